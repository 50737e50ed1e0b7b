package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/taskstore"
)

// shape is one of the task store's write shapes the workload drives.
type shape int

const (
	shapePersist   shape = iota // Persist: a non-idempotent INSERT
	shapeSetStatus              // SetStatus: a guarded UPDATE and an audit row
	shapeAdvance                // AdvanceRun: a compare-and-swap on the schedule version
	shapeClaim                  // Claim, Start, Complete / Fail: the lease lifecycle
	shapeRead                   // Get: the reads that resynchronise a worker
	numShapes
)

var shapeNames = [numShapes]string{"persist", "set_status", "advance", "claim", "read"}

func (s shape) String() string { return shapeNames[s] }

// shapeOf maps a policy operation's name to its shape; a verify counts
// with the write it settles.
func shapeOf(op string) (shape, bool) {
	op = strings.TrimSuffix(op, " verify")
	switch op {
	case "taskstore.persist", "taskstore.naive-persist":
		return shapePersist, true
	case "taskstore.set-status":
		return shapeSetStatus, true
	case "taskstore.advance-run", "taskstore.naive-advance-run":
		return shapeAdvance, true
	case "taskstore.claim", "taskstore.start", "taskstore.complete", "taskstore.fail", "taskstore.recover":
		return shapeClaim, true
	case "taskstore.get", "taskstore.started":
		return shapeRead, true
	}
	return 0, false
}

// shapeStats is what one shape did.
type shapeStats struct {
	mu                                   sync.Mutex
	ops, ok, failed, ambiguous, canceled int
	budgetExhausted                      int
	inOutage                             int // operations begun while an outage was on
	retries                              int
	verifiedApplied, verifiedNotApplied  int
	faults                               map[string]int
	failedBy                             map[string]int // failed operations by failCause
	latencies                            []time.Duration
}

// Why a failed operation failed: the keys of ShapeReport.FailedBy.
const (
	causeBudget    = "budget_exhausted"  // the retry budget denied a retry
	causeRetries   = "retries_exhausted" // every retry was used
	causeBreaker   = "circuit_open"      // the breaker refused the call
	causeConflict  = "conflict"          // the store's own answer: key taken, version changed, ...
	causePermanent = "other"             // any other definite error
)

// causeTitles are the causes' words in the text report.
var causeTitles = map[string]string{
	causeBudget:    "a retry denied by the retry budget",
	causeRetries:   "retries used up",
	causeBreaker:   "circuit breaker open",
	causeConflict:  "conflict the workload expects (key taken, version changed, series complete, status moved)",
	causePermanent: "other error",
}

// failCause says why an operation told failed (a definite error) failed.
func failCause(err error) string {
	switch {
	case errors.Is(err, sqlretry.ErrBudgetExhausted):
		return causeBudget
	case errors.Is(err, sqlretry.ErrRetriesExhausted):
		return causeRetries
	case errors.Is(err, sqlretry.ErrCircuitOpen):
		return causeBreaker
	}
	for _, c := range []error{taskstore.ErrTaskKeyTaken, taskstore.ErrVersionConflict, taskstore.ErrSeriesComplete,
		taskstore.ErrStatusConflict, taskstore.ErrLeaseLost, taskstore.ErrNotFound} {
		if errors.Is(err, c) {
			return causeConflict
		}
	}
	return causePermanent
}

// worker is one goroutine of the workload. Its choices come from its own
// seeded source, so a seed fixes the mix of operations.
type worker struct {
	h      *harness
	id     int
	rng    *rand.Rand
	owner  string
	series string
	ver    int64
	manual *manualTask // the task this worker moves through SetStatus
	n      int         // persists so far
	// nSeries counts the series the worker persisted; series is "" after
	// one completed (or its successor's Persist failed).
	nSeries int
	key     string // the last task key persisted
}

// manualTask is a task moved by SetStatus alone: due far in the future, so
// no claim takes it.
type manualTask struct {
	id     string
	status taskstore.Status
}

