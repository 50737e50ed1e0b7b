package sqlretry

import (
	"context"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"log/slog"
	"math"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/sqlretry/sqlretry/internal/txmark"
	"github.com/sqlretry/sqlretry/internal/wait"
)

// NoRetries, as Config.MaxRetries, disables retries: every failure is
// returned after one attempt (an ambiguous write is still verified).
const NoRetries = -1

// Config sets up a [Policy]. The zero value is a working configuration: every
// zero field means the documented default.
type Config struct {
	// MaxRetries is the number of retries after the first attempt. If 0, 3.
	// NoRetries (any negative value) disables retries.
	MaxRetries int
	// ContentionRetries is the number of retries a call may make while its
	// failures are lock contention (Class.Kind Contention: deadlock
	// victims, serialization failures, lock timeouts, SQLITE_BUSY). Such
	// retries draw nothing from the budget: contention is no sign of a
	// server in trouble, and a tight deadlock loop is carried through by
	// running again, after a jittered wait that breaks the lock-step. If 0,
	// 10 (or MaxRetries, if larger); NoRetries disables them.
	ContentionRetries int
	// BaseDelay is the first backoff step: the wait before retry n is
	// BaseDelay·2^(n-1), capped at MaxDelay, then jittered. If 0, 100 ms.
	BaseDelay time.Duration
	// MaxDelay caps every backoff wait. If 0, 5 s (or BaseDelay, if that is
	// larger). Two waits may exceed it, bounded then by the caller's
	// deadline: a server's own request (Class.MinDelay: Azure SQL 40501
	// asks for 10 s) and a Schedule's rule, which the operator wrote.
	MaxDelay time.Duration
	// Jitter randomises each wait. The zero value is FullJitter.
	Jitter Jitter
	// CommandTimeout bounds each attempt. When it fires while the caller's
	// context is alive, the attempt failed with phase Unknown (the command
	// may have run) and is retried under the Op's rules. If 0, none.
	CommandTimeout time.Duration
	// Classifier gives the verdict on each error. If nil, NeutralClassifier.
	Classifier Classifier
	// Schedule, if set, overrides the decision and the wait for the failures
	// it has rules for (package crl). Others fall to the Policy's rules.
	Schedule Schedule
	// ConnectSchedule, if set, decides the retries of opening a connection
	// through [Connector] (package crl: retryConn rules with
	// connectRetryCount, connectRetryInterval and loginTimeout). If nil,
	// connects retry under the Policy's own rules; authentication failures
	// are never retried either way.
	ConnectSchedule Schedule
	// CommitVerifier, if set, settles the ambiguous COMMIT of a [RunTx]
	// whose Op has no Verify (package postgres: pg_xact_status). If nil, such
	// a COMMIT ends the call with ErrAmbiguous.
	CommitVerifier CommitVerifier
	// SessionInit, if set, runs on every connection a [Connector] opens,
	// before database/sql sees it: the first connect, and every reconnect
	// the Connector makes underneath a connection whose session was lost.
	// Use it to re-apply session state (SET search_path, SET TIME ZONE,
	// PRAGMA busy_timeout, session variables). An error from it fails that
	// connect attempt, classified like any connect error; the connection is
	// closed.
	SessionInit func(ctx context.Context, conn driver.Conn) error
	// Fencer, if set, lets the Connector and RunTx end the session of an
	// attempt whose outcome is unknown, and confirm it gone, before a
	// verify's "not applied" is trusted (packages postgres, mysql, mssql):
	// the Connector learns each new connection's session id, RunTx each
	// transaction's when its Op has a Verify and the handle is not the
	// Connector's. A fence is bounded by 10 s (or CommandTimeout, if
	// larger) and runs only when a verify is about to read. Policy.Do
	// cannot fence a plain function's attempt. Without a fence, a verify
	// that finds nothing after a failure whose attempt may still be
	// running on the server (a command timeout, a lost connection:
	// Class.Ended false) ends the call with ErrAmbiguous; "applied" is
	// trusted either way. Do not use it behind a pooler that multiplexes
	// sessions (PgBouncer in transaction mode, ProxySQL): the session id
	// it learns is not the one a later statement runs on.
	Fencer Fencer
	// SettleTimeout bounds how long settling a write of unknown outcome
	// (its Verify, the CommitVerifier, a fence) may outlive the caller's
	// context. A write or COMMIT in flight when the caller's context ends
	// may have landed: it is settled under a context detached from the
	// caller's, which ends SettleTimeout after the caller's did, and the
	// call returns nil if it landed, the context's error if it provably did
	// not, and an error matching both ErrAmbiguous and the context's error
	// if it could not be settled in time. If 0, 5 s.
	SettleTimeout time.Duration
	// Budget bounds retries across calls. If nil, a DefaultBudget of the
	// Policy's own; NoBudget disables it. Share one *Budget between Policies
	// to bound them together.
	Budget *Budget
	// Breaker, if set, fails calls fast while the database is down.
	Breaker *Breaker
	// Observer, if set, receives the Policy's events.
	Observer Observer
	// Logger, if set, logs retries, and errors that are not retryable (the
	// caller's own: a duplicate key, a syntax error), at Debug; it logs at
	// Warn a call that gives up on a transient failure (retries or budget
	// exhausted, an ambiguous outcome, the breaker open).
	Logger *slog.Logger
	// CountCalls makes Stats count every call and attempt. It costs one
	// atomic add per call (about 10 ns under parallel load), so it is off by
	// default; failures, retries and verifications are always counted.
	CountCalls bool
	// Rand, if set, returns uniform numbers in [0, 1) for the jitter. It
	// must be safe for concurrent use. If nil, math/rand/v2.
	Rand func() float64
}

