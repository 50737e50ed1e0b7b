package pgxretry

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/internal/dbtest"
)

// A COMMIT whose wait for the synchronous standby was cancelled committed
// on the primary alone: pg_xact_status says committed, yet a failover would
// lose it. committed must not say so until the standby has it
// (ErrNotReplicated while it is stalled), as package postgres's verifier.
func TestCommittedWaitsForSyncStandby(t *testing.T) {
	r := dbtest.StartPostgresReplica(t, dbtest.ReplicaOptions{Sync: true})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, r.Primary.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	p, err := sqlretry.New(sqlretry.Config{})
	if err != nil {
		t.Fatal(err)
	}
	w := New(pool, p)
	if _, err := pool.Exec(ctx, "CREATE TABLE t (v int)"); err != nil {
		t.Fatal(err)
	}
	if err := r.StopReceiving(ctx); err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO t VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	mark, err := markTx(ctx, tx)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- tx.Commit(ctx) }()
	cancelSyncWait(t, ctx, pool)
	<-done
	ok, err := w.committed(ctx, mark)
	if ok || !errors.Is(err, ErrNotReplicated) {
		t.Errorf("committed = %v, %v; want false, ErrNotReplicated for a COMMIT the stalled standby lacks", ok, err)
	}
}

// cancelSyncWait cancels the wait of the COMMIT waiting for the standby.
func cancelSyncWait(t *testing.T, ctx context.Context, pool *pgxpool.Pool) {
	t.Helper()
	for {
		var cancelled bool
		err := pool.QueryRow(ctx, "SELECT coalesce(bool_or(pg_cancel_backend(pid)), false) FROM pg_stat_activity WHERE wait_event = 'SyncRep'").Scan(&cancelled)
		if err != nil {
			t.Fatal(err)
		}
		if cancelled {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal("no COMMIT waited for the synchronous standby")
		case <-time.After(10 * time.Millisecond):
		}
	}
}
