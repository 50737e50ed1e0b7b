package sqlretry

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

func verifyReturning(applied bool, err error) (VerifyFunc, *int) {
	n := 0
	return func(context.Context) (bool, error) { n++; return applied, err }, &n
}

// TestDecisionTable walks the whole decision table: class × phase × Op.
func TestDecisionTable(t *testing.T) {
	verifyErrBoom := errors.New("verify: connection refused")
	type want struct {
		calls    int
		verifies int
		ok       bool
		is       []error
	}
	cases := []struct {
		name string
		op   func() (Op, *int)
		errs []error
		want want
	}{
		{"permanent/idempotent", idem, []error{permanentErr("23505")}, want{calls: 1}},
		{"permanent/write", writeNoVerify, []error{permanentErr("23505")}, want{calls: 1}},
		{"not-sent/write", writeNoVerify, []error{transient(NotSent, "bad-conn")}, want{calls: 2, ok: true}},
		{"not-applied/write", writeNoVerify, []error{transient(NotApplied, "40P01"), transient(NotApplied, "40P01")}, want{calls: 3, ok: true}},
		{"not-applied/idempotent", idem, []error{transient(NotApplied, "1205")}, want{calls: 2, ok: true}},
		{"unknown/idempotent", idem, []error{transient(Unknown, "eof")}, want{calls: 2, ok: true}},
		{"unknown/write-no-verify", writeNoVerify, []error{transient(Unknown, "eof")}, want{calls: 1, is: []error{ErrAmbiguous}}},
		{"unknown/write-verify-applied", writeVerify(true, nil), []error{transient(Unknown, "eof")}, want{calls: 1, verifies: 1, ok: true}},
		{"unknown/write-verify-not-applied/attempt-ended", writeVerify(false, nil), []error{ended("eof")}, want{calls: 2, verifies: 1, ok: true}},
		// The attempt may still be running on the server: "not applied"
		// proves nothing yet, and a replay could apply the write twice.
		{"unknown/write-verify-not-applied/attempt-alive", writeVerify(false, nil), []error{transient(Unknown, "eof")}, want{calls: 1, verifies: 1, is: []error{ErrAmbiguous}}},
		{"unknown/write-verify-failed", writeVerify(false, verifyErrBoom), []error{transient(Unknown, "eof")}, want{calls: 1, verifies: 1, is: []error{ErrAmbiguous, verifyErrBoom}}},
		{"exhausted/idempotent", idem, []error{transient(NotApplied, "1"), transient(NotApplied, "2"), transient(NotApplied, "3"), transient(NotApplied, "4"), transient(NotApplied, "5")}, want{calls: 4, is: []error{ErrRetriesExhausted}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, _ := newTestPolicy(t, Config{Budget: NoBudget})
			op, verifies := tc.op()
			fn, calls := script(tc.errs...)
			err := p.Do(context.Background(), op, fn)
			if (err == nil) != tc.want.ok {
				t.Fatalf("Do = %v, want ok=%v", err, tc.want.ok)
			}
			if *calls != tc.want.calls {
				t.Errorf("operation ran %d times, want %d", *calls, tc.want.calls)
			}
			if *verifies != tc.want.verifies {
				t.Errorf("verify ran %d times, want %d", *verifies, tc.want.verifies)
			}
			for _, target := range tc.want.is {
				if !errors.Is(err, target) {
					t.Errorf("errors.Is(%v, %v) = false", err, target)
				}
			}
			if err != nil && !errors.Is(err, tc.errs[min(*calls, len(tc.errs))-1]) {
				t.Errorf("error %v does not wrap the last database error %v", err, tc.errs[*calls-1])
			}
		})
	}
}

func idem() (Op, *int)          { n := 0; return Idempotent("load"), &n }
func writeNoVerify() (Op, *int) { n := 0; return Write("persist", nil), &n }
func writeVerify(applied bool, err error) func() (Op, *int) {
	return func() (Op, *int) {
		v, n := verifyReturning(applied, err)
		return Write("persist", v), n
	}
}

func TestPermanentFirstAttemptReturnedUnchanged(t *testing.T) {
	p, _ := newTestPolicy(t, Config{})
	want := permanentErr("42P01")
	err := p.Do(context.Background(), Idempotent("q"), func(context.Context) error { return want })
	if err != want {
		t.Fatalf("got %#v, want the operation's own error %#v", err, want)
	}
}

