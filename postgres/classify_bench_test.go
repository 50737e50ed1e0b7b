package postgres

import (
	"context"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/lib/pq"

	sr "github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/internal/errsample"
)

// transportError has the shape of pgconn's unexported pgconnError, which
// carries every I/O failure of an established connection: a message, the
// net error, and whether anything was sent.
type transportError struct {
	msg  string
	err  error
	safe bool
}

func (e *transportError) Error() string     { return e.msg + ": " + e.err.Error() }
func (e *transportError) SafeToRetry() bool { return e.safe }
func (e *transportError) Unwrap() error     { return e.err }

var outerError = errsample.Wrapper{Name: "sqlretry.Error", Wrap: func(err error) error {
	return &sr.Error{Op: "load", Attempts: 2, Err: err, Cause: sr.ErrRetriesExhausted}
}}

// realConnectError is a real *pgconn.ConnectError: a dial refused by a closed
// port.
func realConnectError(tb testing.TB) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = pgconn.Connect(ctx, "postgres://u@"+addr+"/db?sslmode=disable&connect_timeout=5")
	if _, ok := err.(*pgconn.ConnectError); !ok {
		tb.Fatalf("setup: got %T %v, want a *pgconn.ConnectError", err, err)
	}
	return err
}

// realStartupError is the *pgconn.ConnectError of a server that refuses
// the connection's startup with code (57P03 "the database system is
// starting up" in a failover, 53300 "too many connections"): a listener
// that answers the startup message with a FATAL error, as PostgreSQL does.
func realStartupError(tb testing.TB, code, msg string) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		be := pgproto3.NewBackend(c, c)
		if _, err := be.ReceiveStartupMessage(); err != nil {
			return
		}
		be.Send(&pgproto3.ErrorResponse{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: code, Message: msg})
		be.Flush()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = pgconn.Connect(ctx, "postgres://u@"+ln.Addr().String()+"/db?sslmode=disable&connect_timeout=5")
	if _, ok := err.(*pgconn.ConnectError); !ok {
		tb.Fatalf("setup: got %T %v, want a *pgconn.ConnectError", err, err)
	}
	return err
}

// practice is every error of practice the PostgreSQL classifiers meet:
// pgx's and lib/pq's server errors, pgconn's transport errors, and the
// engine-neutral ones, each bare and wrapped.
func practice(tb testing.TB) []errsample.Case {
	reset := &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
	engine := []errsample.Case{
		{Name: "pgx-40001", Err: &pgconn.PgError{Severity: "ERROR", Code: "40001", Message: "could not serialize access"}},
		{Name: "pgx-40P01", Err: &pgconn.PgError{Severity: "ERROR", Code: "40P01", Message: "deadlock detected"}},
		{Name: "pgx-57P01", Err: &pgconn.PgError{Severity: "FATAL", Code: "57P01", Message: "terminating connection due to administrator command"}},
		{Name: "pgx-53300", Err: &pgconn.PgError{Severity: "FATAL", Code: "53300", Message: "too many connections"}},
		{Name: "pgx-08006", Err: &pgconn.PgError{Severity: "FATAL", Code: "08006"}},
		{Name: "pgx-23505", Err: &pgconn.PgError{Severity: "ERROR", Code: "23505", Message: "duplicate key"}},
		{Name: "pgx-42P01", Err: &pgconn.PgError{Severity: "ERROR", Code: "42P01", Message: "relation does not exist"}},
		{Name: "pq-40001", Err: &pq.Error{Code: "40001"}},
		{Name: "pgbouncer-crashed", Err: &pgconn.PgError{Severity: "FATAL", Code: "08P01", Message: "server conn crashed?"}},
		{Name: "pgbouncer-login-failing", Err: &pgconn.PgError{Severity: "FATAL", Code: "08P01", Message: "server login has been failing, try again later (server_login_retry)"}},
		{Name: "pq-pgbouncer-wait", Err: &pq.Error{Severity: "FATAL", Code: "08P01", Message: "query_wait_timeout"}},
		{Name: "pgconn-connect", Err: realConnectError(tb)},
		{Name: "pgconn-startup-57P03", Err: realStartupError(tb, "57P03", "the database system is starting up")},
		{Name: "pgconn-startup-3D000", Err: realStartupError(tb, "3D000", `database "db" does not exist`)},
		{Name: "pgconn-startup-28P01", Err: realStartupError(tb, "28P01", `password authentication failed for user "u"`)},
		{Name: "pgconn-reset", Err: &transportError{"failed to receive message", reset, false}},
		{Name: "pgconn-write-safe", Err: &transportError{"failed to write startup message", reset, true}},
		{Name: "pgconn-closed", Err: &transportError{"", pgconn.ErrConnClosed, false}},
	}
	return errsample.Wrapped(append(engine, errsample.Neutral()...), outerError)
}

