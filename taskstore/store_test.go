package taskstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sqlretry/sqlretry/faults"
)

func TestLifecycle(t *testing.T) {
	for _, d := range dialects {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			l := NewLedger()
			s, clk := newStore(t, d, nil, Options{Ledger: l, LeaseTTL: time.Minute})
			ctx := context.Background()
			task, err := s.Persist(ctx, Task{Key: "k1", Payload: []byte("hello")})
			if err != nil {
				t.Fatalf("persist: %v", err)
			}
			if _, err := s.Persist(ctx, Task{Key: "k1", Payload: []byte("other")}); !errors.Is(err, ErrTaskKeyTaken) {
				t.Fatalf("persist with a taken key: got %v, want ErrTaskKeyTaken", err)
			}
			if _, err := s.Persist(ctx, task); !errors.Is(err, ErrIDTaken) {
				t.Fatalf("persist the same task again: got %v, want ErrIDTaken (a first attempt never inserted it)", err)
			}
			other := task
			other.Payload = []byte("not ours")
			other.Key = ""
			if _, err := s.Persist(ctx, other); !errors.Is(err, ErrIDTaken) {
				t.Fatalf("persist another task under a taken id: got %v, want ErrIDTaken", err)
			}
			at := time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC)
			series, err := s.Persist(ctx, Task{MaxRuns: 2})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Persist(ctx, Task{ParentID: series.ID, ScheduledAt: at}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Persist(ctx, Task{ParentID: series.ID, ScheduledAt: at}); !errors.Is(err, ErrOccurrenceTaken) {
				t.Fatalf("second occurrence at the same time: got %v, want ErrOccurrenceTaken", err)
			}
			if _, created, err := s.EnsureOccurrence(ctx, series.ID, Task{ScheduledAt: at.Add(time.Hour)}); err != nil || !created {
				t.Fatalf("ensure occurrence: got created=%v, %v; want true, nil", created, err)
			}
			if _, created, err := s.EnsureOccurrence(ctx, series.ID, Task{ScheduledAt: at.Add(time.Hour)}); err != nil || created {
				t.Fatalf("ensure occurrence again: got created=%v, %v; want false, nil", created, err)
			}

			a1, err := s.AdvanceRun(ctx, series.ID, 0)
			if err != nil || a1.RunNo != 1 || a1.Version != 1 {
				t.Fatalf("advance: got %+v, %v; want run 1 version 1", a1, err)
			}
			if _, err := s.AdvanceRun(ctx, series.ID, 0); !errors.Is(err, ErrVersionConflict) {
				t.Fatalf("advance at a stale version: got %v, want ErrVersionConflict", err)
			}
			if a2, err := s.AdvanceRun(ctx, series.ID, 1); err != nil || a2.RunNo != 2 {
				t.Fatalf("second advance: got %+v, %v", a2, err)
			}
			if _, err := s.AdvanceRun(ctx, series.ID, 2); !errors.Is(err, ErrSeriesComplete) {
				t.Fatalf("advance past MaxRuns: got %v, want ErrSeriesComplete", err)
			}

			// Work every due task: one fails once, then succeeds.
			fails := map[string]int{}
			h := func(ctx context.Context, t Task) error {
				if string(t.Payload) == "hello" && fails[t.ID] == 0 {
					fails[t.ID]++
					return errors.New("handler failed")
				}
				return nil
			}
			for i := 0; i < 20; i++ {
				ran, err := s.Work(ctx, "w1", h, 0)
				if err != nil {
					t.Fatalf("work: %v", err)
				}
				if !ran {
					break
				}
			}
			got, err := s.Get(ctx, task.ID)
			if err != nil || got.Status != Succeeded || got.JobAttempts != 2 {
				t.Fatalf("task after work: got %s attempts %d (%v); want succeeded, 2", got.Status, got.JobAttempts, err)
			}

			// A lease that expires returns to the queue.
			p, _ := s.Persist(ctx, Task{Payload: []byte("expires")})
			lease, err := s.Claim(ctx, "w2")
			if err != nil || lease == nil || lease.Task.ID != p.ID {
				t.Fatalf("claim: got %+v, %v", lease, err)
			}
			if n, err := s.Recover(ctx); err != nil || n != 0 {
				t.Fatalf("recover before expiry: got %d, %v; want 0", n, err)
			}
			clk.Advance(2 * time.Minute)
			if n, err := s.Recover(ctx); err != nil || n != 1 {
				t.Fatalf("recover after expiry: got %d, %v; want 1", n, err)
			}
			if err := s.Start(ctx, lease); !errors.Is(err, ErrLeaseLost) {
				t.Fatalf("start on an expired lease: got %v, want ErrLeaseLost", err)
			}
			if id, err := s.SetStatus(ctx, Transition{TaskID: p.ID, From: Running, To: Succeeded}); !errors.Is(err, ErrStatusConflict) {
				t.Fatalf("set-status from the wrong status: got %s %v, want ErrStatusConflict", id, err)
			}
			r, err := s.Check(ctx, l)
			if err != nil {
				t.Fatal(err)
			}
			if !r.Clean() {
				t.Fatalf("check: %v\n%v", r, r.Problems)
			}
		})
	}
}

