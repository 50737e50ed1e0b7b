package postgres

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/sqlretry/sqlretry/internal/dbtest"
)

// TestCommitVerifierSyncStandby: with synchronous replication a COMMIT
// returns only once the standby has the transaction, but a COMMIT whose wait
// for the standby is cancelled (lib/pq sends a cancel request when the
// context ends; pg_cancel_backend, pg_terminate_backend) commits locally
// anyway: pg_xact_status then says committed for a transaction the standby
// lacks, and a failover loses it. Committed must not call it applied before
// the synchronous standby has it.
func TestCommitVerifierSyncStandby(t *testing.T) {
	r, ctx, db := syncPrimary(t)
	// While the standby follows, a committed transaction is settled (a
	// long MaxWait: the standby's confirmation must not race a timer).
	follow := CommitVerifier{MaxWait: 30 * time.Second}
	tx, mark := markedInsert(t, ctx, db, follow, 1)
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if ok, err := follow.Committed(ctx, db, mark); !ok || err != nil {
		t.Fatalf("the standby follows: got %v, %v; want true, nil", ok, err)
	}
	first := mark
	// A pool that reaches the standby gets no answer: it is in recovery.
	standby, err := sql.Open("pgx", r.Standby.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer standby.Close()
	if ok, err := follow.Committed(ctx, standby, mark); ok || !errors.Is(err, ErrStandby) {
		t.Errorf("asked on the standby: got %v, %v; want false, ErrStandby", ok, err)
	}

	// The standby stops receiving; a COMMIT waits for it, and is cancelled.
	v := CommitVerifier{MaxWait: 500 * time.Millisecond}
	if err := r.StopReceiving(ctx); err != nil {
		t.Fatal(err)
	}
	tx, mark = markedInsert(t, ctx, db, v, 2)
	done := make(chan error, 1)
	go func() { done <- tx.Commit() }()
	cancelSyncWait(t, ctx, db)
	<-done // committed locally, with a warning
	ok, err := v.Committed(ctx, db, mark)
	t.Logf("a COMMIT committed locally, not on the synchronous standby: Committed = %v, %v", ok, err)
	if ok || !errors.Is(err, ErrNotReplicated) {
		t.Errorf("Committed = %v, %v for a transaction the synchronous standby does not have; want false, ErrNotReplicated", ok, err)
	}

	// The proof: the promoted standby lacks it.
	promoted := promoteWithout(t, ctx, r, 2)
	// Even the transaction the standby has gets no answer from it once
	// promoted: a new timeline.
	if ok, err := v.Committed(ctx, promoted, first); ok || !errors.Is(err, ErrHistoryChanged) {
		t.Errorf("asked on the promoted standby: got %v, %v; want false, ErrHistoryChanged", ok, err)
	}
}

// syncPrimary starts a primary with a synchronous standby and returns it,
// a context for the test and a pool of the primary with a table t (v int).
func syncPrimary(t *testing.T) (*dbtest.PostgresReplica, context.Context, *sql.DB) {
	t.Helper()
	r := dbtest.StartPostgresReplica(t, dbtest.ReplicaOptions{Sync: true})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	db, err := sql.Open("pgx", r.Primary.DSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := db.ExecContext(ctx, "CREATE TABLE t (v int)"); err != nil {
		t.Fatal(err)
	}
	return r, ctx, db
}

// promoteWithout stops the primary at once, promotes the standby, checks
// that it lacks the row of value in t, and returns a pool on it.
func promoteWithout(t *testing.T, ctx context.Context, r *dbtest.PostgresReplica, value int) *sql.DB {
	t.Helper()
	if err := r.Primary.StopImmediate(); err != nil {
		t.Fatal(err)
	}
	if err := r.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	promoted, err := sql.Open("pgx", r.Standby.DSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { promoted.Close() })
	var n int
	if err := promoted.QueryRowContext(ctx, "SELECT count(*) FROM t WHERE v = $1", value).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("the promoted standby holds the row written while it did not receive (%d rows): the test proves nothing", n)
	}
	return promoted
}

// markedInsert opens a transaction on db, inserts value and marks it.
func markedInsert(t *testing.T, ctx context.Context, db *sql.DB, v CommitVerifier, value int) (*sql.Tx, string) {
	t.Helper()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO t VALUES ($1)", value); err != nil {
		t.Fatal(err)
	}
	mark, err := v.Mark(ctx, tx)
	if err != nil {
		t.Fatal(err)
	}
	return tx, mark
}

// cancelSyncWait waits until a backend waits for the synchronous standby
// and cancels its wait, as a client's cancel request does.
func cancelSyncWait(t *testing.T, ctx context.Context, db *sql.DB) {
	t.Helper()
	for {
		var cancelled bool
		err := db.QueryRowContext(ctx, "SELECT coalesce(bool_or(pg_cancel_backend(pid)), false) FROM pg_stat_activity WHERE wait_event = 'SyncRep'").Scan(&cancelled)
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
