package faults

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/internal/sqltext"
	"github.com/sqlretry/sqlretry/internal/wait"
)

// Kind names one kind of injected fault. The values are the JSON names the
// chaos command reports its counts under.
type Kind string

// The fault kinds a [Plan] injects through the driver wrapper.
const (
	// BeforeSend fails a call before the inner driver sees it. The caller
	// gets driver.ErrBadConn (for connect: a refused dial), which proves
	// nothing was sent. database/sql itself retries driver.ErrBadConn on a
	// fresh connection up to twice outside a transaction, so a rule that
	// should reach the caller needs a Count of 3, or Err: RefusedError(), a
	// dial error that database/sql passes on at once.
	BeforeSend Kind = "before_send"
	// AfterExec runs the statement inside the transaction, then the
	// connection dies: the inner transaction is rolled back and the caller
	// gets a connection-reset error whose phase is unknown.
	AfterExec Kind = "after_exec"
	// AppliedReplyLost runs an autocommit statement (outside a transaction),
	// then the connection dies before the reply: the write is applied and the
	// caller gets a connection-reset error whose phase is unknown.
	AppliedReplyLost Kind = "applied_reply_lost"
	// CommitNotApplied fails COMMIT before it reaches the database: the
	// inner transaction is rolled back and the caller gets an error wrapping
	// driver.ErrBadConn (phase not-sent).
	CommitNotApplied Kind = "commit_not_applied"
	// CommitAppliedReplyLost lets the inner COMMIT succeed, then loses the
	// reply: the caller gets a connection-reset error (phase unknown) although
	// the transaction is durable.
	CommitAppliedReplyLost Kind = "commit_applied_reply_lost"
	// ServerError returns a synthetic engine error (see [EngineError]) without
	// running the call. Inside a transaction the inner transaction is rolled
	// back and the rest of it fails, as a deadlock victim's would.
	ServerError Kind = "server_error"
	// Latency delays the call by the rule's Delay, then runs it.
	Latency Kind = "latency"
	// Hang blocks the call until its context is done, then returns the
	// context's error; the connection is then dead, as drivers close a
	// connection whose call was cancelled. A COMMIT hangs until the context
	// given to BeginTx is done. Use it only with contexts that end.
	Hang Kind = "hang"
	// Outage fails every call between the rule's From and Until instants of
	// the plan's clock. Phase [sqlretry.NotSent] refuses (a refused dial,
	// driver.ErrBadConn); any other phase resets the connection after the
	// send. Either way nothing reaches the database.
	Outage Kind = "outage"
)

// Kinds lists every Kind, in a stable order.
var Kinds = []Kind{BeforeSend, AfterExec, AppliedReplyLost, CommitNotApplied, CommitAppliedReplyLost, ServerError, Latency, Hang, Outage}

// Op names the driver call a fault is injected into.
type Op string

// The driver calls a [Rule] can match.
const (
	OpConnect  Op = "connect"
	OpPing     Op = "ping"
	OpExec     Op = "exec"
	OpQuery    Op = "query"
	OpPrepare  Op = "prepare"
	OpBegin    Op = "begin"
	OpCommit   Op = "commit"
	OpRollback Op = "rollback"
)

// Unlimited as a [Rule]'s Count lets it fire on every matching call.
const Unlimited = -1

// A Rule says which calls get which fault. A call matches when every
// non-zero field among Op, Match, Verb, From and Until agrees, and the kind
// applies to the call (see [Kind]); Nth, Count and Rate then decide whether it
// fires. Rules are checked in order and the first that fires wins.
type Rule struct {
	// Kind is the fault to inject.
	Kind Kind
	// Op limits the rule to one driver call; "" matches every call the kind
	// applies to except OpPrepare (only an Outage fails a prepare unasked).
	// Some drivers answer a statement with arguments by asking database/sql
	// to prepare it first (go-sql-driver/mysql without interpolateParams);
	// leaving prepares out keeps Nth and Count the same on every driver.
	Op Op
	// Match limits the rule to statements containing this text,
	// case-insensitively. Calls without a statement (connect, begin, commit,
	// rollback, ping) never match a non-empty Match.
	Match string
	// Verb limits the rule to statements whose verb, as [sqlretry.Verb]
	// reads it (past comments, parentheses and a WITH prefix), is this one,
	// in any case: "INSERT", "update".
	Verb string
	// Nth makes the rule fire first on the Nth matching call (1-based);
	// 0 means the first.
	Nth int
	// Count is how many times the rule may fire: 0 means once, [Unlimited]
	// means on every matching call from the Nth on.
	Count int
	// Rate, if in (0, 1), is the probability that a matching call fires,
	// drawn from the plan's seeded source. 0 means always.
	Rate float64
	// From and Until bound the rule to [From, Until) on the plan's clock;
	// zero values leave that side open. An Outage rule normally sets both.
	From, Until time.Time
	// Phase chooses an Outage's error: [sqlretry.NotSent] refuses, any other
	// (the zero value is Unknown) resets after the send.
	Phase sqlretry.Phase
	// Engine and Code choose a ServerError's error (see [EngineError]);
	// Code "" is the engine's deadlock code.
	Engine Engine
	Code   string
	// Delay is a Latency fault's delay.
	Delay time.Duration
	// Err, if set, replaces the error the fault returns (not for Latency).
	Err error
}

