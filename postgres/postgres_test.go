package postgres

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/lib/pq"

	sr "github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/internal/codes"
)

// sample turns a table row's code into a concrete SQLSTATE: "53xxx" → "53000"
// unless that code has a row of its own, in which case "53ZZZ".
func sample(t *table, code string) string {
	if !isClassRow(code) {
		return code
	}
	if k, _ := exactKey(code[:2] + "000"); t.index.find(k) == nil {
		return code[:2] + "000"
	}
	return code[:2] + "ZZZ"
}

func want(e Entry, code string) sr.Class {
	c := e.Class
	c.Code = code
	return c
}

// TestClassifyEveryEntry classifies a real pgx and lib/pq error for every
// row of both tables, bare, wrapped and joined.
func TestClassifyEveryEntry(t *testing.T) {
	engines := []struct {
		name     string
		tab      *table
		rows     []Entry
		classify func(error) sr.Class
	}{
		{"postgres", pgTable, Table(), Classify},
		{"cockroach", crdbTable, CockroachTable(), ClassifyCockroach},
		{"libpq", pgTable, Table(), ClassifyLibPQ},
	}
	for _, eng := range engines {
		if len(eng.rows) < 40 {
			t.Fatalf("%s: table has %d rows, want at least 40", eng.name, len(eng.rows))
		}
		for _, e := range eng.rows {
			code := sample(eng.tab, e.Code)
			w := want(e, code)
			errs := map[string]error{
				"pgconn":  &pgconn.PgError{Severity: "ERROR", Code: code, Message: "m"},
				"pq":      &pq.Error{Severity: "ERROR", Code: pq.ErrorCode(code), Message: "m"},
				"wrapped": fmt.Errorf("persist: %w", &pgconn.PgError{Code: code}),
				"joined":  errors.Join(errors.New("other"), &pq.Error{Code: pq.ErrorCode(code)}),
			}
			for kind, err := range errs {
				if got := eng.classify(err); got != w {
					t.Errorf("%s %s %s: got %+v, want %+v", eng.name, e.Code, kind, got, w)
				}
			}
			if e.Source == "" || e.Class.Reason == "" {
				t.Errorf("%s %s: row has no source or reason", eng.name, e.Code)
			}
		}
	}
}

// TestClassifyNamedCodes pins the verdicts the issue names.
func TestClassifyNamedCodes(t *testing.T) {
	const (
		retry = true
		perm  = false
	)
	cases := []struct {
		code      string
		retryable bool
		phase     sr.Phase
	}{
		{"40001", retry, sr.NotApplied},
		{"40P01", retry, sr.NotApplied},
		{"55P03", retry, sr.NotApplied},
		{"55006", retry, sr.NotApplied},
		{"55000", retry, sr.NotApplied},
		{"53000", retry, sr.NotApplied},
		{"53100", retry, sr.NotApplied},
		{"53200", retry, sr.NotApplied},
		{"53400", retry, sr.NotApplied},
		{"53300", retry, sr.NotSent},
		{"57P03", retry, sr.NotSent},
		{"57P01", retry, sr.NotApplied},
		{"57P02", retry, sr.NotApplied},
		{"57P05", retry, sr.NotApplied},
		{"08000", retry, sr.Unknown},
		{"08001", retry, sr.Unknown},
		{"08003", retry, sr.Unknown},
		{"08004", retry, sr.Unknown},
		{"08006", retry, sr.Unknown},
		{"08007", retry, sr.Unknown},
		{"40003", retry, sr.Unknown},
		{"58030", retry, sr.NotApplied},
		{"57014", perm, sr.NotApplied},
		{"57P04", perm, sr.NotApplied},
		{"42601", perm, sr.NotApplied},
		{"42P01", perm, sr.NotApplied},
		{"42501", perm, sr.NotApplied},
		{"23505", perm, sr.NotApplied},
		{"23503", perm, sr.NotApplied},
		{"23502", perm, sr.NotApplied},
		{"22001", perm, sr.NotApplied},
		{"22P02", perm, sr.NotApplied},
		{"28P01", perm, sr.NotSent},
		{"28000", perm, sr.NotSent},
		{"08P01", perm, sr.Unknown},
		{"40002", perm, sr.NotApplied},
		{"25P02", perm, sr.NotApplied},
		{"CR000", perm, sr.NotApplied}, // not a PostgreSQL code
		{"99999", perm, sr.NotApplied}, // unlisted
	}
	for _, c := range cases {
		got := Classify(&pgconn.PgError{Code: c.code})
		if got.Retryable != c.retryable || got.Phase != c.phase || got.Code != c.code {
			t.Errorf("%s: got {Retryable:%v Phase:%v Code:%q}, want {Retryable:%v Phase:%v Code:%q}",
				c.code, got.Retryable, got.Phase, got.Code, c.retryable, c.phase, c.code)
		}
		if got.Reason == "" {
			t.Errorf("%s: empty reason", c.code)
		}
	}
}

