package chaos

import (
	"errors"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

var (
	colThroughput = color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}
	colAttempts   = color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}
	colFaults     = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}
	colBudget     = color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}
	colOutage     = color.NRGBA{R: 0x80, G: 0x80, B: 0x80, A: 0x48}
)

// WritePlot draws ours (and naive, if not nil, as a second column) to
// path, a .png or .svg file: throughput, attempts per second and injected
// faults per second over time; then, for runs that counted it
// (Config.Damage), the damage over time: writes lost, applied twice and
// misreported, on one scale for both columns; and the retry budget's
// level. The outages are shaded.
func WritePlot(path string, ours, naive *RunReport) error {
	return writeImage(path, func(w io.Writer, format string) error { return DrawPlot(w, format, ours, naive) })
}

// writeImage creates path, a .png or .svg file, and has draw write the
// image into it in the format the extension names ("png" or "svg").
func writeImage(path string, draw func(w io.Writer, format string) error) error {
	ext := strings.ToLower(filepath.Ext(path))
	if ext != ".png" && ext != ".svg" {
		return fmt.Errorf("unknown image format %q (want .png or .svg)", ext)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := draw(f, ext[1:]); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// DrawPlot is [WritePlot] to w, in format "png" or "svg".
func DrawPlot(w io.Writer, format string, ours, naive *RunReport) error {
	if ours == nil {
		return errors.New("no run to plot")
	}
	runs := []*RunReport{ours}
	if naive != nil {
		runs = append(runs, naive)
	}
	damage, ymax := false, 1
	for _, r := range runs {
		damage = damage || r.Damage != nil
		for _, p := range r.Damage {
			ymax = max(ymax, p.Lost, p.AppliedTwice, p.Misreported)
		}
	}
	rows := 2
	if damage {
		rows = 3
	}
	grid := make([][]*plot.Plot, rows)
	for row := range grid {
		grid[row] = make([]*plot.Plot, len(runs))
	}
	for col, r := range runs {
		top, bottom, err := runPlots(r)
		if err != nil {
			return err
		}
		grid[0][col], grid[rows-1][col] = top, bottom
		if damage {
			if grid[1][col], err = damagePlot(r, float64(ymax)*1.35); err != nil {
				return err
			}
		}
	}
	return renderGrid(w, format, grid, vg.Length(len(runs))*16*vg.Centimeter, vg.Length(rows)*9*vg.Centimeter)
}

var (
	colLost        = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}
	colTwice       = color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}
	colMisreported = color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff}
)

// damagePlot draws r's damage over time on a y axis up to ymax, shared by
// the columns so that a run without damage shows flat beside one with.
func damagePlot(r *RunReport, ymax float64) (*plot.Plot, error) {
	p := plot.New()
	p.X.Label.Text = "seconds"
	p.Y.Label.Text = "violations so far"
	p.X.Min, p.X.Max, p.Y.Min, p.Y.Max = 0, float64(r.DurationMS)/1000, 0, ymax
	last := DamagePoint{}
	if n := len(r.Damage); n > 0 {
		last = r.Damage[n-1]
	}
	p.Title.Text = fmt.Sprintf("damage, %s: %d lost, %d applied twice, %d misreported", r.Mode, last.Lost, last.AppliedTwice, last.Misreported)
	if r.DamageUntimed > 0 {
		p.Title.Text += fmt.Sprintf(" (+%d seen only in the final tables)", r.DamageUntimed)
	}
	shade(p, r, ymax)
	series := []struct {
		name  string
		col   color.Color
		value func(DamagePoint) int
		dash  []vg.Length
	}{
		{"lost (told OK, not stored)", colLost, func(d DamagePoint) int { return d.Lost }, nil},
		{"applied twice", colTwice, func(d DamagePoint) int { return d.AppliedTwice }, []vg.Length{vg.Points(5), vg.Points(2)}},
		{"misreported (told failed, applied)", colMisreported, func(d DamagePoint) int { return d.Misreported }, []vg.Length{vg.Points(2), vg.Points(2)}},
	}
	for _, s := range series {
		xys := make(plotter.XYs, len(r.Damage))
		for i, d := range r.Damage {
			xys[i] = plotter.XY{X: d.elapsed().Seconds(), Y: float64(s.value(d))}
		}
		if len(xys) == 0 {
			continue
		}
		l, err := plotter.NewLine(xys)
		if err != nil {
			return nil, err
		}
		l.Color, l.Width, l.Dashes = s.col, vg.Points(1.6), s.dash
		p.Add(l)
		p.Legend.Add(s.name, l)
	}
	p.Legend.Top, p.Legend.Left = true, true
	p.Y.Tick.Marker = countTicks{}
	return p, nil
}

// countTicks labels an axis of counts with whole numbers only: gonum's
// default ticks label 0 to 30 as "0.00" and "25.00".
type countTicks struct{}

// Ticks returns the default ticks, labelled as integers; a tick between
// two integers keeps its mark but loses its label.
func (countTicks) Ticks(lo, hi float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(lo, hi)
	for i, t := range ticks {
		switch {
		case t.Label == "":
		case t.Value == math.Trunc(t.Value):
			ticks[i].Label = strconv.Itoa(int(t.Value))
		default:
			ticks[i].Label = ""
		}
	}
	return ticks
}

