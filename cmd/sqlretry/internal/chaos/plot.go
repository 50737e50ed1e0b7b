package chaos

import (
	"errors"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

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
	grid, err := runGrid(ours, naive)
	if err != nil {
		return err
	}
	return renderGrid(w, format, grid, 15*vg.Centimeter, 9*vg.Centimeter)
}

// runGrid is the panels of [DrawPlot]: a column per run, rows of rates,
// damage (when counted) and budget. The columns share each row's y scale,
// so that the runs compare at a glance.
func runGrid(ours, naive *RunReport) ([][]panel, error) {
	if ours == nil {
		return nil, errors.New("no run to plot")
	}
	runs := []*RunReport{ours}
	if naive != nil {
		runs = append(runs, naive)
	}
	damage, dmax, rmax, bmax := false, 1, 1.0, 10.0
	for _, r := range runs {
		damage = damage || r.Damage != nil
		for _, p := range r.Damage {
			dmax = max(dmax, p.Lost, p.AppliedTwice, p.Misreported)
		}
		ops, attempts, faultsXY, budget := perSecond(r)
		for _, xy := range slices.Concat(ops, attempts, faultsXY) {
			rmax = max(rmax, xy.Y)
		}
		for _, xy := range budget {
			bmax = max(bmax, xy.Y)
		}
	}
	rows := 2
	if damage {
		rows = 3
	}
	grid := make([][]panel, rows)
	for row := range grid {
		grid[row] = make([]panel, len(runs))
	}
	for col, r := range runs {
		top, err := ratePanel(r, rmax*1.15)
		if err != nil {
			return nil, err
		}
		bottom, err := budgetPanel(r, bmax*1.1)
		if err != nil {
			return nil, err
		}
		grid[0][col], grid[rows-1][col] = top, bottom
		if damage {
			if grid[1][col], err = damagePlot(r, float64(dmax)*1.1); err != nil {
				return nil, err
			}
		}
	}
	return grid, nil
}

var (
	colLost        = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}
	colTwice       = color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}
	colMisreported = color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff}
)

// damagePlot draws r's damage over time on a y axis up to ymax, shared by
// the columns so that a run without damage shows flat beside one with.
func damagePlot(r *RunReport, ymax float64) (panel, error) {
	pn := newPanel()
	p := pn.p
	p.X.Label.Text = "seconds"
	p.Y.Label.Text = "violations so far"
	p.X.Min, p.X.Max, p.Y.Min, p.Y.Max = 0, float64(r.DurationMS)/1000, 0, ymax
	last := DamagePoint{}
	if n := len(r.Damage); n > 0 {
		last = r.Damage[n-1]
	}
	p.Title.Text = fmt.Sprintf("damage, %s: %d lost, %d applied twice, %d misreported", modeTitle(r), last.Lost, last.AppliedTwice, last.Misreported)
	if r.DamageUntimed > 0 {
		p.Title.Text += fmt.Sprintf("\n(+%d seen only in the final tables)", r.DamageUntimed)
	}
	pn.shade(r, ymax)
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
		if err := pn.line(xys, s.name, s.col, vg.Points(1.6), s.dash); err != nil {
			return panel{}, err
		}
	}
	p.Y.Tick.Marker = countTicks{}
	return pn, nil
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

// plainTicks labels the default ticks in the shortest form: "25", not
// "25.00".
type plainTicks struct{}

func (plainTicks) Ticks(lo, hi float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(lo, hi)
	for i, t := range ticks {
		if t.Label != "" {
			ticks[i].Label = strconv.FormatFloat(t.Value, 'f', -1, 64)
		}
	}
	return ticks
}

// rateY is where a rate is drawn on the rates' y axis: log10(1 + v). A
// run does thousands of operations a second, and during an outage a few
// hundred attempts fail a second; on a linear axis those read as 0. (The
// data are mapped, not the axis: gonum centres an axis label on the data
// range's middle value, which a log axis puts near the top.)
func rateY(v float64) float64 { return math.Log10(1 + max(v, 0)) }

// rateYs maps xys' y values with rateY.
func rateYs(xys plotter.XYs) plotter.XYs {
	out := make(plotter.XYs, len(xys))
	for i, xy := range xys {
		out[i] = plotter.XY{X: xy.X, Y: rateY(xy.Y)}
	}
	return out
}

// rateTicks are the rates' ticks, on rateY's axis: 0 and the powers of ten
// labelled with the rate, 2× and 5× marked.
type rateTicks struct{}

func (rateTicks) Ticks(lo, hi float64) []plot.Tick {
	ticks := []plot.Tick{{Value: 0, Label: "0"}}
	for p := 1.0; rateY(p) <= hi; p *= 10 {
		ticks = append(ticks, plot.Tick{Value: rateY(p), Label: strconv.FormatFloat(p, 'f', -1, 64)})
		for _, m := range []float64{2, 5} {
			if y := rateY(m * p); y <= hi {
				ticks = append(ticks, plot.Tick{Value: y})
			}
		}
	}
	return slices.DeleteFunc(ticks, func(t plot.Tick) bool { return t.Value < lo })
}

