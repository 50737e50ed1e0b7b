package sqlretry_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	sr "github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/internal/dbtest"
	"github.com/sqlretry/sqlretry/postgres"
)

// Texts that merely contain a word of transaction control or EXECUTE —
// CREATE TEMP TABLE … ON COMMIT DROP, CREATE TRIGGER … EXECUTE FUNCTION —
// pinned a PostgreSQL connection for good ("autocommit may be off", which
// nothing on PostgreSQL can clear): a read on it after its backend was
// terminated failed instead of being retried, and the trigger's own
// permanent error came back as ErrAmbiguous.
func TestStrayWordsKeepRetriesPostgres(t *testing.T) {
	dsn := dbtest.FreshPostgres(t)
	p := newPolicy(t, sr.Config{Classifier: postgres.Classifier})
	db, err := sr.Open("pgx", dsn, p)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	admin := openPG(t, dsn)
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, "CREATE TABLE t (a int)"); err != nil {
		t.Fatal(err)
	}
	var pgErr *pgconn.PgError
	_, err = db.ExecContext(ctx, "CREATE TRIGGER g BEFORE INSERT ON t FOR EACH ROW EXECUTE FUNCTION no_such_function()")
	if err == nil || errors.Is(err, sr.ErrAmbiguous) || !errors.As(err, &pgErr) || pgErr.Code != "42883" {
		t.Errorf("CREATE TRIGGER with a missing function: got %v; want PostgreSQL's own 42883, not ErrAmbiguous", err)
	}
	for _, text := range []string{
		"CREATE TEMP TABLE scratch (a int) ON COMMIT DROP",
		"CREATE OR REPLACE FUNCTION trg() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$",
		"CREATE TRIGGER g2 BEFORE INSERT ON t FOR EACH ROW EXECUTE FUNCTION trg()",
	} {
		conn, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.ExecContext(ctx, text); err != nil {
			t.Fatalf("%s: %v", text, err)
		}
		var pid int
		if err := conn.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.ExecContext(ctx, "SELECT pg_terminate_backend($1)", pid); err != nil {
			t.Fatal(err)
		}
		waitGone(t, admin, pid)
		var n int
		if err := conn.QueryRowContext(ctx, "SELECT count(*) FROM t").Scan(&n); err != nil {
			t.Errorf("after %q: a read on a terminated session failed (%v); want it retried on a new one", text, err)
		}
		conn.Close()
	}
}

func openPG(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// waitGone waits until the backend pid has left pg_stat_activity.
func waitGone(t *testing.T, admin *sql.DB, pid int) {
	t.Helper()
	for i := 0; i < 500; i++ {
		var n int
		if err := admin.QueryRow("SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("backend %d still there", pid)
}