// renderGrid draws a grid of plots (rows of equal length), aligned, on a
// width × height canvas in format "png" or "svg", and writes it to w.
func renderGrid(w io.Writer, format string, grid [][]*plot.Plot, width, height vg.Length) error {
	var c interface {
		vg.CanvasSizer
		io.WriterTo
	}
	switch format {
	case "png":
		img := vgimg.New(width, height)
		c = vgimg.PngCanvas{Canvas: img}
	case "svg":
		c = vgsvg.New(width, height)
	default:
		return fmt.Errorf("unknown image format %q (want png or svg)", format)
	}
	dc := draw.New(c)
	tiles := draw.Tiles{Rows: len(grid), Cols: len(grid[0]), PadX: vg.Centimeter, PadY: vg.Centimeter / 2,
		PadTop: vg.Centimeter / 2, PadBottom: vg.Centimeter / 2, PadLeft: vg.Centimeter / 2, PadRight: vg.Centimeter / 2}
	canvases := plot.Align(grid, tiles, dc)
	for row := range grid {
		for col := range grid[row] {
			grid[row][col].Draw(canvases[row][col])
		}
	}
	_, err := c.WriteTo(w)
	return err
}

// perSecond turns the run's cumulative samples into rates.
func perSecond(r *RunReport) (ops, attempts, faultsXY, budget plotter.XYs) {
	var prev *Sample
	for i := range r.Samples {
		s := &r.Samples[i]
		t := s.Elapsed.Seconds()
		if s.Budget >= 0 {
			budget = append(budget, plotter.XY{X: t, Y: s.Budget})
		}
		if prev != nil {
			dt := (s.Elapsed - prev.Elapsed).Seconds()
			if dt > 0 {
				ops = append(ops, plotter.XY{X: t, Y: float64(s.OK-prev.OK) / dt})
				attempts = append(attempts, plotter.XY{X: t, Y: float64(s.Attempts-prev.Attempts) / dt})
				if n := s.Faults - prev.Faults; n > 0 {
					faultsXY = append(faultsXY, plotter.XY{X: t, Y: float64(n) / dt})
				}
			}
		}
		prev = s
	}
	return ops, attempts, faultsXY, budget
}

func runPlots(r *RunReport) (top, bottom *plot.Plot, err error) {
	ops, attempts, faultsXY, budget := perSecond(r)
	title := fmt.Sprintf("sqlretry chaos: %s, %s", r.Engine, r.Mode)
	top = plot.New()
	top.Title.Text = title
	top.X.Label.Text = "seconds"
	top.Y.Label.Text = "per second"
	top.Y.Min = 0
	top.Y.Tick.Marker = countTicks{}
	ymax := 1.0
	for _, xy := range append(append(append(plotter.XYs{}, ops...), attempts...), faultsXY...) {
		ymax = max(ymax, xy.Y)
	}
	// Headroom above the data for the legend.
	ymax *= 1.4
	total := float64(r.DurationMS) / 1000
	top.X.Min, top.X.Max = 0, total
	shade(top, r, ymax)
	markEvents(top, r, ymax)
	if err := addStyledLine(top, ops, "operations ok/s", colThroughput, vg.Points(1.2), nil); err != nil {
		return nil, nil, err
	}
	if err := addStyledLine(top, attempts, "attempts/s", colAttempts, vg.Points(1), []vg.Length{vg.Points(3), vg.Points(2)}); err != nil {
		return nil, nil, err
	}
	if len(faultsXY) > 0 {
		s, err := plotter.NewScatter(faultsXY)
		if err != nil {
			return nil, nil, err
		}
		s.GlyphStyle.Color, s.GlyphStyle.Shape, s.GlyphStyle.Radius = colFaults, draw.CrossGlyph{}, vg.Points(2.5)
		top.Add(s)
		top.Legend.Add("faults injected/s", s)
	}
	top.Legend.Top = true
	top.Y.Max = ymax

	bottom = plot.New()
	bottom.X.Label.Text = "seconds"
	bottom.Y.Label.Text = "retry budget (tokens)"
	bottom.X.Min, bottom.X.Max = 0, total
	bottom.Y.Min = 0
	bmax := 10.0
	for _, xy := range budget {
		bmax = max(bmax, xy.Y)
	}
	bottom.Y.Max = bmax * 1.3
	shade(bottom, r, bmax*1.3)
	markEvents(bottom, r, bmax*1.3)
	if len(budget) > 0 {
		if err := addStyledLine(bottom, budget, "budget level", colBudget, vg.Points(1.2), nil); err != nil {
			return nil, nil, err
		}
		bottom.Legend.Top = true
	} else {
		bottom.Title.Text = "no retry budget"
	}
	return top, bottom, nil
}

// addStyledLine adds xys to p as a line of colour c, width and dashes (nil:
// solid), named legend in p's legend; nothing when xys is empty.
func addStyledLine(p *plot.Plot, xys plotter.XYs, legend string, c color.Color, width vg.Length, dashes []vg.Length) error {
	if len(xys) == 0 {
		return nil
	}
	l, err := plotter.NewLine(xys)
	if err != nil {
		return err
	}
	l.Color, l.Width = c, width
	if dashes != nil { // else keep the default style's empty (not nil) dashes
		l.Dashes = dashes
	}
	p.Add(l)
	p.Legend.Add(legend, l)
	return nil
}

// shade adds the outage windows as grey bands up to ymax.
func shade(p *plot.Plot, r *RunReport, ymax float64) {
	for i, o := range r.Windows {
		x0, x1 := o.Offset.Seconds(), (o.Offset + o.Length).Seconds()
		poly, err := plotter.NewPolygon(plotter.XYs{{X: x0, Y: 0}, {X: x1, Y: 0}, {X: x1, Y: ymax}, {X: x0, Y: ymax}})
		if err != nil {
			continue
		}
		poly.Color = colOutage
		poly.LineStyle.Width = 0
		p.Add(poly)
		if i == 0 {
			p.Legend.Add("outage", poly)
		}
	}
}