// panel is one plot of a grid and its legend, drawn beside the plot
// rather than over its data.
type panel struct {
	p      *plot.Plot
	legend plot.Legend
	// n counts the legend's entries.
	n int
	// lines are the data lines, in the order drawn.
	lines []*plotter.Line
}

// legendFont is the legends' font size.
const legendFont = 10

func newPanel() panel {
	l := plot.NewLegend()
	l.Top, l.Left = true, true
	l.TextStyle.Font.Size = vg.Points(legendFont)
	p := plot.New()
	p.X.Tick.Marker = plainTicks{}
	return panel{p: p, legend: l}
}

// add adds an entry to the panel's legend.
func (pn *panel) add(name string, thumbs ...plot.Thumbnailer) {
	pn.legend.Add(name, thumbs...)
	pn.n++
}

// legendWidth is the width the panel's legend takes beside its plot.
func (pn *panel) legendWidth() vg.Length {
	if pn.n == 0 {
		return 0
	}
	r := pn.legend.Rectangle(draw.Canvas{})
	return r.Max.X - r.Min.X
}

// legendGap is the space between a plot and its legend.
const legendGap = vg.Length(0.3 * float64(vg.Centimeter))

// renderGrid draws a grid of panels (rows of equal length), aligned, each
// plot cellW × cellH with its legend in a strip to its right, in format
// "png" or "svg", and writes it to w.
func renderGrid(w io.Writer, format string, grid [][]panel, cellW, cellH vg.Length) error {
	cols := len(grid[0])
	var legW vg.Length // the widest legend's strip: every column gets one
	for _, row := range grid {
		for col := range row {
			legW = max(legW, row[col].legendWidth())
		}
	}
	if legW > 0 {
		legW += legendGap
	}
	// Align spreads the plots over the tiles; the legends' strips are
	// the tiles' right pads.
	tiles := draw.Tiles{Rows: len(grid), Cols: cols, PadX: vg.Centimeter + legW, PadY: vg.Centimeter / 2,
		PadTop: vg.Centimeter / 2, PadBottom: vg.Centimeter / 2, PadLeft: vg.Centimeter / 2, PadRight: vg.Centimeter/2 + legW}
	width := vg.Length(cols)*cellW + vg.Length(cols-1)*tiles.PadX + tiles.PadLeft + tiles.PadRight
	height := vg.Length(len(grid)) * cellH
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
	plots := make([][]*plot.Plot, len(grid))
	for row := range grid {
		for col := range grid[row] {
			plots[row] = append(plots[row], grid[row][col].p)
		}
	}
	canvases := plot.Align(plots, tiles, dc)
	for row := range grid {
		for col := range grid[row] {
			cell, pn := canvases[row][col], grid[row][col]
			pn.p.Draw(cell)
			if pn.n == 0 {
				continue
			}
			legC := cell
			legC.Min.X = cell.Max.X + legendGap
			legC.Max.X = legC.Min.X + legW
			if t := pn.p.Title; t.Text != "" {
				legC.Max.Y -= t.TextStyle.Rectangle(t.Text).Size().Y + t.Padding
			}
			pn.legend.Draw(legC)
		}
	}
	_, err := c.WriteTo(w)
	return err
}

