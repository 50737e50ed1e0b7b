package sqlretry

// Tests of the outcome a caller is told, on the fake driver: each case is a
// way the database/sql layer or the Policy could tell a wrong outcome.

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// A multi-part text whose later part fails with a rollback of that part
// (deadlock) must not be replayed whole: its earlier part committed.
func TestConnectorMultiPartNotReplayed(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"not applied (deadlock) on the last part", errDeadlock},
		{"permanent error on the last part", errSyntax},
		{"connection lost on the last part", errLost},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newFakeServer()
			db, _ := openWrapped(t, srv, Config{})
			srv.addFaults(&fault{op: "exec", match: "ADD b 1", err: tc.err})
			_, err := db.ExecContext(context.Background(), "ADD a 1; ADD b 1")
			if !errors.Is(err, ErrAmbiguous) {
				t.Errorf("got %v, want ErrAmbiguous: the first part committed before the second failed", err)
			}
			if got := srv.get("a"); got != 1 {
				t.Errorf("a = %d, want 1: the text was replayed", got)
			}
		})
	}
	// A failure that proves nothing was sent still retries the whole text.
	srv := newFakeServer()
	db, _ := openWrapped(t, srv, Config{})
	if err := db.PingContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv.addFaults(&fault{op: "exec", match: "ADD a 1", err: driver.ErrBadConn, kill: true})
	if _, err := db.ExecContext(context.Background(), "ADD a 1; ADD b 1"); err != nil {
		t.Fatalf("not sent: got %v, want the text retried", err)
	}
	if srv.get("a") != 1 || srv.get("b") != 1 {
		t.Errorf("a, b = %d, %d, want 1, 1", srv.get("a"), srv.get("b"))
	}
}

// A single write whose failure the classifier does not call transient but
// whose outcome is unknown is not a plain error: ErrAmbiguous.
func TestConnectorUnknownPermanentWriteIsAmbiguous(t *testing.T) {
	odd := errors.New("tls: bad record MAC") // neutral: not retryable, phase unknown
	srv := newFakeServer()
	db, _ := openWrapped(t, srv, Config{})
	srv.addFaults(&fault{op: "exec", err: odd, apply: true})
	_, err := db.ExecContext(context.Background(), "ADD n 1")
	if !errors.Is(err, ErrAmbiguous) || !errors.Is(err, odd) {
		t.Fatalf("got %v, want ErrAmbiguous wrapping the driver's error", err)
	}
	if srv.get("n") != 1 || srv.count("exec ") != 1 {
		t.Errorf("n = %d after %d execs, want 1 after 1", srv.get("n"), srv.count("exec "))
	}
}

// INSERT … RETURNING through QueryRow: an error while its rows are read must
// end in ErrAmbiguous, not a bare driver error.
func TestConnectorWriteRowsErrorIsAmbiguous(t *testing.T) {
	srv := newFakeServer()
	db, p := openWrapped(t, srv, Config{})
	srv.addFaults(&fault{op: "next", err: errLost, kill: true})
	var v int64
	err := db.QueryRowContext(context.Background(), "ADD n 1 RETURNING").Scan(&v)
	if !errors.Is(err, ErrAmbiguous) || !errors.Is(err, errLost) {
		t.Fatalf("got %v, want ErrAmbiguous wrapping the driver's error", err)
	}
	if srv.get("n") != 1 {
		t.Errorf("n = %d, want 1", srv.get("n"))
	}
	if s := p.Stats(); s.Ambiguous != 1 {
		t.Errorf("Stats.Ambiguous = %d, want 1", s.Ambiguous)
	}
	// A read's rows are not wrapped: its error is its own.
	srv.addFaults(&fault{op: "next", err: errLost})
	err = db.QueryRowContext(context.Background(), "SELECT n").Scan(&v)
	if !errors.Is(err, errLost) || errors.Is(err, ErrAmbiguous) {
		t.Fatalf("read: got %v, want the driver's error as it is", err)
	}
	// A rollback the server reports on a session that survived proves the
	// single statement was not applied.
	srv.addFaults(&fault{op: "next", err: errSyntax})
	err = db.QueryRowContext(context.Background(), "ADD n 1 RETURNING").Scan(&v)
	if !errors.Is(err, errSyntax) || errors.Is(err, ErrAmbiguous) {
		t.Fatalf("not applied: got %v, want the driver's error as it is", err)
	}
	// A rollback reported by a session that did not survive it may follow
	// the commit (PostgreSQL 57P01 while COMMIT waits for a standby).
	srv.addFaults(&fault{op: "next", err: errDeadlock, kill: true})
	err = db.QueryRowContext(context.Background(), "ADD n 1 RETURNING").Scan(&v)
	if !errors.Is(err, ErrAmbiguous) {
		t.Fatalf("session ended: got %v, want ErrAmbiguous", err)
	}
}

