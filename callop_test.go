package sqlretry

import (
	"context"
	"database/sql/driver"
	"testing"
	"time"
)

// HasOp and TakeOp give an Op attached with WithOp to one write only, as
// the Connector does: the first TakeOp has it, later ones and other
// contexts do not.
func TestTakeOpGivesTheOpOnce(t *testing.T) {
	bare := context.Background()
	if HasOp(bare) {
		t.Error("HasOp(context without an Op) = true")
	}
	ctx := WithOp(bare, Write("create-order", nil))
	if !HasOp(ctx) {
		t.Fatal("HasOp after WithOp = false")
	}
	op, ok := TakeOp(ctx)
	if !ok || op.Name != "create-order" {
		t.Fatalf("first TakeOp = %q, %v; want create-order, true", op.Name, ok)
	}
	if HasOp(ctx) {
		t.Error("HasOp after TakeOp = true: a second write would be settled by the first one's verify")
	}
	if op, ok := TakeOp(ctx); ok {
		t.Errorf("second TakeOp = %q, true; want nothing", op.Name)
	}
	if _, ok := TakeOp(bare); ok {
		t.Error("TakeOp(context without an Op) = true")
	}
}

// An Exists verify settles a write on a pool of one connection (the usual
// SQLite setting, or N concurrent failures on a pool of N). The verify runs
// inside the driver call, while database/sql still holds the failed call's
// connection, and Exists reads through the same pool: it must not wait for
// the connection only its own caller can give back.
//
// History: found in the review of issue 12's changes (finding 9, on WithOp
// as 1bba33b added it): the call hung for as long as the caller's context
// lasted.
func TestWithOpExistsOnOneConnectionPool(t *testing.T) {
	srv := newFakeServer()
	db, _ := openPassthrough(t, srv, Config{})
	db.SetMaxOpenConns(1)
	if err := db.PingContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv.addFaults(&fault{op: "exec", match: "ADD n 1", err: errLost, apply: true})
	ctx := WithOp(context.Background(), Write("add", Exists(db, "SELECT n")))
	done := make(chan error, 1)
	go func() {
		_, err := db.ExecContext(ctx, "ADD n 1")
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("got %v, want the verify to settle the applied write", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("ExecContext still waiting after 3 s: the verify waits for the pool's only connection, which the call holds")
	}
}

// The Op attached with WithOp settles the first write made with the
// context, not every later one: an ORM call (or any helper) that runs two
// writes with ctx must not have the second write's lost reply settled by
// the first write's verify, which would report success for a write that is
// not in the database.
//
// History: found in the review of issue 12's changes (finding 10, on
// WithOp as 1bba33b added it).
func TestWithOpSettlesOnlyTheFirstWrite(t *testing.T) {
	srv := newFakeServer()
	db, _ := openPassthrough(t, srv, Config{})
	verifyA := func(context.Context) (bool, error) { return srv.get("a") == 1, nil }
	ctx := WithOp(context.Background(), Write("create-a", verifyA))
	if _, err := db.ExecContext(ctx, "ADD a 1"); err != nil {
		t.Fatal(err)
	}
	srv.addFaults(&fault{op: "exec", match: "ADD b 1", err: errLost, apply: false})
	_, err := db.ExecContext(ctx, "ADD b 1")
	if err == nil && srv.get("b") == 0 {
		t.Errorf("ADD b 1 returned success, b = 0: a's verify settled b's failure")
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