func TestClassifyCockroach(t *testing.T) {
	cases := []struct {
		code      string
		retryable bool
		phase     sr.Phase
	}{
		{"40001", true, sr.NotApplied},
		{"CR000", true, sr.NotApplied},
		{"40003", true, sr.Unknown},
		{"40P01", true, sr.NotApplied},
		{"57P01", true, sr.NotApplied},
		{"23505", false, sr.NotApplied},
		{"42601", false, sr.NotApplied},
	}
	for _, c := range cases {
		got := ClassifyCockroach(fmt.Errorf("tx: %w", &pgconn.PgError{Code: c.code}))
		if got.Retryable != c.retryable || got.Phase != c.phase {
			t.Errorf("%s: got {Retryable:%v Phase:%v}, want {Retryable:%v Phase:%v}", c.code, got.Retryable, got.Phase, c.retryable, c.phase)
		}
	}
	if got, want := Classify(&pgconn.PgError{Code: "CR000"}).Retryable, false; got != want {
		t.Errorf("postgres CR000: got Retryable %v, want %v", got, want)
	}
}

// safeErr stands for an error with pgconn's SafeToRetry method whose
// verdict the test chooses.
type safeErr struct {
	safe bool
	err  error
}

func (e *safeErr) Error() string     { return "safe: " + e.err.Error() }
func (e *safeErr) SafeToRetry() bool { return e.safe }
func (e *safeErr) Unwrap() error     { return e.err }

// sqlStateSafe is a server error in class 08 that also carries evidence.
type sqlStateSafe struct {
	code string
	safe bool
}

func (e *sqlStateSafe) Error() string     { return "sqlstate " + e.code }
func (e *sqlStateSafe) SQLState() string  { return e.code }
func (e *sqlStateSafe) SafeToRetry() bool { return e.safe }

func TestClassifyEvidence(t *testing.T) {
	cases := []struct {
		name      string
		err       error
		retryable bool
		phase     sr.Phase
		code      string
	}{
		{"08006 safe", &sqlStateSafe{"08006", true}, true, sr.NotSent, "08006"},
		{"08006 not safe", &sqlStateSafe{"08006", false}, true, sr.Unknown, "08006"},
		{"08007 safe stays unknown", &sqlStateSafe{"08007", true}, true, sr.Unknown, "08007"},
		{"08P01 safe stays permanent", &sqlStateSafe{"08P01", true}, false, sr.Unknown, "08P01"},
		{"safe to retry", &safeErr{true, errors.New("write failed")}, true, sr.NotSent, "safe-to-retry"},
		{"conn closed while receiving", &safeErr{false, pgconn.ErrConnClosed}, true, sr.Unknown, "conn-closed"},
		{"not safe, eof", &safeErr{false, io.ErrUnexpectedEOF}, true, sr.Unknown, "eof"},
		{"not safe, unknown cause", &safeErr{false, errors.New("boom")}, false, sr.Unknown, ""},
		{"safe but context done", &safeErr{true, context.Canceled}, false, sr.Unknown, "context"},
		{"bad conn", fmt.Errorf("exec: %w", driver.ErrBadConn), true, sr.NotSent, "bad-conn"},
	}
	for _, c := range cases {
		got := Classify(c.err)
		if got.Retryable != c.retryable || got.Phase != c.phase || got.Code != c.code {
			t.Errorf("%s: got {Retryable:%v Phase:%v Code:%q}, want {Retryable:%v Phase:%v Code:%q}",
				c.name, got.Retryable, got.Phase, got.Code, c.retryable, c.phase, c.code)
		}
	}
}

