package sqlretry_test

// A read that calls a user's function is a write: the function may INSERT.
// When such a read's connection is lost after the server committed it, it
// must not be replayed (the write would land twice, and the caller be told
// success): the caller hears ErrAmbiguous. A read whose functions are the
// engine's own is still replayed.
//
// Each run is cut off the same way, by state, not by time: the statement
// waits on a lock the test holds; once the server shows it waiting, the
// proxy holds its connection's traffic, the lock is let go, and once the
// server shows the statement ended (committed, its reply held by the
// proxy) the connection is reset. The server has committed; the client
// never hears.

import (
	"context"
	"database/sql"
	"errors"
	"net/url"
	"strconv"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	sr "github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/faults/proxy"
	"github.com/sqlretry/sqlretry/internal/dbtest"
	"github.com/sqlretry/sqlretry/mysql"
	srmysql "github.com/sqlretry/sqlretry/mysql"
	"github.com/sqlretry/sqlretry/postgres"
)

// lockedRun is how one engine holds a statement on the server and sees it
// run and end.
type lockedRun struct {
	hold    func(ctx context.Context) error                    // take the lock the statement will wait on
	release func(ctx context.Context) error                    // let it go
	waiting func(ctx context.Context) (string, error)          // the id of the session waiting on it, "" if none yet
	ended   func(ctx context.Context, id string) (bool, error) // that session's statement has ended
}

// runCutOff runs call through px, whose only connection is the call's,
// and cuts that connection off after the server committed the statement
// (see the comment above). It returns call's error.
func runCutOff(t *testing.T, ctx context.Context, px *proxy.Proxy, lr lockedRun, call func(context.Context) error) error {
	t.Helper()
	if err := lr.hold(ctx); err != nil {
		t.Fatalf("hold: %v", err)
	}
	conns := px.Conns()
	if len(conns) != 1 {
		t.Fatalf("%d connections through the proxy, want the call's one", len(conns))
	}
	errc := make(chan error, 1)
	go func() { errc <- call(ctx) }()
	id := waitState(t, ctx, "the statement waits on the lock", func() (string, error) { return lr.waiting(ctx) })
	if err := px.SetConnFault(conns[0].ID, proxy.Fault{Mode: proxy.Blackhole}); err != nil {
		t.Fatal(err)
	}
	if err := lr.release(ctx); err != nil {
		t.Fatalf("release: %v", err)
	}
	waitState(t, ctx, "the statement ended on the server", func() (string, error) {
		if ok, err := lr.ended(ctx, id); !ok || err != nil {
			return "", err
		}
		return "ended", nil
	})
	if err := px.SetConnFault(conns[0].ID, proxy.Fault{Mode: proxy.Reset}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		t.Fatalf("the call did not return: %v", ctx.Err())
		return nil
	}
}