// A Config configures a [Plan]. The zero value injects nothing until rules
// are added.
type Config struct {
	// Rules are the scripted faults, checked in order.
	Rules []Rule
	// Seed seeds the random source rules with a Rate draw from, so the same
	// seed and the same sequence of calls give the same faults.
	Seed uint64
	// Now is the clock Outage windows and From/Until are read on; nil means
	// time.Now.
	Now func() time.Time
	// Sleep waits for a Latency fault; nil means a timer that stops early
	// when ctx is done.
	Sleep func(ctx context.Context, d time.Duration) error
	// Logger, if set, gets one Info record per injected fault.
	Logger *slog.Logger
}

// A Plan decides which calls fail and counts what it injected. It is safe for
// concurrent use by multiple goroutines; with random rules, concurrent calls
// draw in the order they arrive.
type Plan struct {
	now    func() time.Time
	sleep  func(ctx context.Context, d time.Duration) error
	logger *slog.Logger

	mu       sync.Mutex
	rng      *rand.Rand
	rules    []*ruleState
	disabled bool
	counts   Counts
}

type ruleState struct {
	Rule
	seen  int // matching calls
	fired int
}

// Counts is a snapshot of what a [Plan] saw and injected.
type Counts struct {
	// Faults counts injected faults per kind.
	Faults map[Kind]int `json:"faults"`
	// Statements counts injected faults per statement text (the op name for
	// calls without one: "connect", "begin", "commit"...), then per kind.
	Statements map[string]map[Kind]int `json:"statements"`
	// Calls counts every call the wrapper saw, per op.
	Calls map[Op]int `json:"calls"`
	// Passed counts the calls that reached the inner driver, per op.
	Passed map[Op]int `json:"passed"`
}

// Total returns the number of injected faults of all kinds.
func (c Counts) Total() int {
	n := 0
	for _, v := range c.Faults {
		n += v
	}
	return n
}

// NewPlan returns a Plan for cfg. It reports an invalid rule by its index.
func NewPlan(cfg Config) (*Plan, error) {
	p := &Plan{now: cfg.Now, sleep: cfg.Sleep, logger: cfg.Logger}
	if p.now == nil {
		p.now = time.Now
	}
	if p.sleep == nil {
		p.sleep = wait.Sleep
	}
	p.rng = rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15))
	p.counts = Counts{Faults: map[Kind]int{}, Statements: map[string]map[Kind]int{}, Calls: map[Op]int{}, Passed: map[Op]int{}}
	for i, r := range cfg.Rules {
		if err := r.validate(); err != nil {
			return nil, fmt.Errorf("faults: Config.Rules[%d]: %w", i, err)
		}
		p.rules = append(p.rules, &ruleState{Rule: r})
	}
	return p, nil
}

// MustPlan is NewPlan that panics on an invalid rule, for tests.
func MustPlan(cfg Config) *Plan {
	p, err := NewPlan(cfg)
	if err != nil {
		panic(err)
	}
	return p
}

func (r Rule) validate() error {
	known := false
	for _, k := range Kinds {
		known = known || r.Kind == k
	}
	switch {
	case !known:
		return fmt.Errorf("unknown Kind %q", r.Kind)
	case r.Op != "" && !validOp(r.Op):
		return fmt.Errorf("unknown Op %q", r.Op)
	case r.Nth < 0:
		return fmt.Errorf("negative Nth %d", r.Nth)
	case r.Count < Unlimited:
		return fmt.Errorf("Count %d (want >= 0, or Unlimited)", r.Count)
	case r.Rate < 0 || r.Rate > 1:
		return fmt.Errorf("Rate %v outside [0, 1]", r.Rate)
	case r.Kind == Latency && r.Delay <= 0:
		return errors.New("Latency needs a positive Delay")
	case !r.From.IsZero() && !r.Until.IsZero() && !r.Until.After(r.From):
		return errors.New("Until is not after From")
	case r.Op != "" && !applies(r.Kind, r.Op, true) && !applies(r.Kind, r.Op, false):
		return fmt.Errorf("Kind %s never applies to Op %s", r.Kind, r.Op)
	}
	if r.Kind == ServerError {
		if _, err := EngineError(r.Engine, r.Code); err != nil {
			return err
		}
	}
	return nil
}

func validOp(o Op) bool {
	switch o {
	case OpConnect, OpPing, OpExec, OpQuery, OpPrepare, OpBegin, OpCommit, OpRollback:
		return true
	}
	return false
}

