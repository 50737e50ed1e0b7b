package chaos

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/cmd/sqlretry/internal/engine"
	"github.com/sqlretry/sqlretry/faults"
)

// The contention scenario (--scenario contention) runs one workload three
// times, on fresh tables each time, under three policies:
//
//   - sqlretry: the policy under test, the command's policy flags (by
//     default the library's defaults: contention retried up to
//     ContentionRetries, 10, drawing nothing from the budget);
//   - old defaults: the policy before issue 15, MaxRetries 3 for every
//     failure and contention drawing from the budget like any retry;
//   - blind loop: every error retried, up to 10 times, with no budget and
//     no verify, as a hand-written retry loop does.
//
// Each worker runs transactions that read one hot row, then add one to it
// and to a second (half the pairs in the opposite order: deadlocks on a
// server, SQLITE_BUSY on SQLite's single writer), and record the call's id
// in a table of their own, with the attempt's number. A fault rate of the
// COMMITs fail with the connection reset, so that the client cannot know
// the outcome: half were rolled back (commit_not_applied), half committed
// (commit_applied_reply_lost). The transactions have no Verify of their
// own: sqlretry and the old defaults settle each ambiguous COMMIT with the
// run's commit verifier (--verifier), and the run holds every verdict
// against the attempt's row; the blind loop replays it without asking.
const (
	modeSQLretry = "sqlretry"
	modeOld      = "old_defaults"
	modeBlind    = "blind_loop"
)

// contentionModes is the order the modes run and are reported in.
var contentionModes = []string{modeSQLretry, modeOld, modeBlind}

// oldMaxRetries is the retry cap of the old defaults, for every failure.
const oldMaxRetries = 3

// blindMaxRetries is the blind loop's cap: the library's ContentionRetries
// default, so that the loop differs from sqlretry only in what it retries
// and what it draws from.
const blindMaxRetries = 10

// modePolicy returns the Policy config and the Op builder of one mode.
// Every mode gets the run's waits and command timeout, so they differ
// only in what they retry, how often, and what they draw from.
func (c Config) modePolicy(mode string, obs sqlretry.Observer) (sqlretry.Config, func(string) sqlretry.Op, error) {
	pc, err := c.policyConfig(obs)
	if err != nil {
		return pc, nil, err
	}
	// No Verify: an ambiguous COMMIT goes to Config.CommitVerifier.
	write := func(name string) sqlretry.Op { return sqlretry.Write(name, nil) }
	switch mode {
	case modeOld:
		pc.MaxRetries, pc.ContentionRetries = oldMaxRetries, 0
		pc.Budget, pc.Schedule = sqlretry.DefaultBudget(), nil
		pc.Classifier = budgetedContention(pc.Classifier)
	case modeBlind:
		pc.MaxRetries, pc.ContentionRetries = blindMaxRetries, blindMaxRetries
		pc.Budget, pc.Schedule = sqlretry.NoBudget, nil
		pc.Classifier = retryEverything(pc.Classifier)
		write = sqlretry.Idempotent
	}
	return pc, write, nil
}

// budgetedContention reproduces the old defaults with the library as it
// is: a contention verdict loses its Kind, so the Policy budgets it like
// any retry and caps it at MaxRetries. Nothing else changes.
func budgetedContention(inner sqlretry.Classifier) sqlretry.Classifier {
	return sqlretry.ClassifierFunc(func(err error) sqlretry.Class {
		c := inner.Classify(err)
		if c.Kind == sqlretry.Contention {
			c.Kind = sqlretry.KindUnknown
		}
		return c
	})
}

// retryEverything is the blind loop's classifier: every error is worth
// another try.
func retryEverything(inner sqlretry.Classifier) sqlretry.Classifier {
	return sqlretry.ClassifierFunc(func(err error) sqlretry.Class {
		c := inner.Classify(err)
		c.Retryable = true
		return c
	})
}