func TestPermanentAfterRetriesIsWrapped(t *testing.T) {
	p, _ := newTestPolicy(t, Config{})
	last := permanentErr("23505")
	fn, calls := script(transient(NotSent, "dial"), last)
	err := p.Do(context.Background(), Write("w", nil), fn)
	var re *Error
	if !errors.As(err, &re) || re.Attempts != 2 || *calls != 2 || !errors.Is(err, last) {
		t.Fatalf("got %v (attempts %v, calls %d), want *Error after 2 attempts wrapping %v", err, re, *calls, last)
	}
}

func TestNoRetries(t *testing.T) {
	p, _ := newTestPolicy(t, Config{MaxRetries: NoRetries})
	fn, calls := script(transient(NotSent, "dial"), transient(NotSent, "dial"))
	err := p.Do(context.Background(), Idempotent("q"), fn)
	if *calls != 1 || !errors.Is(err, ErrRetriesExhausted) {
		t.Fatalf("calls %d, err %v; want 1 call and ErrRetriesExhausted", *calls, err)
	}
	// An ambiguous write is still verified with retries disabled.
	v, vn := verifyReturning(true, nil)
	fn, calls = script(transient(Unknown, "eof"))
	if err := p.Do(context.Background(), Write("w", v), fn); err != nil || *vn != 1 || *calls != 1 {
		t.Fatalf("err %v, verifies %d, calls %d; want nil, 1, 1", err, *vn, *calls)
	}
}

func TestMaxRetriesCountsRetriesNotAttempts(t *testing.T) {
	for _, n := range []int{1, 2, 5} {
		p, _ := newTestPolicy(t, Config{MaxRetries: n, Budget: NoBudget})
		calls := 0
		err := p.Do(context.Background(), Idempotent("q"), func(context.Context) error { calls++; return transient(NotApplied, "x") })
		var re *Error
		if !errors.As(err, &re) || calls != n+1 || re.Attempts != n+1 {
			t.Errorf("MaxRetries %d: calls %d, err %v; want %d attempts", n, calls, err, n+1)
		}
	}
}

func TestCallerContextDoneBeforeCallNeverStarts(t *testing.T) {
	p, _ := newTestPolicy(t, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	called := false
	err := p.Do(ctx, Idempotent("q"), func(context.Context) error { called = true; return nil })
	if called || !errors.Is(err, context.Canceled) {
		t.Fatalf("called %v, err %v; want no call and context.Canceled", called, err)
	}
}

func TestCancelDuringWaitReturnsBothErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, err := New(Config{Classifier: classErrClassifier, BaseDelay: time.Second, Jitter: NoJitter})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		dbErr := transient(NotApplied, "40P01")
		calls := 0
		done := make(chan error)
		go func() {
			done <- p.Do(ctx, Idempotent("q"), func(context.Context) error { calls++; return dbErr })
		}()
		time.Sleep(300 * time.Millisecond) // inside the 1 s backoff
		cancel()
		err = <-done
		if calls != 1 {
			t.Errorf("operation ran %d times, want 1", calls)
		}
		if !errors.Is(err, context.Canceled) || !errors.Is(err, dbErr) {
			t.Errorf("err %v: want both context.Canceled and the database error", err)
		}
	})
}

