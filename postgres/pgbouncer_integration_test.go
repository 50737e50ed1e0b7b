package postgres_test

import (
	"context"
	"database/sql"
	"errors"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	sr "github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/internal/dbtest"
	"github.com/sqlretry/sqlretry/postgres"
)

// bouncerDB starts a pgbouncer with settings in front of a fresh database
// on the shared server, with a table t (v int), and returns the pgbouncer,
// the DSN through it (exec mode: no prepared statements) and a direct
// handle.
func bouncerDB(t *testing.T, mode string, settings map[string]string) (*dbtest.PgBouncer, string, *sql.DB) {
	t.Helper()
	dsn := dbtest.FreshPostgres(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	if _, err := raw.Exec("CREATE TABLE t (v int NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	b := dbtest.StartPgBouncer(t, u.Host, dbtest.PgBouncerOptions{Mode: mode, Settings: settings})
	return b, b.DSN(dsn) + "&default_query_exec_mode=exec", raw
}

// wantBouncerVerdict checks that err is pgbouncer's FATAL 08P01 with msg
// and that the classifier gives it phase.
func wantBouncerVerdict(t *testing.T, err error, msg string, phase sr.Phase) {
	t.Helper()
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "08P01" || pe.Severity != "FATAL" || !strings.HasPrefix(pe.Message, msg) {
		t.Fatalf("got %v, want pgbouncer's FATAL 08P01 %q", err, msg)
	}
	if c := postgres.Classify(err); !c.Retryable || c.Phase != phase {
		t.Errorf("%q: classified %+v, want retryable and %v", msg, c, phase)
	}
}

// rows counts t's rows on the server itself.
func rows(t *testing.T, raw *sql.DB) int {
	t.Helper()
	var n int
	if err := raw.QueryRow("SELECT count(*) FROM t").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// clientsAtMost waits until pgbouncer's admin console lists at most n
// clients of database db (pgbouncer closed the others).
func clientsAtMost(t *testing.T, ctx context.Context, b *dbtest.PgBouncer, db string, n int) {
	t.Helper()
	for {
		cl, err := b.Show(ctx, "SHOW CLIENTS")
		if err != nil {
			t.Fatal(err)
		}
		k := 0
		for _, c := range cl {
			if c["database"] == db {
				k++
			}
		}
		if k <= n {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("pgbouncer still lists %d clients of %s", k, db)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func dbName(t *testing.T, dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimPrefix(u.Path, "/")
}

// TestPgBouncerErrorsClassified provokes pgbouncer's own errors on a real
// pgbouncer and checks each verdict: transient, not sent where the client's
// statement reached no server (and the INSERT it sent is not in the
// table), unknown where pgbouncer closed the server running it.
func TestPgBouncerErrorsClassified(t *testing.T) {
	t.Run("max_client_conn", func(t *testing.T) {
		t.Parallel()
		_, dsn, _ := bouncerDB(t, dbtest.SessionPooling, map[string]string{"max_client_conn": "2"})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for i := 0; i < 2; i++ {
			c, err := pgx.Connect(ctx, dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close(ctx)
		}
		_, err := pgx.Connect(ctx, dsn)
		wantBouncerVerdict(t, err, "no more connections allowed (max_client_conn)", sr.NotSent)
	})
	t.Run("query_wait_timeout", func(t *testing.T) {
		t.Parallel()
		// One server connection, held by another client's transaction:
		// the INSERT waits for a server, then is dropped unsent.
		_, dsn, raw := bouncerDB(t, dbtest.TransactionPooling, map[string]string{"default_pool_size": "1", "query_wait_timeout": "1"})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		holder, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer holder.Close(ctx)
		if _, err := holder.Exec(ctx, "BEGIN"); err != nil {
			t.Fatal(err)
		}
		c, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(ctx)
		_, err = c.Exec(ctx, "INSERT INTO t VALUES (1)")
		wantBouncerVerdict(t, err, "query_wait_timeout", sr.NotSent)
		if _, err := holder.Exec(ctx, "ROLLBACK"); err != nil {
			t.Fatal(err)
		}
		if n := rows(t, raw); n != 0 {
			t.Errorf("%d rows: the INSERT called not sent ran", n)
		}
	})
	t.Run("client_idle_timeout", func(t *testing.T) {
		t.Parallel()
		b, dsn, raw := bouncerDB(t, dbtest.SessionPooling, map[string]string{"client_idle_timeout": "1"})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(ctx)
		clientsAtMost(t, ctx, b, dbName(t, dsn), 0) // dropped while idle
		_, err = c.Exec(ctx, "INSERT INTO t VALUES (1)")
		wantBouncerVerdict(t, err, "client_idle_timeout", sr.NotSent)
		if n := rows(t, raw); n != 0 {
			t.Errorf("%d rows: the INSERT called not sent ran", n)
		}
	})
	t.Run("database removed", func(t *testing.T) {
		t.Parallel()
		b, dsn, _ := bouncerDB(t, dbtest.SessionPooling, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(ctx)
		done := make(chan error, 1)
		go func() { _, err := c.Exec(ctx, "SELECT pg_sleep(20)"); done <- err }()
		name := dbName(t, dsn)
		waitActive(t, ctx, b, name)
		if err := b.Admin(ctx, "KILL "+name); err != nil {
			t.Fatal(err)
		}
		wantBouncerVerdict(t, <-done, "database removed", sr.Unknown)
		if err := b.Admin(ctx, "RESUME "+name); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("query timeout", func(t *testing.T) {
		t.Parallel()
		_, dsn, _ := bouncerDB(t, dbtest.SessionPooling, map[string]string{"query_timeout": "1"})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(ctx)
		_, err = c.Exec(ctx, "SELECT pg_sleep(20)")
		wantBouncerVerdict(t, err, "query timeout", sr.Unknown)
	})
	t.Run("idle transaction timeout", func(t *testing.T) {
		t.Parallel()
		b, dsn, _ := bouncerDB(t, dbtest.TransactionPooling, map[string]string{"idle_transaction_timeout": "1"})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "BEGIN"); err != nil {
			t.Fatal(err)
		}
		clientsAtMost(t, ctx, b, dbName(t, dsn), 0)
		_, err = c.Exec(ctx, "SELECT 1")
		wantBouncerVerdict(t, err, "idle transaction timeout", sr.Unknown)
	})
	t.Run("server conn crashed and login failing", func(t *testing.T) {
		t.Parallel()
		srv := dbtest.StartPostgres(t)
		b := dbtest.StartPgBouncer(t, srv.Addr(), dbtest.PgBouncerOptions{Mode: dbtest.TransactionPooling})
		dsn := b.DSN(srv.DSN()) + "&default_query_exec_mode=exec"
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		raw, err := sql.Open("pgx", srv.DSN())
		if err != nil {
			t.Fatal(err)
		}
		defer raw.Close()
		c, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(ctx)
		done := make(chan error, 1)
		go func() { _, err := c.Exec(ctx, "SELECT pg_sleep(20)"); done <- err }()
		var pid int
		for pid == 0 {
			err := raw.QueryRowContext(ctx, "SELECT coalesce(max(pid), 0) FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(20)'").Scan(&pid)
			if err != nil {
				t.Fatal(err)
			}
		}
		// SIGKILL: the backend dies without a word, as in a crash or a
		// lost network (pg_terminate_backend would say 57P01 first).
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		wantBouncerVerdict(t, <-done, "server conn crashed?", sr.Unknown)
		raw.Close()
		// Down at once (after the SIGKILL the server is in crash recovery,
		// where a fast shutdown can take long on a loaded machine).
		if err := srv.Kill(); err != nil {
			t.Fatal(err)
		}
		// The server is down: pgbouncer's login to it fails, and within
		// server_login_retry it refuses clients without trying. The first
		// client waits for a server meanwhile: each try has a bound.
		var last error
		for i := 0; i < 50 && ctx.Err() == nil; i++ {
			tctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			c, err := pgx.Connect(tctx, dsn)
			if err == nil {
				_, err = c.Exec(tctx, "SELECT 1")
				c.Close(tctx)
			}
			cancel()
			var pe *pgconn.PgError
			if errors.As(err, &pe) && strings.HasPrefix(pe.Message, "server login has been failing") {
				wantBouncerVerdict(t, err, "server login has been failing", sr.NotSent)
				return
			}
			last = err
		}
		t.Fatalf("never told \"server login has been failing\"; last: %v", last)
	})
}

// waitActive waits until the admin console lists an active client of db.
func waitActive(t *testing.T, ctx context.Context, b *dbtest.PgBouncer, db string) {
	t.Helper()
	for {
		sv, err := b.Show(ctx, "SHOW SERVERS")
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range sv {
			if s["database"] == db && s["state"] == "active" {
				return
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("no active server of %s", db)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
