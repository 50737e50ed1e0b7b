package sqlretry

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

//go:noinline
func okOp(ctx context.Context) error { return nil }

// handLoop is the floor the issue measures against: a minimal generic retry
// loop that checks the context and calls the operation.
func handLoop[T any](ctx context.Context, attempts int, fn func(context.Context) (T, error)) (T, error) {
	var v T
	var err error
	for i := 0; i < attempts; i++ {
		if err = ctx.Err(); err != nil {
			return v, err
		}
		if v, err = fn(ctx); err == nil {
			return v, nil
		}
	}
	return v, err
}

func okValue(ctx context.Context) (int, error) { return 1, okOp(ctx) }

func benchPolicy(b *testing.B, c Config) *Policy {
	p, err := New(c)
	if err != nil {
		b.Fatal(err)
	}
	return p
}

// BenchmarkDo measures a first-try success with the default budget on and no
// CommandTimeout, beside the hand-written loop, serial and parallel.
func BenchmarkDo(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	op := Idempotent("bench")
	p := benchPolicy(b, Config{})
	b.Run("handloop", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			handLoop(ctx, 4, okValue)
		}
	})
	b.Run("sqlretry", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			p.Do(ctx, op, okOp)
		}
	})
	b.Run("handloop-parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				handLoop(ctx, 4, okValue)
			}
		})
	})
	b.Run("sqlretry-parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				p.Do(ctx, op, okOp)
			}
		})
	})
	pb := benchPolicy(b, Config{Breaker: mustBreaker(b)})
	b.Run("sqlretry-breaker-parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pbb *testing.PB) {
			for pbb.Next() {
				pb.Do(ctx, op, okOp)
			}
		})
	})
	pv := benchPolicy(b, Config{})
	b.Run("DoValue", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			DoValue(ctx, pv, op, okValue)
		}
	})
}

func mustBreaker(b *testing.B) *Breaker {
	br, err := NewBreaker(BreakerConfig{})
	if err != nil {
		b.Fatal(err)
	}
	return br
}

// BenchmarkDoCommandTimeout measures a first-try success with a per-attempt
// command timeout: a context.WithTimeout per attempt.
func BenchmarkDoCommandTimeout(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	op := Idempotent("bench")
	p := benchPolicy(b, Config{CommandTimeout: 30 * time.Second})
	b.ReportAllocs()
	for b.Loop() {
		p.Do(ctx, op, okOp)
	}
}

// BenchmarkClassifyNeutral measures the engine-neutral classifier on a
// transient error and on a foreign one, the fallback of every engine.
func BenchmarkClassifyNeutral(b *testing.B) {
	cases := map[string]error{
		"bad-conn": fmt.Errorf("pgx: %w", driver.ErrBadConn),
		"reset":    &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)},
		"foreign":  fmt.Errorf("wrapped: %w", errors.New("something else")),
	}
	for name, err := range cases {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				ClassifyNeutral(err)
			}
		})
	}
}
