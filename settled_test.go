package sqlretry

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"testing"
)

// An Exec whose ambiguous failure a verify settled as applied returns a
// Result: database/sql calls the driver's Result for RowsAffected, and a
// nil one panicked (GORM's Create under connection kills). What the
// statement would have reported is unknown, and says so.
func TestExecSettledAppliedHasAResult(t *testing.T) {
	srv := newFakeServer(&fault{op: "exec", err: errLost, apply: true})
	db, _ := openWrapped(t, srv, Config{})
	verify := func(context.Context) (bool, error) { return srv.get("n") == 1, nil }
	res, err := db.ExecContext(WithOp(context.Background(), Write("add-one", verify)), "ADD n 1")
	if err != nil {
		t.Fatalf("got %v, want the verify to settle it as applied", err)
	}
	n, err := res.RowsAffected()
	if !errors.Is(err, ErrValueUnknown) {
		t.Errorf("RowsAffected() = %d, %v; want an error matching ErrValueUnknown", n, err)
	}
	if _, err := res.LastInsertId(); !errors.Is(err, ErrValueUnknown) {
		t.Errorf("LastInsertId(): %v; want an error matching ErrValueUnknown", err)
	}
}

// A query that writes (INSERT … RETURNING), settled as applied by a verify,
// has no rows to return: the call says the write was applied and its result
// unknown, instead of handing database/sql nil rows.
func TestQuerySettledAppliedIsValueUnknown(t *testing.T) {
	srv := newFakeServer(&fault{op: "query", err: errLost, apply: true})
	db, _ := openWrapped(t, srv, Config{})
	verify := func(context.Context) (bool, error) { return srv.get("n") == 1, nil }
	rows, err := db.QueryContext(WithOp(context.Background(), Write("add-one", verify)), "ADD n 1 RETURNING")
	if err == nil {
		rows.Close()
		t.Fatal("got rows, want an error matching ErrValueUnknown")
	}
	if !errors.Is(err, ErrValueUnknown) || errors.Is(err, ErrAmbiguous) {
		t.Errorf("got %v; want ErrValueUnknown (applied), not ErrAmbiguous", err)
	}
	if srv.get("n") != 1 {
		t.Errorf("n = %d, want 1 (applied once)", srv.get("n"))
	}
}

// A statement the driver first answers with driver.ErrSkip (go-sql-driver
// does for any statement with arguments unless interpolateParams is set)
// is run again by database/sql as a prepared statement: the Op attached
// with WithOp belongs to that run, not to the skipped one.
func TestWithOpSurvivesErrSkip(t *testing.T) {
	srv := newFakeServer(
		&fault{op: "exec", match: "ADD n", err: driver.ErrSkip},
		&fault{op: "exec", match: "ADD n", err: errLost, apply: true}, // the prepared statement's run
	)
	db, p := openWrapped(t, srv, Config{})
	verify := func(context.Context) (bool, error) { return srv.get("n") == 1, nil }
	if _, err := db.ExecContext(WithOp(context.Background(), Write("add-one", verify)), "ADD n 1"); err != nil {
		t.Fatalf("got %v, want the verify to settle it", err)
	}
	if s := p.Stats(); s.Verifications != 1 {
		t.Errorf("%d verifications, want 1", s.Verifications)
	}
	if srv.get("n") != 1 {
		t.Errorf("n = %d, want 1", srv.get("n"))
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