// Policy is the retry engine: it runs an operation, classifies each failure,
// decides by the operation's consent whether a replay is safe, waits out a
// jittered backoff, and draws each retry from a shared budget. Create one per
// database, once; it is safe for concurrent use by multiple goroutines.
//
// A first-try success takes no lock, reads no clock and allocates nothing.
type Policy struct {
	maxRetries     int
	contRetries    int
	baseDelay      time.Duration
	maxDelay       time.Duration
	jitter         Jitter
	commandTimeout time.Duration
	settleTimeout  time.Duration
	classifier     Classifier
	schedule       Schedule
	connSchedule   Schedule
	commitVerifier CommitVerifier
	fencer         Fencer
	sessionInit    func(ctx context.Context, conn driver.Conn) error
	budget         *Budget // nil when disabled
	breaker        *Breaker
	observer       Observer
	logger         *slog.Logger
	countCalls     bool
	rand           func() float64
	now            func() time.Time
	sleep          func(ctx context.Context, d time.Duration) error

	calls, attempts                                    atomic.Int64
	failures, retries, recovered, gaveUp, ambiguous    atomic.Int64
	verifications, verifiedApplied, verifiedNotApplied atomic.Int64
	budgetExhausted, circuitRejected                   atomic.Int64
}

// A ConfigError says which Config field is wrong and why.
type ConfigError struct {
	Field  string // the field's name: "BaseDelay", "Budget"
	Reason string // what is wrong with it
}

func (e *ConfigError) Error() string { return "sqlretry: Config." + e.Field + " " + e.Reason }

