package repocheck

import (
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// module is the module path, which go list prefixes every package with.
const module = "github.com/queuey/queuey/"

// importMap is one line of docs/architecture.md's import map: the
// packages it names (a pattern each, examples/* say), whether it speaks of
// their tests' imports rather than their own, and the module's packages
// they import.
type importMap struct {
	names   []string
	tests   bool
	imports []string
	line    int
}

// readImportMap parses the fenced block under "## Which way the imports
// run" in docs/architecture.md: one line per package or group,
// "name[, name…] [(tests)] ──> import, import… (a remark)", continued on
// indented lines; "nothing" for none.
func readImportMap(t *testing.T) []importMap {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "## Which way the imports run")
	if !ok {
		t.Fatal("docs/architecture.md has no section \"Which way the imports run\"")
	}
	_, block, _ := strings.Cut(section, "```\n")
	block, _, _ = strings.Cut(block, "```")
	var logical []string
	for _, l := range strings.Split(block, "\n") {
		switch {
		case strings.TrimSpace(l) == "":
		case strings.HasPrefix(l, " ") && len(logical) > 0:
			logical[len(logical)-1] += " " + strings.TrimSpace(l)
		default:
			logical = append(logical, l)
		}
	}
	var out []importMap
	for i, l := range logical {
		left, right, ok := strings.Cut(l, "──>")
		if !ok {
			t.Fatalf("import map line %q has no ──>", l)
		}
		m := importMap{line: i}
		left = strings.TrimSpace(left)
		if rest, ok := strings.CutSuffix(left, "(tests)"); ok {
			m.tests, left = true, rest
		}
		for _, n := range strings.Split(left, ",") {
			m.names = append(m.names, strings.TrimSpace(n))
		}
		for strings.Contains(right, "(") { // remarks in parentheses
			a, b, _ := strings.Cut(right, "(")
			_, c, _ := strings.Cut(b, ")")
			right = a + c
		}
		if strings.TrimSpace(right) != "nothing" {
			for _, imp := range strings.Split(right, ",") {
				m.imports = append(m.imports, strings.TrimSpace(imp))
			}
		}
		out = append(out, m)
	}
	return out
}

// moduleImports lists each package of the module with the module's
// packages it imports: in its non-test files, or in its tests.
func moduleImports(t *testing.T, tests bool) map[string][]string {
	t.Helper()
	format := `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`
	if tests {
		format = `{{.ImportPath}}{{range .TestImports}} {{.}}{{end}}{{range .XTestImports}} {{.}}{{end}}`
	}
	cmd := exec.Command("go", "list", "-f", format, "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	pkgs := map[string][]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(l)
		name := strings.TrimPrefix(f[0], module)
		var imps []string
		for _, imp := range f[1:] {
			if rel, ok := strings.CutPrefix(imp, module); ok && rel != name && !slices.Contains(imps, rel) {
				imps = append(imps, rel)
			}
		}
		slices.Sort(imps)
		pkgs[name] = imps
	}
	return pkgs
}

// The import map in docs/architecture.md is the module's: every package
// is on one line, each line lists exactly what its packages import of
// the module (a pattern's packages, at most that), and every import points
// down the map, to a package on a later line. A package that imports
// upward, or a map that no longer matches the code, fails here.
func TestImportsPointDown(t *testing.T) {
	lines := readImportMap(t)
	own, tests := moduleImports(t, false), moduleImports(t, true)
	lineOf := func(pkg string) int {
		found := -1
		for _, m := range lines {
			for _, n := range m.names {
				if ok, _ := path.Match(n, pkg); ok {
					if found >= 0 {
						t.Errorf("%s is on two lines of the import map", pkg)
					}
					found = m.line
				}
			}
		}
		return found
	}
	for pkg := range own {
		i := lineOf(pkg)
		if i < 0 {
			t.Errorf("%s is not on docs/architecture.md's import map", pkg)
			continue
		}
		m := lines[i]
		actual := own[pkg]
		if m.tests {
			actual = tests[pkg]
		}
		documented := slices.Sorted(slices.Values(m.imports))
		exact := !strings.Contains(strings.Join(m.names, ""), "*")
		for _, imp := range actual {
			if !slices.Contains(documented, imp) {
				t.Errorf("%s imports %s, which its line of the import map does not list", pkg, imp)
			}
		}
		if exact && len(m.names) == 1 && !slices.Equal(actual, documented) {
			for _, imp := range documented {
				if !slices.Contains(actual, imp) {
					t.Errorf("the import map says %s imports %s; it does not", pkg, imp)
				}
			}
		}
	}
	for _, m := range lines {
		for _, imp := range m.imports {
			if j := lineOf(imp); j <= m.line {
				t.Errorf("the import map's line for %s lists %s, which is not on a later line: imports must point down", strings.Join(m.names, ", "), imp)
			}
		}
	}
}
