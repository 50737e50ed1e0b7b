package pgxretry

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/internal/dbtest"
)

// A COMMIT whose wait for the synchronous standby was cancelled committed
// on the primary alone: pg_xact_status says committed, yet a failover would
// lose it. committed must not say so until the standby has it
// (ErrNotReplicated while it is stalled), as package postgres's verifier.
func TestCommittedWaitsForSyncStandby(t *testing.T) {
	ctx, w, mark := committedOnPrimaryAlone(t, nil)
	ok, err := w.committed(ctx, mark)
	if ok || !errors.Is(err, ErrNotReplicated) {
		t.Errorf("committed = %v, %v; want false, ErrNotReplicated for a COMMIT the stalled standby lacks", ok, err)
	}
}

// TestBarrierCutShortByCancelRequest: the barrier that proves a committed
// transaction is on the synchronous standbys is a COMMIT of its own,
// bounded by a deadline. With pgx's CancelRequestContextWatcherHandler (a
// pool option users set to keep connections alive across cancelled
// queries), the deadline sends a cancel request, and a COMMIT whose wait
// for the standbys is cancelled returns success with only a warning: the
// barrier must not be taken for proof then (ErrNotReplicated, not true).
func TestBarrierCutShortByCancelRequest(t *testing.T) {
	ctx, w, mark := committedOnPrimaryAlone(t, func(cfg *pgxpool.Config) {
		cfg.ConnConfig.BuildContextWatcherHandler = func(pc *pgconn.PgConn) ctxwatch.Handler {
			return &pgconn.CancelRequestContextWatcherHandler{Conn: pc, DeadlineDelay: 10 * time.Second}
		}
	})
	ok, err := w.committed(ctx, mark)
	if ok || !errors.Is(err, ErrNotReplicated) {
		t.Errorf("committed = %v, %v; want false, ErrNotReplicated: the barrier's wait was cancelled, the standby lacks the transaction", ok, err)
	}
}

// committedOnPrimaryAlone starts a primary with a synchronous standby,
// stops the standby receiving, and commits a marked transaction whose wait
// for it is cancelled: committed on the primary alone. It returns a
// wrapper over a pool of the primary (its config edited by edit, if set)
// and the transaction's mark.
func committedOnPrimaryAlone(t *testing.T, edit func(*pgxpool.Config)) (context.Context, *Pool, string) {
	t.Helper()
	r := dbtest.StartPostgresReplica(t, dbtest.ReplicaOptions{Sync: true})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	cfg, err := pgxpool.ParseConfig(r.Primary.DSN())
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(cfg)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	p, err := sqlretry.New(sqlretry.Config{})
	if err != nil {
		t.Fatal(err)
	}
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
	return ctx, New(pool, p), mark
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
