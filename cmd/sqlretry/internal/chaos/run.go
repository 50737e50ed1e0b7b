package chaos

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/cmd/sqlretry/internal/engine"
	"github.com/sqlretry/sqlretry/faults"
	"github.com/sqlretry/sqlretry/faults/proxy"
	"github.com/sqlretry/sqlretry/internal/naivestore"
	"github.com/sqlretry/sqlretry/taskstore"
)

// Sample is the run's state at one instant: the live progress view and the
// plot are drawn from samples.
type Sample struct {
	Naive    bool          // the sample is from the naive comparison run
	Mode     string        // the contention scenario's mode ("sqlretry", "old_defaults", "blind_loop"); "" in the tasks scenario
	Elapsed  time.Duration // since the workload started
	Total    time.Duration // the run's duration
	Ops      int64         // store operations finished
	OK       int64         // of which succeeded
	Attempts int64         // operation attempts the policy made
	Retries  int64         // retries the policy started
	Faults   int           // faults injected (driver and wire)
	Budget   float64       // the retry budget's tokens; -1 without a budget
	Outage   bool          // an outage window is open
}

// epoch is the instant the plan's clock reads when the workload starts.
var epoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// maxLatencies bounds the latencies kept per shape for the percentiles.
const maxLatencies = 1 << 18

// errPause is how long a worker waits after a failed operation before its
// next one, as a job worker backs off its polling loop.
const errPause = 50 * time.Millisecond

// harness is one run.
type harness struct {
	cfg     Config
	label   string
	started atomic.Bool
	start   time.Time // cfg.Now() when the workload started; set before started

	tgt    *target
	db     *sql.DB
	plan   *faults.Plan
	pol    *sqlretry.Policy
	store  *taskstore.Store
	setup  *taskstore.Store
	ledger *taskstore.Ledger
	stop   atomic.Bool
	// verdicts records the commit verifier's verdicts; nil without one.
	verdicts *recorder
	// cluster is a cluster run's cluster (cluster.go); nil otherwise.
	cluster *clusterRun

	ops, okOps atomic.Int64
	seriesDone atomic.Int64 // series a worker found at their MaxRuns
	shapes     [numShapes]*shapeStats

	mu      sync.Mutex
	windows []window
	claimed map[string]string // token → task id, for every claim told OK
	samples []Sample
	// marks are the ledger's length at some samples (Config.Damage): the
	// damage over time is counted at them.
	marks []damageMark

	wireCommits int // COMMITs the proxy had seen at the last sample; drive's goroutine only

	// ran is how long the workload ran: the run's duration, or less when
	// it was interrupted (interrupted is then set). Set as drive returns.
	ran         time.Duration
	interrupted bool
}

// window is one outage as the run saw it.
type window struct {
	Outage
	from, until    time.Duration // on the run's clock
	opened, closed bool
	calls, retries int64 // calls started and retries begun while the outage was on
	// okInside counts operations that began after the outage opened and
	// were told OK before it closed: every call they made fell inside the
	// window, so each must have been refused. Operations begun before the
	// window are left out, since one may have reached the database then
	// and finish during the window (a command timeout runs on real time,
	// the window on the run's clock).
	okInside        int64
	refusedBefore   int // outage faults injected when the window opened
	refused         int // outage faults injected while the window was on
	recovery        time.Duration
	recovered       bool
	proxyBefore     proxy.Counts
	proxyOutageHits int
}

// elapsed is the run's clock: 0 until the workload starts.
func (h *harness) elapsed() time.Duration {
	if !h.started.Load() {
		return 0
	}
	return h.cfg.Now().Sub(h.start)
}

// Run runs one chaos scenario and returns its report. Its error is an
// [*InputError] for a bad setting or an unusable database, already
// redacted; a violated invariant is not an error: see [RunReport.OK].
func Run(ctx context.Context, cfg Config) (*RunReport, error) {
	red := NewRedactor(cfg.DSN)
	if err := cfg.Validate(); err != nil {
		return nil, red.Error(err)
	}
	if ctx.Err() != nil {
		return nil, ErrInterrupted
	}
	if cfg.WithDefaults().Scenario != ScenarioTasks {
		return nil, inputErr("--scenario", fmt.Errorf("Run runs the %s scenario; %s is RunContention's", ScenarioTasks, cfg.Scenario))
	}
	runner := run
	if cfg.Processes > 1 {
		runner = runFleet
	}
	r, err := runner(ctx, cfg.WithDefaults())
	if err != nil && ctx.Err() != nil {
		// Setting up failed because the run was interrupted (Ctrl-C
		// during the connect or the migration): not a database problem.
		return nil, ErrInterrupted
	}
	return r, red.Error(err)
}

