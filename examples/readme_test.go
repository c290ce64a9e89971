// Package examples_test keeps the code blocks of the README and of
// docs/guide.md the files of this folder that build, run and pass: the
// quick start, a handler's test, a bulk enqueue, per-job options and
// periodic jobs.
package examples_test

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "copy each example file into its README block")

// marker names, just before a code block of the README, the file of the
// repository the block is, whole: <!-- examples/quickstart/main.go -->.
var marker = regexp.MustCompile(`^<!-- (examples/[^ ]+) -->$`)

// shown are the files each document must show: the README the quick
// start, the guide the rest.
var shown = map[string][]string{
	"README.md":     {"examples/quickstart/main.go"},
	"docs/guide.md": {"examples/handlertest/handler_test.go", "examples/bulk/enqueue.go", "examples/options/enqueue.go", "examples/periodic/schedule.go"},
}

// Every code block of the README and of the guide marked with a file is
// that file, byte for byte, and each shows its files of shown. With
// -update, the test copies each file into its block instead.
func TestREADMEBlocksAreTheExamples(t *testing.T) {
	for doc, files := range shown {
		checkBlocks(t, doc, files)
	}
}

func checkBlocks(t *testing.T, doc string, files []string) {
	path := filepath.Join("..", filepath.FromSlash(doc))
	readme, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(readme), "\n")
	blocks, err := markedBlocks(lines)
	if err != nil {
		t.Fatalf("%s: %v", doc, err)
	}
	marked := map[string]bool{}
	for _, b := range blocks {
		marked[b.file] = true
	}
	for _, f := range files {
		if !marked[f] {
			t.Errorf("%s shows no %s: put <!-- %s --> just before a code block that is the file", doc, f, f)
		}
	}
	// From the last block up, so that replacing one moves no other.
	for i := len(blocks) - 1; i >= 0; i-- {
		b := blocks[i]
		want, err := os.ReadFile(filepath.Join("..", filepath.FromSlash(b.file)))
		if err != nil {
			t.Errorf("%s shows %s: %v", doc, b.file, err)
			continue
		}
		got := strings.Join(lines[b.start:b.end], "")
		switch {
		case got == string(want):
		case *update:
			lines = append(lines[:b.start], append(strings.SplitAfter(strings.TrimSuffix(string(want), "\n")+"\n", "\n"), lines[b.end:]...)...)
		default:
			t.Errorf("%s's block for %s differs from the file at its line %d: copy the file into the block (go test ./examples/ -update)",
				doc, b.file, firstDiff(got, string(want)))
		}
	}
	if *update {
		if err := os.WriteFile(path, []byte(strings.Join(lines, "")), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// block is a marked code block of the README: the file it shows, and the
// lines of its contents, lines[start:end], fences excluded.
type block struct {
	file       string
	start, end int
}

// markedBlocks finds the code blocks of a Markdown text's lines (each with
// its newline) that follow a marker line, in order. A marker not just
// before a code block, a block that never ends and a file marked twice are
// errors.
func markedBlocks(lines []string) ([]block, error) {
	var blocks []block
	seen := map[string]bool{}
	for i := 0; i < len(lines); i++ {
		m := marker.FindStringSubmatch(strings.TrimRight(lines[i], "\n"))
		if m == nil {
			continue
		}
		if i+1 >= len(lines) || !strings.HasPrefix(lines[i+1], "```") {
			return nil, fmt.Errorf("line %d: the marker of %s is not just before a code block", i+1, m[1])
		}
		if seen[m[1]] {
			return nil, fmt.Errorf("line %d: %s is marked twice", i+1, m[1])
		}
		seen[m[1]] = true
		j := i + 2
		for j < len(lines) && strings.TrimRight(lines[j], "\n") != "```" {
			j++
		}
		if j == len(lines) {
			return nil, fmt.Errorf("line %d: the code block of %s never ends", i+2, m[1])
		}
		blocks = append(blocks, block{file: m[1], start: i + 2, end: j})
		i = j
	}
	return blocks, nil
}

// firstDiff is the number, from 1, of the first line where a and b differ.
func firstDiff(a, b string) int {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range min(len(al), len(bl)) {
		if al[i] != bl[i] {
			return i + 1
		}
	}
	return min(len(al), len(bl)) + 1
}

// markedBlocks finds a marked block, leaves unmarked ones alone, and
// refuses a marker without its block.
func TestMarkedBlocks(t *testing.T) {
	md := "# x\n\n<!-- examples/a.go -->\n```go\npackage a\n\nfunc A() {}\n```\n\n```sh\ngo test\n```\n"
	lines := strings.SplitAfter(md, "\n")
	got, err := markedBlocks(lines)
	if err != nil || len(got) != 1 || got[0].file != "examples/a.go" || strings.Join(lines[got[0].start:got[0].end], "") != "package a\n\nfunc A() {}\n" {
		t.Errorf("markedBlocks: %v, %v; want examples/a.go's block alone", got, err)
	}
	for _, bad := range []string{
		"<!-- examples/a.go -->\n\n```go\npackage a\n```\n",                                     // not just before
		"<!-- examples/a.go -->\n```go\npackage a\n",                                            // never ends
		"<!-- examples/a.go -->\n```go\npackage a\n```\n<!-- examples/a.go -->\n```go\n\n```\n", // twice
	} {
		if got, err := markedBlocks(strings.SplitAfter(bad, "\n")); err == nil {
			t.Errorf("markedBlocks(%q) = %v, want an error", bad, got)
		}
	}
}
