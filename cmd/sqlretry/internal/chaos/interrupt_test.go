package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestInterruptedTasksRun interrupts a run on a stepped clock inside its
// first outage: the report gives the time actually run, the outage cut
// short at that point, the later outage as one that did not happen, the
// invariants checked over what ran, and OK false.
func TestInterruptedTasksRun(t *testing.T) {
	clk := &stepClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := Config{
		Duration: 2 * time.Second, Workers: 3, Seed: 4, FaultRate: 0.05,
		Outages:     []Outage{{Offset: 500 * time.Millisecond, Length: 400 * time.Millisecond}, {Offset: 1500 * time.Millisecond, Length: 300 * time.Millisecond}},
		Policy:      PolicyConfig{BaseDelay: time.Millisecond, MaxDelay: 4 * time.Millisecond},
		Now:         clk.Now,
		SampleEvery: 20 * time.Millisecond,
		Progress: func(s Sample) {
			clk.step(100 * time.Millisecond)
			if s.Elapsed >= 700*time.Millisecond {
				cancel() // Ctrl-C, 0.8 s into the run on its clock
			}
		},
	}
	r, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Interrupted || r.OK {
		t.Errorf("got interrupted %t, ok %t; want interrupted, not ok", r.Interrupted, r.OK)
	}
	if r.DurationMS != 800 || r.PlannedMS != 2000 {
		t.Errorf("durations: got %d ms run of %d ms planned, want 800 of 2000", r.DurationMS, r.PlannedMS)
	}
	if r.Invariants.Total() != 0 {
		t.Errorf("invariants over what ran: got %+v, want all 0\n%v", r.Invariants, r.Problems)
	}
	if len(r.Outage.Windows) != 1 || !r.Outage.Windows[0].CutShort || r.Outage.Windows[0].LengthMS != 300 {
		t.Errorf("outages that happened: got %+v, want the first alone, cut short after 300 ms", r.Outage.Windows)
	}
	if len(r.Outage.NotReached) != 1 || r.Outage.NotReached[0].OffsetMS != 1500 {
		t.Errorf("outages not reached: got %+v, want the one at 1.5 s", r.Outage.NotReached)
	}
	var buf bytes.Buffer
	r.WriteText(&buf)
	for _, want := range []string{"INTERRUPTED after 0.8 s of 2.0 s", "the run was interrupted while it was on", "outage planned at 1.5s: did not happen",
		"INTERRUPTED after 0.8 s: in what ran, nothing lost, nothing applied twice"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("report: want %q in\n%s", want, buf.String())
		}
	}
	if strings.Contains(buf.String(), "OK: ") {
		t.Errorf("report: an interrupted run says OK:\n%s", buf.String())
	}
	doc, _ := json.Marshal(r)
	for _, want := range []string{`"interrupted":true`, `"ok":false`, `"duration_ms":800`, `"planned_duration_ms":2000`} {
		if !bytes.Contains(doc, []byte(want)) {
			t.Errorf("JSON: want %s in %s", want, doc)
		}
	}
}

// TestInterruptedContention interrupts the contention scenario during its
// second mode, on a stepped clock: the first mode ran whole, the second for
// the time it ran, the third not at all; the checks hold over what ran, and
// OK is false.
func TestInterruptedContention(t *testing.T) {
	clk := &stepClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := Config{
		Duration: time.Second, Workers: 3, Seed: 2,
		Policy:      PolicyConfig{BaseDelay: time.Millisecond, MaxDelay: 4 * time.Millisecond},
		Now:         clk.Now,
		SampleEvery: 20 * time.Millisecond,
		Progress: func(s Sample) {
			clk.step(100 * time.Millisecond)
			if s.Mode == modeOld && s.Elapsed >= 300*time.Millisecond {
				cancel()
			}
		},
	}
	r, err := RunContention(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Interrupted || r.OK || r.InterruptedIn != modeOld || len(r.Problems) != 0 {
		t.Errorf("got interrupted %t in %q, ok %t, problems %q; want interrupted in %s, not ok, no problem", r.Interrupted, r.InterruptedIn, r.OK, r.Problems, modeOld)
	}
	if len(r.Modes) != 2 || r.Modes[0].DurationMS != 1000 || r.Modes[1].DurationMS != 400 || !r.Modes[1].Interrupted {
		t.Fatalf("modes: got %d, want sqlretry whole (1000 ms) and old defaults interrupted at 400 ms: %+v", len(r.Modes), r.Modes)
	}
	var buf bytes.Buffer
	r.WriteText(&buf)
	for _, want := range []string{"INTERRUPTED during old defaults after 0.4 s of 1.0 s; 1 policies did not run", "in what ran: sqlretry lost nothing"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("report: want %q in\n%s", want, buf.String())
		}
	}
}