// RunContention runs the contention scenario: the same seeded workload
// under each policy in turn. Its error is an [*InputError] for a bad
// setting or an unusable database, already redacted; a failed check is not
// an error: see [ContentionReport.OK].
func RunContention(ctx context.Context, cfg Config) (*ContentionReport, error) {
	red := NewRedactor(cfg.DSN)
	cfg.Scenario = ScenarioContention
	if err := cfg.Validate(); err != nil {
		return nil, red.Error(err)
	}
	cfg = cfg.WithDefaults()
	r := newContentionReport(cfg)
	for _, mode := range contentionModes {
		if ctx.Err() != nil {
			r.Interrupted = true
			break
		}
		mr, settings, err := runMode(ctx, cfg, mode)
		if err != nil && ctx.Err() != nil {
			r.Interrupted = true // setting up was cut short: nothing ran
			break
		}
		if err != nil {
			return nil, red.Error(err)
		}
		r.Settings = append([]string{}, settings...) // [] rather than null in JSON
		r.Modes = append(r.Modes, *mr)
		if mr.Interrupted {
			r.Interrupted, r.InterruptedIn = true, mode
			break
		}
	}
	r.check()
	return r, nil
}

// pairRun is one mode's run of the workload.
type pairRun struct {
	cfg  Config
	mode string
	db   *sql.DB
	plan *faults.Plan
	pol  *sqlretry.Policy
	op   func(string) sqlretry.Op
	// verdicts records the commit verifier's verdicts; nil without one
	// (the blind loop, --verifier none).
	verdicts *recorder
	q        pairQueries
	start    time.Time
	// started is set once start is: the plan's clock reads it.
	started atomic.Bool
	stop    atomic.Bool

	contentionErrors   atomic.Int64 // failed attempts a real classifier calls contention
	contentionRefusals atomic.Int64 // budget refusals of a contention failure

	// ran is how long the workload ran; interrupted, whether ctx ended it
	// before the duration. Set as drive returns.
	ran         time.Duration
	interrupted bool

	mu   sync.Mutex
	told map[string]outcome // call id → what its caller was told
	// finishedAt is when each call returned, on the run's clock: the
	// damage over time is placed by it.
	finishedAt map[string]time.Duration
	failedBy   map[string]int64
	latencies  []time.Duration
	samples    []Sample
	calls, ok  int64
}

// outcome is what a call's caller was told.
type outcome uint8

const (
	toldOK outcome = iota
	toldFailed
	toldAmbiguous
	toldCanceled
)

// runMode runs the workload under one mode's policy on fresh tables, and
// returns its report and the engine settings the run applied.
func runMode(ctx context.Context, cfg Config, mode string) (*ModeReport, []string, error) {
	cfg.NoProxy = true // faults are the driver's, on COMMIT only
	tgt, err := openTarget(ctx, cfg, strings.ReplaceAll(mode, "_", ""))
	if err != nil {
		return nil, nil, err
	}
	defer tgt.close()
	pr := &pairRun{cfg: cfg, mode: mode, q: queriesFor(cfg.Engine), told: map[string]outcome{}, finishedAt: map[string]time.Duration{}, failedBy: map[string]int64{}}
	if err := pr.open(ctx, tgt); err != nil {
		return nil, nil, err
	}
	defer pr.db.Close()
	pr.start = cfg.Now()
	pr.started.Store(true)
	pr.plan.Enable()
	var wg sync.WaitGroup
	for w := range cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pr.loop(ctx, w)
		}()
	}
	pr.ran, pr.interrupted = pr.drive(ctx)
	pr.stop.Store(true)
	wg.Wait()
	pr.plan.Disable()
	pr.sample()
	mr, err := pr.report(context.WithoutCancel(ctx))
	return mr, tgt.settings, err
}

// open builds the mode's policy, the fault plan and the pool, and creates
// the tables.
func (pr *pairRun) open(ctx context.Context, tgt *target) error {
	pc, op, err := pr.cfg.modePolicy(pr.mode, sqlretry.ObserverFunc(pr.observe))
	if err != nil {
		return err
	}
	pr.op = op
	if v, name := pr.cfg.commitVerifier(); v != nil && pr.mode != modeBlind {
		pr.verdicts = newRecorder(v, name)
		pc.CommitVerifier = pr.verdicts
	}
	if pr.pol, err = sqlretry.New(pc); err != nil {
		return err
	}
	clock := func() time.Time {
		if !pr.started.Load() {
			return epoch
		}
		return epoch.Add(pr.cfg.Now().Sub(pr.start))
	}
	pr.plan, err = faults.NewPlan(faults.Config{Rules: pr.rules(), Seed: pr.cfg.Seed, Now: clock})
	if err != nil {
		return err
	}
	pr.plan.Disable()
	pr.db = sql.OpenDB(faults.Connector(tgt.inner, pr.plan))
	pr.db.SetMaxOpenConns(pr.cfg.Workers + 2)
	pr.db.SetMaxIdleConns(pr.cfg.Workers + 2)
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := pr.q.create(sctx, pr.db, pr.cfg.HotRows); err != nil {
		pr.db.Close()
		return inputErr("--dsn", fmt.Errorf("create the contention scenario's tables: %w", err))
	}
	return nil
}