// Validate reports the first field of c that New would refuse, as a
// *ConfigError, or nil.
func (c Config) Validate() error {
	bad := func(field, reason string) error { return &ConfigError{Field: field, Reason: reason} }
	switch {
	case c.BaseDelay < 0:
		return bad("BaseDelay", "must be >= 0, got "+c.BaseDelay.String())
	case c.MaxDelay < 0:
		return bad("MaxDelay", "must be >= 0, got "+c.MaxDelay.String())
	case c.CommandTimeout < 0:
		return bad("CommandTimeout", "must be >= 0, got "+c.CommandTimeout.String())
	case c.SettleTimeout < 0:
		return bad("SettleTimeout", "must be >= 0, got "+c.SettleTimeout.String())
	case c.Jitter > NoJitter:
		return bad("Jitter", c.Jitter.String()+" is not a jitter mode (want FullJitter, EqualJitter, DecorrelatedJitter or NoJitter)")
	case c.MaxDelay != 0 && c.BaseDelay != 0 && c.MaxDelay < c.BaseDelay:
		return bad("MaxDelay", c.MaxDelay.String()+" is below Config.BaseDelay "+c.BaseDelay.String())
	case c.Budget != nil && c.Budget != NoBudget && c.Budget.ratio == 0:
		return bad("Budget", "is a zero Budget, which would refuse every retry: use DefaultBudget(), NewBudget or NoBudget")
	}
	return nil
}

// WithDefaults returns c with every zero field that has a default set to
// it, as New reads them: MaxRetries 3 (a negative value stays: no retries),
// ContentionRetries 10 (or MaxRetries if larger),
// BaseDelay 100 ms, MaxDelay 5 s (or BaseDelay if larger), SettleTimeout
// 5 s, Classifier NeutralClassifier, Budget a new DefaultBudget. Jitter's zero value is
// already FullJitter; the other fields have no default.
func (c Config) WithDefaults() Config {
	if c.MaxRetries == 0 {
		c.MaxRetries = 3
	}
	if c.ContentionRetries == 0 {
		c.ContentionRetries = max(10, c.MaxRetries)
	}
	if c.BaseDelay == 0 {
		c.BaseDelay = 100 * time.Millisecond
	}
	if c.MaxDelay == 0 {
		c.MaxDelay = max(5*time.Second, c.BaseDelay)
	}
	if c.SettleTimeout == 0 {
		c.SettleTimeout = 5 * time.Second
	}
	if c.Classifier == nil {
		c.Classifier = NeutralClassifier
	}
	if c.Budget == nil {
		c.Budget = DefaultBudget()
	}
	return c
}

// New validates c and returns a Policy, or a *ConfigError that names the bad
// field. Zero fields take their defaults (see [Config.WithDefaults]).
func New(c Config) (*Policy, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	c = c.WithDefaults()
	p := &Policy{
		maxRetries:     max(c.MaxRetries, 0),
		contRetries:    max(c.ContentionRetries, 0),
		baseDelay:      c.BaseDelay,
		maxDelay:       c.MaxDelay,
		jitter:         c.Jitter,
		commandTimeout: c.CommandTimeout,
		settleTimeout:  c.SettleTimeout,
		classifier:     c.Classifier,
		schedule:       c.Schedule,
		connSchedule:   c.ConnectSchedule,
		commitVerifier: c.CommitVerifier,
		fencer:         c.Fencer,
		sessionInit:    c.SessionInit,
		budget:         c.Budget,
		breaker:        c.Breaker,
		observer:       c.Observer,
		logger:         c.Logger,
		countCalls:     c.CountCalls,
		rand:           c.Rand,
		now:            time.Now,
		sleep:          wait.Sleep,
	}
	if p.budget == NoBudget {
		p.budget = nil
	}
	if p.rand == nil {
		p.rand = rand.Float64
	}
	return p, nil
}

// Classify returns the Policy's verdict on err, as its classifier gives it,
// unless an error in err's chain states its own verdict with a method
// Verdict() Class — as the database/sql layer's errors do where it knows more
// than the driver's error says (a reconnect that failed before the statement
// was sent; a session that ended in reply to COMMIT), keeping the driver's
// error in the chain. Class.Ended is set when err says its attempt ended.
func (p *Policy) Classify(err error) Class {
	if c, ok := verdictOf(err); ok {
		c.Ended = c.Ended || attemptEnded(err)
		return c
	}
	c := p.classifier.Classify(err)
	c.Ended = c.Ended || attemptEnded(err)
	return c
}

