package sqlretry

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"
)

// A COMMIT that failed, on the fake driver: it may have landed, it may have
// left its transaction open on the session, and it is never taken as done
// nor replayed. The real servers' cases are in
// commit_failure_integration_test.go (SQLite's busy COMMIT),
// galera_nonprimary_integration_test.go (a Galera node's refused COMMIT,
// 1047 and 1180), cancel_integration_test.go (a cancel while COMMIT is in
// flight) and tds_integration_test.go (SQL Server's lost COMMIT reply).

// A COMMIT or ROLLBACK in SQL text that failed is not taken as done: a
// ROLLBACK refused before it was sent (the request's context already
// cancelled: a deferred cleanup with the request's ctx) leaves the
// transaction open, so the next statement's deadlock is not replayed alone.
//
// History: found in the review of issue 12's changes (finding 3):
// Session.After applied a failed COMMIT or ROLLBACK as if it ran.
func TestFailedTextCommitOrRollbackLeavesTxOpen(t *testing.T) {
	for _, end := range []string{"ROLLBACK", "COMMIT"} {
		t.Run(end, func(t *testing.T) {
			srv := newFakeServer()
			db, _ := openPassthrough(t, srv, Config{})
			conn := heldConn(t, db)
			ctx := context.Background()
			if _, err := conn.ExecContext(ctx, "BEGIN"); err != nil {
				t.Fatal(err)
			}
			if _, err := conn.ExecContext(ctx, "ADD a 1"); err != nil {
				t.Fatal(err)
			}
			srv.addFaults(&fault{op: "exec", match: end, block: true}) // returns ctx.Err() without running
			cctx, cancel := context.WithCancel(ctx)
			cancel()
			if _, err := conn.ExecContext(cctx, end); err == nil {
				t.Fatalf("%s with a cancelled context succeeded", end)
			}
			srv.addFaults(&fault{op: "exec", match: "ADD n 1", err: errDeadlock})
			_, err := conn.ExecContext(ctx, "ADD n 1")
			if n := srv.count("exec ADD n 1"); n != 1 || err == nil {
				t.Errorf("got %v after %d executions, want the deadlock returned after 1: %s never ran, the transaction is open", err, n, end)
			}
		})
	}
}

// A COMMIT refused while the transaction stays open on the session (a
// Galera node out of the primary component answers 1047 to COMMIT;
// SQLite's busy COMMIT keeps the transaction) must not leave that session
// to the pool: RunTx ran the transaction again, the next BEGIN on the same
// session committed the first attempt, and the write was applied twice.
func TestRefusedCommitSessionNotReused(t *testing.T) {
	for _, viaConnector := range []bool{false, true} {
		srv := newFakeServer(&fault{op: "commit", err: errDeadlock, keepOpen: true})
		p := testPolicy(t, Config{})
		var db *sql.DB
		if viaConnector {
			db = sql.OpenDB(Connector(&fakeConnector{s: srv}, p))
		} else {
			db = sql.OpenDB(&fakeConnector{s: srv})
		}
		defer db.Close()
		db.SetMaxOpenConns(1)
		err := RunTx(context.Background(), db, p, Write("add", nil), nil, func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, "ADD n 1")
			return err
		})
		if err != nil {
			t.Fatalf("connector=%v: RunTx: %v; want the refused COMMIT retried", viaConnector, err)
		}
		if got := srv.get("n"); got != 1 {
			t.Errorf("connector=%v: n = %d, want 1 (applied once)", viaConnector, got)
		}
	}
}

// A command timeout that fires while COMMIT is in flight proves nothing: the
// COMMIT may have landed (pgx returns "timeout: context deadline exceeded"
// after sending it). It is settled, never replayed.
func TestRunTxCommandTimeoutDuringCommitIsAmbiguous(t *testing.T) {
	for _, applied := range []bool{true, false} {
		srv := newFakeServer(&fault{op: "commit", block: true, apply: applied})
		db := sql.OpenDB(&fakeConnector{s: srv})
		p := testPolicy(t, Config{CommandTimeout: 20 * time.Millisecond})
		err := RunTx(context.Background(), db, p, Write("t", nil), nil, addOne)
		if !errors.Is(err, ErrAmbiguous) {
			t.Errorf("applied=%v: got %v, want ErrAmbiguous", applied, err)
		}
		if got := srv.count("begin"); got != 1 {
			t.Errorf("applied=%v: %d transactions begun, want 1: an in-flight COMMIT was replayed", applied, got)
		}
		// With a verify, the outcome is settled either way, exactly once.
		srv2 := newFakeServer(&fault{op: "commit", block: true, apply: applied})
		db2 := sql.OpenDB(&fakeConnector{s: srv2})
		verify := func(ctx context.Context) (bool, error) { return srv2.get("n") >= 1, nil }
		if err := RunTx(context.Background(), db2, p, Write("t", verify), nil, addOne); err != nil {
			t.Errorf("applied=%v, verified: %v", applied, err)
		}
		if got := srv2.get("n"); got != 1 {
			t.Errorf("applied=%v, verified: n = %d, want 1", applied, got)
		}
		db.Close()
		db2.Close()
	}
}

// A COMMIT that fails with an error the classifier does not call transient,
// but whose outcome is unknown, is settled, not passed through as a plain
// error about a write that may have landed.
func TestRunTxUnknownPermanentCommitErrorIsSettled(t *testing.T) {
	errMAC := errors.New("tls: bad record MAC")
	srv := newFakeServer(&fault{op: "commit", err: errMAC, apply: true, kill: true})
	db := sql.OpenDB(&fakeConnector{s: srv})
	defer db.Close()
	p := testPolicy(t, Config{MaxRetries: 2})
	err := RunTx(context.Background(), db, p, Write("t", nil), nil, addOne)
	if !errors.Is(err, ErrAmbiguous) || !errors.Is(err, errMAC) {
		t.Fatalf("got %v, want ErrAmbiguous wrapping the COMMIT's error", err)
	}
	srv2 := newFakeServer(&fault{op: "commit", err: errMAC, apply: true, kill: true})
	db2 := sql.OpenDB(&fakeConnector{s: srv2})
	defer db2.Close()
	verify := func(ctx context.Context) (bool, error) { return srv2.get("n") >= 1, nil }
	if err := RunTx(context.Background(), db2, p, Write("t", verify), nil, addOne); err != nil {
		t.Fatalf("verified: %v", err)
	}
	if n := srv2.get("n"); n != 1 {
		t.Fatalf("n = %d, want 1", n)
	}
}
