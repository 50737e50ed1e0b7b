package chaos

import (
	"fmt"
	"image/color"

	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// eventColours are the cluster events' time lines on the plot.
var eventColours = map[string]color.Color{
	EventNodeLoss:       color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	EventPrimaryStopped: color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	EventRejoin:         color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	EventRestart:        color.RGBA{R: 0x8c, G: 0x56, B: 0x4b, A: 0xff},
	EventPrimaryLost:    color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	EventPromote:        color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
}

// eventLegends are the events' names in the plot's legend.
var eventLegends = map[string]string{
	EventNodeLoss: "node killed", EventRestart: "node restarted (state transfer)", EventRejoin: "node rejoined", EventPrimaryLost: "primary lost", EventPrimaryStopped: "primary stopped", EventPromote: "standby promoted",
}

// markEvents draws a cluster run's events as vertical lines up to ymax,
// one legend entry per kind. An event after the workload's end (a node
// that rejoined as the run settled) has no line: its legend entry says
// when it came.
func (pn *panel) markEvents(r *RunReport, ymax float64) {
	if r.Cluster == nil {
		return
	}
	seen := map[string]bool{}
	end := float64(r.DurationMS) / 1000
	for _, e := range r.Cluster.Events {
		if e.Err != "" {
			continue
		}
		x := float64(e.AtMS) / 1000
		l, err := plotter.NewLine(plotter.XYs{{X: x, Y: 0}, {X: x, Y: ymax}})
		if err != nil {
			continue
		}
		l.Color = eventColours[e.Kind]
		l.Width = vg.Points(1.5)
		l.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
		name := eventLegends[e.Kind]
		if x > end {
			name += fmt.Sprintf(" at %.1f s, after the workload", x)
		} else {
			pn.p.Add(l)
		}
		if !seen[e.Kind] {
			seen[e.Kind] = true
			pn.add(name, l)
		}
	}
}