// The same rule for an autocommit Exec: a session that ended in reply to a
// write may have committed it.
func TestConnectorSessionEndedInReplyToWriteIsAmbiguous(t *testing.T) {
	srv := newFakeServer()
	db, _ := openWrapped(t, srv, Config{})
	if err := db.PingContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv.addFaults(&fault{op: "exec", err: errDeadlock, apply: true, kill: true})
	_, err := db.ExecContext(context.Background(), "ADD n 1")
	if !errors.Is(err, ErrAmbiguous) {
		t.Fatalf("got %v, want ErrAmbiguous", err)
	}
	if srv.get("n") != 1 {
		t.Errorf("n = %d, want 1: replayed", srv.get("n"))
	}
}

// A Connector handle's call inside Do: the inner loop retries, the outer
// does not retry it again, and the budget pays once per retry.
func TestNestedRetryLoopsDoNotMultiply(t *testing.T) {
	srv := newFakeServer()
	db, p := openWrapped(t, srv, Config{MaxRetries: 3})
	if err := db.PingContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv.addFaults(&fault{op: "query", err: errDeadlock, times: 100})
	err := p.Do(context.Background(), Idempotent("read"), func(ctx context.Context) error {
		var v int64
		return db.QueryRowContext(ctx, "SELECT n").Scan(&v)
	})
	if !errors.Is(err, ErrRetriesExhausted) {
		t.Fatalf("got %v, want ErrRetriesExhausted", err)
	}
	if got := srv.count("query "); got != 4 {
		t.Errorf("%d queries reached the server, want 4 (1 + MaxRetries 3)", got)
	}
	if s := p.Stats(); s.Retries != 3 {
		t.Errorf("Stats.Retries = %d, want 3", s.Retries)
	}
}

// An outer Write's verify settles what the inner layer could not: applied
// → success; not applied (the attempt ended) → a plain failure, not a
// retry of the inner loop.
func TestNestedAmbiguousSettledByOuterVerify(t *testing.T) {
	for _, applied := range []bool{true, false} {
		srv := newFakeServer()
		db, p := openWrapped(t, srv, Config{MaxRetries: 3})
		srv.addFaults(&fault{op: "exec", err: errLost, apply: applied})
		verify := func(ctx context.Context) (bool, error) { return srv.get("n") == 1, nil }
		err := p.Do(context.Background(), Write("add", verify), func(ctx context.Context) error {
			_, err := db.ExecContext(ctx, "ADD n 1")
			return err
		})
		switch {
		case applied && err != nil:
			t.Errorf("applied: got %v, want nil", err)
		case !applied && (err == nil || errors.Is(err, ErrAmbiguous) || !errors.Is(err, ErrRetriesExhausted)):
			t.Errorf("not applied: got %v, want a plain ErrRetriesExhausted", err)
		}
		if got := srv.count("exec "); got != 1 {
			t.Errorf("applied=%v: %d execs, want 1", applied, got)
		}
	}
}

