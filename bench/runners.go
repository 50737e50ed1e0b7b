package bench

import (
	"context"
	"errors"
	"time"

	"github.com/avast/retry-go/v4"
	"github.com/cenkalti/backoff/v5"
	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/budget"
	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/failsafe-go/failsafe-go/retrypolicy"
	"github.com/failsafe-go/failsafe-go/timeout"
	goretry "github.com/sethvargo/go-retry"

	"github.com/sqlretry/sqlretry"
)

// Retries is the number of retries every runner allows after the first
// attempt: 4 attempts in all.
const Retries = 3

// Runner runs fn under one library's retry loop with the caller's ctx and
// returns the final error. Each Runner is built once, like a Policy, and is
// safe for concurrent use.
type Runner func(ctx context.Context, fn func(context.Context) error) error

// Named is a Runner with the name its benchmark and test report.
type Named struct {
	Name string
	Run  Runner
}

// Delays are the backoff settings a scenario gives every library.
type Delays struct {
	Base, Max time.Duration
}

var (
	// Production is the scenario 1 and 2 setting: sqlretry's defaults.
	Production = Delays{Base: 100 * time.Millisecond, Max: 5 * time.Second}
	// Tiny is the scenario 3 setting: the smallest base every library accepts
	// (sethvargo's NewExponential panics on 0), so the retries cost CPU only.
	Tiny = Delays{Base: time.Nanosecond, Max: time.Nanosecond}
)

// ErrTransient is the error the flaky operations return. Every runner in the
// retry scenarios treats it as retryable.
var ErrTransient = errors.New("bench: transient failure")

// retryAll is the sqlretry classifier for the retry scenarios: every error is
// retryable and provably not applied, which is what the general-purpose
// libraries assume of every error.
var retryAll = sqlretry.ClassifierFunc(func(error) sqlretry.Class {
	return sqlretry.Class{Retryable: true, Phase: sqlretry.NotApplied, Code: "bench"}
})

// HandLoop is the floor: a minimal retry loop that checks the caller's
// context and calls the operation, with no backoff.
func HandLoop(ctx context.Context, fn func(context.Context) error) error {
	var err error
	for range Retries + 1 {
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		if err = fn(ctx); err == nil {
			return nil
		}
	}
	return err
}

// SQLRetryConfig returns the sqlretry Config for d: 3 retries, full jitter.
func SQLRetryConfig(d Delays) sqlretry.Config {
	return sqlretry.Config{MaxRetries: Retries, BaseDelay: d.Base, MaxDelay: d.Max, Jitter: sqlretry.FullJitter}
}

// SQLRetry returns a runner for a Policy built from c, running each call as
// p.Do(ctx, sqlretry.Idempotent("x"), fn).
func SQLRetry(c sqlretry.Config) Runner {
	p, err := sqlretry.New(c)
	if err != nil {
		panic(err)
	}
	return func(ctx context.Context, fn func(context.Context) error) error {
		return p.Do(ctx, sqlretry.Idempotent("x"), fn)
	}
}

// failsafeRetry returns failsafe-go's retry policy for d: 3 retries,
// exponential backoff, ±50% jitter (it has no full jitter).
func failsafeRetry(d Delays, b budget.Budget) retrypolicy.RetryPolicy[any] {
	rb := retrypolicy.NewBuilder[any]().
		WithMaxRetries(Retries).
		WithBackoff(d.Base, d.Max).
		WithJitterFactor(0.5).
		ReturnLastFailure()
	if b != nil {
		rb = rb.WithBudget(b)
	}
	return rb.Build()
}

// failsafeRunner runs fn through an executor built once, given the caller's
// ctx per call with WithContext.
func failsafeRunner(ex failsafe.Executor[any]) Runner {
	return func(ctx context.Context, fn func(context.Context) error) error {
		return ex.WithContext(ctx).RunWithExecution(func(e failsafe.Execution[any]) error {
			return fn(e.Context())
		})
	}
}

// Failsafe is failsafe-go's retry policy alone.
func Failsafe(d Delays) Runner {
	return failsafeRunner(failsafe.With[any](failsafeRetry(d, nil)))
}

// FailsafeBudgetBreaker is failsafe-go's retry policy with its retry budget
// (defaults: 20% of in-flight executions, at least 3) around a circuit
// breaker that opens after 5 consecutive failures.
func FailsafeBudgetBreaker(d Delays) Runner {
	cb := circuitbreaker.NewBuilder[any]().WithFailureThreshold(5).WithDelay(5 * time.Second).Build()
	return failsafeRunner(failsafe.With[any](failsafeRetry(d, budget.New()), cb))
}

// FailsafeTimeout is failsafe-go's retry policy around a per-attempt timeout
// policy of t.
func FailsafeTimeout(d Delays, t time.Duration) Runner {
	return failsafeRunner(failsafe.With[any](failsafeRetry(d, nil), timeout.New[any](t)))
}

// Cenkalti is cenkalti/backoff/v5 Retry with a fresh ExponentialBackOff per
// call (it is stateful): 4 tries, ×2, ±50% randomisation (it has no full
// jitter).
func Cenkalti(d Delays) Runner {
	return func(ctx context.Context, fn func(context.Context) error) error {
		b := &backoff.ExponentialBackOff{
			InitialInterval:     d.Base,
			RandomizationFactor: 0.5,
			Multiplier:          2,
			MaxInterval:         d.Max,
		}
		_, err := backoff.Retry(ctx, func() (struct{}, error) {
			return struct{}{}, fn(ctx)
		}, backoff.WithBackOff(b), backoff.WithMaxTries(Retries+1))
		return err
	}
}

