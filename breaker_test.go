package sqlretry

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

func newTestBreaker(t *testing.T, c BreakerConfig) *Breaker {
	t.Helper()
	b, err := NewBreaker(c)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestBreakerStateMachine(t *testing.T) {
	br := newTestBreaker(t, BreakerConfig{ConsecutiveFailures: 3, OpenTimeout: 5 * time.Second})
	rec := &recorder{}
	p, clk := newTestPolicy(t, Config{Breaker: br, MaxRetries: NoRetries, Budget: NoBudget, Observer: rec})
	fail := func(context.Context) error { return transient(NotSent, "conn-refused") }
	ok := func(context.Context) error { return nil }
	ctx := context.Background()

	for i := 0; i < 3; i++ {
		p.Do(ctx, Idempotent("q"), fail)
	}
	if s := br.State(clk.Now()); s != BreakerOpen {
		t.Fatalf("after 3 failures: %v, want open", s)
	}
	called := false
	err := p.Do(ctx, Idempotent("q"), func(context.Context) error { called = true; return nil })
	if called || !errors.Is(err, ErrCircuitOpen) {
		t.Fatalf("open: called %v, err %v; want a fast ErrCircuitOpen", called, err)
	}
	clk.Advance(5 * time.Second)
	if s := br.State(clk.Now()); s != BreakerHalfOpen {
		t.Fatalf("after OpenTimeout: %v, want half-open", s)
	}
	// The probe fails: open again.
	p.Do(ctx, Idempotent("q"), fail)
	if s := br.State(clk.Now()); s != BreakerOpen {
		t.Fatalf("failed probe: %v, want open", s)
	}
	clk.Advance(5 * time.Second)
	if err := p.Do(ctx, Idempotent("q"), ok); err != nil {
		t.Fatalf("probe: %v", err)
	}
	if s := br.State(clk.Now()); s != BreakerClosed {
		t.Fatalf("successful probe: %v, want closed", s)
	}
	var changes []string
	for _, e := range rec.events {
		if e.Kind == EventBreakerStateChange {
			changes = append(changes, e.From.String()+">"+e.To.String())
		}
	}
	want := "closed>open open>half-open half-open>open open>half-open half-open>closed"
	if got := joinStrings(changes); got != want {
		t.Fatalf("state changes %q, want %q", got, want)
	}
}

func joinStrings(s []string) string {
	out := ""
	for i, x := range s {
		if i > 0 {
			out += " "
		}
		out += x
	}
	return out
}

func TestBreakerHalfOpenLetsOneProbeThrough(t *testing.T) {
	br := newTestBreaker(t, BreakerConfig{ConsecutiveFailures: 1, OpenTimeout: time.Second})
	p, clk := newTestPolicy(t, Config{Breaker: br, MaxRetries: NoRetries, Budget: NoBudget})
	p.Do(context.Background(), Idempotent("q"), func(context.Context) error { return transient(NotSent, "x") })
	clk.Advance(time.Second)
	inProbe, release := make(chan struct{}), make(chan struct{})
	done := make(chan error)
	go func() {
		done <- p.Do(context.Background(), Idempotent("probe"), func(context.Context) error { close(inProbe); <-release; return nil })
	}()
	<-inProbe
	err := p.Do(context.Background(), Idempotent("second"), func(context.Context) error { return nil })
	if !errors.Is(err, ErrCircuitOpen) {
		t.Fatalf("second call during the probe: %v, want ErrCircuitOpen", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("probe: %v", err)
	}
	if err := p.Do(context.Background(), Idempotent("after"), func(context.Context) error { return nil }); err != nil {
		t.Fatalf("after the probe closed the breaker: %v", err)
	}
}

func TestBreakerIgnoresPermanentErrorsAndCancellations(t *testing.T) {
	br := newTestBreaker(t, BreakerConfig{ConsecutiveFailures: 2})
	p, clk := newTestPolicy(t, Config{Breaker: br, MaxRetries: NoRetries})
	for i := 0; i < 10; i++ {
		p.Do(context.Background(), Idempotent("q"), func(context.Context) error { return permanentErr("23505") })
		ctx, cancel := context.WithCancel(context.Background())
		p.Do(ctx, Idempotent("q"), func(context.Context) error { cancel(); return transient(Unknown, "eof") })
		other, cancelOther := context.WithCancel(context.Background())
		cancelOther()
		p.Do(context.Background(), Idempotent("q"), func(context.Context) error { return other.Err() })
	}
	if s := br.State(clk.Now()); s != BreakerClosed {
		t.Fatalf("state %v, want closed: permanent errors and cancellations must not move the breaker", s)
	}
}

func TestBreakerFailureRatio(t *testing.T) {
	br := newTestBreaker(t, BreakerConfig{ConsecutiveFailures: -1, FailureRatio: 0.5, MinAttempts: 10, Window: time.Minute})
	p, clk := newTestPolicy(t, Config{Breaker: br, MaxRetries: NoRetries, Budget: NoBudget})
	ctx := context.Background()
	// Alternate: 50% failures. The window opens at the first failure.
	for i := 0; i < 9; i++ {
		if i%2 == 0 {
			p.Do(ctx, Idempotent("q"), func(context.Context) error { return transient(NotSent, "x") })
		} else {
			p.Do(ctx, Idempotent("q"), func(context.Context) error { return nil })
		}
		if s := br.State(clk.Now()); s != BreakerClosed {
			t.Fatalf("after %d attempts (below MinAttempts): %v, want closed", i+1, s)
		}
	}
	p.Do(ctx, Idempotent("q"), func(context.Context) error { return transient(NotSent, "x") })
	if s := br.State(clk.Now()); s != BreakerOpen {
		t.Fatalf("6 failures in 10 attempts at ratio 0.5: %v, want open", s)
	}
}

// An observer that reads the breaker while handling a state change would
// deadlock if events were sent under the lock (gobreaker's known trap).
func TestBreakerObserverMayCallBack(t *testing.T) {
	br := newTestBreaker(t, BreakerConfig{ConsecutiveFailures: 1})
	var p *Policy
	var mu sync.Mutex
	var seen []BreakerState
	obs := ObserverFunc(func(e Event) {
		if e.Kind == EventBreakerStateChange {
			st := p.Stats() // takes the breaker's lock
			mu.Lock()
			seen = append(seen, st.Breaker)
			mu.Unlock()
		}
	})
	p, _ = newTestPolicy(t, Config{Breaker: br, Observer: obs, MaxRetries: NoRetries})
	p.Do(context.Background(), Idempotent("q"), func(context.Context) error { return transient(NotSent, "x") })
	if len(seen) != 1 || seen[0] != BreakerOpen {
		t.Fatalf("observer saw %v, want [open]", seen)
	}
}

func TestBreakerOpensMidCall(t *testing.T) {
	br := newTestBreaker(t, BreakerConfig{ConsecutiveFailures: 2})
	p, _ := newTestPolicy(t, Config{Breaker: br, MaxRetries: 5, Budget: NoBudget})
	calls := 0
	dbErr := transient(NotSent, "x")
	err := p.Do(context.Background(), Idempotent("q"), func(context.Context) error { calls++; return dbErr })
	if calls != 2 || !errors.Is(err, ErrCircuitOpen) || !errors.Is(err, dbErr) {
		t.Fatalf("calls %d, err %v; want 2 calls then ErrCircuitOpen wrapping the last error", calls, err)
	}
}

func TestNewBreakerValidation(t *testing.T) {
	for _, c := range []BreakerConfig{{FailureRatio: 2}, {MinAttempts: -1}, {Window: -1}, {OpenTimeout: -1}} {
		if _, err := NewBreaker(c); err == nil {
			t.Errorf("NewBreaker(%+v) accepted a bad value", c)
		}
	}
}

// A probe whose operation panics releases the probe: the breaker must not
// wait for its answer forever.
func TestBreakerPanickingProbeIsReleased(t *testing.T) {
	br := newTestBreaker(t, BreakerConfig{ConsecutiveFailures: 1, OpenTimeout: time.Second})
	p, clk := newTestPolicy(t, Config{Breaker: br, MaxRetries: NoRetries, Budget: NoBudget})
	p.Do(context.Background(), Idempotent("q"), func(context.Context) error { return transient(NotSent, "x") })
	clk.Advance(time.Second)
	func() {
		defer func() { recover() }()
		p.Do(context.Background(), Idempotent("probe"), func(context.Context) error { panic("boom") })
	}()
	if err := p.Do(context.Background(), Idempotent("next"), func(context.Context) error { return nil }); err != nil {
		t.Fatalf("after a panicking probe: %v, want the next call to probe and succeed", err)
	}
	if s := br.State(clk.Now()); s != BreakerClosed {
		t.Fatalf("state %v, want closed", s)
	}
}
