package sqlretry

import (
	"context"
	"sync"
	"testing"
	"time"
)

// classErr is an error that carries its own verdict, for tests.
type classErr struct{ c Class }

func (e *classErr) Error() string { return "test error " + e.c.Code + " (" + e.c.Phase.String() + ")" }

func transient(phase Phase, code string) error {
	return &classErr{Class{Retryable: true, Phase: phase, Code: code}}
}

func permanentErr(code string) error { return &classErr{Class{Phase: NotApplied, Code: code}} }

// ended is a transient failure of unknown outcome whose attempt has provably
// stopped (an in-process engine's), so a verify's "not applied" is final.
func ended(code string) error {
	return &classErr{Class{Retryable: true, Phase: Unknown, Code: code, Ended: true}}
}

var classErrClassifier = ClassifierFunc(func(err error) Class {
	if ce, ok := err.(*classErr); ok {
		return ce.c
	}
	return ClassifyNeutral(err)
})

// fakeClock is a manual clock whose sleep advances time at once and records
// every wait, so tests never depend on the wall clock.
type fakeClock struct {
	mu     sync.Mutex
	t      time.Time
	sleeps []time.Duration
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.sleeps = append(c.sleeps, d)
	c.mu.Unlock()
	return nil
}

func (c *fakeClock) Sleeps() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.sleeps...)
}

// newTestPolicy builds a policy with the test classifier, a fixed random
// number and a fake clock. c's other fields are kept.
func newTestPolicy(t testing.TB, c Config) (*Policy, *fakeClock) {
	t.Helper()
	if c.Classifier == nil {
		c.Classifier = classErrClassifier
	}
	if c.Rand == nil {
		c.Rand = func() float64 { return 0.5 }
	}
	p, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	clk := newFakeClock()
	p.now = clk.Now
	p.sleep = clk.Sleep
	return p, clk
}

// script returns an operation that returns errs in order, then nil, and a
// counter of its calls.
func script(errs ...error) (func(context.Context) error, *int) {
	n := 0
	return func(context.Context) error {
		n++
		if n <= len(errs) {
			return errs[n-1]
		}
		return nil
	}, &n
}

// recorder collects events.
type recorder struct {
	mu     sync.Mutex
	events []Event
}

func (r *recorder) Observe(e Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

func (r *recorder) kinds() []EventKind {
	r.mu.Lock()
	defer r.mu.Unlock()
	var k []EventKind
	for _, e := range r.events {
		k = append(k, e.Kind)
	}
	return k
}
