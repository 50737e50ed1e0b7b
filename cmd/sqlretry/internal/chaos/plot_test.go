package chaos

import (
	"bytes"
	"image"
	"image/color"
	"image/png"
	"strings"
	"testing"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg/draw"
)

// nearColour reports whether c is within a few levels of want: the PNG's
// anti-aliased lines blend their colour with the white behind them.
func nearColour(c color.Color, want color.RGBA, tol int) bool {
	r, g, b, _ := c.RGBA()
	d := func(x uint32, y uint8) int { return max(int(x>>8)-int(y), int(y)-int(x>>8)) }
	return d(r, want.R) <= tol && d(g, want.G) <= tol && d(b, want.B) <= tol
}

// outageBand finds the first column of pixels, from the left, with a long
// unbroken run of the outage's grey shade (lines drawn over the band break
// it, so the run is taken from its longest piece's ends in the column), and
// returns the columns the band spans and its top and bottom rows: the top
// panel's data area, in y, during the outage.
func outageBand(img image.Image) (x0, x1, top, bottom int, ok bool) {
	grey := color.RGBA{R: 0xdb, G: 0xdb, B: 0xdb}
	isGrey := func(x, y int) bool { return nearColour(img.At(x, y), grey, 4) }
	b := img.Bounds()
	for x := b.Min.X; x < b.Max.X; x++ {
		first, last := -1, -1
		run, best := 0, 0
		for y := b.Min.Y; y < b.Max.Y/2; y++ {
			if !isGrey(x, y) {
				run = 0
				continue
			}
			if first < 0 {
				first = y
			}
			last = y
			run++
			best = max(best, run)
		}
		if best < 40 {
			continue
		}
		x1 = x
		for x1+1 < b.Max.X && isGrey(x1+1, first) {
			x1++
		}
		return x, x1, first, last, true
	}
	return 0, 0, 0, 0, false
}

// TestPlotShowsAttemptsDuringTheOutage draws a run whose calls during the
// outage all fail, 160 attempts a second against 3,100 before it: the
// attempts' line must stand well clear of the bottom during the outage,
// not read as 0 (on the old linear axis it sat at 4 % of the height, under
// the ok/s line's 0, while the faults read 160 a second).
func TestPlotShowsAttemptsDuringTheOutage(t *testing.T) {
	var buf bytes.Buffer
	if err := DrawPlot(&buf, "png", runFixture("sqlretry", 6*time.Second), nil); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&buf)
	if err != nil {
		t.Fatal(err)
	}
	x0, x1, top, bottom, ok := outageBand(img)
	if !ok {
		t.Fatal("no outage band in the top panel")
	}
	highest := bottom
	for x := x0 + (x1-x0)/4; x < x1-(x1-x0)/4; x++ {
		for y := top; y <= bottom; y++ {
			if nearColour(img.At(x, y), colAttempts, 40) && y < highest {
				highest = y
			}
		}
	}
	if x1-x0 < 20 {
		t.Fatalf("outage band %d..%d: too narrow to hold the outage", x0, x1)
	}
	if h := float64(bottom-highest) / float64(bottom-top); h < 0.4 {
		t.Errorf("attempts/s during the outage are drawn at %.0f %% of the panel's height, want >= 40 %%: they read as 0", 100*h)
	}
}