func TestClassifyLibPQBadConn(t *testing.T) {
	err := fmt.Errorf("commit: %w", driver.ErrBadConn)
	if got := Classify(err); got.Phase != sr.NotSent || !got.Retryable {
		t.Errorf("Classify(ErrBadConn): got {Retryable:%v Phase:%v}, want {Retryable:true Phase:not-sent}", got.Retryable, got.Phase)
	}
	if got := ClassifyLibPQ(err); got.Phase != sr.Unknown || !got.Retryable {
		t.Errorf("ClassifyLibPQ(ErrBadConn): got {Retryable:%v Phase:%v}, want {Retryable:true Phase:unknown}", got.Retryable, got.Phase)
	}
	if got, want := LibPQClassifier.Classify(&pq.Error{Code: "40001"}), Classify(&pq.Error{Code: "40001"}); got != want {
		t.Errorf("LibPQClassifier(40001): got %+v, want %+v", got, want)
	}
}

// nilCode panics in SQLState, as a typed nil *pgconn.PgError would.
func TestClassifyNeverPanics(t *testing.T) {
	var nilPg *pgconn.PgError
	var nilPq *pq.Error
	errs := []error{
		nil,
		nilPg,
		nilPq,
		errors.New("foreign"),
		errors.Join(),
		errors.Join(nil, errors.New("x")),
		fmt.Errorf("wrap nil: %w", nil),
		&safeErr{false, nil},
		&pgconn.PgError{},
	}
	for i, err := range errs {
		for _, f := range []func(error) sr.Class{Classify, ClassifyCockroach, ClassifyLibPQ} {
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Errorf("case %d (%T): panicked: %v", i, err, r)
					}
				}()
				f(err)
			}()
		}
	}
}

func TestClassifyFallsBackToNeutral(t *testing.T) {
	errs := []error{
		nil,
		errors.New("foreign"),
		io.EOF,
		context.Canceled,
		&net.OpError{Op: "dial", Net: "tcp", Err: errors.New("refused")},
		fmt.Errorf("x: %w", driver.ErrBadConn),
	}
	for _, err := range errs {
		if got, want := Classify(err), sr.ClassifyNeutral(err); got != want {
			t.Errorf("Classify(%v): got %+v, want the neutral %+v", err, got, want)
		}
	}
}

// fakeServer accepts one pgconn connection over a pipe, completes the
// startup, then runs script on the backend.
func fakeServer(t *testing.T, script func(b *pgproto3.Backend, c net.Conn)) *pgconn.PgConn {
	t.Helper()
	client, server := net.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer server.Close()
		b := pgproto3.NewBackend(server, server)
		if _, err := b.ReceiveStartupMessage(); err != nil {
			return
		}
		b.Send(&pgproto3.AuthenticationOk{})
		b.Send(&pgproto3.BackendKeyData{ProcessID: 1, SecretKey: []byte{0, 0, 0, 1}})
		b.Send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
		if err := b.Flush(); err != nil {
			return
		}
		script(b, server)
	}()
	t.Cleanup(func() { client.Close(); <-done })
	cfg, err := pgconn.ParseConfig("postgres://u@127.0.0.1:1/db?sslmode=disable&connect_timeout=5")
	if err != nil {
		t.Fatal(err)
	}
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) { return client, nil }
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("connect to the fake server: %v", err)
	}
	return conn
}

// TestClassifyRealPgconnErrors provokes pgconn's own transport errors.
func TestClassifyRealPgconnErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	t.Run("closed conn is safe to retry", func(t *testing.T) {
		conn := fakeServer(t, func(b *pgproto3.Backend, c net.Conn) { io.Copy(io.Discard, c) })
		conn.Close(ctx)
		_, err := conn.Exec(ctx, "select 1").ReadAll()
		if !pgconn.SafeToRetry(err) {
			t.Fatalf("pgconn says %v is not safe to retry; the test premise is wrong", err)
		}
		if got := Classify(err); !got.Retryable || got.Phase != sr.NotSent {
			t.Errorf("got {Retryable:%v Phase:%v}, want {Retryable:true Phase:not-sent} (%v)", got.Retryable, got.Phase, err)
		}
	})
	t.Run("connection lost after send is unknown", func(t *testing.T) {
		conn := fakeServer(t, func(b *pgproto3.Backend, c net.Conn) {
			b.Receive() // the query arrives; hang up without answering
		})
		_, err := conn.Exec(ctx, "insert into t values (1)").ReadAll()
		if err == nil || pgconn.SafeToRetry(err) {
			t.Fatalf("got %v (SafeToRetry %v), want an error not safe to retry", err, pgconn.SafeToRetry(err))
		}
		if got := Classify(err); !got.Retryable || got.Phase != sr.Unknown {
			t.Errorf("got {Retryable:%v Phase:%v Code:%q}, want {Retryable:true Phase:unknown} (%v)", got.Retryable, got.Phase, got.Code, err)
		}
	})
	t.Run("server error", func(t *testing.T) {
		conn := fakeServer(t, func(b *pgproto3.Backend, c net.Conn) {
			b.Receive()
			b.Send(&pgproto3.ErrorResponse{Severity: "ERROR", Code: "40P01", Message: "deadlock detected"})
			b.Send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
			b.Flush()
			io.Copy(io.Discard, c)
		})
		defer conn.Close(ctx)
		_, err := conn.Exec(ctx, "update t set x = 1").ReadAll()
		if got := Classify(err); !got.Retryable || got.Phase != sr.NotApplied || got.Code != "40P01" {
			t.Errorf("got {Retryable:%v Phase:%v Code:%q}, want {Retryable:true Phase:not-applied Code:\"40P01\"} (%v)", got.Retryable, got.Phase, got.Code, err)
		}
	})
}