// ErrInterrupted is the error of a run whose context ended before its
// workload started: there is nothing to report. A run interrupted later
// returns its report, with Interrupted set.
var ErrInterrupted = errors.New("interrupted before the workload started")

func run(ctx context.Context, cfg Config) (*RunReport, error) {
	label := "ours"
	if cfg.Naive {
		label = "naive"
	}
	h := newHarness(cfg, label)
	cl, err := startCluster(&cfg)
	if err != nil {
		return nil, err
	}
	defer cl.close()
	h.cfg, h.cluster = cfg, cl // cfg with the throwaway cluster's DSN
	tgt, err := openTarget(ctx, cfg, label)
	if err != nil {
		return nil, err
	}
	defer tgt.close()
	if err := h.openDB(tgt); err != nil {
		return nil, err
	}
	defer h.db.Close()
	workers, err := h.setUp(ctx, 0)
	if err != nil {
		return nil, err
	}

	h.runWorkers(ctx, workers, tgt)
	if cfg.Damage {
		h.markDamage(h.ran)
	}
	h.clusterSettle()
	return h.finish(ctx)
}

// newHarness returns a harness for a run of the tasks scenario with cfg,
// its stores' ledger empty.
func newHarness(cfg Config, label string) *harness {
	h := &harness{cfg: cfg, label: label, claimed: map[string]string{}, ledger: taskstore.NewLedger()}
	for i := range h.shapes {
		h.shapes[i] = &shapeStats{faults: map[string]int{}, failedBy: map[string]int{}}
	}
	return h
}

// openDB opens the run's pool on tgt, through a fault plan that starts
// disabled. The caller closes h.db.
func (h *harness) openDB(tgt *target) error {
	h.tgt = tgt
	var err error
	h.plan, err = faults.NewPlan(faults.Config{Rules: h.rules(), Seed: h.cfg.Seed, Now: func() time.Time { return epoch.Add(h.elapsed()) }})
	if err != nil {
		return err
	}
	h.plan.Disable()
	h.db = sql.OpenDB(faults.Connector(tgt.inner, h.plan))
	h.db.SetMaxOpenConns(h.cfg.Workers + 4)
	h.db.SetMaxIdleConns(h.cfg.Workers + 4)
	return nil
}

// setUp opens the stores (migrating the schema, or checking it where a
// fleet's parent migrated) and makes the workers, numbered from first, and
// the outage windows.
func (h *harness) setUp(ctx context.Context, first int) ([]*worker, error) {
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := h.openStores(sctx); err != nil {
		return nil, err
	}
	workers := make([]*worker, h.cfg.Workers)
	for i := range workers {
		var err error
		if workers[i], err = h.newWorker(sctx, first+i); err != nil {
			return nil, fmt.Errorf("set up worker %d: %w", first+i, err)
		}
	}
	for _, o := range h.cfg.Outages {
		h.windows = append(h.windows, window{Outage: o, from: o.Offset, until: o.Offset + o.Length})
	}
	return workers, nil
}

// runWorkers starts the clock and the faults, runs the workers until the
// run's end or its interruption, then stops the faults and takes the final
// sample.
func (h *harness) runWorkers(ctx context.Context, workers []*worker, tgt *target) {
	h.start = h.cfg.Now()
	h.started.Store(true)
	h.plan.Enable()
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.loop(ctx)
		}()
	}
	h.ran, h.interrupted = h.drive(ctx)
	h.stop.Store(true)
	wg.Wait()
	h.plan.Disable()
	if tgt.proxy != nil {
		_ = tgt.proxy.SetFault(proxy.Fault{Mode: proxy.Pass})
	}
	h.sample() // the final state
}