// Avast is avast/retry-go v4 Do with the caller's ctx as retry.Context: 4
// attempts, exponential backoff with full jitter, last error only. The
// options that do not depend on the call are built once.
func Avast(d Delays) Runner {
	attempts := retry.Attempts(Retries + 1)
	delay := retry.Delay(d.Base)
	maxDelay := retry.MaxDelay(d.Max)
	jitter := retry.DelayType(retry.FullJitterBackoffDelay)
	last := retry.LastErrorOnly(true)
	return func(ctx context.Context, fn func(context.Context) error) error {
		return retry.Do(func() error { return fn(ctx) },
			retry.Context(ctx), attempts, delay, maxDelay, jitter, last)
	}
}

// Sethvargo is sethvargo/go-retry Do with a fresh backoff per call (it is
// stateful): exponential, capped, full jitter, 3 retries. Errors are marked
// retryable, as its API requires.
func Sethvargo(d Delays) Runner {
	return func(ctx context.Context, fn func(context.Context) error) error {
		b := goretry.NewExponential(d.Base)
		b = goretry.WithCappedDuration(d.Max, b)
		b = goretry.WithFullJitter(b)
		b = goretry.WithMaxRetries(Retries, b)
		return goretry.Do(ctx, b, func(ctx context.Context) error {
			if err := fn(ctx); err != nil {
				return goretry.RetryableError(err)
			}
			return nil
		})
	}
}

// SuccessRunners are scenarios 1 and 2: a first-try success, every library
// with its production-like settings.
func SuccessRunners() []Named {
	br, err := sqlretry.NewBreaker(sqlretry.BreakerConfig{})
	if err != nil {
		panic(err)
	}
	withBreaker := SQLRetryConfig(Production)
	withBreaker.Breaker = br
	return []Named{
		{"handloop", HandLoop},
		{"sqlretry", SQLRetry(SQLRetryConfig(Production))},
		{"sqlretry-breaker", SQLRetry(withBreaker)},
		{"failsafe-retry", Failsafe(Production)},
		{"failsafe-retry-budget-breaker", FailsafeBudgetBreaker(Production)},
		{"cenkalti-v5", Cenkalti(Production)},
		{"avast-v4", Avast(Production)},
		{"sethvargo", Sethvargo(Production)},
	}
}

// RetryRunners are scenario 3: fail twice, then succeed, with 1 ns delays.
//
// sqlretry runs without a budget (NoBudget), as the other libraries do; the
// "-budget" row uses a Budget of 1e9 tokens, never exhausted in a benchmark,
// to show what a withdrawal costs. Full jitter on a 1 ns cap rounds every
// wait to 0, which sqlretry skips without a timer; the "-nojitter" row waits
// the 1 ns on a real timer, as the other libraries do for any wait.
func RetryRunners() []Named {
	base := SQLRetryConfig(Tiny)
	base.Classifier = retryAll
	base.Budget = sqlretry.NoBudget

	noJitter := base
	noJitter.Jitter = sqlretry.NoJitter

	big, err := sqlretry.NewBudget(sqlretry.BudgetConfig{Max: 1e9})
	if err != nil {
		panic(err)
	}
	withBudget := base
	withBudget.Budget = big

	return []Named{
		{"handloop", HandLoop},
		{"sqlretry", SQLRetry(base)},
		{"sqlretry-nojitter", SQLRetry(noJitter)},
		{"sqlretry-budget", SQLRetry(withBudget)},
		{"failsafe-retry", Failsafe(Tiny)},
		{"cenkalti-v5", Cenkalti(Tiny)},
		{"avast-v4", Avast(Tiny)},
		{"sethvargo", Sethvargo(Tiny)},
	}
}

// CommandTimeout is the per-attempt timeout of scenario 4.
const CommandTimeout = 30 * time.Second

// TimeoutRunners are scenario 4: a first-try success under a per-attempt
// timeout of 30 s.
func TimeoutRunners() []Named { return TimeoutRunnersWith(Production, CommandTimeout) }

// TimeoutRunnersWith are scenario 4's runners with delays d and a per-attempt
// timeout of t.
func TimeoutRunnersWith(d Delays, t time.Duration) []Named {
	c := SQLRetryConfig(d)
	c.CommandTimeout = t
	return []Named{
		{"handloop-withtimeout", HandLoopTimeout(t)},
		{"sqlretry", SQLRetry(c)},
		{"failsafe-retry-timeout", FailsafeTimeout(d, t)},
	}
}

// HandLoopTimeout is the floor of scenario 4: [HandLoop] with a
// context.WithTimeout of t around each attempt, the standard library's cost.
func HandLoopTimeout(t time.Duration) Runner {
	return func(ctx context.Context, fn func(context.Context) error) error {
		var err error
		for range Retries + 1 {
			if cerr := ctx.Err(); cerr != nil {
				return cerr
			}
			actx, cancel := context.WithTimeout(ctx, t)
			err = fn(actx)
			cancel()
			if err == nil {
				return nil
			}
		}
		return err
	}
}
