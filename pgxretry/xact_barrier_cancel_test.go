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

// TestBarrierCutShortByCancelRequest: the barrier that proves a committed
// transaction is on the synchronous standbys is a COMMIT of its own,
// bounded by a deadline. With pgx's CancelRequestContextWatcherHandler (a
// pool option users set to keep connections alive across cancelled
// queries), the deadline sends a cancel request, and a COMMIT whose wait
// for the standbys is cancelled returns success with only a warning: the
// barrier must not be taken for proof then (ErrNotReplicated, not true).
func TestBarrierCutShortByCancelRequest(t *testing.T) {
	r := dbtest.StartPostgresReplica(t, dbtest.ReplicaOptions{Sync: true})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg, err := pgxpool.ParseConfig(r.Primary.DSN())
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.BuildContextWatcherHandler = func(pc *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.CancelRequestContextWatcherHandler{Conn: pc, DeadlineDelay: 10 * time.Second}
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
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
		t.Errorf("committed = %v, %v; want false, ErrNotReplicated: the barrier's wait was cancelled, the standby lacks the transaction", ok, err)
	}
}