// Do runs fn under the policy: once, and again after a failure only when the
// error is transient, the Op consents to a replay, a retry is left under
// MaxRetries and the budget, and the caller's context allows the wait.
//
// fn receives a context bounded by CommandTimeout, if set. It must return the
// database's error unchanged or wrapped, so the classifier can read it.
//
// Called inside a transaction function (with the context [RunTx] or
// pgxretry's RunTx gave fn), Do runs fn once and returns its error as it
// is: a statement of a transaction is never replayed on its own — a MySQL
// deadlock victim's transaction is gone, and the replay would run in
// autocommit mode — and RunTx retries the whole transaction.
//
// A nil error means fn succeeded once, or a verify found its ambiguous attempt
// applied. Otherwise the error is fn's own when the first attempt failed
// permanently, and an [*Error] in every other case: it matches
// [ErrAmbiguous], [ErrBudgetExhausted], [ErrCircuitOpen],
// [ErrRetriesExhausted] or the caller's ctx.Err() as the case may be, and
// always wraps the last database error.
func (p *Policy) Do(ctx context.Context, op Op, fn func(ctx context.Context) error) error {
	if err := ctx.Err(); err != nil {
		return p.stopped(ctx, op, 0, Class{}, nil, err)
	}
	if p.countCalls {
		p.calls.Add(1)
		p.attempts.Add(1)
	}
	if p.commandTimeout > 0 || (p.breaker != nil && BreakerState(p.breaker.state.Load()) != BreakerClosed) {
		if txmark.In(ctx) {
			err, _ := p.attempt(ctx, fn)
			return err
		}
		return p.run(ctx, op, fn, nil, p.schedule)
	}
	err := fn(ctx)
	if err == nil {
		// Inlined for the common case: no breaker, and a full budget that
		// drops deposits.
		if p.breaker != nil || (p.budget != nil && !p.budget.full.Load()) {
			p.succeeded(false)
		}
		return nil
	}
	if txmark.In(ctx) {
		return err // a statement of a transaction: RunTx retries it whole
	}
	return p.run(ctx, op, fn, err, p.schedule)
}

// DoValue is [Policy.Do] for an operation that returns a value.
//
// When a verify settles a failed attempt as applied, the write is in the
// database but the value fn would have returned was never read: DoValue then
// returns the zero value and an error matching [ErrValueUnknown], never a
// zero value with a nil error.
func DoValue[T any](ctx context.Context, p *Policy, op Op, fn func(ctx context.Context) (T, error)) (T, error) {
	var (
		v     T
		read  bool
		tries int
	)
	err := p.Do(ctx, op, func(ctx context.Context) error {
		var err error
		tries++
		v, err = fn(ctx)
		read = err == nil
		return err
	})
	if err == nil && !read {
		var zero T
		return zero, &Error{Op: op.Name, Attempts: tries, Cause: ErrValueUnknown}
	}
	return v, err
}

// succeeded records a successful attempt.
func (p *Policy) succeeded(probe bool) {
	if p.budget != nil {
		p.budget.success()
	}
	if p.breaker != nil {
		if t := p.breaker.success(probe); t.changed() {
			p.breakerChanged(t)
		}
	}
}