// openStores builds the policy under test, the store under test (the naive
// one for a naive run) and the setup store, and creates the tables.
func (h *harness) openStores(ctx context.Context) error {
	cfg := h.cfg
	pc, err := cfg.policyConfig(sqlretry.ObserverFunc(h.observe))
	if err != nil {
		return err
	}
	if v, name := cfg.commitVerifier(); v != nil {
		h.verdicts = newRecorder(v, name)
		pc.CommitVerifier = h.verdicts
	}
	if h.pol, err = sqlretry.New(pc); err != nil {
		return err
	}
	// Leases outlive the run: no lease expires while the workload runs, so
	// a task leased at the end was leased by a claim, not recovered.
	ttl := max(time.Minute, 4*cfg.Duration)
	d := dialect(cfg.Engine)
	newStore := taskstore.New
	if cfg.Naive {
		newStore = naivestore.New
	}
	h.store, err = newStore(h.db, d, taskstore.Options{Policy: h.pol, Ledger: h.ledger, LeaseTTL: ttl, Now: cfg.Now, MaxAttempts: 5})
	if err != nil {
		return err
	}
	h.setup, err = taskstore.New(h.db, d, taskstore.Options{LeaseTTL: ttl, Now: cfg.Now})
	if err != nil {
		return err
	}
	if err := h.setup.Migrate(ctx); err != nil {
		return inputErr("--dsn", fmt.Errorf("create the task store's tables: %w", err))
	}
	if p := h.tgt.proxy; p != nil {
		// The migration's connections went through the proxy.
		return tlsRefusal(cfg.Engine, p.Counts())
	}
	return nil
}

// rules is the fault plan: the outages first (during an outage nothing
// reaches the database), then every kind at the fault rate.
func (h *harness) rules() []faults.Rule {
	cfg := h.cfg
	var rs []faults.Rule
	for _, o := range cfg.Outages {
		from, until := epoch.Add(o.Offset), epoch.Add(o.Offset+o.Length)
		// A server that is down refuses new connections. Without a proxy, a
		// pooled connection finds its peer gone too: database/sql drops it
		// and dials, which is refused. With the proxy, the proxy resets the
		// established connections as the outage starts (a statement in
		// flight then has an unknown outcome), and dials are refused here,
		// as a stopped server's port refuses them.
		r := faults.Rule{Kind: faults.Outage, Phase: sqlretry.NotSent, Count: faults.Unlimited, From: from, Until: until}
		if h.tgt.proxy != nil {
			r.Op = faults.OpConnect
		}
		rs = append(rs, r)
	}
	r := cfg.FaultRate
	if r <= 0 {
		return rs
	}
	fe := faults.SQLite
	switch cfg.Engine {
	case engine.Postgres:
		fe = faults.Postgres
	case engine.MySQL:
		fe = faults.MySQL
	}
	on := func(k faults.Kind) bool { return cfg.Kinds == nil || slices.Contains(cfg.Kinds, k) }
	// The rate is per call, shared by the kinds that apply: a statement
	// gets before_send, after_exec (in a transaction) or applied_reply_lost
	// (outside one), or server_error; a COMMIT one of its two kinds.
	nExec, nCommit := 0, 0
	for _, k := range []faults.Kind{faults.BeforeSend, faults.ServerError} {
		if on(k) {
			nExec++
		}
	}
	if on(faults.AfterExec) || on(faults.AppliedReplyLost) {
		nExec++
	}
	for _, k := range []faults.Kind{faults.CommitNotApplied, faults.CommitAppliedReplyLost} {
		if on(k) {
			nCommit++
		}
	}
	exec, commit := r/float64(max(nExec, 1)), r/float64(max(nCommit, 1))
	// A hang costs its worker a command timeout: a few per run are enough
	// to show the timeout fires and is told apart from a cancellation.
	hangs := max(1, int(cfg.Duration/(5*time.Second)))
	u := faults.Unlimited
	for _, rule := range []faults.Rule{
		// Hangs only on autocommit inserts: a hang inside an SQLite
		// transaction would hold the database's only write lock.
		{Kind: faults.Hang, Op: faults.OpExec, Match: "INSERT INTO tasks (", Rate: exec, Count: hangs},
		{Kind: faults.BeforeSend, Op: faults.OpExec, Rate: exec, Count: u},
		{Kind: faults.AfterExec, Op: faults.OpExec, Rate: exec, Count: u},
		{Kind: faults.AppliedReplyLost, Op: faults.OpExec, Rate: exec, Count: u},
		{Kind: faults.ServerError, Op: faults.OpExec, Engine: fe, Rate: exec, Count: u},
		{Kind: faults.CommitNotApplied, Op: faults.OpCommit, Rate: commit, Count: u},
		{Kind: faults.CommitAppliedReplyLost, Op: faults.OpCommit, Rate: commit, Count: u},
	} {
		if on(rule.Kind) {
			rs = append(rs, rule)
		}
	}
	return rs
}

