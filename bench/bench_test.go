package bench

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"
)

// cpuTime returns the CPU time the process has used, user and system.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// measure runs loop and reports, beside ns/op, the process's CPU time per
// op: on a shared machine the wall clock counts the time other processes
// held the CPU, the CPU time does not. Under RunParallel it is the CPU spent
// per op across all goroutines, so it does not shrink with GOMAXPROCS.
func measure(b *testing.B, loop func()) {
	b.ReportAllocs()
	start := cpuTime(b)
	loop()
	if b.N > 0 {
		b.ReportMetric(float64(cpuTime(b)-start)/float64(b.N), "cpu-ns/op")
	}
}

// okOp is the operation of the success scenarios.
//
//go:noinline
func okOp(ctx context.Context) error { return nil }

// flaky fails its first fails calls, then succeeds. Reset n before each call.
type flaky struct {
	fails, n int
}

func (f *flaky) op(ctx context.Context) error {
	f.n++
	if f.n <= f.fails {
		return ErrTransient
	}
	return nil
}

// callCtx is the per-request context every scenario passes: made once,
// outside the loop, and handed to each call.
func callCtx(b *testing.B) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	return ctx
}

// BenchmarkSuccess is scenario 1: the first attempt succeeds.
func BenchmarkSuccess(b *testing.B) {
	ctx := callCtx(b)
	for _, r := range SuccessRunners() {
		b.Run(r.Name, func(b *testing.B) {
			measure(b, func() {
				for b.Loop() {
					if err := r.Run(ctx, okOp); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

// BenchmarkSuccessParallel is scenario 2: scenario 1 under b.RunParallel,
// every goroutine sharing the runner and the caller's context.
func BenchmarkSuccessParallel(b *testing.B) {
	ctx := callCtx(b)
	for _, r := range SuccessRunners() {
		b.Run(r.Name, func(b *testing.B) {
			measure(b, func() {
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if err := r.Run(ctx, okOp); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		})
	}
}

// BenchmarkFailTwice is scenario 3: two failures, then a success, with
// 1 ns backoff settings (see RetryRunners).
func BenchmarkFailTwice(b *testing.B) {
	ctx := callCtx(b)
	for _, r := range RetryRunners() {
		b.Run(r.Name, func(b *testing.B) {
			f := &flaky{fails: 2}
			fn := f.op
			measure(b, func() {
				for b.Loop() {
					f.n = 0
					if err := r.Run(ctx, fn); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

// BenchmarkCommandTimeout is scenario 4: a first-try success under a 30 s
// per-attempt timeout.
func BenchmarkCommandTimeout(b *testing.B) {
	ctx := callCtx(b)
	for _, r := range TimeoutRunners() {
		b.Run(r.Name, func(b *testing.B) {
			measure(b, func() {
				for b.Loop() {
					if err := r.Run(ctx, okOp); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

type ctxKey struct{}

// TestRunnersCallCount checks that every runner of every scenario calls the
// operation as often as the comparison assumes, passes the caller's context
// through to it, and stops after 3 retries: the benchmarks compare equal work.
func TestRunnersCallCount(t *testing.T) {
	scenarios := []struct {
		name    string
		runners []Named
		fails   int   // failures before the operation succeeds
		want    int   // calls
		wantErr error // nil, or an error the result must match
	}{
		{"success", SuccessRunners(), 0, 1, nil},
		{"command-timeout", TimeoutRunners(), 0, 1, nil},
		{"fail-twice", RetryRunners(), 2, 3, nil},
		{"always-fail", RetryRunners(), 1000, Retries + 1, ErrTransient},
	}
	for _, sc := range scenarios {
		for _, r := range sc.runners {
			t.Run(sc.name+"/"+r.Name, func(t *testing.T) {
				ctx := context.WithValue(t.Context(), ctxKey{}, "caller")
				f := &flaky{fails: sc.fails}
				foreign := 0
				err := r.Run(ctx, func(ctx context.Context) error {
					if ctx.Value(ctxKey{}) != "caller" {
						foreign++
					}
					return f.op(ctx)
				})
				if f.n != sc.want {
					t.Errorf("calls: got %d, want %d", f.n, sc.want)
				}
				if foreign != 0 {
					t.Errorf("calls without the caller's context: got %d, want 0", foreign)
				}
				switch {
				case sc.wantErr == nil && err != nil:
					t.Errorf("err: got %v, want nil", err)
				case sc.wantErr != nil && !errors.Is(err, sc.wantErr):
					t.Errorf("err: got %v, want one matching %v", err, sc.wantErr)
				}
			})
		}
	}
}

// TestTimeoutRunnersBoundEachAttempt checks that scenario 4's runners really
// bound each attempt and retry after the timeout fires: the first attempt
// blocks until its context is done, the second succeeds.
func TestTimeoutRunnersBoundEachAttempt(t *testing.T) {
	for _, r := range TimeoutRunnersWith(Tiny, time.Millisecond) {
		t.Run(r.Name, func(t *testing.T) {
			calls := 0
			err := r.Run(t.Context(), func(ctx context.Context) error {
				calls++
				if calls > 1 {
					return nil
				}
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(10 * time.Second):
					return errors.New("the attempt was not bounded by the timeout")
				}
			})
			if err != nil {
				t.Errorf("err: got %v, want nil", err)
			}
			if calls != 2 {
				t.Errorf("calls: got %d, want 2", calls)
			}
		})
	}
}