// run is the slow path: it runs the first attempt if firstErr is nil, then
// retries for as long as the rules and sched (which may be nil) allow.
func (p *Policy) run(ctx context.Context, op Op, fn func(context.Context) error, firstErr error, sched Schedule) error {
	var (
		err      = firstErr
		timedOut bool
		probe    bool
		attempts = 1
		prevWait time.Duration
		start    time.Time
	)
	if sched != nil { // only a schedule reads Failure.Elapsed
		start = p.now()
	}
	if err == nil {
		ok, pr, _ := p.allow()
		if !ok {
			return p.circuitOpen(ctx, op, 0, Class{}, nil)
		}
		probe = pr
		if err, timedOut = p.probeAttempt(ctx, fn, probe); err == nil {
			p.succeeded(probe)
			return nil
		}
	}
	_, hasDeadline := ctx.Deadline()
	needClock := p.budget != nil || p.breaker != nil || sched != nil || hasDeadline
	for {
		class, ret, done := p.triage(ctx, op, attempts, err, timedOut, probe)
		if done {
			return ret
		}
		now := p.clock(needClock) // once per failure, and only if read
		p.breakerFailure(class, now, probe)
		probe = false
		decision, wait := Defer, time.Duration(0)
		if sched != nil && class.Code != "context" {
			decision, wait = sched.Decide(Failure{Op: op.Name, Statement: op.Statement, Err: err, Class: class, Retry: attempts, Elapsed: now.Sub(start)})
		}
		limit := p.maxRetries
		if class.Kind == Contention {
			limit = p.contRetries
		}
		next := decide(class, decision, op.mustSettle(class), attempts, limit)
		if next.act == actPermanent {
			return p.permanent(ctx, op, attempts, class, err)
		}
		if next.settle {
			if ret, settled := p.settle(ctx, op, attempts, class, err); settled {
				return ret
			}
			if cerr := ctx.Err(); cerr != nil { // ended while the verify ran: not applied
				return p.stopped(ctx, op, attempts, class, err, cerr)
			}
			now = p.clock(needClock) // the verify took time
		}
		if next.act == actExhausted {
			return p.giveUp(ctx, op, attempts, class, err, ErrRetriesExhausted, false)
		}
		if decision != Retry {
			wait = Delay(p.jitter, p.baseDelay, p.maxDelay, attempts, prevWait, p.rand())
		}
		wait = max(wait, class.MinDelay)
		if ret := p.drawRetry(ctx, op, attempts, class, err, now, wait); ret != nil {
			return ret
		}
		prevWait = wait
		ok, pr, _ := p.allow()
		if !ok {
			return p.circuitOpen(ctx, op, attempts, class, err)
		}
		probe = pr
		attempts++
		if p.countCalls {
			p.attempts.Add(1)
		}
		if err, timedOut = p.probeAttempt(ctx, fn, probe); err == nil {
			p.recovered.Add(1)
			p.succeeded(probe)
			return nil
		}
	}
}

// triage reads a failed attempt before any retry decision: the caller's
// cancellation ends the call; driver.ErrSkip is no failure but database/sql's
// signal to prepare the statement instead (go-sql-driver/mysql, for any
// statement with arguments); an inner retry loop's error (a Connector
// handle's call inside Do) is not retried again, since one user call must
// not retry MaxRetries times per layer. Otherwise it counts the failure and
// returns its class, revised by the Op.
func (p *Policy) triage(ctx context.Context, op Op, attempts int, err error, timedOut, probe bool) (c Class, ret error, done bool) {
	if cerr := ctx.Err(); cerr != nil {
		p.releaseProbe(probe)
		return c, p.cutOff(ctx, op, attempts, err, timedOut, cerr), true
	}
	if err == driver.ErrSkip {
		p.releaseProbe(probe)
		return c, err, true
	}
	c = p.classify(err, timedOut)
	if op.rephase != nil {
		c = op.rephase(err, c)
	}
	if inner, ok := errors.AsType[*Error](err); ok && inner.Cause != nil {
		// The inner loop counted this failure already.
		p.releaseProbe(probe)
		return c, p.nested(ctx, op, attempts, c, err, inner), true
	}
	p.failures.Add(1)
	return c, nil, false
}

// clock reads the clock when something needs it: a deadline, the budget,
// the breaker or a schedule.
func (p *Policy) clock(need bool) time.Time {
	if !need {
		return time.Time{}
	}
	return p.now()
}

