package taskstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/internal/dbtest"
	"github.com/sqlretry/sqlretry/postgres"
)

// TestSustainedOutage stops a throwaway PostgreSQL server for several
// seconds under concurrent workers, producers, an advancer and the recovery
// pass, then starts it again. The budget must hold (retries stay a small
// fraction of calls), every worker must recover without a restart, and the
// invariants must hold once the queue is drained.
func TestSustainedOutage(t *testing.T) {
	t.Parallel() // it waits on servers, not the CPU
	const (
		workers = 4
		healthy = 1500 * time.Millisecond
		outage  = 3 * time.Second
		after   = 2500 * time.Millisecond
	)
	srv := dbtest.StartPostgres(t)
	db, err := sql.Open("pgx", srv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(workers + 4)
	budget := sqlretry.DefaultBudget() // Ratio 0.1, Max 10, Floor 1/s
	p, err := sqlretry.New(sqlretry.Config{
		MaxRetries: 4, BaseDelay: 10 * time.Millisecond, MaxDelay: 200 * time.Millisecond,
		CommandTimeout: 2 * time.Second, Classifier: postgres.Classifier, Budget: budget, CountCalls: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	ledger := NewLedger()
	s, err := New(db, Postgres, Options{Policy: p, Ledger: ledger, LeaseTTL: 2 * time.Second, MaxAttempts: 5})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	// The series row is due far in the future: it is advanced, not worked.
	series, err := s.Persist(ctx, Task{MaxRuns: 100000, DueAt: time.Now().Add(24 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}

	wctx, stop := context.WithCancel(ctx)
	var (
		wg       sync.WaitGroup
		lastOK   [workers]atomic.Int64 // unix nanos of each worker's last successful task
		handled  atomic.Int64
		errCount atomic.Int64
	)
	handler := func(ctx context.Context, task Task) error {
		if handled.Add(1)%7 == 0 {
			return errors.New("handler: simulated job failure")
		}
		return nil
	}
	pause := func(d time.Duration) bool {
		select {
		case <-wctx.Done():
			return false
		case <-time.After(d):
			return true
		}
	}
	loop := func(every time.Duration, fn func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 1_000_000 && wctx.Err() == nil; i++ {
				if err := fn(); err != nil && wctx.Err() == nil {
					errCount.Add(1)
				}
				if !pause(every) {
					return
				}
			}
		}()
	}
	for w := range workers {
		name := fmt.Sprintf("worker-%d", w)
		loop(5*time.Millisecond, func() error {
			ran, err := s.Work(wctx, name, handler, 10*time.Millisecond)
			if ran && err == nil {
				lastOK[w].Store(time.Now().UnixNano())
			}
			return err
		})
	}
	loop(8*time.Millisecond, func() error { _, err := s.Persist(wctx, Task{Payload: []byte("job")}); return err })
	loop(20*time.Millisecond, func() error {
		cur, err := s.Get(wctx, series.ID)
		if err != nil {
			return err
		}
		_, err = s.AdvanceRun(wctx, series.ID, cur.ScheduleVersion)
		return err
	})
	loop(250*time.Millisecond, func() error { _, err := s.Recover(wctx); return err })

	started := time.Now()
	time.Sleep(healthy)
	before, beforeAt := p.Stats(), time.Now()
	if err := srv.Stop(); err != nil {
		t.Fatalf("stop server: %v", err)
	}
	time.Sleep(outage)
	during, window := p.Stats(), time.Since(beforeAt)
	if err := srv.Start(); err != nil {
		t.Fatalf("start server: %v", err)
	}
	restarted := time.Now()
	time.Sleep(after)
	stop()
	wg.Wait()
	elapsed := time.Since(started)
	st := p.Stats()

	// The budget held: retries during the outage are bounded by what it can
	// hand out: its Max (10), its Floor (1/s) over the outage, and a tenth
	// of a token per success.
	outageRetries := during.Retries - before.Retries
	successes := (during.Calls - during.GaveUp) - (before.Calls - before.GaveUp)
	maxRetries := float64(10) + window.Seconds()*1 + 0.1*float64(max(successes, 0))
	if float64(outageRetries) > maxRetries+1 {
		t.Errorf("retries during the outage: got %d, want at most %.0f (the budget's Max + Floor·t + Ratio·calls)", outageRetries, maxRetries)
	}
	if during.BudgetExhausted == before.BudgetExhausted {
		t.Errorf("the budget never refused a retry during a %v outage: it did not engage", outage)
	}
	// Over the whole run, too, retries stay a small fraction of calls: the
	// budget's Ratio (10%) is the ceiling; runs measure 0.5-2%.
	ratio := float64(st.Retries) / float64(max(st.Calls, 1))
	if ratio > 0.10 {
		t.Errorf("retries: got %d of %d calls (%.1f%%), want within the budget's 10%%", st.Retries, st.Calls, 100*ratio)
	}
	for w := range workers {
		if ok := lastOK[w].Load(); ok < restarted.UnixNano() {
			t.Errorf("worker-%d never completed a task after the server came back", w)
		}
	}

	// Drain: expired leases return to the queue, workers finish the rest.
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	pending := -1
	for pass := 0; pass < 100 && pending != 0 && dctx.Err() == nil; pass++ {
		if _, err := s.Recover(dctx); err != nil {
			t.Fatalf("drain recover: %v", err)
		}
		for i := 0; i < 10000; i++ {
			ran, err := s.Work(dctx, "drain", handler, 0)
			if err != nil {
				t.Fatalf("drain work: %v", err)
			}
			if !ran {
				break
			}
		}
		if err := db.QueryRowContext(dctx, `SELECT COUNT(*) FROM tasks WHERE status NOT IN ('succeeded', 'failed') AND id <> $1`, series.ID).Scan(&pending); err != nil {
			t.Fatal(err)
		}
		if pending != 0 {
			time.Sleep(250 * time.Millisecond) // for leases to expire
		}
	}
	if pending != 0 {
		t.Errorf("after the drain %d tasks are still pending", pending)
	}
	r, err := s.Check(ctx, ledger)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Clean() {
		t.Errorf("invariants: %v\n%v", r, r.Problems)
	}
	t.Logf("outage %v in %v: %d calls, %d retries (%.2f%%), %d during the outage (bound %.0f), budget refusals %d, verifications %d, ambiguous %d, worker errors %d; %v",
		outage, elapsed.Round(time.Millisecond), st.Calls, st.Retries, 100*ratio, outageRetries, maxRetries, st.BudgetExhausted, st.Verifications, st.Ambiguous, errCount.Load(), r)
}
