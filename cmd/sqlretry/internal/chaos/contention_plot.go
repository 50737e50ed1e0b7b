package chaos

import (
	"cmp"
	"errors"
	"fmt"
	"image/color"
	"io"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// modeColors are the modes' colours in the contention plot.
var modeColors = map[string]color.Color{
	modeSQLretry: colThroughput,
	modeOld:      colAttempts,
	modeBlind:    colFaults,
}

// successWindow is the span the plot's success rate is taken over: long
// enough that a slow engine finishes several calls in it.
const successWindow = time.Second

// WriteContentionPlot draws r to path, a .png or .svg file: each mode's
// success rate over time; below it the damage each mode did so far (calls
// applied twice, lost or misreported); and each budgeted mode's budget
// level.
func WriteContentionPlot(path string, r *ContentionReport) error {
	return writeImage(path, func(w io.Writer, format string) error { return DrawContentionPlot(w, format, r) })
}

// DrawContentionPlot is [WriteContentionPlot] to w, in format "png" or "svg".
func DrawContentionPlot(w io.Writer, format string, r *ContentionReport) error {
	grid, err := contentionGrid(r)
	if err != nil {
		return err
	}
	return renderGrid(w, format, grid, 18*vg.Centimeter, 8.5*vg.Centimeter)
}

// contentionGrid is the panels of [DrawContentionPlot], one above the
// other.
func contentionGrid(r *ContentionReport) ([][]panel, error) {
	if r == nil || len(r.Modes) == 0 {
		return nil, errors.New("no run to plot")
	}
	top, middle, bottom := newPanel(), newPanel(), newPanel()
	total := float64(r.DurationMS) / 1000
	top.p.Title.Text = fmt.Sprintf("sqlretry chaos --scenario contention: %s, %d workers on %d hot rows", r.Engine, r.Workers, r.HotRows)
	if r.Interrupted {
		top.p.Title.Text += fmt.Sprintf("\nINTERRUPTED in %s", cmp.Or(modeTitles[r.InterruptedIn], "the setup"))
	}
	top.p.Y.Label.Text = fmt.Sprintf("success rate, %% of calls (over %s)", successWindow)
	bottom.p.Y.Label.Text = "retry budget (tokens)"
	bottom.p.Y.Tick.Marker = plainTicks{}
	middle.p.Title.Text = "damage so far: calls applied twice, lost or told the wrong outcome"
	middle.p.Y.Label.Text = "calls"
	middle.p.Y.Tick.Marker = countTicks{}
	unbudgeted := []string{}
	for _, p := range []*plot.Plot{top.p, middle.p, bottom.p} {
		p.X.Label.Text = "seconds into each policy's run"
		p.X.Min, p.X.Max, p.Y.Min = 0, total, 0
	}
	top.p.Y.Max = 105
	bottom.p.Y.Max = 11
	middle.p.Y.Max = 1
	// sqlretry first, as a broad band the others are drawn over: where
	// the lines meet (100 %, no damage) every one still shows.
	for _, m := range r.Modes {
		rate, budget := successRates(m.Samples, successWindow), budgetLevels(m.Samples)
		if err := addLine(&top, rate, m.Mode); err != nil {
			return nil, err
		}
		if err := addLine(&middle, damageTotals(m.Damage, &middle.p.Y.Max), m.Mode); err != nil {
			return nil, err
		}
		if len(budget) == 0 {
			unbudgeted = append(unbudgeted, modeTitles[m.Mode])
			continue
		}
		for _, xy := range budget {
			bottom.p.Y.Max = max(bottom.p.Y.Max, xy.Y*1.1)
		}
		if err := addLine(&bottom, budget, m.Mode); err != nil {
			return nil, err
		}
	}
	if len(unbudgeted) > 0 {
		bottom.p.Title.Text = "retry budget (no budget at all: " + strings.Join(unbudgeted, ", ") + ")"
	}
	middle.p.Y.Max *= 1.1
	return [][]panel{{top}, {middle}, {bottom}}, nil
}

// damageTotals is a mode's damage so far at each point, and raises *ymax
// to its largest.
func damageTotals(points []DamagePoint, ymax *float64) plotter.XYs {
	out := make(plotter.XYs, len(points))
	for i, d := range points {
		out[i] = plotter.XY{X: d.elapsed().Seconds(), Y: float64(d.Lost + d.AppliedTwice + d.Misreported)}
		*ymax = max(*ymax, out[i].Y)
	}
	return out
}

// modeStyles are the modes' line widths and dashes: sqlretry a broad
// band drawn first, the others narrower over it.
var modeStyles = map[string]struct {
	width  vg.Length
	dashes []vg.Length
}{
	modeSQLretry: {vg.Points(4.5), nil},
	modeOld:      {vg.Points(1.5), nil},
	modeBlind:    {vg.Points(1.5), []vg.Length{vg.Points(4), vg.Points(2)}},
}

// addLine adds one mode's series to pn, in the mode's colour and style.
func addLine(pn *panel, xys plotter.XYs, mode string) error {
	st := modeStyles[mode]
	return pn.line(xys, modeTitles[mode], modeColors[mode], st.width, st.dashes)
}

// successRates turns cumulative samples into the percentage of calls told
// OK among those that finished in the window before each sample; a sample
// with no call finished in its window has no point.
func successRates(samples []Sample, window time.Duration) plotter.XYs {
	var out plotter.XYs
	from := 0
	for _, s := range samples {
		for from < len(samples) && samples[from].Elapsed <= s.Elapsed-window {
			from++
		}
		base := Sample{} // no sample as old as the window: count from the start
		if from > 0 {
			base = samples[from-1] // the last sample at or before the window's start
		}
		if calls := s.Ops - base.Ops; calls > 0 {
			out = append(out, plotter.XY{X: s.Elapsed.Seconds(), Y: 100 * float64(s.OK-base.OK) / float64(calls)})
		}
	}
	return out
}

// budgetLevels is the budget's level at each sample; none without a budget.
func budgetLevels(samples []Sample) plotter.XYs {
	var out plotter.XYs
	for _, s := range samples {
		if s.Budget >= 0 {
			out = append(out, plotter.XY{X: s.Elapsed.Seconds(), Y: s.Budget})
		}
	}
	return out
}
