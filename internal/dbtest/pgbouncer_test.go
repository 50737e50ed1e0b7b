package dbtest

import (
	"context"
	"database/sql"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"
)

// pgbouncerFor starts a pgbouncer in front of the shared PostgreSQL server
// and returns it with the DSN of a fresh database through it.
func pgbouncerFor(t *testing.T, opts PgBouncerOptions) (*PgBouncer, string) {
	t.Helper()
	dsn := FreshPostgres(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	b := StartPgBouncer(t, u.Host, opts)
	return b, b.DSN(dsn)
}

// backendPID runs SELECT pg_backend_pid() on c.
func backendPID(t *testing.T, ctx context.Context, c interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}) int {
	t.Helper()
	var pid int
	if err := c.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	return pid
}

func openConn(t *testing.T, ctx context.Context, dsn string) *sql.Conn {
	t.Helper()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	c, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestPgBouncerSessionPoolingKeepsTheServerSession: in session pooling a
// client connection keeps one server session for its life.
func TestPgBouncerSessionPoolingKeepsTheServerSession(t *testing.T) {
	_, dsn := pgbouncerFor(t, PgBouncerOptions{})
	ctx := context.Background()
	c := openConn(t, ctx, dsn+"&default_query_exec_mode=simple_protocol")
	first := backendPID(t, ctx, c)
	for i := 0; i < 5; i++ {
		if got := backendPID(t, ctx, c); got != first {
			t.Fatalf("statement %d ran on backend %d, the first on %d: session pooling must keep the server session", i, got, first)
		}
	}
}

// TestPgBouncerTransactionPoolingMovesAutocommitStatements: in transaction
// pooling a client connection's autocommit statements run on whichever
// server connection is free. With a pool of two servers, each held in turn
// by another client's open transaction, one client connection sees both.
func TestPgBouncerTransactionPoolingMovesAutocommitStatements(t *testing.T) {
	_, dsn := pgbouncerFor(t, PgBouncerOptions{Mode: TransactionPooling, Settings: map[string]string{"default_pool_size": "2"}})
	dsn += "&default_query_exec_mode=simple_protocol"
	ctx := context.Background()
	c1, c2, c3 := openConn(t, ctx, dsn), openConn(t, ctx, dsn), openConn(t, ctx, dsn)
	a := backendPID(t, ctx, c1)
	tx2, err := c2.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx2.Rollback()
	tx3, err := c3.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx3.Rollback()
	p2, p3 := backendPID(t, ctx, tx2), backendPID(t, ctx, tx3) // both servers held
	if p2 == p3 {
		t.Fatalf("two open transactions on one server session %d", p2)
	}
	// Free the server that is not a.
	switch a {
	case p2:
		err = tx3.Commit()
	case p3:
		err = tx2.Commit()
	default:
		t.Fatalf("c1's statement ran on %d, neither of the pool's two servers %d and %d", a, p2, p3)
	}
	if err != nil {
		t.Fatal(err)
	}
	if b := backendPID(t, ctx, c1); b == a {
		t.Fatalf("c1's statements ran on %d both times, though that server was held by another transaction", a)
	}
}

// TestPgBouncerAdminRestartKill: the admin console answers, and pgbouncer
// can be restarted and killed under its clients.
func TestPgBouncerAdminRestartKill(t *testing.T) {
	b, dsn := pgbouncerFor(t, PgBouncerOptions{Mode: TransactionPooling})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.PingContext(ctx); err != nil {
		t.Fatal(err)
	}
	pools, err := b.Show(ctx, "SHOW POOLS")
	if err != nil {
		t.Fatal(err)
	}
	if len(pools) == 0 || pools[0]["pool_mode"] == "" {
		t.Fatalf("SHOW POOLS: %v", pools)
	}
	for _, cmd := range []string{"RECONNECT", "PAUSE", "RESUME"} {
		if err := b.Admin(ctx, cmd); err != nil {
			t.Fatal(err)
		}
	}
	pid := b.PID()
	if err := b.Restart(); err != nil {
		t.Fatal(err)
	}
	if b.PID() == pid || !b.Running() {
		t.Fatalf("after Restart: pid %d (was %d), running %v", b.PID(), pid, b.Running())
	}
	if err := db.PingContext(ctx); err != nil {
		t.Fatalf("ping after a restart: %v", err)
	}
	// SHUTDOWN ends the process; its connection may or may not see a reply.
	_ = b.Admin(ctx, "SHUTDOWN")
	for b.Running() {
		if ctx.Err() != nil {
			t.Fatal("pgbouncer still running after SHUTDOWN")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	if err := b.Kill(); err != nil {
		t.Fatal(err)
	}
	if b.Running() {
		t.Fatal("running after Kill")
	}
	err = db.PingContext(ctx)
	if err == nil {
		t.Fatal("ping through a killed pgbouncer succeeded")
	}
	if !strings.Contains(err.Error(), "connect") && !errors.Is(err, context.DeadlineExceeded) {
		t.Logf("ping through a killed pgbouncer: %v", err)
	}
}

// TestPgBouncerMissingSkips: without pgbouncer the test is skipped, or
// fails when SQLRETRY_REQUIRE_DB=1.
func TestPgBouncerMissingSkips(t *testing.T) {
	t.Setenv("SQLRETRY_PGBOUNCER", "/nonexistent/pgbouncer")
	for _, require := range []string{"", "1"} {
		t.Setenv(envRequire, require)
		r := &recTB{TB: t}
		if b := StartPgBouncer(r, "127.0.0.1:5432", PgBouncerOptions{}); b != nil {
			t.Fatal("StartPgBouncer without a binary returned a pgbouncer")
		}
		msg := r.skipped
		if require == "1" {
			msg = r.fatal
		}
		if !strings.Contains(msg, "no pgbouncer at /nonexistent/pgbouncer") {
			t.Errorf("SQLRETRY_REQUIRE_DB=%q: skipped %q, fatal %q", require, r.skipped, r.fatal)
		}
	}
}
