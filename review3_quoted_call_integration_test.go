package sqlretry_test

import (
	"context"
	"database/sql"
	"errors"
	"net/url"
	"testing"
	"time"

	sr "github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/faults/proxy"
	"github.com/sqlretry/sqlretry/internal/dbtest"
	"github.com/sqlretry/sqlretry/postgres"
)

// Review 3: a function called by a quoted name ("bump"()) was read as a
// read, so a statement whose connection was lost after the server had
// committed it was run again: the function's write landed twice and the
// caller was told success. Read as an unknown call (a write), it is not
// replayed: ErrAmbiguous, one row.
func TestQuotedFunctionCallNotReplayed(t *testing.T) {
	dsn := dbtest.FreshPostgres(t)
	admin, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	for _, q := range []string{
		"CREATE TABLE t (id serial PRIMARY KEY)",
		// Inserts, then sleeps: the connection is cut while it sleeps,
		// after its write and before its autocommit reply.
		`CREATE FUNCTION bump() RETURNS int LANGUAGE plpgsql AS $$ BEGIN INSERT INTO t DEFAULT VALUES; PERFORM pg_sleep(0.3); RETURN 1; END $$`,
	} {
		if _, err := admin.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	px, err := proxy.New(proxy.Config{Target: u.Host})
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	u.Host = px.Addr()
	q := u.Query()
	q.Set("sslmode", "disable")
	u.RawQuery = q.Encode()
	db, err := sr.Open("pgx", u.String(), newPolicy(t, sr.Config{Classifier: postgres.Classifier}))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Ping(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sleeping := func() int {
		var n int
		if err := admin.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep' AND query LIKE '%bump%'`).Scan(&n); err != nil {
			t.Error(err)
		}
		return n
	}
	go func() { // once the first run sleeps (its row inserted), cut it off
		for ctx.Err() == nil && sleeping() == 0 {
			time.Sleep(5 * time.Millisecond)
		}
		_ = px.SetFault(proxy.Fault{Mode: proxy.Reset})
		time.Sleep(20 * time.Millisecond)
		_ = px.SetFault(proxy.Fault{Mode: proxy.Pass})
	}()
	var v int
	callErr := db.QueryRowContext(ctx, `SELECT "bump"()`).Scan(&v)
	for ctx.Err() == nil && sleeping() > 0 { // the cut-off run commits
		time.Sleep(5 * time.Millisecond)
	}
	var n int
	if err := admin.QueryRowContext(ctx, "SELECT count(*) FROM t").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 || !errors.Is(callErr, sr.ErrAmbiguous) {
		t.Errorf(`SELECT "bump"(): %v with %d rows; want ErrAmbiguous and 1 row (a write replayed after a failure of unknown outcome)`, callErr, n)
	}
}