// A write's verify that reads "not applied" after a failure whose attempt
// may still be running on the server is no proof: ErrAmbiguous, no replay.
// With a fence that ends the session first, it is.
func TestVerifyNotAppliedNeedsTheAttemptEnded(t *testing.T) {
	p := testPolicy(t, Config{Classifier: serverClassifier, MaxRetries: 2})
	calls := 0
	fn := func(context.Context) error {
		calls++
		if calls == 1 {
			return errLost
		}
		return nil
	}
	notApplied := func(context.Context) (bool, error) { return false, nil }
	err := p.Do(context.Background(), Write("w", notApplied), fn)
	if !errors.Is(err, ErrAmbiguous) || calls != 1 {
		t.Fatalf("got %v after %d calls, want ErrAmbiguous after 1", err, calls)
	}
	if !strings.Contains(err.Error(), "may still be running") {
		t.Errorf("error %q does not say why", err)
	}
	calls = 0
	fenced := 0
	op := Write("w", notApplied)
	op.fence = func(context.Context) error { fenced++; return nil }
	if err := p.Do(context.Background(), op, fn); err != nil || calls != 2 || fenced != 1 {
		t.Fatalf("fenced: got %v after %d calls and %d fences, want nil after 2 and 1", err, calls, fenced)
	}
	// A verify that waits out the attempt itself (Op.VerifyWaits) needs no
	// Fencer: its "not applied" is final, and the write is replayed once.
	calls = 0
	if err := p.Do(context.Background(), Write("w", notApplied).VerifyWaits(), fn); err != nil || calls != 2 {
		t.Fatalf("VerifyWaits: got %v after %d calls, want nil after 2", err, calls)
	}
}

// DoValue never returns a zero value with a nil error: when a verify
// settles the attempt as applied, the value was never read.
func TestDoValueAppliedByVerifyIsValueUnknown(t *testing.T) {
	p := testPolicy(t, Config{})
	v, err := DoValue(context.Background(), p, Write("insert", func(context.Context) (bool, error) { return true, nil }),
		func(context.Context) (int64, error) { return 0, errLost })
	if !errors.Is(err, ErrValueUnknown) || errors.Is(err, ErrAmbiguous) || v != 0 {
		t.Fatalf("got (%v, %v), want (0, ErrValueUnknown)", v, err)
	}
	v, err = DoValue(context.Background(), p, Idempotent("read"), func(context.Context) (int64, error) { return 7, nil })
	if err != nil || v != 7 {
		t.Fatalf("got (%v, %v), want (7, nil)", v, err)
	}
}

// RunTx with nothing to settle a COMMIT says so, plainly, once.
func TestRunTxNoVerifierSaysSo(t *testing.T) {
	srv := newFakeServer(&fault{op: "commit", err: errLost, apply: true, kill: true})
	db := sql.OpenDB(&fakeConnector{s: srv})
	defer db.Close()
	p := testPolicy(t, Config{})
	err := RunTx(context.Background(), db, p, Write("claim", nil), nil, addOne)
	if !errors.Is(err, ErrAmbiguous) {
		t.Fatalf("got %v, want ErrAmbiguous", err)
	}
	msg := err.Error()
	if strings.Count(msg, "sqlretry:") != 1 || !strings.Contains(msg, "no verifier is configured") || strings.Contains(msg, "verify failed") {
		t.Errorf("message %q: want one prefix, saying no verifier is configured", msg)
	}
}

// Inside a transaction the Connector's errors never match driver.ErrBadConn
// either: database/sql would run a pooled statement again elsewhere.
func TestConnectorTxErrorsHideBadConn(t *testing.T) {
	srv := newFakeServer()
	db, _ := openWrapped(t, srv, Config{})
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv.addFaults(&fault{op: "exec", err: driver.ErrBadConn, kill: true})
	_, err = tx.ExecContext(ctx, "ADD n 1")
	if err == nil || errors.Is(err, driver.ErrBadConn) {
		t.Fatalf("in a transaction: got %v, want an error not matching driver.ErrBadConn", err)
	}
	_ = tx.Rollback()
	// A SQL-text transaction on a pooled connection: database/sql would
	// retry a driver.ErrBadConn on another connection, outside it.
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	srv.addFaults(&fault{op: "exec", err: driver.ErrBadConn, kill: true})
	if _, err = conn.ExecContext(ctx, "ADD n 1"); err == nil || errors.Is(err, driver.ErrBadConn) {
		t.Fatalf("SQL-text transaction: got %v, want an error not matching driver.ErrBadConn", err)
	}
}

