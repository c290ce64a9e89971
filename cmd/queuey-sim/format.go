package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// table is an aligned text table whose columns sit under group headers,
// each spanning one or more columns. Cells are right-aligned unless their
// column is in leftCols.
type table struct {
	groups   []group
	heads    []string
	leftCols map[int]bool
	rows     [][]string
}

// group is a header spanning columns [from, to).
type group struct {
	label    string
	from, to int
}

// gap is the space between columns.
const gap = 2

func (t *table) add(cells []string) { t.rows = append(t.rows, cells) }

// render writes the two header lines and the rows.
func (t *table) render(b *strings.Builder) {
	widths := make([]int, len(t.heads))
	for i, h := range t.heads {
		widths[i] = width(h)
	}
	for _, r := range t.rows {
		for i, c := range r {
			widths[i] = max(widths[i], width(c))
		}
	}
	for _, g := range t.groups {
		if extra := width(g.label) - t.span(widths, g); extra > 0 {
			widths[g.to-1] += extra
		}
	}
	var line strings.Builder
	for i, g := range t.groups {
		if i > 0 {
			line.WriteString(strings.Repeat(" ", gap))
		}
		span := t.span(widths, g)
		if g.from == 0 {
			line.WriteString(pad(g.label, span, true))
			continue
		}
		left := (span - width(g.label) + 1) / 2
		line.WriteString(pad(strings.Repeat(" ", left)+g.label, span, true))
	}
	writeLine(b, line.String())
	t.writeCells(b, widths, t.heads)
	for _, r := range t.rows {
		t.writeCells(b, widths, r)
	}
}

// span is the width of a group's columns and the gaps between them.
func (t *table) span(widths []int, g group) int {
	n := gap * (g.to - g.from - 1)
	for _, w := range widths[g.from:g.to] {
		n += w
	}
	return n
}

func (t *table) writeCells(b *strings.Builder, widths []int, cells []string) {
	var line strings.Builder
	for i, c := range cells {
		if i > 0 {
			line.WriteString(strings.Repeat(" ", gap))
		}
		line.WriteString(pad(c, widths[i], t.leftCols[i]))
	}
	writeLine(b, line.String())
}

// writeLine writes s without trailing spaces, and a newline.
func writeLine(b *strings.Builder, s string) {
	b.WriteString(strings.TrimRight(s, " "))
	b.WriteByte('\n')
}

func width(s string) int { return utf8.RuneCountInString(s) }

// pad pads s with spaces to n runes, on the right if left is set.
func pad(s string, n int, left bool) string {
	p := strings.Repeat(" ", max(n-width(s), 0))
	if left {
		return s + p
	}
	return p + s
}

// fmtGranularity writes a granularity or a span of virtual time the way
// people write them: 100ms, 1s, 1m, 1h30m.
func fmtGranularity(d time.Duration) string {
	if d == 0 {
		return "0"
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// fmtDur writes a measured duration with about three significant figures
// and its unit: 0, 850µs, 12.3ms, 1.52s, 4m05s, 1h02m.
func fmtDur(d time.Duration) string {
	d = round3(d)
	switch {
	case d == 0:
		return "0"
	case d < time.Microsecond:
		return strconv.FormatInt(int64(d), 10) + "ns"
	case d < time.Millisecond:
		return sig3(float64(d)/float64(time.Microsecond)) + "µs"
	case d < time.Second:
		return sig3(float64(d)/float64(time.Millisecond)) + "ms"
	case d < time.Minute:
		return sig3(d.Seconds()) + "s"
	case d < time.Hour:
		d = d.Round(time.Second)
		return fmt.Sprintf("%dm%02ds", d/time.Minute, d%time.Minute/time.Second)
	}
	d = d.Round(time.Minute)
	return fmt.Sprintf("%dh%02dm", d/time.Hour, d%time.Hour/time.Minute)
}

// round3 rounds a positive d to three significant figures, so that the
// unit fmtDur picks is the one the rounded value needs (1.00ms, not
// 1000µs).
func round3(d time.Duration) time.Duration {
	if d < 1000 {
		return d
	}
	p := time.Duration(1)
	for d/p >= 1000 {
		p *= 10
	}
	return (d + p/2) / p * p
}

// sig3 writes x (positive, under 1000) with three significant figures.
func sig3(x float64) string {
	switch {
	case x >= 99.95:
		return strconv.FormatFloat(x, 'f', 0, 64)
	case x >= 9.995:
		return strconv.FormatFloat(x, 'f', 1, 64)
	}
	return strconv.FormatFloat(x, 'f', 2, 64)
}

// fmtRate writes a rate with three significant figures (more for large
// rates, none lost).
func fmtRate(x float64) string {
	if x == 0 {
		return "0"
	}
	if x >= 99.95 {
		return strconv.FormatFloat(x, 'f', 0, 64)
	}
	if x < 0.01 {
		return strconv.FormatFloat(x, 'g', 2, 64)
	}
	return sig3(x)
}