// perSecond turns the run's cumulative samples into rates. A sample less
// than half the usual interval after the last one used is left out of the
// rates (its counts go to the next interval): a fleet merges its
// processes' samples as they come, and two merges a few milliseconds apart
// divided a process's whole interval by those milliseconds (a spike of
// 600,000 ok/s).
func perSecond(r *RunReport) (ops, attempts, faultsXY, budget plotter.XYs) {
	minGap := sampleGap(r.Samples) / 2
	var prev *Sample
	for i := range r.Samples {
		s := &r.Samples[i]
		t := s.Elapsed.Seconds()
		if s.Budget >= 0 {
			budget = append(budget, plotter.XY{X: t, Y: s.Budget})
		}
		if prev != nil && s.Elapsed-prev.Elapsed < minGap {
			continue
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

// sampleGap is the median interval between samples.
func sampleGap(samples []Sample) time.Duration {
	var gaps []time.Duration
	for i := 1; i < len(samples); i++ {
		if d := samples[i].Elapsed - samples[i-1].Elapsed; d > 0 {
			gaps = append(gaps, d)
		}
	}
	if len(gaps) == 0 {
		return 0
	}
	slices.Sort(gaps)
	return gaps[len(gaps)/2]
}

// modeTitle names r's mode in a title.
func modeTitle(r *RunReport) string {
	if r.Mode == "naive" {
		return "naive blind replay"
	}
	return r.Mode
}

// runTitle is the title over a run's column: the engine and mode, then
// what kind of run it was (a fleet, a Galera cluster, a failover) and
// whether it was interrupted.
func runTitle(r *RunReport) string {
	title := fmt.Sprintf("sqlretry chaos: %s, %s", r.Engine, modeTitle(r))
	var more []string
	if f := r.Fleet; f != nil {
		more = append(more, fmt.Sprintf("fleet of %d processes × %d workers", f.Processes, f.WorkersPerProcess))
	} else {
		title += fmt.Sprintf(", %d workers", r.Workers)
	}
	if c := r.Cluster; c != nil {
		kind := "failover: primary stopped, standby promoted"
		if c.Kind == ClusterGalera {
			routing, _, _ := strings.Cut(c.Routing, ":")
			kind = fmt.Sprintf("Galera cluster of %d nodes, %s routing", len(c.Nodes), routing)
		}
		more = append(more, kind)
	}
	if r.Interrupted {
		more = append(more, fmt.Sprintf("INTERRUPTED at %.1f s of %.1f s", float64(r.DurationMS)/1000, float64(r.PlannedMS)/1000))
	}
	if len(more) > 0 {
		title += "\n" + strings.Join(more, "\n")
	}
	return title
}

// ratePanel draws r's operations told OK, attempts and injected faults
// per second, on rateY's scale up to the rate ymax (shared by the columns).
func ratePanel(r *RunReport, ymax float64) (panel, error) {
	ops, attempts, faultsXY, _ := perSecond(r)
	pn := newPanel()
	top := pn.p
	top.Title.Text = runTitle(r)
	top.X.Label.Text = "seconds"
	top.Y.Label.Text = "per second (log scale)"
	top.Y.Tick.Marker = rateTicks{}
	ymax = rateY(ymax)
	top.X.Min, top.X.Max, top.Y.Min, top.Y.Max = 0, float64(r.DurationMS)/1000, 0, ymax
	pn.shade(r, ymax)
	if err := pn.line(rateYs(ops), "operations ok/s", colThroughput, vg.Points(1.2), nil); err != nil {
		return panel{}, err
	}
	if err := pn.line(rateYs(attempts), "attempts/s", colAttempts, vg.Points(1), []vg.Length{vg.Points(3), vg.Points(2)}); err != nil {
		return panel{}, err
	}
	if len(faultsXY) > 0 {
		s, err := plotter.NewScatter(rateYs(faultsXY))
		if err != nil {
			return panel{}, err
		}
		s.GlyphStyle.Color, s.GlyphStyle.Shape, s.GlyphStyle.Radius = colFaults, draw.CrossGlyph{}, vg.Points(2.5)
		top.Add(s)
		pn.add("faults injected/s", s)
	}
	pn.markEvents(r, ymax)
	return pn, nil
}

// budgetPanel draws r's retry budget level up to ymax (shared by the
// columns).
func budgetPanel(r *RunReport, ymax float64) (panel, error) {
	_, _, _, budget := perSecond(r)
	pn := newPanel()
	bottom := pn.p
	bottom.X.Label.Text = "seconds"
	bottom.Y.Label.Text = "retry budget (tokens)"
	if f := r.Fleet; f != nil {
		bottom.Y.Label.Text = fmt.Sprintf("retry budget (tokens, the %d processes' sum)", f.Processes)
	}
	bottom.Y.Tick.Marker = plainTicks{}
	bottom.X.Min, bottom.X.Max, bottom.Y.Min, bottom.Y.Max = 0, float64(r.DurationMS)/1000, 0, ymax
	pn.shade(r, ymax)
	if len(budget) == 0 {
		bottom.Title.Text = "no retry budget"
	} else if err := pn.line(budget, "budget level", colBudget, vg.Points(1.2), nil); err != nil {
		return panel{}, err
	}
	pn.markEvents(r, ymax)
	return pn, nil
}

// line adds xys to the panel as a line of colour c, width and dashes (nil:
// solid), named legend in its legend; nothing when xys is empty.
func (pn *panel) line(xys plotter.XYs, legend string, c color.Color, width vg.Length, dashes []vg.Length) error {
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
	pn.p.Add(l)
	pn.lines = append(pn.lines, l)
	pn.add(legend, l)
	return nil
}

// shade adds the outage windows as grey bands up to ymax.
func (pn *panel) shade(r *RunReport, ymax float64) {
	for i, o := range r.Windows {
		x0, x1 := o.Offset.Seconds(), (o.Offset + o.Length).Seconds()
		poly, err := plotter.NewPolygon(plotter.XYs{{X: x0, Y: 0}, {X: x1, Y: 0}, {X: x1, Y: ymax}, {X: x0, Y: ymax}})
		if err != nil {
			continue
		}
		poly.Color = colOutage
		poly.LineStyle.Width = 0
		pn.p.Add(poly)
		if i == 0 {
			pn.add("outage", poly)
		}
	}
}
