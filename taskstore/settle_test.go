package taskstore

import (
	"context"
	"testing"
	"time"

	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/faults"
)

// ambiguousStartStore returns a store with one task of MaxAttempts 1 whose
// next Start commits, loses its reply, and then fails the first
// verifyFaults reads of the audit table (faults.Unlimited: all of them).
func ambiguousStartStore(t *testing.T, verifyFaults int) (*Store, *clock, *faults.Plan, *Ledger, Task) {
	t.Helper()
	plan := faults.MustPlan(faults.Config{Rules: []faults.Rule{
		// COMMIT 1 is the claim's, COMMIT 2 is Start's.
		{Kind: faults.CommitAppliedReplyLost, Op: faults.OpCommit, Nth: 2, Count: 1},
		{Kind: faults.BeforeSend, Op: faults.OpQuery, Match: "transition_id", Count: verifyFaults},
	}, Seed: 1})
	// Start's verify gives up after two reads; the Read policy, which
	// settles it, has room for more.
	fin, err := sqlretry.New(sqlretry.Config{MaxRetries: 1, BaseDelay: time.Millisecond, Classifier: Classifier(SQLite), Budget: sqlretry.NoBudget})
	if err != nil {
		t.Fatal(err)
	}
	rd, err := sqlretry.New(sqlretry.Config{MaxRetries: 20, BaseDelay: time.Millisecond, MaxDelay: 2 * time.Millisecond, Classifier: Classifier(SQLite), Budget: sqlretry.NoBudget})
	if err != nil {
		t.Fatal(err)
	}
	led := NewLedger()
	s, clk := newStore(t, SQLite, plan, Options{Policy: fin, Policies: Policies{Read: rd}, Ledger: led, MaxAttempts: 1, LeaseTTL: time.Second})
	plan.Disable()
	task, err := s.Persist(context.Background(), Task{})
	if err != nil {
		t.Fatal(err)
	}
	plan.Enable()
	return s, clk, plan, led, task
}

// startOutcome is what the ledger says the Start call was told.
func startOutcome(led *Ledger) Outcome {
	for _, e := range led.Entries() {
		if e.Kind == OpStart {
			return e.Outcome
		}
	}
	return Outcome(255)
}

