package chaos

import (
	"bytes"
	"context"
	"fmt"
	"image/png"
	"strings"
	"testing"
	"time"

	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/faults"
	"github.com/sqlretry/sqlretry/taskstore"
)

// TestProgressFrames: on a terminal each sample is one frame, written
// whole after a carriage return and ended by "erase to the end of the
// line", labelled with its run's mode; a new mode starts a new line; the
// last frame of an interrupted run stays short of 100 %.
func TestProgressFrames(t *testing.T) {
	var buf bytes.Buffer
	p := NewProgress(&buf, true)
	p.Width = 80
	p.Update(Sample{Mode: modeOld, Elapsed: 500 * time.Millisecond, Total: 2 * time.Second, Ops: 7, Budget: -1})
	frame := buf.String()
	if !strings.HasPrefix(frame, "\r[=====>") || !strings.HasSuffix(frame, "\x1b[K") || !strings.Contains(frame, " 25% old_defaults   0.5s/2s  ops 7") {
		t.Errorf("frame: got %q", frame)
	}
	if strings.Contains(frame, "outage") || len(frame) > 80+4 {
		t.Errorf("contention frame: got %q, want no outage and at most 80 columns", frame)
	}
	p.Update(Sample{Mode: modeBlind, Elapsed: 100 * time.Millisecond, Total: 2 * time.Second, Budget: -1})
	if !strings.Contains(buf.String(), "\x1b[K\n\r[=>") || !strings.Contains(buf.String(), "blind_loop") {
		t.Errorf("a new mode: got %q, want the old frame's line ended and a new frame", buf.String())
	}
	p.Finish()
	if strings.Contains(buf.String(), "100%") || !strings.HasSuffix(buf.String(), "\x1b[K\n") {
		t.Errorf("finish: got %q, want the last frame as it was, then a line end", buf.String())
	}
	for _, c := range []struct {
		s    Sample
		want string
	}{
		{Sample{Total: time.Second, Budget: 3}, "sqlretry   0.0s/1s"},
		{Sample{Naive: true, Total: time.Second, Outage: true}, "naive   0.0s/1s  ops 0  faults 0  retries 0  budget 0.0  outage ON"},
		{Sample{Mode: modeSQLretry, Total: time.Second}, "sqlretry   0.0s/1s"},
	} {
		if got := describe(c.s); !strings.HasPrefix(got, c.want) {
			t.Errorf("describe(%+v): got %q, want it to start %q", c.s, got, c.want)
		}
	}
	var piped bytes.Buffer
	q := NewProgress(&piped, false)
	for ms := 0; ms <= 2000; ms += 100 {
		q.Update(Sample{Elapsed: time.Duration(ms) * time.Millisecond, Total: 2 * time.Second})
	}
	if n := strings.Count(piped.String(), "\n"); n != 3 || strings.ContainsAny(piped.String(), "\r\x1b") {
		t.Errorf("piped: got %d lines %q, want 3 plain lines (0 s, 1 s, 2 s)", n, piped.String())
	}
}

// TestFailCause: each failed operation is put down to one cause.
func TestFailCause(t *testing.T) {
	cases := []struct {
		err  error
		want string
	}{
		{fmt.Errorf("x: %w", sqlretry.ErrBudgetExhausted), causeBudget},
		{fmt.Errorf("x: %w", sqlretry.ErrRetriesExhausted), causeRetries},
		{fmt.Errorf("x: %w", sqlretry.ErrCircuitOpen), causeBreaker},
		{fmt.Errorf("x: %w", taskstore.ErrTaskKeyTaken), causeConflict},
		{fmt.Errorf("x: %w", taskstore.ErrSeriesComplete), causeConflict},
		{fmt.Errorf("syntax"), causePermanent},
	}
	for _, c := range cases {
		if got := failCause(c.err); got != c.want {
			t.Errorf("failCause(%v): got %s, want %s", c.err, got, c.want)
		}
	}
}

// TestReportWords: the text report breaks failures down by cause, names
// the budget's denials and the outage's failures differently, says what
// the series count means in plain words, and lists problems with counts
// that agree (issue 18, finding 9).
func TestReportWords(t *testing.T) {
	r := &RunReport{Mode: "naive", PlannedMS: 2000, DurationMS: 2000, BudgetExhausted: 114, SeriesCompleted: 9, SeriesMaxRuns: 4,
		Faults:     map[string]int{"outage": 40},
		Shapes:     map[string]ShapeReport{"read": {Operations: 120, Failed: 114, FailedBy: map[string]int{causeBudget: 114}}},
		Outage:     OutageReport{Windows: []OutageWindow{{OffsetMS: 800, LengthMS: 300, Calls: 50, Attempts: 60, Refused: 40, RecoveryMS: 12}}},
		Invariants: Invariants{Duplicated: 200, Lost: 26},
		Settlement: Settlement{Verifier: "marker table", Note: tasksSettlementNote},
	}
	for i := range 20 {
		r.Problems = append(r.Problems, fmt.Sprintf("problem %d", i))
	}
	var buf bytes.Buffer
	r.WriteText(&buf)
	out := buf.String()
	for _, want := range []string{
		"114 retries denied by the retry budget",
		"read       failed: 114 a retry denied by the retry budget",
		"(and 40 calls failed by the simulated outage)",
		"40 calls failed by the outage (connection refused or reset)",
		"9 recurring tasks ran all 4 of their runs",
		"VIOLATED (naive): 226 violations in all",
		"the first 5 of 20 problem lines",
		"run with --json to see every line",
		"commit verifier (marker table): 0 ambiguous COMMITs",
		"in the tasks scenario, none: every task-store write has a Verify of its own",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report: want %q in\n%s", want, out)
		}
	}
	if strings.Contains(out, "calls refused") || strings.Contains(out, "refused by the budget") || strings.Contains(out, "more\n") || strings.Contains(out, "reached their max") {
		t.Errorf("report: want no bare \"refused\", no unexplained \"... more\", no jargon; got\n%s", out)
	}
	buf.Reset()
	WriteComparison(&buf, &RunReport{}, &RunReport{Invariants: Invariants{EndedEarly: 3, UncountedStarts: 1}})
	for _, want := range []string{"ended early         0                   3", "uncounted starts", "violations in all         0                   4", "the exit code is ours alone"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("comparison: want %q in\n%s", want, buf.String())
		}
	}
}

