package taskstore

import (
	"context"
	"testing"
	"time"
)

// The happy path's cost: a first-try success runs no verify and no extra
// read. Compare safe and naive: the safe store's consent costs nothing
// until a failure.
func BenchmarkPersist(b *testing.B) {
	for _, naive := range []bool{false, true} {
		b.Run(map[bool]string{false: "safe", true: "naive"}[naive], func(b *testing.B) {
			s, _ := newStore(b, SQLite, nil, Options{})
			s.naive = naive
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.Persist(ctx, Task{Payload: []byte("x")}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkWork: Claim, Start, handler, Complete: three transactions.
func BenchmarkWork(b *testing.B) {
	s, _ := newStore(b, SQLite, nil, Options{LeaseTTL: time.Hour})
	ctx := context.Background()
	h := func(context.Context, Task) error { return nil }
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		if _, err := s.Persist(ctx, Task{}); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if ran, err := s.Work(ctx, "w", h, 0); err != nil || !ran {
			b.Fatalf("work: %v %v", ran, err)
		}
	}
}