// TestRunGridSharesScalesAcrossColumns: a naive run beside ours is drawn
// on the same y scale in every row, so the column that did less reads
// lower, not the same.
func TestRunGridSharesScalesAcrossColumns(t *testing.T) {
	ours, naive := runFixture("sqlretry", 4*time.Second), runFixture("naive", 4*time.Second)
	for i := range naive.Samples {
		naive.Samples[i].OK /= 2
		naive.Samples[i].Attempts /= 2
		naive.Samples[i].Budget = 10 * float64(i)
	}
	ours.Damage = []DamagePoint{{ElapsedMS: 1000}}
	naive.Damage = []DamagePoint{{ElapsedMS: 1000, Misreported: 40}}
	grid, err := runGrid(ours, naive)
	if err != nil {
		t.Fatal(err)
	}
	if len(grid) != 3 || len(grid[0]) != 2 {
		t.Fatalf("grid: got %d rows of %d, want 3 rows (rates, damage, budget) of 2", len(grid), len(grid[0]))
	}
	for row := range grid {
		a, b := grid[row][0].p.Y, grid[row][1].p.Y
		if a.Min != b.Min || a.Max != b.Max {
			t.Errorf("row %d: y from %v to %v beside %v to %v, want one scale", row, a.Min, a.Max, b.Min, b.Max)
		}
	}
	if grid[1][0].p.Y.Max < 40 || grid[2][0].p.Y.Max < 10*float64(len(naive.Samples)-1) {
		t.Errorf("damage and budget rows: y up to %v and %v, want room for the naive run's 40 and its budget", grid[1][0].p.Y.Max, grid[2][0].p.Y.Max)
	}
}

// TestPanelsKeepTheirLegendsOffTheData: every panel's legend is drawn in
// the strip beside its plot, none inside the plot's data area (where it
// covered the latest seconds of the run).
func TestPanelsKeepTheirLegendsOffTheData(t *testing.T) {
	ours, naive := runFixture("sqlretry", 4*time.Second), runFixture("naive", 4*time.Second)
	ours.Damage, naive.Damage = []DamagePoint{{ElapsedMS: 1000}}, []DamagePoint{{ElapsedMS: 1000, Lost: 1}}
	grid, err := runGrid(ours, naive)
	if err != nil {
		t.Fatal(err)
	}
	cgrid, err := contentionGrid(contentionFixture())
	if err != nil {
		t.Fatal(err)
	}
	empty := plot.NewLegend()
	for _, g := range [][][]panel{grid, cgrid} {
		for _, row := range g {
			for _, pn := range row {
				if pn.n == 0 {
					t.Errorf("panel %q: no legend entry", pn.p.Title.Text)
				}
				if pn.p.Legend.Rectangle(draw.Canvas{}) != empty.Rectangle(draw.Canvas{}) {
					t.Errorf("panel %q: its plot has a legend of its own, drawn over the data", pn.p.Title.Text)
				}
			}
		}
	}
}

// TestContentionPlotDrawsSQLretryUnderTheOthers: where the modes' lines
// meet (100 % success, no damage), the one drawn last hides the others; so
// sqlretry's is drawn first, broader than every other, which run over it.
func TestContentionPlotDrawsSQLretryUnderTheOthers(t *testing.T) {
	grid, err := contentionGrid(contentionFixture())
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range grid {
		lines := row[0].lines
		if len(lines) < 2 {
			t.Fatalf("panel %q: %d lines, want one per mode", row[0].p.Title.Text, len(lines))
		}
		if lines[0].Color != modeColors[modeSQLretry] {
			t.Errorf("panel %q: the first line drawn is %v, want sqlretry's", row[0].p.Title.Text, lines[0].Color)
		}
		for _, l := range lines[1:] {
			if l.Width >= lines[0].Width {
				t.Errorf("panel %q: a line %v as broad as sqlretry's %v hides it", row[0].p.Title.Text, l.Width, lines[0].Width)
			}
		}
	}
}