// TestReportSaysWhatItCounts: the report says that reads run where writes
// fail (in the outage), gives the calls the run's end cut off a column of
// their own, counts a fleet's workers in all, and says a comparison's runs
// are timed; the commit verifier is described in the help's words.
func TestReportSaysWhatItCounts(t *testing.T) {
	r := &RunReport{Mode: "sqlretry", Engine: "sqlite", PlannedMS: 6000, DurationMS: 6000, Workers: 8, Seed: 1,
		Shapes: map[string]ShapeReport{
			"read":    {Operations: 36, Failed: 36, InOutage: 35, FailedBy: map[string]int{causeBudget: 36}},
			"persist": {Operations: 10, OK: 6, Failed: 1, Ambiguous: 1, Canceled: 2},
		},
		Fleet:      &FleetReport{Processes: 4, WorkersPerProcess: 8},
		Settlement: Settlement{Verifier: "marker table", Note: tasksSettlementNote},
		Outage:     OutageReport{Windows: []OutageWindow{{OffsetMS: 2000, LengthMS: 1000}}},
	}
	var buf bytes.Buffer
	r.WriteText(&buf)
	out := buf.String()
	for _, want := range []string{
		"sqlretry chaos: sqlite, 6s, 4 processes × 8 workers (32 in all), seed 1",
		"ambiguous  interrupted  faults seen",
		"read       35 of 36 began in an outage: a worker reads only to resynchronise after a write failed",
		"(ambiguous: told ErrAmbiguous, the outcome unknown; interrupted: cut off by the run's end;",
		tasksVerifyReason,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report: want %q in\n%s", want, out)
		}
	}
	// persist's row: 10 operations, 6 ok, 1 failed, 1 ambiguous, 2 interrupted.
	if !strings.Contains(out, "persist          10   6       1          1            2") {
		t.Errorf("report: want persist's interrupted calls in their column:\n%s", out)
	}
	if !strings.Contains(strings.Join(strings.Fields(VerifierScope), " "), tasksVerifyReason) {
		t.Errorf("the help's verifier scope %q and the report's note %q differ", VerifierScope, tasksSettlementNote)
	}
	buf.Reset()
	WriteComparison(&buf, &RunReport{Seed: 1, PlannedMS: 8000, Operations: 22217, OpsPerSec: 2777}, &RunReport{Operations: 13274, OpsPerSec: 1659})
	for _, want := range []string{"Each run is timed (8s), not counted", "the seed fixes the fault plan and the mix of operations, not how many",
		"operations per second      2777                1659"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("comparison: want %q in\n%s", want, buf.String())
		}
	}
}

// TestDamageOverTime runs ours and the naive store on one worker with lost
// COMMIT replies: the naive run's damage grows over time and ends at its
// final counts, ours stays 0, and the plot of the two decodes.
func TestDamageOverTime(t *testing.T) {
	base := Config{
		Duration: 2 * time.Second, Workers: 2, Seed: 7, FaultRate: 0.4, Outages: []Outage{}, Damage: true,
		Kinds:  []faults.Kind{faults.CommitAppliedReplyLost, faults.AfterExec},
		Policy: PolicyConfig{BaseDelay: time.Millisecond, MaxDelay: 2 * time.Millisecond, NoBudget: true},
	}
	runs := map[bool]*RunReport{}
	for _, naive := range []bool{false, true} {
		cfg := base
		cfg.Naive = naive
		r, err := Run(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		runs[naive] = r
	}
	ours, naive := runs[false], runs[true]
	if len(ours.Damage) < 2 || len(naive.Damage) < 2 {
		t.Fatalf("damage points: got %d and %d, want several", len(ours.Damage), len(naive.Damage))
	}
	for _, d := range ours.Damage {
		if d.Lost+d.AppliedTwice+d.Misreported != 0 {
			t.Errorf("ours: damage %+v, want none", d)
		}
	}
	prev := DamagePoint{}
	for _, d := range naive.Damage {
		if d.Lost < prev.Lost || d.Misreported < prev.Misreported || d.ElapsedMS < prev.ElapsedMS {
			t.Errorf("naive: damage went back from %+v to %+v", prev, d)
		}
		prev = d
	}
	v := naive.Invariants
	if prev.Lost != v.Lost || prev.Misreported != v.Misreported || prev.AppliedTwice+naive.DamageUntimed < v.DoubleCounted {
		t.Errorf("naive: last point %+v (untimed %d), want the final counts %+v", prev, naive.DamageUntimed, v)
	}
	if prev.Lost+prev.AppliedTwice+prev.Misreported == 0 {
		t.Errorf("naive: no damage over time, final invariants %+v", v)
	}
	var buf bytes.Buffer
	if err := DrawPlot(&buf, "png", ours, naive); err != nil {
		t.Fatal(err)
	}
	if _, err := png.Decode(&buf); err != nil {
		t.Fatal(err)
	}
	if grid, err := runGrid(ours, naive); err != nil || len(grid) != 3 || len(grid[0]) != 2 {
		t.Errorf("plot: %d rows of panels (%v), want three (rates, damage, budget) of two", len(grid), err)
	}
}
