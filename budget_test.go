package sqlretry

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"
)

// TestBudgetBoundsASustainedOutage simulates 60 s in which every attempt
// fails, at 100 calls a second, then a recovery. The budget must keep
// retries within 5% of calls plus the floor, where MaxRetries alone would
// allow 3 retries per call, and successes must refill it quickly after.
func TestBudgetBoundsASustainedOutage(t *testing.T) {
	p, clk := newTestPolicy(t, Config{MaxRetries: 3, BaseDelay: time.Millisecond, CountCalls: true})
	down := true
	fn := func(context.Context) error {
		if down {
			return transient(NotSent, "conn-refused")
		}
		return nil
	}
	const perSecond = 100
	for s := 0; s < 60; s++ {
		for i := 0; i < perSecond; i++ {
			err := p.Do(context.Background(), Idempotent("q"), fn)
			if err == nil {
				t.Fatal("a call succeeded during the outage")
			}
			clk.Advance(time.Second / perSecond)
		}
	}
	st := p.Stats()
	floor := 60.0 // 1 token a second
	if limit := 0.05*float64(st.Calls) + floor; float64(st.Retries) > limit {
		t.Fatalf("outage: %d retries for %d calls; want at most 5%% of calls plus the floor (%.0f)", st.Retries, st.Calls, limit)
	}
	if amp := float64(st.Attempts) / float64(st.Calls); amp > 1.05 {
		t.Fatalf("outage amplification %.3f attempts per call, want <= 1.05 (without a budget it would be 4)", amp)
	}
	if st.BudgetExhausted == 0 {
		t.Fatal("the budget never refused a retry during the outage")
	}
	// Recovery: successes refill the bucket; within a second of healthy
	// traffic a retry is possible again.
	down = false
	for i := 0; i < perSecond; i++ {
		if err := p.Do(context.Background(), Idempotent("q"), fn); err != nil {
			t.Fatalf("after recovery: %v", err)
		}
		clk.Advance(time.Second / perSecond)
	}
	if tok := p.Stats().BudgetTokens; tok < 10 {
		t.Fatalf("after 1 s of recovery the budget holds %.2f tokens, want it full (10)", tok)
	}
	down = true
	before := p.Stats().Retries
	p.Do(context.Background(), Idempotent("q"), fn)
	if p.Stats().Retries != before+3 {
		t.Fatalf("after recovery a failing call made %d retries, want 3", p.Stats().Retries-before)
	}
}

func TestBudgetWithoutBudgetAmplifies(t *testing.T) {
	p, _ := newTestPolicy(t, Config{MaxRetries: 3, Budget: NoBudget, CountCalls: true})
	for i := 0; i < 100; i++ {
		p.Do(context.Background(), Idempotent("q"), func(context.Context) error { return transient(NotSent, "x") })
	}
	if st := p.Stats(); st.Attempts != 400 || !math.IsInf(st.BudgetTokens, 1) {
		t.Fatalf("NoBudget: %d attempts for 100 calls, tokens %v; want 400 and +Inf", st.Attempts, st.BudgetTokens)
	}
}

func TestBudgetExhaustedWrapsTheLastError(t *testing.T) {
	b, _ := NewBudget(BudgetConfig{Max: 1, Floor: NoFloor})
	p, _ := newTestPolicy(t, Config{Budget: b})
	dbErr := transient(NotApplied, "40P01")
	err := p.Do(context.Background(), Idempotent("q"), func(context.Context) error { return dbErr })
	var re *Error
	if !errors.Is(err, ErrBudgetExhausted) || !errors.Is(err, dbErr) || !errors.As(err, &re) || re.Attempts != 2 {
		t.Fatalf("got %v; want ErrBudgetExhausted after 2 attempts wrapping the database error", err)
	}
}

func TestBudgetArithmetic(t *testing.T) {
	b, _ := NewBudget(BudgetConfig{Ratio: 0.5, Max: 2, Floor: 1})
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	steps := []struct {
		do   string
		at   time.Duration
		want float64 // tokens after
		ok   bool
	}{
		{"take", 0, 1, true},
		{"take", 0, 0, true},
		{"take", 0, 0, false},
		{"take", 500 * time.Millisecond, 0.5, false}, // half a token of floor: not enough
		{"succeed", 500 * time.Millisecond, 1, true},
		{"take", 500 * time.Millisecond, 0, true},
		{"succeed", 500 * time.Millisecond, 0.5, true},
		{"succeed", 500 * time.Millisecond, 1, true},
		{"succeed", 500 * time.Millisecond, 1.5, true},
		{"succeed", 500 * time.Millisecond, 2, true},
		{"succeed", 500 * time.Millisecond, 2, true}, // capped
		{"tokens", 10 * time.Second, 2, true},        // the floor is capped too
	}
	for i, s := range steps {
		now := t0.Add(s.at)
		ok := true
		switch s.do {
		case "take":
			ok = b.withdraw(now)
		case "succeed":
			b.success()
		}
		if got := b.Tokens(now); ok != s.ok || math.Abs(got-s.want) > 1e-9 {
			t.Fatalf("step %d %s: ok %v tokens %v, want ok %v tokens %v", i, s.do, ok, got, s.ok, s.want)
		}
	}
}

func TestBudgetFullFlagSkipsDeposits(t *testing.T) {
	b := DefaultBudget()
	for i := 0; i < 1000; i++ {
		b.success()
	}
	if n := b.pending.Load(); n != 0 {
		t.Fatalf("a full bucket counted %d deposits, want 0 (the hot path must not write)", n)
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b.withdraw(t0)
	for i := 0; i < 10; i++ {
		b.success()
	}
	if !b.full.Load() {
		t.Fatal("10 deposits of 0.1 did not mark the bucket full again")
	}
	if got := b.Tokens(t0); got != 10 {
		t.Fatalf("tokens %v, want 10", got)
	}
}

func TestNewBudgetValidation(t *testing.T) {
	for _, c := range []BudgetConfig{{Ratio: -1}, {Max: -1}, {Floor: -2}, {Ratio: math.NaN()}, {Max: math.Inf(1)}} {
		if _, err := NewBudget(c); err == nil {
			t.Errorf("NewBudget(%+v) accepted a bad value", c)
		}
	}
}
