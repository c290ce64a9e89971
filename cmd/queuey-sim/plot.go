package main

import (
	"errors"
	"fmt"
	"image/color"
	"io"
	"os"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Plot size.
const (
	plotWidth  = 16 * vg.Centimeter
	plotHeight = 20 * vg.Centimeter
)

// writePlot draws two panels against retry granularity (log scale): peak
// hold queues with the budget, and p99 added wait. The legacy row is left
// out: it has no hold queues. The format follows path's extension (.svg
// or .png). The file is written only if drawing succeeded.
func writePlot(path string, rep *report) (err error) {
	format, err := plotFormat(path)
	if err != nil {
		return err
	}
	c, err := drawPlot(rep, format)
	if err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("plot: %w", cerr)
		}
	}()
	if _, err := c.WriteTo(f); err != nil {
		return fmt.Errorf("plot: writing %s: %w", path, err)
	}
	return nil
}

// drawPlot draws the report on a canvas of the format ("svg" or "png").
// gonum/plot panics on some degenerate inputs; such a panic is returned as
// an error instead.
func drawPlot(rep *report, format string) (c io.WriterTo, err error) {
	defer func() {
		if r := recover(); r != nil {
			c, err = nil, fmt.Errorf("drawing failed: %v", r)
		}
	}()
	var xs []float64
	var peaks, p99s []float64
	var ticks []plot.Tick
	for _, r := range rep.Rows {
		if r.Legacy {
			continue
		}
		x := time.Duration(r.GranularityNS).Seconds()
		xs = append(xs, x)
		peaks = append(peaks, float64(r.HoldQueuesPeak))
		p99s = append(p99s, r.AddedWait.P99.Seconds())
		ticks = append(ticks, plot.Tick{Value: x, Label: r.Label})
	}
	if len(xs) == 0 {
		return nil, errors.New("no granularity to plot")
	}
	title := fmt.Sprintf("%s, seed %d", rep.Scenario, rep.Seed)
	top, err := panel(title, xs, peaks, ticks, "peak hold queues (queues per work queue)")
	if err != nil {
		return nil, err
	}
	budget := make([]float64, len(xs))
	for i := range budget {
		budget[i] = float64(rep.Budget)
	}
	if err := addLine(top, xs, budget, fmt.Sprintf("budget (%d)", rep.Budget), color.RGBA{R: 200, A: 255}, true); err != nil {
		return nil, err
	}
	bottom, err := panel("", xs, p99s, ticks, "p99 added wait (s)")
	if err != nil {
		return nil, err
	}
	bottom.X.Label.Text = "retry granularity (log scale)"

	var canvas vg.CanvasWriterTo
	switch format {
	case "png":
		canvas = vgimg.PngCanvas{Canvas: vgimg.New(plotWidth, plotHeight)}
	default:
		canvas = vgsvg.New(plotWidth, plotHeight)
	}
	dc := draw.New(canvas)
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadX: vg.Millimeter, PadY: 6 * vg.Millimeter,
		PadTop: 2 * vg.Millimeter, PadBottom: 2 * vg.Millimeter, PadLeft: 2 * vg.Millimeter, PadRight: 4 * vg.Millimeter}
	plots := [][]*plot.Plot{{top}, {bottom}}
	canvases := plot.Align(plots, tiles, dc)
	top.Draw(canvases[0][0])
	bottom.Draw(canvases[1][0])
	return canvas, nil
}

// panel is one plot of ys against xs on a log x axis labelled by ticks.
// The y axis is logarithmic when every y is positive and they span more
// than a factor of 20, linear from 0 otherwise.
func panel(title string, xs, ys []float64, ticks []plot.Tick, ylabel string) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	p.X.Label.Text = "retry granularity (log scale)"
	p.Y.Label.Text = ylabel
	p.Add(plotter.NewGrid())
	lo, hi := ys[0], ys[0]
	for _, y := range ys {
		lo, hi = min(lo, y), max(hi, y)
	}
	if lo > 0 && hi > 20*lo {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	} else {
		p.Y.Min = 0
	}
	if err := addLine(p, xs, ys, "", color.RGBA{B: 180, A: 255}, false); err != nil {
		return nil, err
	}
	if len(xs) == 1 {
		p.X.Min, p.X.Max = xs[0]/2, xs[0]*2
	}
	return p, nil
}

// addLine adds a line with points through (xs[i], ys[i]); a dashed line
// without points if dashed, with its name in the legend if name is set.
func addLine(p *plot.Plot, xs, ys []float64, name string, c color.Color, dashed bool) error {
	pts := make(plotter.XYs, len(xs))
	for i := range xs {
		pts[i].X, pts[i].Y = xs[i], ys[i]
	}
	l, err := plotter.NewLine(pts)
	if err != nil {
		return err
	}
	l.Color = c
	l.Width = vg.Points(1.5)
	if dashed {
		l.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
		p.Add(l)
	} else {
		s, err := plotter.NewScatter(pts)
		if err != nil {
			return err
		}
		s.Color = c
		s.Shape = draw.CircleGlyph{}
		p.Add(l, s)
	}
	if name != "" {
		p.Legend.Add(name, l)
		p.Legend.Top = true
	}
	return nil
}
