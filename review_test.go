package sqlretry

// Adversarial review of issue 12's changes, on the fake driver. Each test
// fails on the code it was written against; see the review report for the
// scenario, the line and the suggested fix.

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"strings"
	"testing"
	"time"
)

// rvConn is a fakeConn that also accepts statements the fake's parser does
// not know — session and transaction control (SET …, START TRANSACTION, XA …,
// BEGIN TRAN, MySQL executable comments) and CALL — as no-ops that reach the
// server's log and its faults. "CALL commit_then_fail" stands for a MySQL
// procedure whose body runs COMMIT (committing the session's open
// transaction) and then fails with a deadlock.
type rvConn struct{ *fakeConn }

func rvPassthrough(q string) bool {
	for _, p := range []string{"SET ", "START ", "XA ", "BEGIN TRAN", "CALL ", "/*"} {
		if strings.HasPrefix(q, p) {
			return true
		}
	}
	return false
}

func (c rvConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	if !rvPassthrough(q) {
		return c.fakeConn.ExecContext(ctx, q, args)
	}
	if c.dead {
		return nil, driver.ErrBadConn
	}
	if q == "CALL commit_then_fail" {
		c.s.take("exec", q)
		if c.tx != nil {
			c.s.mu.Lock()
			for _, p := range c.tx.pending {
				p(c.s.data)
			}
			c.s.mu.Unlock()
			c.tx.pending = nil
		}
		return nil, errDeadlock
	}
	if f := c.s.take("exec", q); f != nil {
		return nil, f.fire(ctx, c.fakeConn, nil)
	}
	return driver.RowsAffected(0), nil
}

func openReview(t *testing.T, srv *fakeServer, c Config) (*sql.DB, *Policy) {
	t.Helper()
	if c.MaxRetries == 0 {
		c.MaxRetries = 2
	}
	p := testPolicy(t, c)
	fc := &fakeConnector{s: srv, mk: func(c *fakeConn) driver.Conn { return rvConn{c} }}
	db := sql.OpenDB(Connector(fc, p))
	t.Cleanup(func() { db.Close() })
	return db, p
}