// TestPersistResubmittedIDIsRefused: Persist of a task whose id already
// holds a task, the same content included, is a collision the caller hears
// of (ErrIDTaken) when no earlier attempt of this call can have inserted the
// row: a task that already ran is not reported queued and fresh while the
// stored one, succeeded, never runs again. A duplicate key proves success
// only after an attempt of this very call whose outcome was unknown.
func TestPersistResubmittedIDIsRefused(t *testing.T) {
	for _, d := range dialects {
		t.Run(d.String(), func(t *testing.T) {
			ctx := context.Background()
			plan := faults.MustPlan(faults.Config{Seed: 1})
			led := NewLedger()
			s, _ := newStore(t, d, plan, Options{Ledger: led})
			task, err := s.Persist(ctx, Task{Key: "report-1", Payload: []byte("p")})
			if err != nil {
				t.Fatal(err)
			}
			if ran, err := s.Work(ctx, "w", func(context.Context, Task) error { return nil }, 0); !ran || err != nil {
				t.Fatalf("work: got %v, %v", ran, err)
			}
			stored := func() Task {
				t.Helper()
				got, err := s.Get(ctx, task.ID)
				if err != nil {
					t.Fatal(err)
				}
				return got
			}
			if got := stored(); got.Status != Succeeded || got.JobAttempts != 1 {
				t.Fatalf("after work: got %s with %d attempts, want succeeded with 1", got.Status, got.JobAttempts)
			}
			for _, tc := range []struct {
				name string
				rule *faults.Rule
			}{
				{"first attempt", nil},
				// The first attempt is rolled back (a deadlock victim): the
				// retry's duplicate key is not its own insert either.
				{"retry after a failure that applied nothing", &faults.Rule{Kind: faults.ServerError, Engine: engineOf(d), Op: faults.OpExec, Match: "INSERT INTO tasks"}},
			} {
				if tc.rule != nil {
					if err := plan.Add(*tc.rule); err != nil {
						t.Fatal(err)
					}
				}
				got, err := s.Persist(ctx, task)
				if !errors.Is(err, ErrIDTaken) {
					t.Errorf("%s: re-submitting task %s got %v (returned as %s with %d attempts), want ErrIDTaken", tc.name, task.ID, err, got.Status, got.JobAttempts)
				}
				if tc.rule != nil && plan.Counts().Faults[faults.ServerError] != 1 {
					t.Errorf("%s: the fault fired %d times, want 1", tc.name, plan.Counts().Faults[faults.ServerError])
				}
			}
			if got := stored(); got.Status != Succeeded || got.JobAttempts != 1 {
				t.Errorf("stored task: got %s with %d attempts, want succeeded with 1", got.Status, got.JobAttempts)
			}

			// A retry after our own insert landed and its reply was lost is
			// success, once.
			if err := plan.Add(faults.Rule{Kind: faults.AppliedReplyLost, Op: faults.OpExec, Match: "INSERT INTO tasks"}); err != nil {
				t.Fatal(err)
			}
			fresh, err := s.Persist(ctx, Task{Payload: []byte("q")})
			if err != nil {
				t.Errorf("persist whose reply was lost: got %v, want nil", err)
			}
			if plan.Counts().Faults[faults.AppliedReplyLost] != 1 {
				t.Errorf("the lost reply fired %d times, want 1", plan.Counts().Faults[faults.AppliedReplyLost])
			}
			if got, err := s.Get(ctx, fresh.ID); err != nil || !sameTask(got, fresh) {
				t.Errorf("persist whose reply was lost: stored %+v (%v), want %+v", got, err, fresh)
			}
			plan.Disable()
			r, err := s.Check(ctx, led)
			if err != nil {
				t.Fatal(err)
			}
			if !r.Clean() {
				t.Errorf("check: got %v\n%v, want clean", r, r.Problems)
			}
		})
	}
}
