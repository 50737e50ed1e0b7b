package taskstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/faults"
)

// The fault matrix: every write shape × every fault kind × every dialect.
// Each cell runs its shape's operations with the fault injected at random
// (a seeded plan) into the shape's own statements or COMMITs, then checks
// the invariants with injection off.

// matrixOps is the number of operations per cell.
func matrixOps() int {
	if os.Getenv("SQLRETRY_LONG") == "1" {
		return 200
	}
	return 24
}

// fault is one column of the matrix.
type fault struct {
	name   string
	rule   func(d Dialect) faults.Rule
	cancel bool // the caller cancels hung calls
	tx     bool // applies to transactional shapes only
	auto   bool // applies to the autocommit shape (Persist) only
}

const (
	matrixRate     = 0.15
	commandTimeout = time.Second
	cancelAfter    = 250 * time.Millisecond
)

var matrixFaults = []fault{
	{name: "before_send", rule: func(Dialect) faults.Rule {
		return faults.Rule{Kind: faults.BeforeSend, Op: faults.OpExec, Rate: matrixRate, Count: faults.Unlimited}
	}},
	{name: "after_exec", tx: true, rule: func(Dialect) faults.Rule {
		return faults.Rule{Kind: faults.AfterExec, Op: faults.OpExec, Rate: matrixRate, Count: faults.Unlimited}
	}},
	{name: "applied_reply_lost", auto: true, rule: func(Dialect) faults.Rule {
		return faults.Rule{Kind: faults.AppliedReplyLost, Op: faults.OpExec, Rate: matrixRate, Count: faults.Unlimited}
	}},
	{name: "commit_not_applied", tx: true, rule: func(Dialect) faults.Rule {
		return faults.Rule{Kind: faults.CommitNotApplied, Op: faults.OpCommit, Rate: matrixRate, Count: faults.Unlimited}
	}},
	{name: "commit_applied_reply_lost", tx: true, rule: func(Dialect) faults.Rule {
		return faults.Rule{Kind: faults.CommitAppliedReplyLost, Op: faults.OpCommit, Rate: matrixRate, Count: faults.Unlimited}
	}},
	{name: "server_error", rule: func(d Dialect) faults.Rule {
		return faults.Rule{Kind: faults.ServerError, Op: faults.OpExec, Engine: engineOf(d), Rate: matrixRate, Count: faults.Unlimited}
	}},
	{name: "hang", rule: func(Dialect) faults.Rule {
		return faults.Rule{Kind: faults.Hang, Op: faults.OpExec, Rate: matrixRate, Count: max(2, matrixOps()/12)}
	}},
	{name: "cancel", cancel: true, rule: func(Dialect) faults.Rule {
		return faults.Rule{Kind: faults.Hang, Op: faults.OpExec, Rate: matrixRate, Count: max(3, matrixOps()/8)}
	}},
}

func engineOf(d Dialect) faults.Engine {
	switch d {
	case Postgres:
		return faults.Postgres
	case MariaDB:
		return faults.MySQL
	}
	return faults.SQLite
}

// cell is what one shape needs to run under a fault.
type cell struct {
	t      *testing.T
	s      *Store // the store under test
	setup  *Store // the same database and ledger, with a patient policy
	clk    *clock
	ledger *Ledger
	plan   *faults.Plan
	n      int
	call   func(fn func(ctx context.Context) error) error // runs one operation, cancelling it if the cell says so
}

// shape is one row of the matrix.
type shape struct {
	name string
	tx   bool
	// run runs the shape's operations with injection on and returns how
	// many it ran; check asserts shape-specific invariants after.
	run   func(c *cell) int
	check func(c *cell)
}

var shapes = []shape{
	{name: "persist", run: runPersist},
	{name: "set_status", tx: true, run: runSetStatus, check: checkNoRestamp},
	{name: "advance_run", tx: true, run: runAdvance},
	{name: "claim", tx: true, run: runClaim},
	{name: "start", tx: true, run: runStart},
	{name: "complete_fail", tx: true, run: runFinish},
}

// matrixTotals collects what the matrix did, for the summary.
type matrixTotals struct {
	mu             sync.Mutex
	cells, ops     int
	faults         map[faults.Kind]int
	told           map[string]int
	perDialectHits map[Dialect]int
}