func TestSuccessIsNotDiscardedWhenCallerCancels(t *testing.T) {
	p, _ := newTestPolicy(t, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	err := p.Do(ctx, Idempotent("q"), func(context.Context) error { cancel(); return nil })
	if err != nil {
		t.Fatalf("got %v, want nil: the attempt succeeded", err)
	}
	// And on a retry.
	ctx, cancel = context.WithCancel(context.Background())
	fn, _ := script(transient(NotSent, "dial"))
	err = p.Do(ctx, Idempotent("q"), func(ctx context.Context) error {
		err := fn(ctx)
		if err == nil {
			cancel()
		}
		return err
	})
	if err != nil {
		t.Fatalf("retry: got %v, want nil", err)
	}
}

func TestCallerCancelDuringAttemptIsFinal(t *testing.T) {
	p, _ := newTestPolicy(t, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	err := p.Do(ctx, Idempotent("q"), func(ctx context.Context) error {
		calls++
		cancel()
		return fmt.Errorf("driver: %w", ctx.Err())
	})
	if calls != 1 || !errors.Is(err, context.Canceled) {
		t.Fatalf("calls %d, err %v; want 1 call, context.Canceled", calls, err)
	}
}

func TestCancelOfAnotherContextIsNotRetried(t *testing.T) {
	p, _ := newTestPolicy(t, Config{})
	other, cancel := context.WithCancel(context.Background())
	cancel()
	calls := 0
	err := p.Do(context.Background(), Idempotent("q"), func(context.Context) error { calls++; return other.Err() })
	if calls != 1 || !errors.Is(err, context.Canceled) {
		t.Fatalf("calls %d, err %v; want 1 call: another context's cancel is not a database fault", calls, err)
	}
}

func TestCommandTimeoutIsRetryableAndUnknown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hang := func(ctx context.Context) error { <-ctx.Done(); return fmt.Errorf("driver: %w", ctx.Err()) }
		// Idempotent: retried, then succeeds.
		p, err := New(Config{Classifier: classErrClassifier, CommandTimeout: time.Second, BaseDelay: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		calls := 0
		err = p.Do(context.Background(), Idempotent("q"), func(ctx context.Context) error {
			calls++
			if calls == 1 {
				return hang(ctx)
			}
			return nil
		})
		if err != nil || calls != 2 {
			t.Fatalf("idempotent: err %v, calls %d; want nil after 2", err, calls)
		}
		// A write without verify: ambiguous, never replayed.
		calls = 0
		err = p.Do(context.Background(), Write("w", nil), func(ctx context.Context) error { calls++; return hang(ctx) })
		var re *Error
		if calls != 1 || !errors.Is(err, ErrAmbiguous) || !errors.As(err, &re) || re.Class.Code != "command-timeout" || re.Class.Phase != Unknown {
			t.Fatalf("write: calls %d, err %v; want 1 call, ErrAmbiguous with class command-timeout/unknown", calls, err)
		}
	})
}

func TestCallerDeadlineIsNotACommandTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, err := New(Config{Classifier: classErrClassifier, CommandTimeout: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		calls := 0
		err = p.Do(ctx, Idempotent("q"), func(ctx context.Context) error { calls++; <-ctx.Done(); return ctx.Err() })
		if calls != 1 || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("calls %d, err %v; want 1 call ended by the caller's deadline", calls, err)
		}
	})
}

func TestWaitPastDeadlineIsNotStarted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, err := New(Config{Classifier: classErrClassifier, BaseDelay: 2 * time.Second, Jitter: NoJitter})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start := time.Now()
		dbErr := transient(NotApplied, "1205")
		err = p.Do(ctx, Idempotent("q"), func(context.Context) error { return dbErr })
		if !errors.Is(err, ErrDeadline) || !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, dbErr) {
			t.Fatalf("err %v: want ErrDeadline, DeadlineExceeded and the database error", err)
		}
		if waited := time.Since(start); waited != 0 { // synctest's clock: no wait was started
			t.Fatalf("waited %v, want 0", waited)
		}
	})
}

func TestMinDelayRaisesTheWait(t *testing.T) {
	p, clk := newTestPolicy(t, Config{BaseDelay: time.Millisecond, Jitter: NoJitter})
	busy := &classErr{Class{Retryable: true, Phase: NotSent, Code: "40501", MinDelay: 10 * time.Second}}
	fn, _ := script(busy)
	if err := p.Do(context.Background(), Idempotent("q"), fn); err != nil {
		t.Fatal(err)
	}
	if s := clk.Sleeps(); len(s) != 1 || s[0] != 10*time.Second {
		t.Fatalf("waits %v, want [10s]", s)
	}
}

func TestBackoffWaitsFollowTheSchedule(t *testing.T) {
	p, clk := newTestPolicy(t, Config{BaseDelay: 100 * time.Millisecond, MaxDelay: 300 * time.Millisecond, Jitter: NoJitter, MaxRetries: 4, Budget: NoBudget})
	fn, _ := script(transient(NotApplied, "x"), transient(NotApplied, "x"), transient(NotApplied, "x"), transient(NotApplied, "x"))
	if err := p.Do(context.Background(), Idempotent("q"), fn); err != nil {
		t.Fatal(err)
	}
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 300 * time.Millisecond, 300 * time.Millisecond}
	if got := clk.Sleeps(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("waits %v, want %v", got, want)
	}
}