func TestLookup(t *testing.T) {
	cases := []struct {
		code      string
		ok        bool
		retryable bool
		phase     sr.Phase
		wantCode  string
	}{
		{"40001", true, true, sr.NotApplied, "40001"},
		{"40p01", true, true, sr.NotApplied, "40P01"},
		{"53200", true, true, sr.NotApplied, "53200"},
		{"08006", true, true, sr.Unknown, "08006"},
		{"42P01", true, false, sr.NotApplied, "42P01"},
		{"99999", false, false, sr.NotApplied, "99999"},
		{"CR000", false, false, sr.NotApplied, "CR000"},
		{"4000", false, false, sr.Unknown, "4000"},
	}
	for _, c := range cases {
		got, ok := Lookup(c.code)
		if ok != c.ok || got.Retryable != c.retryable || got.Phase != c.phase || got.Code != c.wantCode {
			t.Errorf("Lookup(%q): got ({Retryable:%v Phase:%v Code:%q}, %v), want ({Retryable:%v Phase:%v Code:%q}, %v)",
				c.code, got.Retryable, got.Phase, got.Code, ok, c.retryable, c.phase, c.wantCode, c.ok)
		}
	}
	if got, ok := CockroachLookup("CR000"); !ok || !got.Retryable || got.Phase != sr.NotApplied {
		t.Errorf("CockroachLookup(CR000): got (%+v, %v), want retryable not-applied, listed", got, ok)
	}
	if got, ok := CockroachLookup("40003"); !ok || !got.Retryable || got.Phase != sr.Unknown {
		t.Errorf("CockroachLookup(40003): got (%+v, %v), want retryable unknown, listed", got, ok)
	}
	// Lookup and Classify agree on every row.
	for _, e := range Table() {
		code := sample(pgTable, e.Code)
		got, ok := Lookup(code)
		if !ok || got != Classify(&pgconn.PgError{Code: code}) {
			t.Errorf("Lookup(%q) = (%+v, %v), disagrees with Classify", code, got, ok)
		}
	}
}

func TestValidCode(t *testing.T) {
	cases := []struct {
		code string
		ok   bool
	}{
		{"40001", true}, {"40P01", true}, {"40p01", true}, {"CR000", true},
		{"", false}, {"4000", false}, {"400011", false}, {"40-01", false}, {"4000 ", false}, {"4000é", false},
	}
	for _, c := range cases {
		err := ValidCode(c.code)
		if (err == nil) != c.ok {
			t.Errorf("ValidCode(%q): got %v, want ok=%v", c.code, err, c.ok)
		}
		if err != nil && err.Error() == "" {
			t.Errorf("ValidCode(%q): empty error message", c.code)
		}
	}
}

func TestTableSortedAndFresh(t *testing.T) {
	for name, rows := range map[string][]Entry{"postgres": Table(), "cockroach": CockroachTable()} {
		for i := 1; i < len(rows); i++ {
			if rows[i-1].Code >= rows[i].Code {
				t.Errorf("%s: rows %q and %q out of order or duplicated", name, rows[i-1].Code, rows[i].Code)
			}
		}
	}
	a := Table()
	a[0].Code = "mutated"
	if Table()[0].Code == "mutated" {
		t.Error("Table returned the package's own slice; got a shared copy, want a fresh one")
	}
}