// action is what a failed attempt leads to, once a settle (if any) has not
// ended the call.
type action uint8

const (
	actPermanent action = iota // return the error: no retry can help
	actExhausted               // give up with ErrRetriesExhausted
	actRetry                   // wait, then run the operation again
)

// next is the decision on one failure: settle it first (a write of unknown
// outcome: verify, or ErrAmbiguous), then act.
type next struct {
	settle bool
	act    action
}

// decide is the retry decision, apart from the mechanics of clocks, budget
// and breaker: the classifier's verdict c, a rule schedule's decision d,
// whether the failure leaves a write's outcome unknown without consent to
// replay it, and how many attempts ran of 1+maxRetries.
//
// A failure no retry can help is returned as it is. A transient one is
// retried while retries are left, unless a rule stops it; a write of
// unknown outcome is settled before anything else, and a rule that stops it
// never leaves it looking like a plain error.
func decide(c Class, d Decision, ambiguous bool, attempts, maxRetries int) next {
	retryable := c.Retryable
	switch d {
	case Retry:
		retryable = true
	case Stop:
		retryable = false
	}
	switch {
	case !retryable && (d != Stop || !c.Retryable):
		return next{act: actPermanent}
	case !retryable: // a rule stopped a transient failure
		return next{settle: ambiguous, act: actExhausted}
	case d != Retry && attempts > maxRetries:
		return next{settle: ambiguous, act: actExhausted}
	}
	return next{settle: ambiguous, act: actRetry}
}

// breakerFailure records a failed attempt with the breaker: a transient
// failure counts against the database, any other only gives back the probe.
func (p *Policy) breakerFailure(c Class, now time.Time, probe bool) {
	if p.breaker == nil {
		return
	}
	if !c.Retryable {
		p.breaker.release(probe)
		return
	}
	if t := p.breaker.failure(now, probe); t.changed() {
		p.breakerChanged(t)
	}
}

// drawRetry takes a retry's wait within the caller's deadline and a token
// from the budget (none for contention), and waits; it returns the call's
// error if either refuses or the caller's context ends the wait.
func (p *Policy) drawRetry(ctx context.Context, op Op, attempts int, class Class, err error, now time.Time, wait time.Duration) error {
	if dl, ok := ctx.Deadline(); ok && !now.Add(wait).Before(dl) {
		return p.giveUp(ctx, op, attempts, class, err, deadlineErr{}, false)
	}
	if p.budget != nil && class.Kind != Contention && !p.budget.withdraw(now) {
		p.budgetExhausted.Add(1)
		p.emit(Event{Ctx: ctx, Kind: EventBudgetExhausted, Op: op.Name, Attempt: attempts, Err: err, Class: class})
		return p.giveUp(ctx, op, attempts, class, err, ErrBudgetExhausted, false)
	}
	p.retries.Add(1)
	p.emit(Event{Ctx: ctx, Kind: EventRetry, Op: op.Name, Attempt: attempts, Err: err, Class: class, Wait: wait})
	if p.logger != nil {
		p.logger.Debug("sqlretry: retrying", "op", op.Name, "attempt", attempts, "code", class.Code, "phase", class.Phase.String(), "wait", wait, "err", err)
	}
	if serr := p.sleep(ctx, wait); serr != nil {
		return p.stopped(ctx, op, attempts, class, err, serr)
	}
	return nil
}

// probeAttempt is attempt for a call that may hold the breaker's half-open
// probe: if fn panics, the probe is released, or the breaker would wait for
// its answer forever.
func (p *Policy) probeAttempt(ctx context.Context, fn func(context.Context) error, probe bool) (error, bool) {
	if probe {
		defer func() {
			if r := recover(); r != nil {
				p.breaker.release(true)
				panic(r)
			}
		}()
	}
	return p.attempt(ctx, fn)
}

