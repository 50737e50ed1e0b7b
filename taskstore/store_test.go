package taskstore

import (
	"context"
	"errors"
	"testing"
	"time"
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
			if _, err := s.Persist(ctx, task); err != nil {
				t.Fatalf("persist the same task again: got %v, want nil (the row is ours)", err)
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
