package chaos

import (
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
	if r == nil || len(r.Modes) == 0 {
		return errors.New("no run to plot")
	}
	top, middle, bottom := plot.New(), plot.New(), plot.New()
	total := float64(r.DurationMS) / 1000
	top.Title.Text = fmt.Sprintf("sqlretry chaos --scenario contention: %s, %d workers on %d hot rows", r.Engine, r.Workers, r.HotRows)
	top.Y.Label.Text = fmt.Sprintf("success rate, %% of calls (over %s)", successWindow)
	bottom.Y.Label.Text = "retry budget (tokens)"
	middle.Title.Text = "damage so far: calls applied twice, lost or told the wrong outcome"
	middle.Y.Label.Text = "calls"
	middle.Y.Tick.Marker = countTicks{}
	unbudgeted := []string{}
	for _, p := range []*plot.Plot{top, middle, bottom} {
		p.X.Label.Text = "seconds into each policy's run"
		p.X.Min, p.X.Max, p.Y.Min = 0, total, 0
		p.Legend.Top = true
	}
	top.Y.Max = 125 // headroom for the legend above 100 %
	bottom.Y.Max = 13
	middle.Y.Max = 1
	for _, m := range r.Modes {
		rate, budget := successRates(m.Samples, successWindow), budgetLevels(m.Samples)
		if err := addLine(top, rate, m.Mode); err != nil {
			return err
		}
		if err := addLine(middle, damageTotals(m.Damage, &middle.Y.Max), m.Mode); err != nil {
			return err
		}
		if len(budget) == 0 {
			unbudgeted = append(unbudgeted, modeTitles[m.Mode])
			continue
		}
		if err := addLine(bottom, budget, m.Mode); err != nil {
			return err
		}
	}
	if len(unbudgeted) > 0 {
		bottom.Title.Text = "retry budget (no budget at all: " + strings.Join(unbudgeted, ", ") + ")"
	}
	middle.Y.Max *= 1.35 // headroom for the legend
	return renderGrid(w, format, [][]*plot.Plot{{top}, {middle}, {bottom}}, 20*vg.Centimeter, 26*vg.Centimeter)
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

// addLine adds one mode's series to p, in the mode's colour.
func addLine(p *plot.Plot, xys plotter.XYs, mode string) error {
	var dashes []vg.Length
	if mode == modeBlind {
		dashes = []vg.Length{vg.Points(4), vg.Points(2)}
	}
	return addStyledLine(p, xys, modeTitles[mode], modeColors[mode], vg.Points(1.4), dashes)
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
