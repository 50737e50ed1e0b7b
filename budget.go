package sqlretry

import (
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// BudgetConfig sets a [Budget]'s shape. Zero fields take the defaults.
type BudgetConfig struct {
	// Ratio is the fraction of a token each success deposits. If 0, 0.1:
	// in a partial outage retries stay near 10% of successful calls.
	Ratio float64
	// Max is the bucket's capacity, and its level at start. If 0, 10.
	Max float64
	// Floor is the tokens per second deposited regardless of traffic, so a
	// quiet, healthy service can still retry. If 0, 1. NoFloor disables it.
	Floor float64
}

// NoFloor, as BudgetConfig.Floor, disables the per-second floor.
const NoFloor = -1

// Budget is a token bucket shared by every call of one or more Policies:
// each success deposits Ratio of a token, each retry withdraws one, and Floor
// tokens per second are deposited whatever the traffic. When it is empty a call
// that wants to retry fails fast with [ErrBudgetExhausted], so a fleet of
// clients cannot multiply its load on a database that is trying to recover.
//
// A first-try success costs one atomic load while the bucket is full, which is
// the normal state: deposits are counted only while there is room for them.
// It is safe for concurrent use by multiple goroutines.
type Budget struct {
	ratio, max, floor float64
	disabled          bool

	full    atomic.Bool  // the bucket is (or will be, once settled) at Max: deposits are dropped
	pending atomic.Int64 // successes not yet settled into tokens
	need    atomic.Int64 // successes that would fill the bucket, as of the last settle

	mu     sync.Mutex
	tokens float64
	last   time.Time // when the floor was last applied
}

// NoBudget, as Config.Budget, disables the budget: retries are bounded only by
// MaxRetries, the breaker and the caller's context.
var NoBudget = &Budget{disabled: true}

// DefaultBudget returns a new Budget with the default shape (Ratio 0.1, Max 10,
// Floor 1 per second).
func DefaultBudget() *Budget {
	b, _ := NewBudget(BudgetConfig{})
	return b
}

// NewBudget returns a full Budget, or an error naming a bad field.
func NewBudget(c BudgetConfig) (*Budget, error) {
	switch {
	case c.Ratio < 0 || math.IsNaN(c.Ratio) || math.IsInf(c.Ratio, 0):
		return nil, errors.New("sqlretry: BudgetConfig.Ratio must be a finite number >= 0")
	case c.Max < 0 || math.IsNaN(c.Max) || math.IsInf(c.Max, 0):
		return nil, errors.New("sqlretry: BudgetConfig.Max must be a finite number >= 0")
	case (c.Floor < 0 && c.Floor != NoFloor) || math.IsNaN(c.Floor) || math.IsInf(c.Floor, 0):
		return nil, errors.New("sqlretry: BudgetConfig.Floor must be a finite number >= 0, or NoFloor")
	}
	if c.Ratio == 0 {
		c.Ratio = 0.1
	}
	if c.Max == 0 {
		c.Max = 10
	}
	switch c.Floor {
	case 0:
		c.Floor = 1
	case NoFloor:
		c.Floor = 0
	}
	b := &Budget{ratio: c.Ratio, max: c.Max, floor: c.Floor, tokens: c.Max}
	b.full.Store(true)
	return b, nil
}

// success records a successful call: the hot path.
func (b *Budget) success() {
	if b.full.Load() {
		return
	}
	if b.pending.Add(1) >= b.need.Load() {
		b.full.Store(true)
	}
}

// settle folds pending successes and the floor into tokens. b.mu is held.
func (b *Budget) settle(now time.Time) {
	n := b.pending.Swap(0)
	b.tokens += float64(n) * b.ratio
	if !b.last.IsZero() && now.After(b.last) {
		b.tokens += now.Sub(b.last).Seconds() * b.floor
	}
	if b.last.IsZero() || now.After(b.last) {
		b.last = now
	}
	if b.tokens >= b.max {
		b.tokens = b.max
		b.full.Store(true)
		return
	}
	b.full.Store(false)
	b.need.Store(int64(math.Ceil((b.max - b.tokens) / b.ratio)))
}

// withdraw takes one token for a retry, reporting false if there is none.
func (b *Budget) withdraw(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.settle(now)
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	b.settle(now) // updates full and need for the new level
	return true
}

// Tokens returns the bucket's level at now.
func (b *Budget) Tokens(now time.Time) float64 {
	if b.disabled {
		return math.Inf(1)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.settle(now)
	return b.tokens
}
