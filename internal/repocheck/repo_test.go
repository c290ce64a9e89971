package repocheck

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// root is the repository's root, from this package's directory.
const root = "../.."

// files lists the files git tracks, or, outside a git checkout, every
// regular file under the root but .git.
func files(t *testing.T) []string {
	t.Helper()
	if out, err := exec.Command("git", "-C", root, "ls-files").Output(); err == nil && len(out) > 0 {
		return strings.Fields(string(out))
	}
	var fs []string
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == ".git" {
			return filepath.SkipDir
		}
		if d.Type().IsRegular() {
			rel, _ := filepath.Rel(root, p)
			fs = append(fs, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return fs
}

// semanticsDoc is where "§N" citations point.
const semanticsDoc = "docs/rabbitmq-semantics.md"

var (
	// A citation: § and a section number, numeric (3, 5.2) or of the
	// error texts (E2, E1.3).
	citation = regexp.MustCompile(`§(E?[0-9]+(?:\.[0-9]+)*)`)
	// A section of the doc: a heading "## 5. ", "### 5.2 ", "### E2. ", or
	// a bold list item "**E2.3**".
	heading  = regexp.MustCompile(`^#{2,4} (E?[0-9]+(?:\.[0-9]+)*)\.? `)
	boldItem = regexp.MustCompile(`\*\*(E?[0-9]+(?:\.[0-9]+)*)\*\*`)
)

// Every "§N" in the repository's code and docs names a section of
// docs/rabbitmq-semantics.md, so that a reader can follow it.
func TestCitationsResolve(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(root, semanticsDoc))
	if err != nil {
		t.Fatal(err)
	}
	sections := map[string]bool{}
	for line := range strings.SplitSeq(string(doc), "\n") {
		if m := heading.FindStringSubmatch(line); m != nil {
			sections[m[1]] = true
		}
		for _, m := range boldItem.FindAllStringSubmatch(line, -1) {
			sections[m[1]] = true
		}
	}
	if len(sections) < 20 {
		t.Fatalf("found only %d sections in %s: has its format changed?", len(sections), semanticsDoc)
	}
	var missing []string
	cited := 0
	for _, f := range files(t) {
		if !strings.HasSuffix(f, ".go") && !strings.HasSuffix(f, ".md") {
			continue
		}
		fh, err := os.Open(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for n := 1; sc.Scan(); n++ {
			for _, m := range citation.FindAllStringSubmatch(sc.Text(), -1) {
				cited++
				if !sections[m[1]] {
					missing = append(missing, f+":"+strconv.Itoa(n)+": §"+m[1])
				}
			}
		}
		_ = fh.Close()
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("%d of %d citations name no section of %s:\n%s", len(missing), cited, semanticsDoc, strings.Join(missing, "\n"))
	}
	if cited < 100 {
		t.Errorf("found only %d citations: is the scan broken?", cited)
	}
}

// No committed file names a path of a machine outside the repository
// (docs/architecture.md, "Paths"): a temporary, home or work folder, or
// the shared folder of the project's sources.
func TestNoPathsOutsideTheRepository(t *testing.T) {
	outside := regexp.MustCompile(`(^|[\s"'(=:])(/(tmp|home|root|work|Users|var/folders)/|\.\./shared/|shared/(reference|seeds)/)`)
	var found []string
	for _, f := range files(t) {
		if f == "go.sum" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		for n, line := range strings.Split(string(b), "\n") {
			if outside.MatchString(line) {
				found = append(found, f+":"+strconv.Itoa(n+1)+": "+strings.TrimSpace(line))
			}
		}
	}
	if len(found) > 0 {
		t.Errorf("paths outside the repository:\n%s", strings.Join(found, "\n"))
	}
}

// maxLines is the most lines a non-test Go file may have: a file longer
// than that does more than one thing. The conformance scenarios, a
// catalogue read one scenario at a time, are exempt.
const maxLines = 700

// No non-test Go file outside membroker/conformance is over maxLines.
func TestFilesStayShort(t *testing.T) {
	for _, f := range files(t) {
		if !strings.HasSuffix(f, ".go") || strings.HasSuffix(f, "_test.go") || strings.HasPrefix(f, "membroker/conformance/") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(string(data), "\n"); n > maxLines {
			t.Errorf("%s has %d lines, over %d: split it by what its parts do", f, n, maxLines)
		}
	}
}
