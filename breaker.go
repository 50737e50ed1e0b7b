package sqlretry

import (
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sqlretry/sqlretry/internal/enum"
)

// BreakerState is a [Breaker]'s state.
type BreakerState uint8

const (
	BreakerClosed   BreakerState = iota // calls flow
	BreakerOpen                         // calls fail fast with ErrCircuitOpen
	BreakerHalfOpen                     // one probe call is let through
)

var breakerStateNames = []string{"closed", "open", "half-open"}

// String returns "closed", "open" or "half-open".
func (s BreakerState) String() string { return enum.Name(breakerStateNames, s, "BreakerState") }

// BreakerConfig sets when a [Breaker] trips and how long it stays open.
type BreakerConfig struct {
	// ConsecutiveFailures trips the breaker after this many transient failed
	// attempts in a row. If 0, 5. Negative disables this trigger.
	ConsecutiveFailures int
	// FailureRatio, if > 0, also trips the breaker when, within Window of
	// the first failure since the breaker last closed or reset, at least
	// MinAttempts attempts were seen and this fraction of them failed.
	FailureRatio float64
	// MinAttempts for FailureRatio. If 0, 20.
	MinAttempts int
	// Window for FailureRatio. If 0, 10 s.
	Window time.Duration
	// OpenTimeout is how long the breaker stays open before it lets one
	// probe through. If 0, 5 s.
	OpenTimeout time.Duration
}

// Breaker is an optional circuit breaker for one or more Policies: after a run
// of transient failures it opens, and calls fail fast with [ErrCircuitOpen]
// until OpenTimeout has passed and a single probe call succeeds. Only
// attempts that fail with a retryable class count as failures: permanent
// errors (the database answered) and cancellations never move it.
//
// The state machine: closed → open (tripped) → half-open (OpenTimeout passed,
// one probe let through) → closed (probe succeeded) or open (probe failed).
// It is safe for concurrent use by multiple goroutines; while closed, a
// success costs two atomic loads.
type Breaker struct {
	consecutive int
	ratio       float64
	minAttempts int
	window      time.Duration
	openFor     time.Duration

	state     atomic.Uint32 // BreakerState
	streak    atomic.Int64  // consecutive failures
	counting  atomic.Bool   // a ratio window is open: count successes
	successes atomic.Int64  // successes since the window opened

	mu          sync.Mutex
	windowStart time.Time
	failures    int64
	openedAt    time.Time
	probing     bool
}

// NewBreaker returns a closed Breaker, or an error naming a bad field.
func NewBreaker(c BreakerConfig) (*Breaker, error) {
	switch {
	case c.FailureRatio < 0 || c.FailureRatio > 1 || math.IsNaN(c.FailureRatio):
		return nil, errors.New("sqlretry: BreakerConfig.FailureRatio must be in [0, 1]")
	case c.MinAttempts < 0:
		return nil, errors.New("sqlretry: BreakerConfig.MinAttempts must be >= 0")
	case c.Window < 0:
		return nil, errors.New("sqlretry: BreakerConfig.Window must be >= 0")
	case c.OpenTimeout < 0:
		return nil, errors.New("sqlretry: BreakerConfig.OpenTimeout must be >= 0")
	}
	b := &Breaker{consecutive: c.ConsecutiveFailures, ratio: c.FailureRatio, minAttempts: c.MinAttempts, window: c.Window, openFor: c.OpenTimeout}
	if b.consecutive == 0 {
		b.consecutive = 5
	}
	if b.minAttempts == 0 {
		b.minAttempts = 20
	}
	if b.window == 0 {
		b.window = 10 * time.Second
	}
	if b.openFor == 0 {
		b.openFor = 5 * time.Second
	}
	return b, nil
}

// State returns the breaker's state at now: an open breaker whose
// OpenTimeout has passed reports half-open.
func (b *Breaker) State(now time.Time) BreakerState {
	s := BreakerState(b.state.Load())
	if s == BreakerOpen {
		b.mu.Lock()
		if !now.Before(b.openedAt.Add(b.openFor)) {
			s = BreakerHalfOpen
		}
		b.mu.Unlock()
	}
	return s
}

// transition is a state change to report once the lock is released.
type transition struct{ from, to BreakerState }

func (t transition) changed() bool { return t.from != t.to }

// allow reports whether a call may start, and whether it is the probe.
func (b *Breaker) allow(now time.Time) (ok, probe bool, t transition) {
	if BreakerState(b.state.Load()) == BreakerClosed {
		return true, false, t
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	s := BreakerState(b.state.Load())
	t = transition{s, s}
	switch s {
	case BreakerClosed:
		return true, false, t
	case BreakerOpen:
		if now.Before(b.openedAt.Add(b.openFor)) {
			return false, false, t
		}
		b.setState(BreakerHalfOpen)
		t.to = BreakerHalfOpen
	}
	if b.probing {
		return false, false, t
	}
	b.probing = true
	return true, true, t
}

// success records a successful attempt: the hot path when probe is false.
func (b *Breaker) success(probe bool) (t transition) {
	if !probe {
		if b.streak.Load() != 0 {
			b.streak.Store(0)
		}
		if b.counting.Load() {
			b.successes.Add(1)
		}
		return t
	}
	return b.probeSucceeded()
}

// probeSucceeded closes the breaker after its probe succeeded. It is apart
// from success so that the hot path stays small enough to inline.
func (b *Breaker) probeSucceeded() (t transition) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.probing = false
	t = transition{BreakerState(b.state.Load()), BreakerClosed}
	b.reset()
	b.setState(BreakerClosed)
	return t
}

// failure records a transient failed attempt.
func (b *Breaker) failure(now time.Time, probe bool) (t transition) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := BreakerState(b.state.Load())
	t = transition{s, s}
	if probe {
		b.probing = false
		b.open(now)
		t.to = BreakerOpen
		return t
	}
	if s != BreakerClosed {
		return t // a straggler from before the breaker opened
	}
	streak := b.streak.Add(1)
	trip := b.consecutive > 0 && streak >= int64(b.consecutive)
	if b.ratio > 0 {
		if !b.counting.Load() || now.Sub(b.windowStart) > b.window {
			b.windowStart, b.failures = now, 0
			b.successes.Store(0)
			b.counting.Store(true)
		}
		b.failures++
		total := b.failures + b.successes.Load()
		if total >= int64(b.minAttempts) && float64(b.failures) >= b.ratio*float64(total) {
			trip = true
		}
	}
	if trip {
		b.open(now)
		t.to = BreakerOpen
	}
	return t
}

// release ends a probe that neither succeeded nor failed transiently (a
// cancellation or a permanent error): the state does not move.
func (b *Breaker) release(probe bool) {
	if !probe {
		return
	}
	b.mu.Lock()
	b.probing = false
	b.mu.Unlock()
}

func (b *Breaker) open(now time.Time) {
	b.openedAt = now
	b.reset()
	b.setState(BreakerOpen)
}

func (b *Breaker) reset() {
	b.streak.Store(0)
	b.counting.Store(false)
	b.successes.Store(0)
	b.failures = 0
}

func (b *Breaker) setState(s BreakerState) { b.state.Store(uint32(s)) }