func reviewConn(t *testing.T, db *sql.DB) *sql.Conn {
	t.Helper()
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// Finding 1. A session the tracker takes as "possibly in a transaction"
// (txUnsure: here after a CALL, which a pooled connection keeps until a
// plain ROLLBACK) but that may be in autocommit mode is pinned, and a
// pinned query's rows are returned unwrapped: INSERT … RETURNING whose
// connection is lost after the commit, while its rows are read, comes back
// as a plain driver error — the point 5, back for every connection
// that ever ran a CALL.
func TestReviewPinnedWriteRowsErrorIsAmbiguous(t *testing.T) {
	srv := newFakeServer()
	db, _ := openReview(t, srv, Config{})
	conn := reviewConn(t, db)
	ctx := context.Background()
	if _, err := conn.ExecContext(ctx, "CALL noop"); err != nil {
		t.Fatal(err)
	}
	srv.addFaults(&fault{op: "next", err: errLost, kill: true})
	var v int64
	err := conn.QueryRowContext(ctx, "ADD n 1 RETURNING").Scan(&v)
	if srv.get("n") != 1 {
		t.Fatalf("n = %d, want 1 (the write committed)", srv.get("n"))
	}
	if !errors.Is(err, ErrAmbiguous) {
		t.Errorf("got %v, want ErrAmbiguous: the write committed, its rows' error is a plain error", err)
	}
}

// Finding 2. Texts that leave a session inside a transaction (or with
// autocommit off) on MySQL/MariaDB (and SQL Server) but that the tracker
// reads as "outside a transaction": a deadlock victim's statement is then
// replayed alone. Each opener was checked on MariaDB 10.11 (@@in_transaction
// or @@autocommit); see review_integration_test.go for the real-server run.
func TestReviewSQLTextTransactionOpenersMissed(t *testing.T) {
	for _, tc := range []struct {
		name    string
		openers []string
		init    func(ctx context.Context, c driver.Conn) error
	}{
		// MySQL: SET autocommit=1 commits only when autocommit was 0; inside
		// START TRANSACTION with autocommit already 1 it is a no-op, and
		// the transaction stays open.
		{name: "START TRANSACTION then SET autocommit=1", openers: []string{"START TRANSACTION", "SET autocommit=1"}},
		// SQL Server: SET IMPLICIT_TRANSACTIONS OFF does not end an open
		// transaction.
		{name: "BEGIN TRAN then SET IMPLICIT_TRANSACTIONS OFF", openers: []string{"BEGIN TRAN", "SET IMPLICIT_TRANSACTIONS OFF"}},
		// A quoted variable name: TxControl is false, After is never asked.
		{name: "SET `autocommit` = 0", openers: []string{"SET `autocommit` = 0"}},
		// MySQL runs the body of an executable comment.
		{name: "/*!START TRANSACTION*/", openers: []string{"/*!START TRANSACTION*/"}},
		{name: "/*!40101 SET autocommit=0 */", openers: []string{"/*!40101 SET autocommit=0 */"}},
		// MariaDB: SET STATEMENT … FOR <statement> runs the statement.
		{name: "SET STATEMENT … FOR START TRANSACTION", openers: []string{"SET STATEMENT max_statement_time=10 FOR START TRANSACTION"}},
		// completion_type=CHAIN: a plain COMMIT opens the next transaction.
		{name: "completion_type CHAIN then COMMIT", openers: []string{"SET completion_type = 'CHAIN'", "START TRANSACTION", "COMMIT"}},
		// MySQL: a procedure may SET autocommit=0 (session state that
		// outlives the CALL); a plain ROLLBACK then clears txUnsure, and
		// nothing says autocommit is still off.
		{name: "CALL of a procedure that sets autocommit=0, then ROLLBACK", openers: []string{"CALL set_autocommit_off", "ROLLBACK"}},
		// A session whose autocommit is off from the start is read with
		// SELECT @@autocommit on MySQL and MariaDB (the only engines where
		// it can be): see the real-server test. On a driver the Connector
		// does not know (this fake), SessionInit must not turn it off; the
		// Config.SessionInit doc says so.
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newFakeServer()
			db, _ := openReview(t, srv, Config{SessionInit: tc.init})
			conn := reviewConn(t, db)
			ctx := context.Background()
			for _, q := range tc.openers {
				if _, err := conn.ExecContext(ctx, q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			srv.addFaults(&fault{op: "exec", match: "ADD n 1", err: errDeadlock})
			_, err := conn.ExecContext(ctx, "ADD n 1")
			if n := srv.count("exec ADD n 1"); n != 1 || err == nil {
				t.Errorf("got %v after %d executions, want the deadlock returned after 1: the statement was replayed alone inside a transaction", err, n)
			}
		})
	}
}

// Finding 3. A COMMIT or ROLLBACK in SQL text that failed is taken as done:
// Session.After applies it as if it ran. A ROLLBACK refused before it was
// sent (the request's context already cancelled: a deferred cleanup with the
// request's ctx) leaves the transaction open, and the next statement's
// deadlock is replayed alone.
func TestReviewFailedTextRollbackLeavesSessionUnknown(t *testing.T) {
	for _, end := range []string{"ROLLBACK", "COMMIT"} {
		t.Run(end, func(t *testing.T) {
			srv := newFakeServer()
			db, _ := openReview(t, srv, Config{})
			conn := reviewConn(t, db)
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

// rvCommitVerifier is a CommitVerifier that cannot settle anything; the
// path under test never asks it.
type rvCommitVerifier struct{}

func (rvCommitVerifier) Mark(context.Context, *sql.Tx) (string, error) { return "mark", nil }
func (rvCommitVerifier) Committed(context.Context, *sql.DB, string) (bool, error) {
	return false, errors.New("review: cannot tell")
}

// Finding 4. RunTx on a Connector handle with a CommitVerifier: a CALL
// inside the transaction whose procedure COMMITs (MySQL allows it) and then
// fails. The Connector rightly reports ErrAmbiguous for the CALL, but RunTx's
// nested rule hands it to t.verify, which answers "not applied" for any
// failure before RunTx's own COMMIT, and the caller gets a plain
// ErrRetriesExhausted for a transaction that is in the database.
func TestReviewRunTxCallThatCommitsIsNotAPlainError(t *testing.T) {
	srv := newFakeServer()
	db, p := openReview(t, srv, Config{CommitVerifier: rvCommitVerifier{}})
	err := RunTx(context.Background(), db, p, Write("order", nil), nil,
		func(ctx context.Context, tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, "ADD n 1"); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, "CALL commit_then_fail")
			return err
		})
	if srv.get("n") != 1 {
		t.Fatalf("n = %d, want 1 (committed by the procedure)", srv.get("n"))
	}
	if !errors.Is(err, ErrAmbiguous) {
		t.Errorf("got %v, want ErrAmbiguous: the transaction's write is in the database", err)
	}
}

// rvFencer knows every session's id and never confirms a fence: a session
// stuck in rollback (MariaDB "Killed" while it undoes a large UPDATE), a
// fence connection that cannot reach the server during the outage that
// caused the failure, a pid reused by a long-lived backend.
type rvFencer struct{ stop chan struct{} }

func (rvFencer) SessionID(context.Context, driver.Conn) (string, error) { return "42", nil }
func (f rvFencer) Fence(ctx context.Context, _ driver.Conn, _ string) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-f.stop:
		return errors.New("review: test over")
	}
}

// Finding 5. After a write ends in ErrAmbiguous the Connector fences its
// session under the caller's context alone: neither CommandTimeout nor any
// bound of its own limits the fence's connect, KILL and wait. A caller
// without a deadline (context.Background(), a worker loop) hangs, though
// its answer — ErrAmbiguous — was known at once and nobody asked for a
// verify.
func TestReviewFenceIsBounded(t *testing.T) {
	srv := newFakeServer()
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	db, _ := openReview(t, srv, Config{Classifier: serverClassifier, CommandTimeout: 50 * time.Millisecond, Fencer: rvFencer{stop}})
	if err := db.PingContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv.addFaults(&fault{op: "exec", err: errLost, apply: true, kill: true})
	done := make(chan error, 1)
	go func() {
		_, err := db.ExecContext(context.Background(), "ADD n 1")
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, ErrAmbiguous) {
			t.Errorf("got %v, want ErrAmbiguous", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("ExecContext still waiting on the fence after 3 s (CommandTimeout 50 ms, no verify to serve)")
	}
}

// QueryContext: "SELECT create_order()" stands for a user-defined function
// called from a SELECT that writes (PostgreSQL's usual way to call stored
// code): it adds 1 to "orders" and returns the new value.
func (c rvConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	if q != "SELECT create_order()" {
		return c.fakeConn.QueryContext(ctx, q, args)
	}
	if c.dead {
		return nil, driver.ErrBadConn
	}
	apply := func() {
		c.s.mu.Lock()
		c.s.data["orders"]++
		c.s.mu.Unlock()
	}
	if f := c.s.take("query", q); f != nil {
		return nil, f.fire(ctx, c.fakeConn, apply)
	}
	apply()
	return &fakeRows{c: c.fakeConn, ctx: ctx, vals: []int64{c.s.get("orders")}}, nil
}

// Finding 7. SELECT of a function is judged read-only, so the Connector
// replays it after a failure of unknown outcome: the function's write lands
// twice and the caller gets success.
func TestReviewSelectOfWritingFunctionNotReplayed(t *testing.T) {
	srv := newFakeServer()
	db, _ := openReview(t, srv, Config{})
	if err := db.PingContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv.addFaults(&fault{op: "query", match: "create_order", err: errLost, apply: true, kill: true})
	var id int64
	err := db.QueryRowContext(context.Background(), "SELECT create_order()").Scan(&id)
	if n := srv.get("orders"); n != 1 || !errors.Is(err, ErrAmbiguous) {
		t.Errorf("got (%d, %v) with %d orders, want ErrAmbiguous with 1: the function's write was replayed", id, err, n)
	}
}

// Finding 8. On a pinned session (here after a CALL) a write that fails
// while the caller's context is done comes back as the driver's bare error:
// it matches neither ctx.Err() nor ErrAmbiguous, though the write applied.
// The Policy's own path (Policy.stopped) wraps both, as rule 1 asks.
func TestReviewPinnedFailureWithContextDoneWrapsIt(t *testing.T) {
	srv := newFakeServer()
	db, _ := openReview(t, srv, Config{})
	conn := reviewConn(t, db)
	if _, err := conn.ExecContext(context.Background(), "CALL noop"); err != nil {
		t.Fatal(err)
	}
	srv.addFaults(&fault{op: "exec", match: "ADD n 1", err: errLost, apply: true, kill: true})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := conn.ExecContext(ctx, "ADD n 1")
	if srv.get("n") != 1 {
		t.Fatalf("n = %d, want 1", srv.get("n"))
	}
	if !errors.Is(err, context.Canceled) && !errors.Is(err, ErrAmbiguous) {
		t.Errorf("got %v, want an error matching context.Canceled (and the driver's): the write applied", err)
	}
}

// Finding 9 (WithOp, 1bba33b). The verify runs inside the driver call, while
// database/sql still holds the failed call's connection; Exists reads
// through the same pool. With db.SetMaxOpenConns(1) — the usual SQLite
// setting — or N concurrent failures on a pool of N, the verify waits for a
// connection that only its own caller can give back: the call hangs for as
// long as the caller's context lasts.
func TestReviewWithOpExistsOnOneConnectionPool(t *testing.T) {
	srv := newFakeServer()
	db, _ := openReview(t, srv, Config{})
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

// Finding 10 (WithOp, 1bba33b). The Op rides on the context, so it settles
// every statement made with that context, not the one it was written for:
// an ORM call (or any helper) that runs two writes with ctx gets the second
// write's lost reply settled by the first write's verify, and success for a
// write that is not in the database.
func TestReviewWithOpSettlesOnlyItsStatement(t *testing.T) {
	srv := newFakeServer()
	db, _ := openReview(t, srv, Config{})
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

// rvNoPrep is a connection without ConnPrepareContext (nor the other
// optional interfaces but ExecerContext and Validator): an older driver.
type rvLimited interface {
	driver.Conn
	driver.ExecerContext
	driver.Validator
}

type rvNoPrep struct{ rvLimited }

// Finding 11. After a reconnect underneath fails, conn.inner is nil but the
// connection stays usable to a *sql.Conn holder (its errors never match
// driver.ErrBadConn). Once the session is pinned (a BEGIN in SQL text), a
// PrepareContext on an inner driver without ConnPrepareContext calls
// c.inner.Prepare on nil: a panic inside database/sql.
func TestReviewPrepareAfterFailedReconnectDoesNotPanic(t *testing.T) {
	srv := newFakeServer()
	p := testPolicy(t, Config{MaxRetries: 1})
	fc := &fakeConnector{s: srv, mk: func(c *fakeConn) driver.Conn { return rvNoPrep{c} }}
	db := sql.OpenDB(Connector(fc, p))
	t.Cleanup(func() { db.Close() })
	conn := reviewConn(t, db)
	ctx := context.Background()
	srv.addFaults(&fault{op: "exec", match: "ADD n 1", err: driver.ErrBadConn, kill: true},
		&fault{op: "connect", err: errRefused, times: 10})
	if _, err := conn.ExecContext(ctx, "ADD n 1"); err == nil {
		t.Fatal("want the reconnect's failure")
	}
	_, _ = conn.ExecContext(ctx, "BEGIN")
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("PrepareContext panicked: %v", r)
		}
	}()
	st, err := conn.PrepareContext(ctx, "ADD n 1")
	if err == nil {
		st.Close()
	}
}

// Finding 12. CommandTimeout does not bound a pinned statement. A pooled
// connection that once ran a CALL stays pinned (txUnsure) until a plain
// ROLLBACK, so from then on its statements run under the caller's context
// alone: a hung write blocks a caller without a deadline for good, where
// the same write on any other connection fails after CommandTimeout.
func TestReviewPinnedStatementKeepsCommandTimeout(t *testing.T) {
	srv := newFakeServer()
	db, _ := openReview(t, srv, Config{CommandTimeout: 50 * time.Millisecond})
	conn := reviewConn(t, db)
	if _, err := conn.ExecContext(context.Background(), "CALL noop"); err != nil {
		t.Fatal(err)
	}
	srv.addFaults(&fault{op: "exec", match: "ADD n 1", block: true})
	stop, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	done := make(chan error, 1)
	go func() {
		_, err := conn.ExecContext(stop, "ADD n 1")
		done <- err
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("the statement still runs after 2 s with CommandTimeout 50 ms: a pinned session has no command timeout")
	}
}
