package postgres_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	sr "github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/internal/dbtest"
	"github.com/sqlretry/sqlretry/postgres"
)

// freshTable returns a fresh database's DSN and a direct handle on it, with
// a table t (v int).
func freshTable(t *testing.T) (string, *sql.DB) {
	t.Helper()
	dsn := dbtest.FreshPostgres(t)
	raw, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	if _, err := raw.Exec("CREATE TABLE t (v int NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	return dsn, raw
}

// backendGone waits until the server no longer lists backend pid.
func backendGone(t *testing.T, ctx context.Context, raw *sql.DB, pid uint32) {
	t.Helper()
	for n := 1; n > 0; {
		if err := raw.QueryRowContext(ctx, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", int64(pid)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if ctx.Err() != nil {
			t.Fatalf("backend %d still listed", pid)
		}
	}
}

// wantCode checks that err carries SQLSTATE code and the classifier's
// verdict on it.
func wantCode(t *testing.T, err error, code string, retryable bool, phase sr.Phase) {
	t.Helper()
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != code {
		t.Fatalf("got %v, want SQLSTATE %s", err, code)
	}
	if c := postgres.Classify(err); c.Retryable != retryable || c.Phase != phase {
		t.Errorf("%s (%s): classified %+v, want retryable %v, %v", code, pe.Message, c, retryable, phase)
	}
}

// TestIdleInTransactionTimeout: a session idle in a transaction past
// idle_in_transaction_session_timeout is ended with FATAL 25P03, its
// transaction rolled back, and the statement the client sends next never
// runs. The verdict: retryable, not applied, so RunTx runs the transaction
// again. Before, 25P03 was not retried, and RunTx failed a transaction a
// second attempt commits.
func TestIdleInTransactionTimeout(t *testing.T) {
	dsn, raw := freshTable(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	t.Run("the next statement does not run", func(t *testing.T) {
		c, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(ctx)
		for _, q := range []string{"SET idle_in_transaction_session_timeout = '50ms'", "BEGIN", "INSERT INTO t VALUES (1)"} {
			if _, err := c.Exec(ctx, q); err != nil {
				t.Fatal(err)
			}
		}
		backendGone(t, ctx, raw, c.PgConn().PID())
		_, err = c.Exec(ctx, "INSERT INTO t VALUES (2)")
		wantCode(t, err, "25P03", true, sr.NotApplied)
		var n int
		if err := raw.QueryRowContext(ctx, "SELECT count(*) FROM t").Scan(&n); err != nil || n != 0 {
			t.Fatalf("%d rows (%v), want 0: the transaction and the statement after it applied nothing", n, err)
		}
	})

	t.Run("RunTx runs the transaction again", func(t *testing.T) {
		p, err := sr.New(sr.Config{Classifier: postgres.Classifier, BaseDelay: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		db, err := sr.Open("pgx", dsn, p)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		attempts := 0
		err = sr.RunTx(ctx, db, p, sr.Write("pause", nil), nil, func(ctx context.Context, tx *sql.Tx) error {
			attempts++
			if _, err := tx.ExecContext(ctx, "INSERT INTO t VALUES (10)"); err != nil {
				return err
			}
			if attempts == 1 {
				// The application pauses inside its transaction longer
				// than the server allows.
				var pid uint32
				if _, err := tx.ExecContext(ctx, "SET LOCAL idle_in_transaction_session_timeout = '50ms'"); err != nil {
					return err
				}
				if err := tx.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
					return err
				}
				backendGone(t, ctx, raw, pid)
			}
			_, err := tx.ExecContext(ctx, "INSERT INTO t VALUES (11)")
			return err
		})
		var n int
		if qerr := raw.QueryRowContext(ctx, "SELECT count(*) FROM t WHERE v >= 10").Scan(&n); qerr != nil {
			t.Fatal(qerr)
		}
		if err != nil || attempts != 2 || n != 2 {
			t.Errorf("RunTx: %v after %d attempts, %d rows; want nil after 2, and 2 rows (the first attempt rolled back)", err, attempts, n)
		}
	})
}

// TestQueryCanceled: 57014 from statement_timeout or a cancel request is
// not retried, and is not applied: an autocommit INSERT cut off by
// statement_timeout, one waiting on a lock cancelled by pg_cancel_backend,
// and a COMMIT cancelled while it ran a deferred trigger all leave no row,
// and RunTx reports the last as the plain error it is, after one attempt. (The verdict was already this; these pin its evidence.)
func TestQueryCanceled(t *testing.T) {
	dsn, raw := freshTable(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	connect := func(t *testing.T) *pgx.Conn {
		c, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(context.Background()) })
		return c
	}
	rows := func(t *testing.T) int {
		var n int
		if err := raw.QueryRowContext(ctx, "SELECT count(*) FROM t").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	t.Run("statement_timeout on an autocommit INSERT", func(t *testing.T) {
		c := connect(t)
		if _, err := c.Exec(ctx, "SET statement_timeout = '50ms'"); err != nil {
			t.Fatal(err)
		}
		_, err := c.Exec(ctx, "INSERT INTO t SELECT 1 FROM pg_sleep(5)")
		wantCode(t, err, "57014", false, sr.NotApplied)
		if n := rows(t); n != 0 {
			t.Errorf("%d rows, want 0", n)
		}
	})

	t.Run("pg_cancel_backend of an INSERT waiting on a lock", func(t *testing.T) {
		lock, err := raw.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer lock.Rollback()
		if _, err := lock.ExecContext(ctx, "LOCK TABLE t IN SHARE MODE"); err != nil {
			t.Fatal(err)
		}
		c := connect(t)
		done := make(chan error, 1)
		go func() { _, err := c.Exec(ctx, "INSERT INTO t VALUES (2)"); done <- err }()
		pid := int64(c.PgConn().PID())
		for waiting := false; !waiting; {
			if err := raw.QueryRowContext(ctx, "SELECT count(*) > 0 FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock'", pid).Scan(&waiting); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := raw.ExecContext(ctx, "SELECT pg_cancel_backend($1)", pid); err != nil {
			t.Fatal(err)
		}
		wantCode(t, <-done, "57014", false, sr.NotApplied)
		if err := lock.Rollback(); err != nil {
			t.Fatal(err)
		}
		if n := rows(t); n != 0 {
			t.Errorf("%d rows once the lock was gone, want 0", n)
		}
	})

	t.Run("a cancel during COMMIT", func(t *testing.T) {
		// statement_timeout is off while COMMIT runs its deferred triggers
		// (finish_xact_command disables it first), so only a cancel
		// request can stop one; it arrives before the commit record.
		for _, q := range []string{
			"CREATE FUNCTION slow() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(10); RETURN NULL; END $$",
			"CREATE TABLE d (v int)",
			"CREATE CONSTRAINT TRIGGER slow_commit AFTER INSERT ON d DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION slow()",
		} {
			if _, err := raw.ExecContext(ctx, q); err != nil {
				t.Fatal(err)
			}
		}
		p, err := sr.New(sr.Config{Classifier: postgres.Classifier, BaseDelay: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		db, err := sr.Open("pgx", dsn+"&application_name=slow_commit", p)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		attempts := 0
		done := make(chan error, 1)
		go func() {
			done <- sr.RunTx(ctx, db, p, sr.Write("slow-commit", nil), nil, func(ctx context.Context, tx *sql.Tx) error {
				attempts++
				_, err := tx.ExecContext(ctx, "INSERT INTO d VALUES (1)")
				return err
			})
		}()
		var pid int64
		for pid == 0 {
			if err := raw.QueryRowContext(ctx, "SELECT coalesce(max(pid), 0) FROM pg_stat_activity WHERE application_name = 'slow_commit' "+
				"AND query ILIKE 'commit' AND wait_event = 'PgSleep'").Scan(&pid); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := raw.ExecContext(ctx, "SELECT pg_cancel_backend($1)", pid); err != nil {
			t.Fatal(err)
		}
		err = <-done
		wantCode(t, err, "57014", false, sr.NotApplied)
		var n int
		if err := raw.QueryRowContext(ctx, "SELECT count(*) FROM d").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 0 || attempts != 1 || errors.Is(err, sr.ErrAmbiguous) {
			t.Errorf("RunTx: %v after %d attempts, %d rows; want 57014 after 1, no row", err, attempts, n)
		}
	})
}