// applies reports whether kind k can be injected into op (inTx: the call is
// inside a transaction).
func applies(k Kind, op Op, inTx bool) bool {
	switch k {
	case BeforeSend, Latency, Outage:
		return true
	case AfterExec:
		return inTx && (op == OpExec || op == OpQuery)
	case AppliedReplyLost:
		return !inTx && (op == OpExec || op == OpQuery)
	case CommitNotApplied, CommitAppliedReplyLost:
		return op == OpCommit
	case ServerError:
		return op != OpRollback
	case Hang:
		return op != OpRollback
	}
	return false
}

// Add appends a rule at run time.
func (p *Plan) Add(r Rule) error {
	if err := r.validate(); err != nil {
		return fmt.Errorf("faults: Plan.Add: %w", err)
	}
	p.mu.Lock()
	p.rules = append(p.rules, &ruleState{Rule: r})
	p.mu.Unlock()
	return nil
}

// Enable turns injection on (the initial state).
func (p *Plan) Enable() { p.setDisabled(false) }

// Disable turns injection off: every call passes through untouched (and is
// still counted in Calls and Passed), so a harness can run a clean
// verification phase. Rules keep their state.
func (p *Plan) Disable() { p.setDisabled(true) }

func (p *Plan) setDisabled(v bool) {
	p.mu.Lock()
	p.disabled = v
	p.mu.Unlock()
}

// Counts returns a snapshot of the plan's counters.
func (p *Plan) Counts() Counts {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := Counts{
		Faults:     maps.Clone(p.counts.Faults),
		Statements: make(map[string]map[Kind]int, len(p.counts.Statements)),
		Calls:      maps.Clone(p.counts.Calls),
		Passed:     maps.Clone(p.counts.Passed),
	}
	for s, m := range p.counts.Statements {
		c.Statements[s] = maps.Clone(m)
	}
	return c
}

// call describes one driver call.
type call struct {
	op   Op
	stmt string
	inTx bool
}

func (c call) key() string {
	if c.stmt != "" {
		return c.stmt
	}
	return string(c.op)
}

// decide counts the call and returns the rule that fires on it, if any.
func (p *Plan) decide(c call) (Rule, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.counts.Calls[c.op]++
	if p.disabled {
		return Rule{}, false
	}
	var now time.Time
	verb := ""
	for _, r := range p.rules {
		if !applies(r.Kind, c.op, c.inTx) || (r.Op != "" && r.Op != c.op) {
			continue
		}
		if r.Op == "" && c.op == OpPrepare && r.Kind != Outage {
			continue // see Rule.Op: keeps occurrence counts the same across drivers
		}
		if r.Match != "" && (c.stmt == "" || !strings.Contains(strings.ToLower(c.stmt), strings.ToLower(r.Match))) {
			continue
		}
		if r.Verb != "" {
			if verb == "" {
				verb = sqltext.Verb(c.stmt)
			}
			if c.stmt == "" || !strings.EqualFold(verb, r.Verb) {
				continue
			}
		}
		if !r.From.IsZero() || !r.Until.IsZero() {
			if now.IsZero() {
				now = p.now()
			}
			if (!r.From.IsZero() && now.Before(r.From)) || (!r.Until.IsZero() && !now.Before(r.Until)) {
				continue
			}
		}
		r.seen++
		if r.seen < max(r.Nth, 1) {
			continue
		}
		if r.Count != Unlimited && r.fired >= max(r.Count, 1) {
			continue
		}
		if r.Rate > 0 && r.Rate < 1 && p.rng.Float64() >= r.Rate {
			continue
		}
		r.fired++
		p.counts.Faults[r.Kind]++
		m := p.counts.Statements[c.key()]
		if m == nil {
			m = map[Kind]int{}
			p.counts.Statements[c.key()] = m
		}
		m[r.Kind]++
		if p.logger != nil {
			p.logger.Info("sqlretry/faults: injected fault", "kind", string(r.Kind), "op", string(c.op), "statement", c.stmt, "in_tx", c.inTx)
		}
		return r.Rule, true
	}
	return Rule{}, false
}

func (p *Plan) passed(op Op) {
	p.mu.Lock()
	p.counts.Passed[op]++
	p.mu.Unlock()
}

// RandomRules returns one rule per kind in rates that fires on any call it
// applies to with that probability, without limit, in the order of [Kinds]:
// the seeded chaos of a soak test. Latency rules wait delay; ServerError
// rules return engine's deadlock or busy error. Hang and Outage are left out:
// one needs a context that ends, the other a window.
func RandomRules(rates map[Kind]float64, engine Engine, delay time.Duration) []Rule {
	var rules []Rule
	for _, k := range Kinds {
		rate, ok := rates[k]
		if !ok || rate <= 0 || k == Hang || k == Outage {
			continue
		}
		r := Rule{Kind: k, Rate: rate, Count: Unlimited}
		switch k {
		case Latency:
			r.Delay = delay
		case ServerError:
			r.Engine = engine
		}
		rules = append(rules, r)
	}
	return rules
}