// attempt runs fn once, under CommandTimeout if set, and reports whether the
// command timeout (not the caller's context) ended it.
func (p *Policy) attempt(ctx context.Context, fn func(context.Context) error) (err error, timedOut bool) {
	if p.commandTimeout <= 0 {
		return fn(ctx), false
	}
	actx, cancel := context.WithTimeout(ctx, p.commandTimeout)
	err = fn(actx)
	if err != nil && ctx.Err() == nil {
		// A driver may return DeadlineExceeded from a context derived from
		// actx a moment before actx's own timer has run: the deadline, not
		// the timer, says whether the command timeout fired.
		dl, _ := actx.Deadline()
		timedOut = actx.Err() != nil || (errors.Is(err, context.DeadlineExceeded) && !p.now().Before(dl))
	}
	cancel()
	return err, timedOut
}

// classify gives the verdict on a failed attempt. The Policy tells a command
// timeout, and a context error from outside the caller's context, from a
// database error before it asks the classifier: the two must never be
// confused.
func (p *Policy) classify(err error, timedOut bool) Class {
	if c, ok := verdictOf(err); ok {
		c.Ended = c.Ended || attemptEnded(err)
		return c
	}
	if timedOut {
		// Ended as the engine says: SQLite's attempt stops when the call
		// returns; a server's may run on.
		return Class{Retryable: true, Phase: Unknown, Code: "command-timeout", Reason: "the command timeout fired: the command may have run",
			Kind: Unavailable, Ended: p.classifier.Classify(err).Ended || attemptEnded(err)}
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return Class{Phase: Unknown, Code: "context", Reason: "a context other than the caller's ended the attempt: not a database fault", Ended: attemptEnded(err)}
	}
	return p.Classify(err)
}

func (p *Policy) allow() (ok, probe bool, t transition) {
	if p.breaker == nil {
		return true, false, t
	}
	ok, probe, t = p.breaker.allow(p.now())
	if t.changed() {
		p.breakerChanged(t)
	}
	return ok, probe, t
}

func (p *Policy) releaseProbe(probe bool) {
	if p.breaker != nil {
		p.breaker.release(probe)
	}
}

func (p *Policy) breakerChanged(t transition) {
	p.emit(Event{Kind: EventBreakerStateChange, From: t.from, To: t.to})
	if p.logger != nil {
		p.logger.Warn("sqlretry: breaker state change", "from", t.from.String(), "to", t.to.String())
	}
}

// permanent ends a call on an error that no retry can help.
func (p *Policy) permanent(ctx context.Context, op Op, attempts int, class Class, err error) error {
	p.gaveUp.Add(1)
	var out error = err
	if attempts > 1 {
		out = &Error{Op: op.Name, Attempts: attempts, Class: class, Err: err}
	}
	p.emit(Event{Ctx: ctx, Kind: EventGiveUp, Op: op.Name, Attempt: attempts, Err: out, Class: class})
	if p.logger != nil {
		p.logger.Debug("sqlretry: not retryable", "op", op.Name, "attempt", attempts, "code", class.Code, "err", err)
	}
	return out
}

// giveUp ends a call that the rules stopped from retrying.
func (p *Policy) giveUp(ctx context.Context, op Op, attempts int, class Class, err, cause error, ambiguous bool) error {
	p.gaveUp.Add(1)
	if ambiguous {
		p.ambiguous.Add(1)
	}
	out := &Error{Op: op.Name, Attempts: attempts, Class: class, Err: err, Cause: cause}
	p.emit(Event{Ctx: ctx, Kind: EventGiveUp, Op: op.Name, Attempt: attempts, Err: out, Class: class})
	if p.logger != nil {
		p.logger.Warn("sqlretry: giving up", "op", op.Name, "attempts", attempts, "code", class.Code, "phase", class.Phase.String(), "cause", cause.Error(), "err", err)
	}
	return out
}