// TestRunTitlesSayWhatRan: the title over a run names a fleet, a Galera
// cluster, a failover and an interruption.
func TestRunTitlesSayWhatRan(t *testing.T) {
	fleet := runFixture("sqlretry", time.Second)
	fleet.Fleet = &FleetReport{Processes: 4, WorkersPerProcess: 8}
	galera := runFixture("sqlretry", time.Second)
	galera.Cluster = &ClusterReport{Kind: ClusterGalera, Nodes: []string{"a", "b", "c"}, Routing: "spread: each connection ..."}
	failover := runFixture("sqlretry", time.Second)
	failover.Cluster = &ClusterReport{Kind: "postgres_failover", Nodes: []string{"a", "b"}}
	failover.Interrupted, failover.DurationMS = true, 400
	for _, c := range []struct {
		r    *RunReport
		want []string
	}{
		{runFixture("sqlretry", time.Second), []string{"sqlite", "sqlretry", "8 workers"}},
		{runFixture("naive", time.Second), []string{"naive blind replay"}},
		{fleet, []string{"fleet of 4 processes × 8 workers"}},
		{galera, []string{"Galera cluster of 3 nodes, spread routing"}},
		{failover, []string{"failover", "standby promoted", "INTERRUPTED at 0.4 s of 1.0 s"}},
	} {
		title := runTitle(c.r)
		for _, w := range c.want {
			if !strings.Contains(title, w) {
				t.Errorf("title %q: want it to say %q", title, w)
			}
		}
	}
	r := contentionFixture()
	r.Interrupted, r.InterruptedIn = true, modeOld
	grid, err := contentionGrid(r)
	if err != nil {
		t.Fatal(err)
	}
	if title := grid[0][0].p.Title.Text; !strings.Contains(title, "INTERRUPTED in old defaults") {
		t.Errorf("contention title %q: want it to say where it was interrupted", title)
	}
}

// TestRateTicks labels 0 and the powers of ten up to the axis's top.
func TestRateTicks(t *testing.T) {
	var labels []string
	for _, tk := range (rateTicks{}).Ticks(0, rateY(3500)) {
		if tk.Label != "" {
			labels = append(labels, tk.Label)
		}
	}
	if got := strings.Join(labels, " "); got != "0 1 10 100 1000" {
		t.Errorf("labels: got %q, want 0 1 10 100 1000", got)
	}
}

// TestContentionPlotShowsSQLretryWhereTheModesMeet draws three modes that
// all succeed every call: sqlretry's line must show in the success-rate
// panel (it was drawn first, as wide as the others, and hidden whole).
func TestContentionPlotShowsSQLretryWhereTheModesMeet(t *testing.T) {
	r := contentionFixture()
	for i := range r.Modes {
		for j := range r.Modes[i].Samples {
			r.Modes[i].Samples[j].OK = r.Modes[i].Samples[j].Ops
		}
	}
	var buf bytes.Buffer
	if err := DrawContentionPlot(&buf, "png", r); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&buf)
	if err != nil {
		t.Fatal(err)
	}
	b := img.Bounds()
	blue := 0
	// The left half of the top panel: the lines, and no legend.
	for x := b.Dx() / 8; x < b.Dx()/2; x++ {
		for y := 0; y < b.Dy()/3; y++ {
			if nearColour(img.At(x, y), colThroughput, 24) {
				blue++
			}
		}
	}
	if blue < b.Dx()/4 {
		t.Errorf("sqlretry's colour: %d pixels in the success-rate panel, want a line's worth (>= %d): it is hidden", blue, b.Dx()/4)
	}
}

// TestPerSecondSkipsSamplesTooClose: two samples a few milliseconds apart
// (a fleet's merges as its processes' samples come in) would divide a
// whole interval's counts by those milliseconds; the rate stays the run's.
func TestPerSecondSkipsSamplesTooClose(t *testing.T) {
	r := &RunReport{}
	ok := int64(0)
	for el := time.Duration(0); el <= time.Second; el += 100 * time.Millisecond {
		r.Samples = append(r.Samples, Sample{Elapsed: el, OK: ok, Budget: -1})
		if el == 500*time.Millisecond {
			// A merge 2 ms later, when a process's 100 ms of work arrived.
			r.Samples = append(r.Samples, Sample{Elapsed: el + 2*time.Millisecond, OK: ok + 300, Budget: -1})
		}
		ok += 300 // 3,000 ok/s
	}
	ops, _, _, _ := perSecond(r)
	for _, xy := range ops {
		if xy.Y > 6000 {
			t.Errorf("ok/s at %.3f s: %.0f, want about 3,000", xy.X, xy.Y)
		}
	}
}