// rules are the COMMIT faults: the fault rate shared by the kinds chosen.
func (pr *pairRun) rules() []faults.Rule {
	kinds := pr.cfg.Kinds
	if kinds == nil {
		kinds = ContentionKinds
	}
	if pr.cfg.FaultRate <= 0 || len(kinds) == 0 {
		return nil
	}
	rate := pr.cfg.FaultRate / float64(len(kinds))
	var rs []faults.Rule
	for _, k := range kinds {
		r := faults.Rule{Kind: k, Op: faults.OpCommit, Rate: rate, Count: faults.Unlimited}
		if k == faults.CommitNotApplied {
			// The connection reset in reply to COMMIT, as for a COMMIT
			// that landed: the client cannot tell the two apart, and the
			// commit verifier must.
			r.Err = faults.ResetError()
		}
		rs = append(rs, r)
	}
	return rs
}

// loop runs one worker's transactions until the run stops. A call that
// started is always finished.
func (pr *pairRun) loop(ctx context.Context, w int) {
	rng := rand.New(rand.NewPCG(pr.cfg.Seed, uint64(w)+1))
	for n := 0; !pr.stop.Load() && ctx.Err() == nil; n++ {
		a := rng.IntN(pr.cfg.HotRows) + 1
		b := rng.IntN(pr.cfg.HotRows-1) + 1
		if b >= a {
			b++ // two distinct rows, in either order
		}
		id := &attemptID{call: fmt.Sprintf("w%d-%d", w, n)}
		began := pr.cfg.Now()
		// The recording verifier reads the attempt from the context.
		actx := context.WithValue(ctx, attemptKey{}, id)
		err := sqlretry.RunTx(actx, pr.db, pr.pol, pr.op("contention.pair"), nil, pr.pair(id, a, b))
		pr.done(id.call, began, err)
		if err != nil {
			// As a worker backs off after a failed job, so that a
			// policy that fails fast is not measured spinning.
			pause(ctx, errPause)
		}
	}
}

// pair is the transaction: read row a, add one to rows a and b, record
// the call's id and the attempt's number.
func (pr *pairRun) pair(id *attemptID, a, b int) func(context.Context, *sql.Tx) error {
	return func(ctx context.Context, tx *sql.Tx) error {
		id.n++ // attempts run one after another
		var v int64
		if err := tx.QueryRowContext(ctx, pr.q.read, a).Scan(&v); err != nil {
			return err
		}
		for _, row := range []int{a, b} {
			if _, err := tx.ExecContext(ctx, pr.q.add, row); err != nil {
				return err
			}
		}
		_, err := tx.ExecContext(ctx, pr.q.record, id.call, id.n)
		return err
	}
}

// done records one finished call.
func (pr *pairRun) done(id string, began time.Time, err error) {
	lat := pr.cfg.Now().Sub(began)
	o, cause := tell(err)
	pr.mu.Lock()
	defer pr.mu.Unlock()
	pr.calls++
	pr.told[id] = o
	pr.finishedAt[id] = pr.cfg.Now().Sub(pr.start)
	if o == toldOK {
		pr.ok++
	} else {
		pr.failedBy[cause]++
	}
	if len(pr.latencies) < maxLatencies {
		pr.latencies = append(pr.latencies, lat)
	} else if i := rand.Int64N(pr.calls); i < maxLatencies {
		pr.latencies[i] = lat
	}
}