// farFuture is the due time of tasks no claim may take.
var farFuture = time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)

func (h *harness) newWorker(ctx context.Context, i int) (*worker, error) {
	w := &worker{h: h, id: i, rng: rand.New(rand.NewPCG(h.cfg.Seed, uint64(i)+1)), owner: fmt.Sprintf("worker-%d", i)}
	t, err := h.setup.Persist(ctx, w.seriesTask())
	if err != nil {
		return nil, err
	}
	w.series = t.ID
	return w, nil
}

// seriesRuns is the MaxRuns of the workers' series: small enough that a
// run completes many series, so a run counted twice ends one early (the
// ended_early invariant) and a worker then starts a new series.
const seriesRuns = 4

func (w *worker) seriesTask() taskstore.Task {
	w.nSeries++
	return taskstore.Task{DueAt: farFuture, MaxRuns: seriesRuns, Payload: []byte(fmt.Sprintf("series %d of %s", w.nSeries, w.owner))}
}

// loop runs operations until the harness stops it. An operation that
// started is always finished: the stop is checked between operations.
func (w *worker) loop(ctx context.Context) {
	for !w.h.stop.Load() && ctx.Err() == nil {
		var ok bool
		switch p := w.rng.IntN(100); {
		case p < 30:
			ok = w.persist(ctx)
		case p < 50:
			ok = w.setStatus(ctx)
		case p < 70:
			ok = w.advance(ctx)
		default:
			ok = w.claim(ctx)
		}
		if !ok {
			pause(ctx, errPause)
		}
	}
}

func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// persist inserts a claimable task. Every tenth reuses the worker's
// previous task key: a collision the store must report as one, never as
// "already inserted".
func (w *worker) persist(ctx context.Context) bool {
	w.n++
	key := fmt.Sprintf("%s-%d", w.owner, w.n)
	if w.n%10 == 0 && w.key != "" {
		key = w.key
	}
	t := taskstore.Task{Key: key, Payload: []byte(fmt.Sprintf("task %d of %s", w.n, w.owner))}
	began := w.h.cfg.Now()
	_, err := w.h.store.Persist(ctx, t)
	w.h.done(shapePersist, began, err)
	if err == nil {
		w.key = key
	}
	return err == nil || errors.Is(err, taskstore.ErrTaskKeyTaken)
}

// setStatus moves the worker's manual task one step: queued → running →
// succeeded, then starts a new one.
func (w *worker) setStatus(ctx context.Context) bool {
	if w.manual == nil || w.manual.status == taskstore.Succeeded {
		began := w.h.cfg.Now()
		t, err := w.h.store.Persist(ctx, taskstore.Task{DueAt: farFuture, Payload: []byte("manual task of " + w.owner)})
		w.h.done(shapePersist, began, err)
		if err != nil {
			w.manual = nil
			return false
		}
		w.manual = &manualTask{id: t.ID, status: taskstore.Queued}
	}
	m := w.manual
	next := taskstore.Running
	if m.status == taskstore.Running {
		next = taskstore.Succeeded
	}
	began := w.h.cfg.Now()
	_, err := w.h.store.SetStatus(ctx, taskstore.Transition{TaskID: m.id, From: m.status, To: next})
	w.h.done(shapeSetStatus, began, err)
	if err == nil {
		m.status = next
		return true
	}
	// The outcome may be unknown: read where the task is.
	w.resync(ctx, m.id, func(t taskstore.Task) { m.status = t.Status }, func() { w.manual = nil })
	return false
}