// waitState polls state until it answers something, and returns that.
func waitState(t *testing.T, ctx context.Context, what string, state func() (string, error)) string {
	t.Helper()
	for {
		v, err := state()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if v != "" {
			return v
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: never (%v)", what, ctx.Err())
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// fcProxy starts a fault proxy in front of host.
func fcProxy(t *testing.T, host string, p proxy.Protocol) *proxy.Proxy {
	t.Helper()
	px, err := proxy.New(proxy.Config{Target: host, Protocol: p})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	return px
}

// scalar reads one integer.
func scalar(t *testing.T, ctx context.Context, db *sql.DB, q string, args ...any) int {
	t.Helper()
	var n int
	if err := db.QueryRowContext(ctx, q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// pgLockedRun holds a statement on PostgreSQL by the advisory lock 4242
// (the users' functions below wait on it) or, with table, by an ACCESS
// EXCLUSIVE lock on it (a read of it waits), on a session of admin's.
func pgLockedRun(t *testing.T, admin *sql.DB, query, table string) lockedRun {
	t.Helper()
	conn, err := admin.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	exec := func(q string) func(context.Context) error {
		return func(ctx context.Context) error { _, err := conn.ExecContext(ctx, q); return err }
	}
	lr := lockedRun{hold: exec("SELECT pg_advisory_lock(4242)"), release: exec("SELECT pg_advisory_unlock(4242)")}
	if table != "" {
		lr.hold = func(ctx context.Context) error {
			if _, err := conn.ExecContext(ctx, "BEGIN"); err != nil {
				return err
			}
			_, err := conn.ExecContext(ctx, "LOCK TABLE "+table+" IN ACCESS EXCLUSIVE MODE")
			return err
		}
		lr.release = exec("COMMIT")
	}
	lr.waiting = func(ctx context.Context) (string, error) {
		var pid sql.NullString
		err := admin.QueryRowContext(ctx, `SELECT max(pid)::text FROM pg_stat_activity
			WHERE datname = current_database() AND query = $1 AND wait_event_type = 'Lock'`, query).Scan(&pid)
		return pid.String, err
	}
	lr.ended = func(ctx context.Context, pid string) (bool, error) {
		var n int
		err := admin.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE pid = $1::int AND state = 'active'`, pid).Scan(&n)
		return n == 0, err
	}
	return lr
}

// pgFunctionDB is a fresh PostgreSQL database whose users' functions write
// a row to calls, then wait on the advisory lock 4242: audit.log(text),
// log(text) in public (in search_path: it takes SELECT log('msg'), an
// unknown-typed literal preferring text to pg_catalog's numeric and double
// precision), audit(t), which SELECT t.audit calls, the function "bump"()
// and bump2().
func pgFunctionDB(t *testing.T) (admin *sql.DB, host string, via func(px *proxy.Proxy) string) {
	t.Helper()
	dsn := dbtest.FreshPostgres(t)
	admin, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	const body = `LANGUAGE plpgsql AS $$ BEGIN INSERT INTO calls (note) VALUES ('x'); PERFORM pg_advisory_xact_lock(4242); RETURN 1; END $$`
	for _, q := range []string{
		`CREATE TABLE calls (id serial PRIMARY KEY, note text NOT NULL)`,
		`CREATE TABLE t (id int PRIMARY KEY, name text NOT NULL)`,
		`INSERT INTO t VALUES (1, 'Ann'), (2, 'Bo')`,
		`CREATE SCHEMA audit`,
		`CREATE FUNCTION audit.log(m text) RETURNS int ` + body,
		`CREATE FUNCTION public.log(m text) RETURNS int ` + body,
		`CREATE FUNCTION public.audit(r t) RETURNS int ` + body,
		`CREATE FUNCTION public."bump"() RETURNS int ` + body,
		`CREATE FUNCTION public.bump2() RETURNS int ` + body,
	} {
		if _, err := admin.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return admin, u.Host, func(px *proxy.Proxy) string {
		v := *u
		v.Host = px.Addr()
		q := v.Query()
		q.Set("sslmode", "disable")
		v.RawQuery = q.Encode()
		return v.String()
	}
}

// openOne opens driver's dsn through sqlretry.Open with one connection,
// connected, under a Policy of its own.
func openOne(t *testing.T, driver, dsn string, c sr.Classifier) (*sql.DB, *sr.Policy) {
	t.Helper()
	p := newPolicy(t, sr.Config{Classifier: c})
	db, err := sr.Open(driver, dsn, p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(1)
	if err := db.Ping(); err != nil {
		t.Fatal(err)
	}
	return db, p
}

// A read that calls a user's function, cut off after the server committed
// it, ends in ErrAmbiguous with the function's one row. Before, each was
// read as a read and replayed: 2 rows and nil, every run (the quoted name
// was fixed before: b813f0f).
func TestUserFunctionCallNotReplayedPostgres(t *testing.T) {
	admin, host, via := pgFunctionDB(t)
	for _, q := range []string{
		`SELECT audit.log('user signed in')`, // a schema's function named like a built-in
		`SELECT * FROM audit.log('x')`,       // in FROM
		`SELECT log('msg')`,                  // the user's log(text) in search_path
		`SELECT t.audit FROM t WHERE id = 1`, // audit(t), by attribute notation
		`SELECT "bump"()`,                    // a quoted name
		`SELECT * FROM bump2() AS b`,         // a function given an alias, once read as a CTE's columns
	} {
		t.Run(q, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if _, err := admin.ExecContext(ctx, "TRUNCATE calls"); err != nil {
				t.Fatal(err)
			}
			px := fcProxy(t, host, proxy.ProtocolPostgres)
			db, _ := openOne(t, "pgx", via(px), postgres.Classifier)
			err := runCutOff(t, ctx, px, pgLockedRun(t, admin, q, ""), func(ctx context.Context) error {
				var v int
				return db.QueryRowContext(ctx, q).Scan(&v)
			})
			n := scalar(t, ctx, admin, "SELECT count(*) FROM calls")
			t.Logf("%s: %v, %d rows", q, err, n)
			if n != 1 || !errors.Is(err, sr.ErrAmbiguous) {
				t.Errorf("%s: %v with %d rows; want ErrAmbiguous and 1 row (a function's write replayed after a failure of unknown outcome)", q, err, n)
			}
		})
	}
}

// A read whose functions are PostgreSQL's own, cut off the same way, is
// still replayed: the catalog holds no function of a user's by its names.
func TestBuiltinFunctionReadReplayedPostgres(t *testing.T) {
	admin, host, via := pgFunctionDB(t)
	for _, c := range []struct {
		q    string
		want string
	}{
		{`SELECT count(*)::text FROM t`, "2"},
		{`SELECT lower(name) FROM t WHERE id = 1`, "ann"},
		{`SELECT t.name FROM t WHERE t.id = 2`, "Bo"},
	} {
		t.Run(c.q, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			px := fcProxy(t, host, proxy.ProtocolPostgres)
			db, p := openOne(t, "pgx", via(px), postgres.Classifier)
			var got string
			err := runCutOff(t, ctx, px, pgLockedRun(t, admin, c.q, "t"), func(ctx context.Context) error {
				return db.QueryRowContext(ctx, c.q).Scan(&got)
			})
			// Replayed once the catalog said no function of a user's
			// has the read's names.
			if st := p.Stats(); err != nil || got != c.want || st.Retries < 1 || st.VerifiedNotApplied != 1 {
				t.Errorf("%s: %q, %v, %+v; want %q, nil, a verify that found nothing and a replay", c.q, got, err, st, c.want)
			}
		})
	}
}

// myFunctionDB is a fresh MariaDB database whose stored functions write a
// row to calls, then wait on the named lock "fc": f(), initcap(text), which
// MySQL does not build in, and count(int), which "count (…)" reaches.
func myFunctionDB(t *testing.T) (admin *sql.DB, cfg *gomysql.Config) {
	t.Helper()
	dsn := dbtest.FreshMySQL(t)
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	admin, err = sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	const body = ` RETURNS int BEGIN INSERT INTO calls (note) VALUES ('x'); DO GET_LOCK('fc', 60); DO RELEASE_LOCK('fc'); RETURN 1; END`
	for _, q := range []string{
		`CREATE TABLE calls (id int AUTO_INCREMENT PRIMARY KEY, note varchar(20) NOT NULL)`,
		`CREATE TABLE t (id int PRIMARY KEY, name varchar(20) NOT NULL)`,
		`INSERT INTO t VALUES (1, 'Ann'), (2, 'Bo')`,
		`CREATE FUNCTION f()` + body,
		`CREATE FUNCTION initcap(m varchar(20))` + body,
		"CREATE FUNCTION `count`(n int)" + body,
	} {
		if _, err := admin.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	return admin, cfg
}

// myLockedRun holds a statement on MariaDB by the named lock "fc" (the
// stored functions wait on it) or, with table, by LOCK TABLES … WRITE, on
// a session of admin's.
func myLockedRun(t *testing.T, admin *sql.DB, table string) lockedRun {
	t.Helper()
	conn, err := admin.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	exec := func(q string) func(context.Context) error {
		return func(ctx context.Context) error { _, err := conn.ExecContext(ctx, q); return err }
	}
	lr := lockedRun{hold: exec("DO GET_LOCK('fc', 10)"), release: exec("DO RELEASE_LOCK('fc')")}
	state := "User lock"
	if table != "" {
		lr.hold, lr.release, state = exec("LOCK TABLES "+table+" WRITE"), exec("UNLOCK TABLES"), "Waiting for table metadata lock"
	}
	lr.waiting = func(ctx context.Context) (string, error) {
		var id sql.NullString
		err := admin.QueryRowContext(ctx, `SELECT MAX(ID) FROM information_schema.PROCESSLIST
			WHERE DB = DATABASE() AND STATE = ?`, state).Scan(&id)
		return id.String, err
	}
	lr.ended = func(ctx context.Context, id string) (bool, error) {
		var n int
		err := admin.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.PROCESSLIST
			WHERE ID = ? AND COMMAND <> 'Sleep'`, id).Scan(&n)
		return n == 0, err
	}
	return lr
}

// The same on MariaDB: a stored function called by its database's name,
// one whose name MySQL does not build in (so the server looks it up in the
// default database), and one named like a built-in the parser reads
// specially, reached through a space. Before: 2 rows and nil.
func TestUserFunctionCallNotReplayedMariaDB(t *testing.T) {
	admin, cfg := myFunctionDB(t)
	for _, q := range []string{
		"SELECT `" + cfg.DBName + "`.f()",
		"SELECT initcap('x')",
		"SELECT count (1)",
	} {
		t.Run(q, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if _, err := admin.ExecContext(ctx, "TRUNCATE calls"); err != nil {
				t.Fatal(err)
			}
			px := fcProxy(t, cfg.Addr, proxy.ProtocolMySQL)
			via := cfg.Clone()
			via.Addr = px.Addr()
			db, _ := openOne(t, "mysql", via.FormatDSN(), srmysql.Classifier)
			err := runCutOff(t, ctx, px, myLockedRun(t, admin, ""), func(ctx context.Context) error {
				var v int
				return db.QueryRowContext(ctx, q).Scan(&v)
			})
			n := scalar(t, ctx, admin, "SELECT COUNT(*) FROM calls")
			t.Logf("%s: %v, %d rows", q, err, n)
			if n != 1 || !errors.Is(err, sr.ErrAmbiguous) {
				t.Errorf("%s: %v with %d rows; want ErrAmbiguous and 1 row (a function's write replayed after a failure of unknown outcome)", q, err, n)
			}
		})
	}
}

// A read of MariaDB's built-ins is still replayed, and a read of a stored
// function's name (count) is replayed when the name is a built-in's.
func TestBuiltinFunctionReadReplayedMariaDB(t *testing.T) {
	admin, cfg := myFunctionDB(t)
	for _, c := range []struct {
		q    string
		want string
	}{
		{`SELECT CAST(count(*) AS char) FROM t`, "2"},
		{`SELECT lower(name) FROM t WHERE id = 1`, "ann"},
	} {
		t.Run(c.q, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			px := fcProxy(t, cfg.Addr, proxy.ProtocolMySQL)
			via := cfg.Clone()
			via.Addr = px.Addr()
			db, p := openOne(t, "mysql", via.FormatDSN(), srmysql.Classifier)
			var got string
			err := runCutOff(t, ctx, px, myLockedRun(t, admin, "t"), func(ctx context.Context) error {
				return db.QueryRowContext(ctx, c.q).Scan(&got)
			})
			// MySQL's built-ins called with "(" right after their
			// names: replayed with no catalog to ask.
			if st := p.Stats(); err != nil || got != c.want || st.Retries < 1 || st.Verifications != 0 {
				t.Errorf("%s: %q, %v, %+v; want %q, nil, a replay and no verify", c.q, got, err, st, c.want)
			}
		})
	}
}

// A CALL whose procedure's INSERT committed (autocommit, per statement) and
// whose connection is then lost while the caller reads the procedure's
// later result sets is ErrAmbiguous: the write is in the database.
//
// History: found in the review of issue 12's changes (finding 1, on
// MariaDB): CALL is transaction control, so it took the pinned path, whose
// rows were returned unwrapped, and the caller got a plain "invalid
// connection".
func TestCallRowsLostIsAmbiguousMariaDB(t *testing.T) {
	db, raw, _ := openMySQL(t, sr.Config{}, nil)
	mustExec(t, raw, "CREATE TABLE t (v INT)")
	mustExec(t, raw, "CREATE PROCEDURE p() BEGIN INSERT INTO t VALUES (1); SELECT 1 AS a; DO SLEEP(5); SELECT 2 AS b; END")
	go func() {
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			var id int64
			err := raw.QueryRow("SELECT ID FROM information_schema.PROCESSLIST WHERE DB = DATABASE() AND INFO LIKE 'DO SLEEP%' LIMIT 1").Scan(&id)
			if err == nil {
				_, _ = raw.Exec("KILL " + strconv.FormatInt(id, 10))
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	rows, err := db.QueryContext(context.Background(), "CALL p()")
	if err != nil {
		t.Fatalf("CALL: %v", err)
	}
	for rows.Next() {
	}
	for rows.NextResultSet() {
		for rows.Next() {
		}
	}
	err = rows.Err()
	rows.Close()
	if n := count(t, raw, "SELECT COUNT(*) FROM t"); n != 1 {
		t.Fatalf("%d rows in t, want 1 (the procedure's INSERT committed)", n)
	}
	if !errors.Is(err, sr.ErrAmbiguous) {
		t.Errorf("rows.Err() = %v, want ErrAmbiguous: the CALL's INSERT is in the database", err)
	}
}

// undecidedVerifier is a CommitVerifier that can never tell.
type undecidedVerifier struct{}

func (undecidedVerifier) Mark(context.Context, *sql.Tx) (string, error) { return "mark", nil }

func (undecidedVerifier) Committed(context.Context, *sql.DB, string) (bool, error) {
	return false, errors.New("test: cannot tell")
}

// A procedure called inside RunTx's transaction COMMITs (MySQL allows
// COMMIT in a procedure: it commits the caller's transaction) and then fails
// with a deadlock: through the Connector with Config.CommitVerifier, RunTx
// ends in ErrAmbiguous with the INSERT applied once.
//
// History: found in the review of issue 12's changes (finding 4, on
// MariaDB): RunTx took any failure before its own COMMIT as a rollback: on
// a plain handle it replayed the whole transaction (the INSERT landed
// twice, and more), and through the Connector the CALL's ErrAmbiguous became
// a plain ErrRetriesExhausted.
func TestRunTxCallThatCommitsIsAmbiguousMariaDB(t *testing.T) {
	// On a handle not opened through the Connector, RunTx cannot see the
	// statements its function runs: a CALL that commits inside is the
	// caller's to avoid (RunTx's doc says so). Through the Connector it is
	// seen, and the failure after it is not taken for a clean rollback.
	for _, tc := range []struct {
		name      string
		connector bool
	}{
		{"Connector with a CommitVerifier", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db, raw, _ := openMySQL(t, sr.Config{}, nil)
			mustExec(t, raw, "CREATE TABLE t (v INT)")
			mustExec(t, raw, "CREATE PROCEDURE p() BEGIN COMMIT; SIGNAL SQLSTATE '40001' SET MYSQL_ERRNO = 1213, MESSAGE_TEXT = 'Deadlock found when trying to get lock'; END")
			p := newPolicy(t, sr.Config{Classifier: mysql.Classifier, MaxRetries: 2, CommitVerifier: undecidedVerifier{}})
			h := raw
			if tc.connector {
				h = db
			}
			err := sr.RunTx(context.Background(), h, p, sr.Write("order", nil), nil, func(ctx context.Context, tx *sql.Tx) error {
				if _, err := tx.ExecContext(ctx, "INSERT INTO t VALUES (1)"); err != nil {
					return err
				}
				_, err := tx.ExecContext(ctx, "CALL p()")
				return err
			})
			n := count(t, raw, "SELECT COUNT(*) FROM t")
			if n != 1 || !errors.Is(err, sr.ErrAmbiguous) {
				t.Errorf("got %v with %d rows in t, want ErrAmbiguous with 1: the procedure committed the INSERT", err, n)
			}
		})
	}
}

// SELECT of a function that writes, whose COMMIT is durable locally and
// then waits for a synchronous standby that does not exist (the backend is
// terminated in that wait), is ErrAmbiguous with the order committed once.
//
// History: found in the review of issue 12's changes (finding 7, on
// PostgreSQL): the SELECT was judged read-only, so its rows were returned
// unwrapped and the caller got a bare "unexpected EOF" (had the failure
// come before QueryContext returned, it would have been replayed).
func TestSelectOfWritingFunctionIsAmbiguousPostgres(t *testing.T) {
	srv := dbtest.StartPostgresWith(t, dbtest.Options{Settings: map[string]string{"synchronous_standby_names": "nostandby"}})
	admin, err := sql.Open("pgx", srv.DSN()+"&synchronous_commit=local")
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	mustExec(t, admin, "CREATE TABLE orders (id serial PRIMARY KEY)")
	mustExec(t, admin, "CREATE FUNCTION create_order() RETURNS int LANGUAGE sql AS $$ INSERT INTO orders DEFAULT VALUES RETURNING id $$")
	p := newPolicy(t, sr.Config{Classifier: postgres.Classifier, MaxRetries: 2})
	db, err := sr.Open("pgx", srv.DSN(), p)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
			_, _ = admin.Exec("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE wait_event = 'SyncRep'")
		}
	}()
	var id int
	err = db.QueryRow("SELECT create_order()").Scan(&id)
	n := count(t, admin, "SELECT count(*) FROM orders")
	if n != 1 || !errors.Is(err, sr.ErrAmbiguous) {
		t.Errorf("got %v with %d orders committed, want ErrAmbiguous with 1: a write judged a read", err, n)
	}
}