func TestScheduleDecisions(t *testing.T) {
	rule := ScheduleFunc(func(f Failure) (Decision, time.Duration) {
		switch f.Class.Code {
		case "2714": // a rule makes a permanent error retryable
			if f.Retry <= 2 {
				return Retry, time.Duration(f.Retry) * time.Second
			}
			return Stop, 0
		case "1205":
			return Stop, 0
		}
		return Defer, 0
	})
	p, clk := newTestPolicy(t, Config{Schedule: rule, Budget: NoBudget, Jitter: NoJitter})
	calls := 0
	err := p.Do(context.Background(), Idempotent("q").WithStatement("create table t"), func(context.Context) error { calls++; return permanentErr("2714") })
	if calls != 3 || err == nil || fmt.Sprint(clk.Sleeps()) != "[1s 2s]" {
		t.Errorf("rule retry: calls %d, waits %v, err %v; want 3 calls with waits [1s 2s]", calls, clk.Sleeps(), err)
	}
	calls = 0
	p.Do(context.Background(), Idempotent("q"), func(context.Context) error { calls++; return transient(NotApplied, "1205") })
	if calls != 1 {
		t.Errorf("rule stop: calls %d, want 1", calls)
	}
	calls = 0
	fn, n := script(transient(NotApplied, "40P01"))
	if err := p.Do(context.Background(), Idempotent("q"), fn); err != nil || *n != 2 {
		t.Errorf("defer: calls %d, err %v; want the policy's own retry", *n, err)
	}
	// A rule never overrides the write's phase rule.
	calls = 0
	err = p.Do(context.Background(), Write("w", nil), func(context.Context) error {
		calls++
		return &classErr{Class{Phase: Unknown, Code: "2714"}}
	})
	if calls != 1 || !errors.Is(err, ErrAmbiguous) {
		t.Errorf("rule on unknown write: calls %d, err %v; want 1 call, ErrAmbiguous", calls, err)
	}
}

func TestScheduleSeesStatementAndRetryNumber(t *testing.T) {
	var seen []string
	rule := ScheduleFunc(func(f Failure) (Decision, time.Duration) {
		seen = append(seen, fmt.Sprintf("%s#%d", f.Statement, f.Retry))
		return Defer, 0
	})
	p, _ := newTestPolicy(t, Config{Schedule: rule})
	fn, _ := script(transient(NotApplied, "x"), transient(NotApplied, "x"))
	p.Do(context.Background(), Idempotent("q").WithStatement("select 1"), fn)
	if got := strings.Join(seen, ","); got != "select 1#1,select 1#2" {
		t.Fatalf("schedule saw %q", got)
	}
}

