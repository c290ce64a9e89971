package repocheck

import (
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"os"
	"path"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// Every package's documentation opens where go doc and pkg.go.dev show
// it: "Package NAME …", or, for a command, its name ("Command NAME …" or
// "NAME …"). A comment that a
// blank line cuts off from the package clause is not the package's
// documentation, so a package whose doc opens anywhere else lost its
// introduction (rabbitmq's did once: go doc showed a paragraph from the
// middle). Test files do not count.
func TestPackageDocsOpenWithTheirName(t *testing.T) {
	dirs := map[string][]string{}
	for _, f := range files(t) {
		if strings.HasSuffix(f, ".go") && !strings.HasSuffix(f, "_test.go") && !strings.Contains(f, "testdata/") {
			dirs[path.Dir(f)] = append(dirs[path.Dir(f)], f)
		}
	}
	names := make([]string, 0, len(dirs))
	for d := range dirs {
		names = append(names, d)
	}
	slices.Sort(names)
	for _, dir := range names {
		fset := token.NewFileSet()
		var parsed []*ast.File
		for _, f := range dirs[dir] {
			af, err := parser.ParseFile(fset, path.Join(root, f), nil, parser.ParseComments|parser.PackageClauseOnly)
			if err != nil {
				t.Fatal(err)
			}
			parsed = append(parsed, af)
		}
		p, err := doc.NewFromFiles(fset, parsed, "example/"+dir)
		if err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		want := "Package " + p.Name + " "
		text := strings.TrimLeftFunc(p.Doc, unicode.IsSpace)
		if p.Name == "main" {
			// A command's doc opens with its name, as the program is
			// called, or "Command" and its name.
			want = path.Base(dir) + " "
			text = strings.TrimPrefix(text, "Command ")
		}
		if !strings.HasPrefix(strings.ToLower(text), strings.ToLower(want)) {
			first, _, _ := strings.Cut(text, "\n")
			t.Errorf("%s: its package doc opens %q, want %q", dir, first, want)
		}
	}
}

// The README is a user's guide's front page: at most 300 lines, and its
// first screen (40 lines) names the systems a user compares queuey with.
// Depth goes in docs/guide.md and the package docs.
func TestREADMEIsShortAndSaysWhyFirst(t *testing.T) {
	data, err := os.ReadFile(path.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	if n := len(lines); n > 300 {
		t.Errorf("README.md has %d lines, over 300: move depth to docs/guide.md", n)
	}
	first := strings.Join(lines[:min(40, len(lines))], "\n")
	for _, name := range []string{"river", "asynq", "machinery"} {
		if !strings.Contains(first, name) {
			t.Errorf("README.md's first 40 lines do not name %s", name)
		}
	}
}