var sink sr.Class

func BenchmarkClassify(b *testing.B) {
	cases := []struct {
		name     string
		classify func(error) sr.Class
		err      error
	}{
		{"transient/pgx-40001", Classify, &pgconn.PgError{Severity: "ERROR", Code: "40001", Message: "could not serialize access"}},
		{"transient/pq-40P01-wrapped", Classify, fmt.Errorf("tx: %w", &pq.Error{Code: "40P01"})},
		{"transient/class-53200", Classify, &pgconn.PgError{Code: "53200"}},
		{"cockroach/40001", ClassifyCockroach, &pgconn.PgError{Code: "40001"}},
		{"foreign", Classify, errors.New("boom")},
		{"foreign-wrapped", Classify, fmt.Errorf("op: %w", errors.New("boom"))},
		{"neutral-baseline/foreign", sr.ClassifyNeutral, errors.New("boom")},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				sink = c.classify(c.err)
			}
		})
	}
}

// A reset during the connection handshake (a server shutting down) is a
// pgconn.ConnectError: nothing was sent, whatever the transport said.
func TestConnectErrorIsNotSent(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if tc, ok := c.(*net.TCPConn); ok {
				tc.SetLinger(0) // close with a reset
			}
			buf := make([]byte, 8)
			c.Read(buf)
			c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = pgconn.Connect(ctx, "postgres://u@"+ln.Addr().String()+"/db?sslmode=disable&connect_timeout=5")
	if err == nil {
		t.Fatal("connected to a server that resets every connection")
	}
	c := Classify(err)
	if !c.Retryable || c.Phase != sr.NotSent {
		t.Fatalf("Classify(%v) = %+v, want retryable and not-sent", err, c)
	}
}

// TestLibPQBadConnOnlyFromErrBadConn: ClassifyLibPQ reads a verdict as lib/pq's
// driver.ErrBadConn only when the tree holds driver.ErrBadConn, as it did
// with its second walk (codes.Is) before 052bbb8. A server error whose
// SQLSTATE is the text "bad-conn" (a proxy's, a fake server's: the code is
// whatever the wire says) gets the verdict "SQLSTATE not listed", not
// retried and not applied; 052bbb8 read the code alone and turned its phase
// to unknown with lib/pq's reason. With driver.ErrBadConn elsewhere in the
// tree, the old reading (the second walk's) is kept.
func TestLibPQBadConnOnlyFromErrBadConn(t *testing.T) {
	for _, c := range []struct {
		name    string
		err     error
		overlay bool // lib/pq's reading applies
	}{
		{"pgx", &pgconn.PgError{Code: "bad-conn"}, false},
		{"pq", &pq.Error{Code: "bad-conn"}, false},
		{"fmt/pq", fmt.Errorf("q: %w", &pq.Error{Code: "bad-conn"}), false},
		{"pq+ErrBadConn", errors.Join(&pq.Error{Code: "bad-conn"}, driver.ErrBadConn), true},
		{"ErrBadConn", driver.ErrBadConn, true},
		{"fmt/ErrBadConn", fmt.Errorf("q: %w", driver.ErrBadConn), true},
	} {
		want := Classify(c.err)
		if c.overlay {
			want.Phase = sr.Unknown
			want.Reason = "driver.ErrBadConn from lib/pq: the connection broke, but lib/pq also returns it after sending (lib/pq#939), so the command may have run"
		}
		if got := ClassifyLibPQ(c.err); got != want {
			t.Errorf("%s: ClassifyLibPQ = %+v, want %+v", c.name, got, want)
		}
	}
}

// panicky's Unwrap panics.
type panicky struct{}

func (panicky) Error() string { return "panicky" }

func (panicky) Unwrap() error { panic("Unwrap") }

// TestLibPQBadConnSecondWalkNeverPanics: the second walk, which reads past
// the server error where Classify's walk stopped, turns a panic of an
// error's method into the verdict Panicked, as Classify does (before
// 052bbb8 the panic left ClassifyLibPQ).
func TestLibPQBadConnSecondWalkNeverPanics(t *testing.T) {
	err := errors.Join(&pq.Error{Code: "bad-conn"}, panicky{})
	if got := ClassifyLibPQ(err); got != codes.Panicked {
		t.Errorf("ClassifyLibPQ = %+v, want Panicked", got)
	}
}