// A reconnect that runs out of the attempt's CommandTimeout sent nothing:
// the write is retried, not reported ambiguous.
func TestConnectTimeoutIsNotSent(t *testing.T) {
	srv := newFakeServer()
	db, _ := openWrapped(t, srv, Config{CommandTimeout: 20 * time.Millisecond, MaxRetries: 3})
	if err := db.PingContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv.addFaults(&fault{op: "exec", err: driver.ErrBadConn, kill: true}, &fault{op: "connect", block: true})
	if _, err := db.ExecContext(context.Background(), "ADD n 1"); err != nil {
		t.Fatalf("got %v, want the write retried after the connect timed out", err)
	}
	if srv.get("n") != 1 {
		t.Errorf("n = %d, want 1", srv.get("n"))
	}
}

// Stats of a Policy without a budget marshal to JSON.
func TestStatsJSONWithoutBudget(t *testing.T) {
	p := testPolicy(t, Config{Budget: NoBudget})
	b, err := json.Marshal(p.Stats())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"BudgetTokens":null`) {
		t.Errorf("got %s, want BudgetTokens null", b)
	}
	p = testPolicy(t, Config{Budget: DefaultBudget()})
	if b, err = json.Marshal(p.Stats()); err != nil || strings.Contains(string(b), `"BudgetTokens":null`) {
		t.Errorf("with a budget: got %s, %v", b, err)
	}
}

// An error that states its verdict is taken at its word, and the driver's
// error stays in the chain: after a failed reconnect, errors.As still finds it.
func TestVerdictKeepsTheDriversError(t *testing.T) {
	srv := newFakeServer()
	db, _ := openWrapped(t, srv, Config{MaxRetries: 1})
	if err := db.PingContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv.addFaults(&fault{op: "exec", err: driver.ErrBadConn, kill: true}, &fault{op: "connect", err: errRefused, times: 5})
	_, err := db.ExecContext(context.Background(), "ADD n 1")
	if !errors.Is(err, errRefused) || !errors.Is(err, ErrRetriesExhausted) || errors.Is(err, driver.ErrBadConn) {
		t.Fatalf("got %v, want ErrRetriesExhausted wrapping the reconnect's own error", err)
	}
	var re *Error
	if !errors.As(err, &re) || re.Class.Phase != NotSent {
		t.Errorf("class %+v, want NotSent", re)
	}
}

// An Op attached to one call's context settles that statement's ambiguous
// failure: the write that landed is not reported ambiguous, the one that
// did not is replayed once.
func TestWithOpSettlesOneStatement(t *testing.T) {
	for _, applied := range []bool{true, false} {
		srv := newFakeServer()
		db, p := openWrapped(t, srv, Config{})
		srv.addFaults(&fault{op: "exec", err: errLost, apply: applied})
		verify := func(ctx context.Context) (bool, error) { return srv.get("n") == 1, nil }
		ctx := WithOp(context.Background(), Write("add-one", verify))
		if _, err := db.ExecContext(ctx, "ADD n 1"); err != nil {
			t.Fatalf("applied=%v: got %v, want the verify to settle it", applied, err)
		}
		if srv.get("n") != 1 {
			t.Errorf("applied=%v: n = %d, want 1", applied, srv.get("n"))
		}
		if s := p.Stats(); s.Verifications != 1 {
			t.Errorf("applied=%v: %d verifications, want 1", applied, s.Verifications)
		}
	}
	// Without it, the same failure is ambiguous.
	srv := newFakeServer()
	db, _ := openWrapped(t, srv, Config{})
	srv.addFaults(&fault{op: "exec", err: errLost, apply: true})
	if _, err := db.ExecContext(context.Background(), "ADD n 1"); !errors.Is(err, ErrAmbiguous) {
		t.Fatalf("no Op: got %v, want ErrAmbiguous", err)
	}
}

func TestNewKey(t *testing.T) {
	a, b := NewKey(), NewKey()
	if len(a) != 32 || a == b {
		t.Errorf("NewKey() = %q, %q: want two different 32-digit keys", a, b)
	}
}