func TestFaultMatrix(t *testing.T) {
	t.Parallel() // it waits on servers, not the CPU
	tot := &matrixTotals{faults: map[faults.Kind]int{}, told: map[string]int{}, perDialectHits: map[Dialect]int{}}
	t.Cleanup(func() {
		kinds := make([]string, 0, len(tot.faults))
		for k, v := range tot.faults {
			kinds = append(kinds, fmt.Sprintf("%s=%d", k, v))
		}
		sort.Strings(kinds)
		t.Logf("fault matrix: %d cells, %d operations, faults hit %v, outcomes %v, per dialect %v", tot.cells, tot.ops, kinds, tot.told, tot.perDialectHits)
	})
	// Every (dialect, shape) group runs at once, each on its own fresh
	// database, its cells one after another. Goroutines rather than
	// t.Parallel: the groups wait on the servers, not the CPU, and -parallel
	// defaults to GOMAXPROCS.
	var wg sync.WaitGroup
	for _, d := range dialects {
		for _, sh := range shapes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				t.Run(d.String()+"/"+sh.name, func(t *testing.T) {
					name, dsn := driverFor(t, d)
					setup, err := sql.Open(name, dsn)
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { setup.Close() })
					ms, err := New(setup, d, Options{})
					if err != nil {
						t.Fatal(err)
					}
					if err := ms.Migrate(context.Background()); err != nil {
						t.Fatalf("migrate: %v", err)
					}
					for fi, f := range matrixFaults {
						if (f.tx && !sh.tx) || (f.auto && sh.tx) {
							continue // the fault cannot occur in this shape
						}
						t.Run(f.name, func(t *testing.T) {
							reset(t, ms)
							runCell(t, d, name, dsn, sh, f, uint64(fi+1), tot)
						})
					}
				})
			}()
		}
	}
	wg.Wait()
}

