package taskstore

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/sqlretry/sqlretry/faults"
)

// TestClaimLeaseLostBeforeSettled: the claim's COMMIT lands and its reply is
// lost; before the verify reads, the lease expires and Recover takes the
// task back. Claim reports ErrLeaseLost, and the ledger records the claim as
// applied, so Check finds nothing misreported.
func TestClaimLeaseLostBeforeSettled(t *testing.T) {
	ctx := context.Background()
	name, dsn := driverFor(t, SQLite)
	clk := newClock()
	other, err := sql.Open(name, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	healer, err := New(other, SQLite, Options{Now: clk.Now, LeaseTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := healer.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	recovered := 0
	plan := faults.MustPlan(faults.Config{
		Rules: []faults.Rule{
			{Kind: faults.CommitAppliedReplyLost, Op: faults.OpCommit},
			// The verify's first read waits while the lease expires and
			// Recover returns the task to the queue.
			{Kind: faults.Latency, Op: faults.OpQuery, Match: "SELECT task_id FROM status_audit", Delay: time.Millisecond},
		},
		Sleep: func(ctx context.Context, _ time.Duration) error {
			clk.Advance(time.Hour)
			n, err := healer.Recover(ctx)
			recovered += n
			return err
		},
	})
	db, err := faults.Open(name, dsn, plan)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	led := NewLedger()
	s, err := New(db, SQLite, Options{Now: clk.Now, LeaseTTL: time.Second, Ledger: led, Policy: fastPolicy(t, SQLite, 2*time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	plan.Disable()
	if _, err := s.Persist(ctx, Task{}); err != nil {
		t.Fatal(err)
	}
	plan.Enable()
	l, err := s.Claim(ctx, "w")
	plan.Disable()
	if l != nil || !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("Claim: got (%v, %v), want (nil, ErrLeaseLost)", l, err)
	}
	if recovered != 1 {
		t.Fatalf("Recover moved %d tasks during the verify, want 1: the test no longer loses the lease", recovered)
	}
	r, err := s.Check(ctx, led)
	if err != nil {
		t.Fatal(err)
	}
	if r.Misreported != 0 || !r.Clean() {
		t.Errorf("check: got %v\n%v, want clean (misreported 0)", r, r.Problems)
	}
}