// drive samples the run until its duration has passed or ctx is done, and
// plays the outages and wire faults on the proxy, if there is one. It
// returns how long the workload ran, and whether ctx ended it early.
func (h *harness) drive(ctx context.Context) (time.Duration, bool) {
	var rng *rand.Rand
	if h.tgt.proxy != nil {
		rng = rand.New(rand.NewPCG(h.cfg.Seed, 0x5eed))
	}
	return tickUntil(ctx, h.cfg.SampleEvery, h.cfg.Duration, h.elapsed, func() bool {
		el := h.elapsed()
		h.outageEdges(el)
		h.clusterStep(el)
		if rng != nil {
			h.wireFaults(rng, el)
		}
		h.sample()
		return el >= h.cfg.Duration
	})
}

// tickUntil calls step at once and then every period, until step says the
// run's duration total has passed or ctx is done. It returns how long the
// run went (total, or elapsed when ctx ended it first, at most total) and
// whether ctx ended it.
func tickUntil(ctx context.Context, period, total time.Duration, elapsed func() time.Duration, step func() (over bool)) (time.Duration, bool) {
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		if step() {
			return total, false
		}
		if ctx.Err() != nil { // checked before the select, which picks at random
			return min(elapsed(), total), true
		}
		select {
		case <-ctx.Done():
			return min(elapsed(), total), true
		case <-tick.C:
		}
	}
}

// tlsRefusal is the error of a run whose connections through the wire
// proxy are encrypted (counts, after the setup's connections): the proxy
// cannot read inside TLS, so it sees no COMMIT and never cuts a connection
// right after one, and the run would claim a test it did not make. Nil
// when no connection is encrypted.
func tlsRefusal(e engine.Engine, counts proxy.Counts) error {
	if counts.TLS == 0 {
		return nil
	}
	off := "add sslmode=disable to the DSN"
	if e == engine.MySQL {
		off = "add tls=false to the DSN"
	}
	return inputErr("--dsn", fmt.Errorf("TLS: %d of %d connections through the fault proxy are encrypted, so the proxy cannot see "+
		"COMMITs and its wire faults (a connection cut right after COMMIT) would never fire; %s for the run, or pass --no-proxy "+
		"for driver-level faults only", counts.TLS, counts.Connections, off))
}

// outageEdges records the policy's counters as each outage opens and closes,
// and switches the proxy's outage.
func (h *harness) outageEdges(el time.Duration) {
	refused := h.plan.Counts().Faults[faults.Outage]
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := range h.windows {
		w := &h.windows[i]
		if !w.opened && el < w.from {
			// The plan refuses calls from the window's start on: count
			// from the last sample before it.
			w.refusedBefore = refused
		}
		if !w.opened && el >= w.from {
			w.opened = true
			if p := h.tgt.proxy; p != nil {
				w.proxyBefore = p.Counts()
				_ = p.SetFault(proxy.Fault{Mode: proxy.Reset})
			}
		}
		if w.opened && !w.closed && el >= w.until {
			w.closed = true
			w.refused = refused - w.refusedBefore
			if p := h.tgt.proxy; p != nil {
				_ = p.SetFault(proxy.Fault{Mode: proxy.Pass})
				after := p.Counts()
				w.proxyOutageHits = (after.Reset - w.proxyBefore.Reset) + (after.Refuse - w.proxyBefore.Refuse)
			}
		}
	}
}

func (h *harness) inOutage(el time.Duration) bool {
	for _, o := range h.cfg.Outages {
		if el >= o.Offset && el < o.Offset+o.Length {
			return true
		}
	}
	return false
}

