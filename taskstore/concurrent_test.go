package taskstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sqlretry/sqlretry/faults"
)

// TestConcurrentWorkers runs workers, producers and competing advancers at
// once, with every fault kind injected at a low rate, on each dialect: the
// claims' row locks (SKIP LOCKED; BEGIN IMMEDIATE on SQLite) and the
// advance's compare-and-swap under contention, then the invariants.
func TestConcurrentWorkers(t *testing.T) {
	const (
		workers   = 4
		advancers = 3
		tasks     = 40
		maxRuns   = 30
		rate      = 0.04
	)
	for _, d := range dialects {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			var rules []faults.Rule
			for _, k := range []faults.Kind{faults.BeforeSend, faults.AfterExec, faults.AppliedReplyLost, faults.CommitNotApplied, faults.CommitAppliedReplyLost, faults.ServerError} {
				rules = append(rules, faults.Rule{Kind: k, Rate: rate, Count: faults.Unlimited, Engine: engineOf(d)})
			}
			rules = append(rules, faults.Rule{Kind: faults.Hang, Op: faults.OpExec, Rate: rate, Count: 2})
			plan := faults.MustPlan(faults.Config{Rules: rules, Seed: 7})
			ledger := NewLedger()
			s, clk := newStore(t, d, plan, Options{Ledger: ledger, LeaseTTL: time.Hour, MaxAttempts: 10, Policy: fastPolicy(t, d, time.Second)})
			plan.Disable()
			series, err := s.Persist(context.Background(), Task{MaxRuns: maxRuns, DueAt: clk.Now().Add(1000 * time.Hour)})
			if err != nil {
				t.Fatal(err)
			}
			plan.Enable()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			var wg sync.WaitGroup
			var mu sync.Mutex
			conflicts := 0
			wg.Add(1)
			go func() { // producer
				defer wg.Done()
				for i := 0; i < tasks; i++ {
					_, _ = s.Persist(ctx, Task{Payload: []byte(fmt.Sprint(i))})
				}
			}()
			for a := 0; a < advancers; a++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < 20*maxRuns && ctx.Err() == nil; i++ {
						cur, err := s.Get(ctx, series.ID)
						if err != nil {
							continue
						}
						_, err = s.AdvanceRun(ctx, series.ID, cur.ScheduleVersion)
						if errors.Is(err, ErrSeriesComplete) {
							return
						}
						if errors.Is(err, ErrVersionConflict) {
							mu.Lock()
							conflicts++
							mu.Unlock()
						}
					}
				}()
			}
			for w := 0; w < workers; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					idle := 0
					for i := 0; i < 10*tasks && idle < 30 && ctx.Err() == nil; i++ {
						ran, _ := s.Work(ctx, fmt.Sprintf("w%d", w), func(context.Context, Task) error { return nil }, 0)
						if ran {
							idle = 0
						} else {
							idle++
							time.Sleep(2 * time.Millisecond)
						}
					}
				}()
			}
			wg.Wait()
			plan.Disable()
			// Drain: whatever a failed write left leased comes back and runs.
			clk.Advance(2 * time.Hour)
			for pass := 0; pass < 20; pass++ {
				if _, err := s.Recover(ctx); err != nil {
					t.Fatal(err)
				}
				ran := true
				for i := 0; ran && i < 10*tasks; i++ {
					if ran, err = s.Work(ctx, "drain", func(context.Context, Task) error { return nil }, 0); err != nil {
						t.Fatal(err)
					}
				}
				r, err := s.Check(ctx, ledger)
				if err != nil {
					t.Fatal(err)
				}
				if r.Pending <= 1 { // the series row is never due
					break
				}
			}
			got, err := s.Get(ctx, series.ID)
			if err != nil {
				t.Fatal(err)
			}
			if got.CurrentRunCount != maxRuns {
				t.Errorf("series: got %d runs, want %d", got.CurrentRunCount, maxRuns)
			}
			r, err := s.Check(ctx, ledger)
			if err != nil {
				t.Fatal(err)
			}
			if !r.Clean() || r.Pending > 1 {
				t.Errorf("invariants: %v\n%v", r, r.Problems)
			}
			t.Logf("%d faults %v; %d version conflicts between advancers; %v", plan.Counts().Total(), plan.Counts().Faults, conflicts, r)
		})
	}
}