// tell reads what a caller was told, and why a call that did not succeed
// ended: budget_exhausted, retries_exhausted, ambiguous, canceled, other.
func tell(err error) (outcome, string) {
	switch {
	case err == nil:
		return toldOK, ""
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return toldCanceled, "canceled"
	case errors.Is(err, sqlretry.ErrAmbiguous):
		return toldAmbiguous, "ambiguous"
	case errors.Is(err, sqlretry.ErrBudgetExhausted):
		return toldFailed, "budget_exhausted"
	case errors.Is(err, sqlretry.ErrRetriesExhausted):
		return toldFailed, "retries_exhausted"
	}
	return toldFailed, "other"
}

// observe counts the failed attempts that were contention, and the budget
// refusals of contention, by the engine's own classifier: the old
// defaults' classifier hides the Kind from the Policy, not from the report.
func (pr *pairRun) observe(e sqlretry.Event) {
	if e.Err == nil || pr.cfg.Engine.Classifier().Classify(e.Err).Kind != sqlretry.Contention {
		return
	}
	switch e.Kind {
	case sqlretry.EventRetry, sqlretry.EventGiveUp:
		pr.contentionErrors.Add(1)
	case sqlretry.EventBudgetExhausted:
		pr.contentionRefusals.Add(1)
	}
}

// drive samples the run until its duration has passed or ctx is done, and
// returns how long the workload ran, and whether ctx ended it early.
func (pr *pairRun) drive(ctx context.Context) (time.Duration, bool) {
	return tickUntil(ctx, pr.cfg.SampleEvery, pr.cfg.Duration, pr.elapsed, func() bool {
		pr.sample()
		return pr.elapsed() >= pr.cfg.Duration
	})
}

func (pr *pairRun) elapsed() time.Duration { return pr.cfg.Now().Sub(pr.start) }

func (pr *pairRun) sample() {
	st := pr.pol.Stats()
	pr.mu.Lock()
	s := Sample{Mode: pr.mode, Elapsed: min(pr.elapsed(), pr.cfg.Duration), Total: pr.cfg.Duration, Ops: pr.calls, OK: pr.ok,
		Attempts: st.Attempts, Retries: st.Retries, Faults: pr.plan.Counts().Total(), Budget: st.BudgetTokens}
	if math.IsInf(s.Budget, 1) {
		s.Budget = -1
	}
	pr.samples = append(pr.samples, s)
	pr.mu.Unlock()
	if pr.cfg.Progress != nil {
		pr.cfg.Progress(s)
	}
}

// pairQueries are the scenario's statements in one engine's dialect.
type pairQueries struct {
	schema         []string
	insertHot      string
	read, add      string
	record         string
	applied, total string
}

func queriesFor(e engine.Engine) pairQueries {
	q := pairQueries{
		schema: []string{
			"CREATE TABLE hot (id INT PRIMARY KEY, v BIGINT NOT NULL)",
			// No unique key on id: a replayed COMMIT shows as a second row,
			// not as a constraint error.
			"CREATE TABLE calls (id VARCHAR(64) NOT NULL, attempt INT NOT NULL)",
			"CREATE INDEX calls_id ON calls (id)",
		},
		insertHot: "INSERT INTO hot (id, v) VALUES (?, 0)",
		read:      "SELECT v FROM hot WHERE id = ?",
		add:       "UPDATE hot SET v = v + 1 WHERE id = ?",
		record:    "INSERT INTO calls (id, attempt) VALUES (?, ?)",
		applied:   "SELECT id, attempt FROM calls",
		total:     "SELECT COALESCE(SUM(v), 0) FROM hot",
	}
	if e == engine.Postgres {
		for _, s := range []*string{&q.insertHot, &q.read, &q.add, &q.record} {
			*s = strings.Replace(*s, "?", "$1", 1)
		}
		q.record = strings.Replace(q.record, "?", "$2", 1)
	}
	return q
}

// create creates the tables and the hot rows.
func (q pairQueries) create(ctx context.Context, db *sql.DB, hot int) error {
	for _, s := range q.schema {
		if _, err := db.ExecContext(ctx, s); err != nil {
			return err
		}
	}
	for id := 1; id <= hot; id++ {
		if _, err := db.ExecContext(ctx, q.insertHot, id); err != nil {
			return err
		}
	}
	return nil
}