func TestErrorMessageAndUnwrap(t *testing.T) {
	dbErr := errors.New("deadlock detected")
	e := &Error{Op: "persist", Attempts: 3, Err: dbErr, Cause: ErrBudgetExhausted}
	if got, want := e.Error(), "sqlretry: persist: retry budget exhausted after 3 attempts: deadlock detected"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(e, dbErr) || !errors.Is(e, ErrBudgetExhausted) {
		t.Error("Unwrap does not expose both the cause and the database error")
	}
	e = &Error{Op: "q", Attempts: 1, Err: dbErr}
	if got, want := e.Error(), "sqlretry: q: failed after 1 attempt: deadlock detected"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

func TestObserverAndStats(t *testing.T) {
	rec := &recorder{}
	p, _ := newTestPolicy(t, Config{Observer: rec, CountCalls: true})
	fn, _ := script(transient(NotApplied, "40001"))
	if err := p.Do(context.Background(), Idempotent("q"), fn); err != nil {
		t.Fatal(err)
	}
	v, _ := verifyReturning(true, nil)
	fn, _ = script(transient(Unknown, "eof"))
	p.Do(context.Background(), Write("w", v), fn)
	p.Do(context.Background(), Write("w", nil), func(context.Context) error { return transient(Unknown, "eof") })
	p.Do(context.Background(), Idempotent("ok"), func(context.Context) error { return nil })
	if got, want := fmt.Sprint(rec.kinds()), "[retry verified give-up]"; got != want {
		t.Errorf("events %s, want %s", got, want)
	}
	s := p.Stats()
	// 10 tokens, one retry, three successes at 0.1, 50 ms of floor at 1/s.
	if d := s.BudgetTokens - 9.35; d > 1e-9 || d < -1e-9 {
		t.Errorf("BudgetTokens = %v, want 9.35", s.BudgetTokens)
	}
	s.BudgetTokens = 0
	want := Stats{Calls: 4, Attempts: 5, Failures: 3, Retries: 1, Recovered: 2, GaveUp: 1, Ambiguous: 1, Verifications: 1, VerifiedApplied: 1}
	if s != want {
		t.Errorf("Stats = %+v\nwant    %+v", s, want)
	}
}

func TestValidationNamesTheField(t *testing.T) {
	cases := []struct {
		c    Config
		want string
	}{
		{Config{BaseDelay: -1}, "Config.BaseDelay"},
		{Config{MaxDelay: -1}, "Config.MaxDelay"},
		{Config{CommandTimeout: -time.Second}, "Config.CommandTimeout"},
		{Config{Jitter: 9}, "Config.Jitter"},
		{Config{BaseDelay: time.Second, MaxDelay: time.Millisecond}, "Config.MaxDelay"},
	}
	for _, tc := range cases {
		_, err := New(tc.c)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want an error naming %s", tc.c, err, tc.want)
		}
	}
	if _, err := New(Config{}); err != nil {
		t.Errorf("New(Config{}) = %v, want the zero config to work", err)
	}
}

func TestDefaults(t *testing.T) {
	p, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	if p.maxRetries != 3 || p.baseDelay != 100*time.Millisecond || p.maxDelay != 5*time.Second || p.jitter != FullJitter || p.commandTimeout != 0 || p.budget == nil || p.classifier == nil {
		t.Fatalf("defaults: %s budget=%v", p, p.budget != nil)
	}
}

func TestDoValue(t *testing.T) {
	p, _ := newTestPolicy(t, Config{})
	n := 0
	v, err := DoValue(context.Background(), p, Idempotent("q"), func(context.Context) (string, error) {
		n++
		if n == 1 {
			return "", transient(NotSent, "dial")
		}
		return "row", nil
	})
	if v != "row" || err != nil || n != 2 {
		t.Fatalf("DoValue = %q, %v after %d calls; want row, nil after 2", v, err, n)
	}
}

func TestConcurrentCallsShareTheBudget(t *testing.T) {
	b, _ := NewBudget(BudgetConfig{Max: 50, Floor: NoFloor})
	p, _ := newTestPolicy(t, Config{Budget: b, MaxRetries: 3})
	var wg sync.WaitGroup
	var failures, ok atomic.Int64
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				err := p.Do(context.Background(), Idempotent("q"), func(context.Context) error {
					if i%2 == 0 {
						return transient(NotApplied, "40001")
					}
					return nil
				})
				if err != nil {
					failures.Add(1)
				} else {
					ok.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	s := p.Stats()
	// Every failing call wants 3 retries; only the deposits (0.1 per success)
	// and the initial 50 tokens can pay for them.
	maxRetries := 50 + int64(float64(ok.Load())*0.1) + 1
	if s.Retries > maxRetries || s.BudgetExhausted == 0 {
		t.Fatalf("retries %d (max %d), budget refusals %d: the shared budget did not bound the retries", s.Retries, maxRetries, s.BudgetExhausted)
	}
}

// A driver that times out on its own context, derived from the attempt's
// deadline, may return before the attempt context's timer has run; that is
// still the command timeout, not a stray context error.
func TestCommandTimeoutSeenThroughADerivedDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, err := New(Config{Classifier: classErrClassifier, CommandTimeout: time.Second, BaseDelay: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		calls := 0
		err = p.Do(context.Background(), Idempotent("q"), func(ctx context.Context) error {
			calls++
			if calls > 1 {
				return nil
			}
			dl, _ := ctx.Deadline()
			qctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), dl)
			defer cancel()
			<-qctx.Done()
			return fmt.Errorf("driver: %w", qctx.Err())
		})
		if err != nil || calls != 2 {
			t.Fatalf("err %v after %d calls; want the timeout retried once", err, calls)
		}
	})
}

