package pgxretry_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/faults/proxy"
)

// TestMarkerTenantSearchPath: the marker INSERT sent with COMMIT named the
// table unqualified, so it resolved through the transaction's search_path,
// while the settle reads and tombstones through another session's. A
// transaction that set its own search_path (schema per tenant) marked
// tenant.sqlretry_commit_marks; after its COMMIT's reply was cut, the
// settle found no key in public.sqlretry_commit_marks, its tombstone landed
// there, and RunTx ran the committed transaction again: two rows for one
// call. The verifier now names the table qualified by the pool's schema.
func TestMarkerTenantSearchPath(t *testing.T) {
	f, px := markerFixture(t, nil)
	searchPathRun(t, f, px)
}

// TestXactTenantSearchPath: the same run settled by pg_xact_status
// (no WithMarker) applies once: the double is the marker's.
func TestXactTenantSearchPath(t *testing.T) {
	f, px := cutFixture(t)
	searchPathRun(t, f, px)
}

func searchPathRun(t *testing.T, f *fixture, px *proxy.Proxy) {
	f.exec(t, "BEGIN; CREATE SCHEMA tenant; SET LOCAL search_path TO tenant; "+
		"CREATE TABLE sqlretry_commit_marks (mark_key char(32) PRIMARY KEY, created_at bigint NOT NULL, tombstone smallint NOT NULL); COMMIT")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	attempts := 0
	err := f.w.RunTx(ctx, sqlretry.Write("tenant", nil), pgx.TxOptions{}, func(ctx context.Context, tx pgx.Tx) error {
		attempts++
		if _, err := tx.Exec(ctx, "SET LOCAL search_path TO tenant, public"); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, insertItem, 1, "tenant"); err != nil {
			return err
		}
		if attempts > 1 {
			return px.SetFault(proxy.Fault{Mode: proxy.Pass})
		}
		return px.SetFault(proxy.Fault{Mode: proxy.CutAfterCommit})
	})
	_ = px.SetFault(proxy.Fault{Mode: proxy.Pass})
	if n := f.count(t, "SELECT count(*) FROM public.items WHERE call_id = 1"); n != 1 {
		t.Errorf("%d rows after %d attempts (RunTx: %v); want 1: a committed transaction ran again", n, attempts, err)
	}
}

// TestMarkerReadOnlyByStatement: a transaction made read-only by a
// statement (SET TRANSACTION READ ONLY, or default_transaction_read_only)
// rather than pgx.ReadOnly gets the marker INSERT, which fails (25006): a
// RunTx that succeeds without WithMarker failed with it. Now the attempt,
// which applied nothing, runs again marked by pg_xact_status.
func TestMarkerReadOnlyByStatement(t *testing.T) {
	f, _ := markerFixture(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := f.w.RunTx(ctx, sqlretry.Write("ro", nil), pgx.TxOptions{}, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "SET TRANSACTION READ ONLY")
		return err
	})
	if err != nil {
		t.Errorf("RunTx of a read-only transaction: %v; want nil (as without WithMarker)", err)
	}
}

// TestMarkerDeferredAtCommit: a deferred
// constraint that fails at the marked COMMIT (after the INSERT's reply) is
// returned as the server's error, nothing committed, no second attempt,
// and the pool's connections are back outside a transaction.
func TestMarkerDeferredAtCommit(t *testing.T) {
	f, _ := markerFixture(t, nil)
	f.exec(t, "CREATE TABLE parent (id int PRIMARY KEY); CREATE TABLE child (pid int REFERENCES parent DEFERRABLE INITIALLY DEFERRED)")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	attempts := 0
	err := f.w.RunTx(ctx, sqlretry.Write("deferred", nil), pgx.TxOptions{}, func(ctx context.Context, tx pgx.Tx) error {
		attempts++
		if _, err := tx.Exec(ctx, insertItem, 1, "deferred"); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "INSERT INTO child VALUES (7)")
		return err
	})
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "23503" || attempts != 1 {
		t.Errorf("RunTx: %v after %d attempts; want 23503 after 1", err, attempts)
	}
	if n := f.count(t, "SELECT count(*) FROM items WHERE call_id = 1") + f.count(t, "SELECT count(*) FROM sqlretry_commit_marks"); n != 0 {
		t.Errorf("%d rows committed; want 0", n)
	}
	if n := f.count(t, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND state LIKE 'idle in transaction%'"); n != 0 {
		t.Errorf("%d sessions idle in a transaction", n)
	}
}

// TestMarkerFailedTxBody: fn swallows an error, so
// the transaction is aborted ('E') when it returns nil: RunTx takes
// tx.Commit's path and returns pgx.ErrTxCommitRollback, no marker, no run
// again.
func TestMarkerFailedTxBody(t *testing.T) {
	f, _ := markerFixture(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	attempts := 0
	err := f.w.RunTx(ctx, sqlretry.Write("aborted", nil), pgx.TxOptions{}, func(ctx context.Context, tx pgx.Tx) error {
		attempts++
		_, _ = tx.Exec(ctx, insertItem, 1, "aborted")
		_, _ = tx.Exec(ctx, "SELECT 1/0")
		return nil
	})
	if !errors.Is(err, pgx.ErrTxCommitRollback) || attempts != 1 {
		t.Errorf("RunTx: %v after %d attempts; want ErrTxCommitRollback after 1", err, attempts)
	}
	if n := f.count(t, "SELECT count(*) FROM items") + f.count(t, "SELECT count(*) FROM sqlretry_commit_marks"); n != 0 {
		t.Errorf("%d rows committed; want 0", n)
	}
}