// advance counts one run of the worker's series at the version it last
// saw; once the series has its MaxRuns, the worker persists a new one.
func (w *worker) advance(ctx context.Context) bool {
	if w.series == "" {
		began := w.h.cfg.Now()
		t, err := w.h.store.Persist(ctx, w.seriesTask())
		w.h.done(shapePersist, began, err)
		if err != nil {
			return false
		}
		w.series, w.ver = t.ID, t.ScheduleVersion
	}
	began := w.h.cfg.Now()
	a, err := w.h.store.AdvanceRun(ctx, w.series, w.ver)
	w.h.done(shapeAdvance, began, err)
	switch {
	case err == nil:
		w.ver = a.Version
		return true
	case errors.Is(err, taskstore.ErrSeriesComplete):
		w.series = ""
		w.h.seriesDone.Add(1)
		return true
	}
	w.resync(ctx, w.series, func(t taskstore.Task) {
		w.ver = t.ScheduleVersion
		if t.MaxRuns > 0 && t.CurrentRunCount >= t.MaxRuns {
			w.series = ""
			w.h.seriesDone.Add(1)
		}
	}, func() {})
	return false
}

// resync reads a task's state after a failed write, whose outcome may be
// unknown; on a failed read it calls lost.
func (w *worker) resync(ctx context.Context, id string, found func(taskstore.Task), lost func()) {
	began := w.h.cfg.Now()
	t, err := w.h.store.Get(ctx, id)
	w.h.done(shapeRead, began, err)
	if err != nil {
		lost()
		return
	}
	found(t)
}

// claim runs one task end to end: Claim, Start (a job attempt is counted
// as the handler starts), the handler, then Complete, or Fail for one task
// in ten.
func (w *worker) claim(ctx context.Context) bool {
	h := w.h
	began := h.cfg.Now()
	l, err := h.store.Claim(ctx, w.owner)
	h.done(shapeClaim, began, err)
	if err != nil {
		return false
	}
	if l == nil {
		return true // nothing due
	}
	h.mu.Lock()
	h.claimed[l.Token] = l.Task.ID
	h.mu.Unlock()
	began = h.cfg.Now()
	err = h.store.Start(ctx, l)
	h.done(shapeClaim, began, err)
	if err != nil && !w.settleStart(ctx, l, err) {
		return false // the lease expires and Recover returns the task
	}
	h.ledger.HandlerStarted(l.Task.ID)
	began = h.cfg.Now()
	if w.rng.IntN(10) == 0 {
		err = h.store.Fail(ctx, l, time.Time{})
	} else {
		err = h.store.Complete(ctx, l)
	}
	h.done(shapeClaim, began, err)
	return err == nil
}

// settleStart settles a Start that failed with err: true when it landed
// after all (its outcome was unknown and Store.SettleStart finds its audit
// row, with the lease still held), so the job attempt was counted and the
// handler must run, as Store.Work does. A Start is left ambiguous mostly as
// an outage begins (the proxy resets every connection, then refuses them):
// SettleStart reads on until the database answers, since giving up would
// leave the attempt counted with no handler start. Only the run's end
// (Ctrl-C) stops it: the worker, the Start's caller, then gives the Start
// up, and says so in the ledger (a Start its caller cancelled, as
// Store.Work's caller does when it cancels a settlement).
func (w *worker) settleStart(ctx context.Context, l *taskstore.Lease, err error) bool {
	if taskstore.OutcomeOf(err) != taskstore.ToldAmbiguous {
		return false
	}
	if ctx.Err() != nil {
		w.abandonStart(ctx, l)
		return false
	}
	began := w.h.cfg.Now()
	started, serr := w.h.store.SettleStart(ctx, l)
	w.h.done(shapeRead, began, serr)
	if serr != nil && ctx.Err() != nil {
		w.abandonStart(ctx, l)
	}
	return serr == nil && started
}

// abandonStart records that the worker gave up an ambiguous Start as the
// run stopped, unsettled: a Start its caller cancelled.
func (w *worker) abandonStart(ctx context.Context, l *taskstore.Lease) {
	w.h.ledger.Record(taskstore.Entry{Kind: taskstore.OpStart, ID: l.Token + ":start", TaskID: l.Task.ID}, ctx.Err())
}