// wireFaults, outside outages, resets a random proxied connection or cuts
// one after its next COMMIT: about one wire fault per 1/FaultRate COMMITs,
// at most one per sample.
func (h *harness) wireFaults(rng *rand.Rand, el time.Duration) {
	p := h.tgt.proxy
	commits := p.Counts().CommitsSeen
	seen := commits - h.wireCommits
	h.wireCommits = commits
	if h.inOutage(el) || h.cfg.FaultRate <= 0 {
		return
	}
	conns := p.Conns()
	if len(conns) == 0 || rng.Float64() >= h.cfg.FaultRate*float64(seen)/2 {
		return
	}
	c := conns[rng.IntN(len(conns))]
	mode := proxy.Reset
	if rng.IntN(2) == 0 {
		mode = proxy.CutAfterCommit
	}
	_ = p.SetConnFault(c.ID, proxy.Fault{Mode: mode})
}

func (h *harness) faultCount() int {
	n := h.plan.Counts().Total()
	if p := h.tgt.proxy; p != nil {
		n += p.Counts().Faults()
	}
	return n
}

func (h *harness) sample() {
	st := h.pol.Stats()
	s := Sample{
		Naive: h.cfg.Naive, Elapsed: min(h.elapsed(), h.cfg.Duration), Total: h.cfg.Duration,
		Ops: h.ops.Load(), OK: h.okOps.Load(), Attempts: st.Attempts, Retries: st.Retries,
		Faults: h.faultCount(), Budget: st.BudgetTokens,
	}
	if math.IsInf(s.Budget, 1) {
		s.Budget = -1
	}
	s.Outage = h.inOutage(h.elapsed())
	h.mu.Lock()
	h.samples = append(h.samples, s)
	due := h.cfg.Damage && (len(h.samples)-1)%h.damageEvery() == 0
	h.mu.Unlock()
	if due {
		h.markDamage(s.Elapsed)
	}
	if h.cfg.Progress != nil {
		h.cfg.Progress(s)
	}
}

// done records one finished operation of shape sh.
func (h *harness) done(sh shape, began time.Time, err error) {
	end := h.cfg.Now()
	h.ops.Add(1)
	b, el := began.Sub(h.start), end.Sub(h.start)
	st := h.shapes[sh]
	st.mu.Lock()
	st.ops++
	if h.inOutage(b) {
		st.inOutage++
	}
	// Reservoir sampling keeps a long run's memory bounded.
	if len(st.latencies) < maxLatencies {
		st.latencies = append(st.latencies, end.Sub(began))
	} else if i := rand.IntN(st.ops); i < maxLatencies {
		st.latencies[i] = end.Sub(began)
	}
	switch taskstore.OutcomeOf(err) {
	case taskstore.ToldOK:
		st.ok++
	case taskstore.ToldAmbiguous:
		st.ambiguous++
	case taskstore.ToldCanceled:
		st.canceled++
	default:
		st.failed++
		st.failedBy[failCause(err)]++
		if errors.Is(err, sqlretry.ErrBudgetExhausted) {
			st.budgetExhausted++
		}
	}
	st.mu.Unlock()
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := range h.windows {
		w := &h.windows[i]
		if b >= w.from && b < w.until {
			w.calls++
			if err == nil && el < w.until {
				w.okInside++
			}
		}
		if err == nil && !w.recovered && el >= w.until {
			w.recovered, w.recovery = true, el-w.until
		}
	}
	h.clusterDone(b, el, err)
	if err == nil {
		h.okOps.Add(1)
	}
}

// retryAt counts a retry begun at el against the outage it falls in.
func (h *harness) retryAt(el time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := range h.windows {
		if w := &h.windows[i]; el >= w.from && el < w.until {
			w.retries++
		}
	}
}

// observe attributes the policy's events to shapes.
func (h *harness) observe(e sqlretry.Event) {
	sh, ok := shapeOf(e.Op)
	if !ok {
		return
	}
	st := h.shapes[sh]
	// A failed attempt is counted once: by the retry it caused, by the
	// give-up it ended in, or by the verify that found it applied.
	counted := false
	st.mu.Lock()
	defer st.mu.Unlock()
	switch e.Kind {
	case sqlretry.EventRetry:
		st.retries++
		counted = true
		h.retryAt(h.elapsed())
	case sqlretry.EventGiveUp:
		counted = true
	case sqlretry.EventVerified:
		if e.Applied {
			st.verifiedApplied++
			counted = true
		} else {
			st.verifiedNotApplied++
		}
	}
	if !counted || e.Err == nil {
		return
	}
	var fe *faults.Error
	switch {
	case errors.As(e.Err, &fe):
		st.faults[string(fe.Kind)]++
	case e.Class.Retryable:
		st.faults["other_transient"]++
	}
}