var classSink sr.Class

// BenchmarkClassifyPractice measures each PostgreSQL classifier on every
// error of practice. Issue 20: each at most 100 ns and no allocation.
func BenchmarkClassifyPractice(b *testing.B) {
	for _, cl := range []struct {
		name     string
		classify func(error) sr.Class
	}{{"pg", Classify}, {"crdb", ClassifyCockroach}, {"libpq", ClassifyLibPQ}} {
		for _, c := range practice(b) {
			b.Run(cl.name+"/"+c.Name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					classSink = cl.classify(c.Err)
				}
			})
		}
	}
}

// TestPracticeVerdicts holds the verdicts of the three PostgreSQL
// classifiers on the errors of practice still (testdata/practice.golden).
func TestPracticeVerdicts(t *testing.T) {
	cases := practice(t)
	errsample.Check(t, "testdata/practice.golden", cases, func(err error) string {
		return fmt.Sprintf("%+v\n\tcrdb %+v\n\tlibpq %+v", Classify(err), ClassifyCockroach(err), ClassifyLibPQ(err))
	})
}

// TestConnectReasonSpellsEveryCode: the written-out reasons read as the
// general one does.
func TestConnectReasonSpellsEveryCode(t *testing.T) {
	for _, code := range []string{"dial", "dns", "conn-refused", "conn-reset", "net-timeout", "eof", "bad-conn", "other"} {
		want := "pgconn.ConnectError: the connection was never established, nothing was sent (" + code + ")"
		if got := connectReason(code); got != want {
			t.Errorf("connectReason(%q) = %q, want %q", code, got, want)
		}
	}
}

// TestClassifyPracticeAllocatesNothing: no classifier allocates on an error
// of practice (issue 20).
func TestClassifyPracticeAllocatesNothing(t *testing.T) {
	for _, c := range practice(t) {
		for _, cl := range []func(error) sr.Class{Classify, ClassifyCockroach, ClassifyLibPQ} {
			if n := testing.AllocsPerRun(20, func() { classSink = cl(c.Err) }); n != 0 {
				t.Errorf("%s: %v allocations a call, want 0", c.Name, n)
			}
		}
	}
}

// isConnectError answers from its small cache of types as it does without
// one, whatever order more types than the cache holds come in.
func TestIsConnectErrorCacheAnswersAsTheTypeName(t *testing.T) {
	ce := realConnectError(t)
	errs := []error{
		ce, fmt.Errorf("x: %w", ce), &pgconn.PgError{Code: "40001"}, &transportError{"m", ce, false},
		&pq.Error{Code: "40001"}, &net.OpError{Op: "read"}, &pgconn.ConnectError{}, os.ErrDeadlineExceeded,
	}
	for round := 0; round < 3; round++ {
		for i := range errs {
			e := errs[(i*(round+1))%len(errs)]
			_, want := e.(*pgconn.ConnectError)
			if got := isConnectError(e); got != want {
				t.Errorf("round %d: isConnectError(%T) = %v, want %v", round, e, got, want)
			}
		}
	}
}