func runCell(t *testing.T, d Dialect, name, dsn string, sh shape, f fault, seed uint64, tot *matrixTotals) {
	rule := f.rule(d)
	if !sh.tx {
		rule.Rate *= 2 // one statement per operation, not two or three
	}
	plan := faults.MustPlan(faults.Config{Rules: []faults.Rule{rule}, Seed: seed})
	plan.Disable()
	db, err := faults.Open(name, dsn, plan)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(4)
	ledger := NewLedger()
	clk := newClock()
	// The operations under test time out fast, so a hang costs little; the
	// recovery pass and the check's reads get a timeout of their own.
	slow := fastPolicy(t, d, 10*time.Second)
	s, err := New(db, d, Options{Policy: fastPolicy(t, d, commandTimeout), Policies: Policies{Recover: slow, Read: slow},
		Now: clk.Now, Ledger: ledger, LeaseTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	// Setup (injection off) goes through a store with the patient policy, so
	// a loaded server cannot fail the cell before it starts.
	setup, err := New(db, d, Options{Policy: slow, Now: clk.Now, Ledger: ledger, LeaseTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	c := &cell{t: t, s: s, setup: setup, clk: clk, ledger: ledger, plan: plan, n: matrixOps()}
	canceled := 0
	c.call = func(fn func(ctx context.Context) error) error {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if f.cancel {
			stop := time.AfterFunc(cancelAfter, cancel)
			defer stop.Stop()
		}
		err := fn(ctx)
		if err != nil && OutcomeOf(err) == ToldCanceled {
			canceled++
			var re *sqlretry.Error
			if !f.cancel {
				t.Errorf("an operation was cancelled with no caller cancellation: %v", err)
			} else if !errors.Is(err, context.Canceled) {
				t.Errorf("cancelled operation: got %v, want an error matching context.Canceled", err)
			} else if errors.As(err, &re) && re.Attempts > 1 {
				t.Errorf("cancelled operation ran %d attempts; a caller's cancellation must never turn into a retry", re.Attempts)
			}
		}
		if err != nil {
			assertClear(t, err)
		}
		return err
	}
	ops := sh.run(c)
	plan.Disable()
	counts := plan.Counts()
	hits := counts.Total()
	if hits == 0 {
		t.Errorf("no fault was injected in %d operations: the cell tests nothing", ops)
	}
	if f.cancel && canceled == 0 {
		t.Errorf("no operation was cancelled by its caller: the cell tests nothing")
	}
	if sh.check != nil {
		sh.check(c)
	}
	r, err := s.Check(context.Background(), ledger)
	if err != nil {
		t.Fatalf("check: %v", err)
	}
	if !r.Clean() {
		t.Errorf("invariants: %v\n%v", r, r.Problems)
	}
	t.Logf("%d ops, %d faults %v, told %v", ops, hits, counts.Faults, r.Told)
	tot.mu.Lock()
	tot.cells++
	tot.ops += ops
	for k, v := range counts.Faults {
		tot.faults[k] += v
	}
	for k, v := range r.Told {
		tot.told[k] += v
	}
	tot.perDialectHits[d] += hits
	tot.mu.Unlock()
}

// assertClear fails the test unless err tells the caller clearly what
// happened: a store error naming the conflict, or a *sqlretry.Error saying
// why the retries stopped (ambiguous, exhausted, cancelled).
func assertClear(t *testing.T, err error) {
	t.Helper()
	for _, s := range []error{ErrNotFound, ErrIDTaken, ErrTaskKeyTaken, ErrOccurrenceTaken, ErrStatusConflict, ErrLeaseLost, ErrVersionConflict, ErrSeriesComplete} {
		if errors.Is(err, s) {
			return
		}
	}
	var re *sqlretry.Error
	if errors.As(err, &re) && re.Cause != nil {
		return
	}
	t.Errorf("unclear error: %v (%T)", err, err)
}

// persistAll persists n plain tasks with injection off.
func persistAll(c *cell, n int) []Task {
	c.plan.Disable()
	defer c.plan.Enable()
	out := make([]Task, n)
	for i := range out {
		t, err := c.setup.Persist(context.Background(), Task{Payload: []byte(fmt.Sprintf("setup %d", i))})
		if err != nil {
			c.t.Fatalf("setup persist: %v", err)
		}
		out[i] = t
	}
	return out
}

func runPersist(c *cell) int {
	c.plan.Enable()
	parent := "series-" + c.s.newID()
	at := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	for i := 0; i < c.n; i++ {
		t := Task{Key: fmt.Sprintf("key-%d", i), Payload: []byte(fmt.Sprintf("payload %d", i))}
		switch i % 6 {
		case 3: // the previous task's key: a task-key collision, never "already inserted"
			t.Key = fmt.Sprintf("key-%d", i-1)
		case 4: // an occurrence of the series
			t.Key, t.ParentID, t.ScheduledAt = "", parent, at.Add(time.Duration(i)*time.Hour)
		case 5: // the same occurrence again: the occurrence index fires
			t.Key, t.ParentID, t.ScheduledAt = "", parent, at.Add(time.Duration(i-1)*time.Hour)
		}
		_ = c.call(func(ctx context.Context) error { _, err := c.s.Persist(ctx, t); return err })
	}
	return c.n
}

func runSetStatus(c *cell) int {
	tasks := persistAll(c, c.n)
	for _, t := range tasks {
		_ = c.call(func(ctx context.Context) error {
			_, err := c.s.SetStatus(ctx, Transition{TaskID: t.ID, From: Queued, To: Running})
			return err
		})
	}
	return c.n
}

// checkNoRestamp: every task moved to Running keeps the execution time its
// one transition stamped.
func checkNoRestamp(c *cell) {
	var n int
	err := c.s.db.QueryRow(c.s.dialect.bind(`SELECT COUNT(*) FROM tasks t JOIN status_audit a ON a.task_id = t.id
		WHERE a.to_status = 'running' AND (t.last_execution_us IS NULL OR t.last_execution_us <> a.at_us)`)).Scan(&n)
	if err != nil {
		c.t.Fatal(err)
	}
	if n != 0 {
		c.t.Errorf("%d tasks have an execution time other than their transition's: re-stamped", n)
	}
}

func runAdvance(c *cell) int {
	const maxRuns = 6
	series := c.n / maxRuns
	if series < 2 {
		series = 2
	}
	c.plan.Disable()
	ids := make([]string, series)
	for i := range ids {
		t, err := c.setup.Persist(context.Background(), Task{MaxRuns: maxRuns})
		if err != nil {
			c.t.Fatal(err)
		}
		ids[i] = t.ID
	}
	c.plan.Enable()
	ops := 0
	for _, id := range ids {
		for i := 0; i < 4*maxRuns; i++ {
			t, err := c.s.Get(context.Background(), id)
			if err != nil {
				c.t.Fatalf("get %s: %v", id, err)
			}
			ops++
			err = c.call(func(ctx context.Context) error { _, err := c.s.AdvanceRun(ctx, id, t.ScheduleVersion); return err })
			if errors.Is(err, ErrSeriesComplete) {
				break
			}
		}
	}
	c.plan.Disable()
	for _, id := range ids {
		t, err := c.s.Get(context.Background(), id)
		if err != nil {
			c.t.Fatal(err)
		}
		if t.CurrentRunCount != maxRuns || t.ScheduleVersion != maxRuns {
			c.t.Errorf("series %s: got %d runs at version %d, want %d and %d: a run counted twice or the series ended early",
				id, t.CurrentRunCount, t.ScheduleVersion, maxRuns, maxRuns)
		}
	}
	return ops
}

func runClaim(c *cell) int {
	tasks := persistAll(c, c.n)
	held := map[string]string{} // task id → token of an OK claim
	unsettled := 0
	for i := 0; i < c.n+3; i++ {
		var l *Lease
		err := c.call(func(ctx context.Context) error { var err error; l, err = c.s.Claim(ctx, "w"); return err })
		switch {
		case err != nil && OutcomeOf(err) != ToldFailed:
			unsettled++
		case l != nil:
			if tok, dup := held[l.Task.ID]; dup {
				c.t.Errorf("task %s claimed twice: tokens %s and %s", l.Task.ID, tok, l.Token)
			}
			held[l.Task.ID] = l.Token
		}
	}
	c.plan.Disable()
	// Every task is held by a claim its caller knows of, or still queued;
	// only a claim reported unsettled may hold one nobody knows of.
	orphans := 0
	for _, t := range tasks {
		got, err := c.s.Get(context.Background(), t.ID)
		if err != nil {
			c.t.Fatal(err)
		}
		if got.Status == Leased && held[t.ID] == "" {
			orphans++
		}
		if got.Status != Leased && held[t.ID] != "" {
			c.t.Errorf("task %s: claim told ok, but the task is %s", t.ID, got.Status)
		}
	}
	if orphans > unsettled {
		c.t.Errorf("%d leased tasks no caller knows of, but only %d claims were reported unsettled: a claimed task was lost", orphans, unsettled)
	}
	// The recovery pass returns every lease nobody uses.
	// SKIP LOCKED lets a pass skip a row a dying transaction still locks;
	// the next pass takes it, so passes repeat until none is left.
	c.clk.Advance(2 * time.Hour)
	leased := -1
	for pass := 0; pass < 50 && leased != 0; pass++ {
		if pass > 0 {
			time.Sleep(20 * time.Millisecond)
		}
		if _, err := c.s.Recover(context.Background()); err != nil {
			c.t.Fatalf("recover: %v", err)
		}
		if err := c.s.db.QueryRow(c.s.dialect.bind(`SELECT COUNT(*) FROM tasks WHERE status = 'leased'`)).Scan(&leased); err != nil {
			c.t.Fatal(err)
		}
	}
	if leased != 0 {
		c.t.Errorf("after 50 recovery passes %d tasks are still leased, want 0", leased)
	}
	return c.n + 3
}

// claimAll claims every task with injection off.
func claimAll(c *cell, n int) []*Lease {
	persistAll(c, n)
	c.plan.Disable()
	defer c.plan.Enable()
	var out []*Lease
	for i := 0; i < n; i++ {
		l, err := c.setup.Claim(context.Background(), "w")
		if err != nil || l == nil {
			c.t.Fatalf("setup claim: %v %v", l, err)
		}
		out = append(out, l)
	}
	return out
}

func runStart(c *cell) int {
	for _, l := range claimAll(c, c.n) {
		err := c.call(func(ctx context.Context) error { return c.s.Start(ctx, l) })
		if OutcomeOf(err) == ToldAmbiguous {
			// Settle it as Work does: the handler runs if the start landed.
			c.plan.Disable()
			started, serr := c.setup.Started(context.Background(), l)
			c.plan.Enable()
			if serr != nil {
				c.t.Fatalf("settle start: %v", serr)
			}
			if started {
				err = nil
			}
		}
		if err == nil {
			c.ledger.HandlerStarted(l.Task.ID)
		}
	}
	return c.n
}

func runFinish(c *cell) int {
	leases := claimAll(c, c.n)
	c.plan.Disable()
	for _, l := range leases {
		if err := c.setup.Start(context.Background(), l); err != nil {
			c.t.Fatalf("setup start: %v", err)
		}
		c.ledger.HandlerStarted(l.Task.ID)
	}
	c.plan.Enable()
	for i, l := range leases {
		if i%2 == 0 {
			_ = c.call(func(ctx context.Context) error { return c.s.Complete(ctx, l) })
		} else {
			_ = c.call(func(ctx context.Context) error { return c.s.Fail(ctx, l, time.Time{}) })
		}
	}
	return c.n
}