// TestWorkSettlesAmbiguousStart: Start's COMMIT lands, its reply and its
// verify are lost; Work settles the start from the audit row and runs the
// handler, so the job attempt is not spent for nothing.
func TestWorkSettlesAmbiguousStart(t *testing.T) {
	ctx := context.Background()
	s, _, plan, led, task := ambiguousStartStore(t, 8)
	ran := 0
	claimed, err := s.Work(ctx, "w", func(context.Context, Task) error { ran++; return nil }, 0)
	plan.Disable()
	if o := startOutcome(led); o != ToldAmbiguous {
		t.Fatalf("Start told %v, want ambiguous: the test no longer reaches the unsettled start", o)
	}
	if !claimed || err != nil {
		t.Errorf("Work: got (%v, %v), want (true, nil)", claimed, err)
	}
	if ran != 1 {
		t.Errorf("handler ran %d times, want 1", ran)
	}
	got, err := s.Get(ctx, task.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != Succeeded || got.JobAttempts != 1 {
		t.Errorf("task: got %s with %d attempts, want succeeded with 1", got.Status, got.JobAttempts)
	}
	r, err := s.Check(ctx, led)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Clean() {
		t.Errorf("check: got %v\n%v, want clean", r, r.Problems)
	}
}

// TestCheckCountsUnsettledStart: when the start cannot be settled within
// a lease either (Work keeps reading until the lease would have expired),
// the attempt is spent with no handler start, and Check says so.
func TestCheckCountsUnsettledStart(t *testing.T) {
	ctx := context.Background()
	s, clk, plan, led, task := ambiguousStartStore(t, faults.Unlimited)
	ran := 0
	// Once the settling reads have failed for a while, the lease's time
	// passes: Work gives up.
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for plan.Counts().Faults[faults.BeforeSend] < 100 {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
		clk.Advance(time.Hour)
	}()
	_, err := s.Work(ctx, "w", func(context.Context, Task) error { ran++; return nil }, 0)
	plan.Disable()
	if n := plan.Counts().Faults[faults.BeforeSend]; n < 100 {
		t.Errorf("Work gave up after %d failed reads, want it to go on reading until the lease's time passed", n)
	}
	if o := OutcomeOf(err); o != ToldAmbiguous {
		t.Fatalf("Work: got %v (%v), want an ambiguous error", err, o)
	}
	if ran != 0 {
		t.Fatalf("handler ran %d times, want 0", ran)
	}
	clk.Advance(time.Hour)
	if _, err := s.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, task.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != Failed || got.JobAttempts != 1 {
		t.Fatalf("task: got %s with %d attempts, want failed with 1", got.Status, got.JobAttempts)
	}
	r, err := s.Check(ctx, led)
	if err != nil {
		t.Fatal(err)
	}
	if r.JobAttemptsBurned != 1 {
		t.Errorf("check: job_attempts_burned got %d, want 1 (%v)", r.JobAttemptsBurned, r)
	}
}

// TestCheckStartExcuses: a Start its caller cancelled may leave an attempt
// with no handler start; an ambiguous one may not.
func TestCheckStartExcuses(t *testing.T) {
	for _, tc := range []struct {
		told Outcome
		want int
	}{
		{ToldAmbiguous, 1},
		{ToldCanceled, 0},
		{ToldFailed, 1},
	} {
		task := Task{ID: "t1", Status: Failed, JobAttempts: 1, MaxAttempts: 1, Payload: []byte{}}
		sn := snapshot{tasks: map[string]taskRow{"t1": {task: task, fp: fingerprint(task)}}, audit: map[string]int{"c1": 1, "c1:start": 1}}
		entries := []Entry{
			{Kind: OpClaim, ID: "c1", TaskID: "t1", Outcome: ToldOK},
			{Kind: OpStart, ID: "c1:start", TaskID: "t1", Outcome: tc.told},
		}
		if got := check(sn, entries, nil).JobAttemptsBurned; got != tc.want {
			t.Errorf("start told %v: job_attempts_burned got %d, want %d", tc.told, got, tc.want)
		}
	}
}

// TestCheckCanceledStartExcusesOnlyItsOwnAttempt: a Start its caller
// cancelled excuses the job attempt it counted, and only if its audit row
// shows it ran: a cancelled Start that never reached the database does not
// hide an attempt another Start burned, and a Start named twice in the
// ledger excuses one attempt.
func TestCheckCanceledStartExcusesOnlyItsOwnAttempt(t *testing.T) {
	for _, tc := range []struct {
		name     string
		attempts int
		audit    map[string]int
		starts   []Entry
		want     int
	}{
		{"cancelled start that ran", 1, map[string]int{"c2:start": 1},
			[]Entry{{ID: "c2:start", Outcome: ToldCanceled}}, 0},
		{"cancelled start that never ran, an earlier attempt burned", 1, map[string]int{"c1:start": 1},
			[]Entry{{ID: "c1:start", Outcome: ToldOK}, {ID: "c2:start", Outcome: ToldCanceled}}, 1},
		{"one cancelled start recorded twice, two attempts burned", 2, map[string]int{"c1:start": 1, "c2:start": 1},
			[]Entry{{ID: "c1:start", Outcome: ToldOK}, {ID: "c2:start", Outcome: ToldAmbiguous}, {ID: "c2:start", Outcome: ToldCanceled}, {ID: "c2:start", Outcome: ToldCanceled}}, 1},
	} {
		task := Task{ID: "t1", Status: Failed, JobAttempts: tc.attempts, MaxAttempts: 3, Payload: []byte{}}
		sn := snapshot{tasks: map[string]taskRow{"t1": {task: task, fp: fingerprint(task)}}, audit: tc.audit}
		var entries []Entry
		for _, e := range tc.starts {
			e.Kind, e.TaskID = OpStart, "t1"
			entries = append(entries, e)
		}
		r := check(sn, entries, nil)
		if r.JobAttemptsBurned != tc.want {
			t.Errorf("%s: job_attempts_burned got %d, want %d (%v)", tc.name, r.JobAttemptsBurned, tc.want, r.Problems)
		}
	}
}