// stopped ends a call whose caller's context is done.
func (p *Policy) stopped(ctx context.Context, op Op, attempts int, class Class, err, cause error) error {
	if attempts > 0 {
		p.gaveUp.Add(1)
	}
	out := &Error{Op: op.Name, Attempts: attempts, Class: class, Err: err, Cause: cause}
	if attempts > 0 {
		p.emit(Event{Ctx: ctx, Kind: EventGiveUp, Op: op.Name, Attempt: attempts, Err: out, Class: class})
	}
	return out
}

func (p *Policy) circuitOpen(ctx context.Context, op Op, attempts int, class Class, err error) error {
	p.circuitRejected.Add(1)
	return p.giveUp(ctx, op, attempts, class, err, ErrCircuitOpen, false)
}

func (p *Policy) emit(e Event) {
	if p.observer != nil {
		p.observer.Observe(e)
	}
}

var contextDeadlineExceeded = context.DeadlineExceeded

// Stats is a snapshot of a Policy's counters since it was created.
type Stats struct {
	Calls              int64        // calls made; counted only with Config.CountCalls
	Attempts           int64        // operation runs; counted only with Config.CountCalls
	Failures           int64        // failed attempts
	Retries            int64        // retries started (each drew a budget token)
	Recovered          int64        // calls that succeeded after a failure, by a retry or a verify
	GaveUp             int64        // calls that ended in an error after running (an error that is not retryable included)
	Ambiguous          int64        // calls that ended in ErrAmbiguous
	Verifications      int64        // verify calls
	VerifiedApplied    int64        // verifies that found the write applied
	VerifiedNotApplied int64        // verifies that found it not applied
	BudgetExhausted    int64        // retries refused for want of a token
	CircuitRejected    int64        // calls or retries refused by an open breaker
	BudgetTokens       float64      // the budget's level now; +Inf without a budget
	Breaker            BreakerState // the breaker's state now; closed without a breaker
}

// MarshalJSON encodes s as an object of its fields, with BudgetTokens null
// when there is no budget: its +Inf has no JSON form.
func (s Stats) MarshalJSON() ([]byte, error) {
	type plain Stats
	v := struct {
		plain
		BudgetTokens *float64
	}{plain: plain(s)}
	if !math.IsInf(s.BudgetTokens, 0) && !math.IsNaN(s.BudgetTokens) {
		v.BudgetTokens = &s.BudgetTokens
	}
	return json.Marshal(v)
}

// Stats returns a snapshot of the Policy's counters.
func (p *Policy) Stats() Stats {
	s := Stats{
		Calls:              p.calls.Load(),
		Attempts:           p.attempts.Load(),
		Failures:           p.failures.Load(),
		Retries:            p.retries.Load(),
		Recovered:          p.recovered.Load(),
		GaveUp:             p.gaveUp.Load(),
		Ambiguous:          p.ambiguous.Load(),
		Verifications:      p.verifications.Load(),
		VerifiedApplied:    p.verifiedApplied.Load(),
		VerifiedNotApplied: p.verifiedNotApplied.Load(),
		BudgetExhausted:    p.budgetExhausted.Load(),
		CircuitRejected:    p.circuitRejected.Load(),
		BudgetTokens:       NoBudget.Tokens(time.Time{}),
	}
	now := p.now()
	if p.budget != nil {
		s.BudgetTokens = p.budget.Tokens(now)
	}
	if p.breaker != nil {
		s.Breaker = p.breaker.State(now)
	}
	return s
}

// String describes the policy's settings, for logs.
func (p *Policy) String() string {
	return "sqlretry.Policy{MaxRetries: " + strconv.Itoa(p.maxRetries) + ", BaseDelay: " + p.baseDelay.String() +
		", MaxDelay: " + p.maxDelay.String() + ", Jitter: " + p.jitter.String() + ", CommandTimeout: " + p.commandTimeout.String() + "}"
}