// The success path reads no clock: time.Now costs more than the whole call.
func TestSuccessPathReadsNoClock(t *testing.T) {
	for _, c := range []Config{{}, {Breaker: mustNewBreaker(t)}, {Schedule: ScheduleFunc(func(Failure) (Decision, time.Duration) { return Defer, 0 })}} {
		p, _ := newTestPolicy(t, c)
		p.now = func() time.Time { t.Fatal("the success path read the clock"); return time.Time{} }
		for i := 0; i < 3; i++ {
			if err := p.Do(context.Background(), Idempotent("q"), func(context.Context) error { return nil }); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func mustNewBreaker(t *testing.T) *Breaker {
	b, err := NewBreaker(BreakerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestZeroBudgetIsRejected(t *testing.T) {
	if _, err := New(Config{Budget: &Budget{}}); err == nil || !strings.Contains(err.Error(), "Config.Budget") {
		t.Fatalf("New with &Budget{} = %v, want an error naming Config.Budget", err)
	}
}

// A rule that stops a transient failure says so (ErrRetriesExhausted), and
// never lets a write whose outcome is unknown pass for a plain error.
func TestScheduleStopOfATransientFailure(t *testing.T) {
	stop := ScheduleFunc(func(Failure) (Decision, time.Duration) { return Stop, 0 })
	p, _ := newTestPolicy(t, Config{Schedule: stop})
	dbErr := transient(NotApplied, "1205")
	err := p.Do(context.Background(), Write("w", nil), func(context.Context) error { return dbErr })
	if !errors.Is(err, ErrRetriesExhausted) || !errors.Is(err, dbErr) {
		t.Errorf("not-applied: got %v, want ErrRetriesExhausted wrapping the error", err)
	}
	lost := transient(Unknown, "-2")
	err = p.Do(context.Background(), Write("w", nil), func(context.Context) error { return lost })
	if !errors.Is(err, ErrAmbiguous) {
		t.Errorf("unknown, no verify: got %v, want ErrAmbiguous", err)
	}
	v, n := verifyReturning(true, nil)
	if err := p.Do(context.Background(), Write("w", v), func(context.Context) error { return lost }); err != nil || *n != 1 {
		t.Errorf("unknown, verified applied: got %v after %d verifies, want nil after 1", err, *n)
	}
	// A permanent error stays the operation's own.
	perm := permanentErr("2627")
	if err := p.Do(context.Background(), Write("w", nil), func(context.Context) error { return perm }); err != perm {
		t.Errorf("permanent: got %v, want the error itself", err)
	}
}

// decide is the whole retry decision, as a table: verdict × rule × consent ×
// attempts left.
func TestDecide(t *testing.T) {
	transientC := Class{Retryable: true}
	permanentC := Class{}
	cases := []struct {
		name      string
		c         Class
		d         Decision
		ambiguous bool
		attempts  int
		want      next
	}{
		{"permanent", permanentC, Defer, false, 1, next{act: actPermanent}},
		{"permanent, unknown outcome: a classifier's no is final", permanentC, Defer, true, 1, next{act: actPermanent}},
		{"transient, retries left", transientC, Defer, false, 1, next{act: actRetry}},
		{"transient, unknown outcome: settle, then retry", transientC, Defer, true, 1, next{settle: true, act: actRetry}},
		{"transient, retries spent", transientC, Defer, false, 4, next{act: actExhausted}},
		{"transient, retries spent, unknown outcome: settle first", transientC, Defer, true, 4, next{settle: true, act: actExhausted}},
		{"a rule retries a permanent error", permanentC, Retry, false, 1, next{act: actRetry}},
		{"a rule retries past MaxRetries", transientC, Retry, false, 9, next{act: actRetry}},
		{"a rule stops a transient failure", transientC, Stop, false, 1, next{act: actExhausted}},
		{"a rule stops a transient write of unknown outcome: settled, never a plain error", transientC, Stop, true, 1, next{settle: true, act: actExhausted}},
		{"a rule stops a permanent error", permanentC, Stop, false, 1, next{act: actPermanent}},
	}
	for _, tc := range cases {
		if got := decide(tc.c, tc.d, tc.ambiguous, tc.attempts, 3); got != tc.want {
			t.Errorf("%s: decide = %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// New's errors name the field, as a *ConfigError a program can read.
func TestConfigErrorNamesTheField(t *testing.T) {
	for field, c := range map[string]Config{
		"BaseDelay":      {BaseDelay: -1},
		"MaxDelay":       {BaseDelay: time.Second, MaxDelay: time.Millisecond},
		"CommandTimeout": {CommandTimeout: -1},
		"Jitter":         {Jitter: NoJitter + 1},
		"Budget":         {Budget: &Budget{}},
	} {
		_, err := New(c)
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != field || !strings.Contains(err.Error(), "Config."+field) {
			t.Errorf("New(%+v) = %v, want a *ConfigError for %s", c, err, field)
		}
		if c.Validate() == nil {
			t.Errorf("Validate(%+v) = nil, want the error New returns", c)
		}
	}
}

// WithDefaults states the defaults once: New applies exactly these.
func TestConfigWithDefaults(t *testing.T) {
	d := Config{}.WithDefaults()
	if d.MaxRetries != 3 || d.BaseDelay != 100*time.Millisecond || d.MaxDelay != 5*time.Second || d.Classifier == nil || d.Budget == nil || d.Jitter != FullJitter {
		t.Errorf("Config{}.WithDefaults() = %+v", d)
	}
	if got := (Config{BaseDelay: 10 * time.Second}).WithDefaults().MaxDelay; got != 10*time.Second {
		t.Errorf("MaxDelay default with BaseDelay 10s = %v, want 10s", got)
	}
	if got := (Config{MaxRetries: NoRetries}).WithDefaults().MaxRetries; got != NoRetries {
		t.Errorf("NoRetries became %d", got)
	}
	p, err := New(Config{})
	if err != nil || p.maxRetries != d.MaxRetries || p.baseDelay != d.BaseDelay || p.maxDelay != d.MaxDelay {
		t.Errorf("New(Config{}) = %v (%v), want WithDefaults' values", p, err)
	}
}

// Lock contention is no outage: its retries have their own cap
// (ContentionRetries, default 10) and draw nothing from the budget, which
// an outage's retries still drain.
func TestContentionRetriesApartFromTheBudget(t *testing.T) {
	deadlock := &classErr{Class{Retryable: true, Phase: NotApplied, Code: "40P01", Kind: Contention}}
	reset := &classErr{Class{Retryable: true, Phase: NotSent, Code: "reset", Kind: Unavailable}}
	b, err := NewBudget(BudgetConfig{Max: 1, Floor: NoFloor}) // one token, no refill
	if err != nil {
		t.Fatal(err)
	}
	p, _ := newTestPolicy(t, Config{Budget: b})
	errs := make([]error, 10)
	for i := range errs {
		errs[i] = deadlock
	}
	fn, calls := script(errs...)
	if err := p.Do(context.Background(), Write("pair", nil), fn); err != nil || *calls != 11 {
		t.Fatalf("got %v after %d calls, want success after 11 (10 contention retries)", err, *calls)
	}
	if s := p.Stats(); s.BudgetExhausted != 0 || s.BudgetTokens < 1 {
		t.Errorf("contention drew on the budget: %+v", s)
	}
	fn, calls = script(append(errs, deadlock)...)
	if err := p.Do(context.Background(), Write("pair", nil), fn); !errors.Is(err, ErrRetriesExhausted) || *calls != 11 {
		t.Errorf("11 deadlocks: got %v after %d calls, want ErrRetriesExhausted after 11", err, *calls)
	}
	// An outage's retries are capped by MaxRetries and paid from the budget.
	fn, calls = script(reset, reset, reset)
	if err := p.Do(context.Background(), Write("w", nil), fn); !errors.Is(err, ErrBudgetExhausted) || *calls != 2 {
		t.Errorf("outage: got %v after %d calls, want ErrBudgetExhausted after 2 (one token)", err, *calls)
	}
	if d := (Config{}).WithDefaults(); d.ContentionRetries != 10 {
		t.Errorf("default ContentionRetries %d, want 10", d.ContentionRetries)
	}
}
