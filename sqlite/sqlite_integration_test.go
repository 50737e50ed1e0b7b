package sqlite_test

// Integration tests: each provokes a real SQLite error through
// modernc.org/sqlite on a database file in a temporary directory and checks
// how the classifier reads it. They need no server.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	sr "github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/sqlite"
)

// opTimeout bounds every single database call in these tests.
const opTimeout = 15 * time.Second

type want struct {
	retryable bool
	phase     sr.Phase
	code      string
}

func (w want) String() string {
	return fmt.Sprintf("{Retryable:%v Phase:%v Code:%q}", w.retryable, w.phase, w.code)
}

// checkClass classifies err and compares it with w; it logs the real error
// text, so -v shows what SQLite said.
func checkClass(t *testing.T, what string, err error, w want) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: got no error, want %v", what, w)
		return
	}
	c := sqlite.Classify(err)
	code := "none"
	var coder interface{ Code() int }
	if errors.As(err, &coder) {
		code = fmt.Sprint(coder.Code())
	}
	t.Logf("%s: %T %q (Code() %s) -> Retryable=%v Phase=%v Code=%q", what, err, err.Error(), code, c.Retryable, c.Phase, c.Code)
	if c.Retryable != w.retryable || c.Phase != w.phase || c.Code != w.code {
		t.Errorf("%s: error %q classified {Retryable:%v Phase:%v Code:%q}, want %v",
			what, err, c.Retryable, c.Phase, c.Code, w)
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	t.Cleanup(cancel)
	return ctx
}

// conn opens its own pool on path and pins one connection of it, so that
// two conns are two SQLite connections contending for the file's locks.
func conn(t *testing.T, dsn string) *sql.Conn {
	t.Helper()
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		t.Fatal(err)
	}
	c, err := db.Conn(ctxT(t))
	if err != nil {
		db.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); db.Close() })
	return c
}

func mustExec(t *testing.T, c *sql.Conn, qs ...string) {
	t.Helper()
	for _, q := range qs {
		if _, err := c.ExecContext(ctxT(t), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

func exec(t *testing.T, c *sql.Conn, q string) error {
	_, err := c.ExecContext(ctxT(t), q)
	return err
}

// dsn returns a DSN for a new database file with the given journal mode and
// busy timeout (milliseconds), holding table t(id integer primary key, v
// integer not null).
func dsn(t *testing.T, journal string, busyMS int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "test.db")
	d := fmt.Sprintf("file:%s?_pragma=busy_timeout(%d)&_pragma=journal_mode(%s)", path, busyMS, journal)
	setup := conn(t, d)
	mustExec(t, setup, "CREATE TABLE t (id INTEGER PRIMARY KEY, v INTEGER NOT NULL)", "INSERT INTO t VALUES (1, 0), (2, 0)")
	return d
}

// TestIntegrationBusy: two connections to one file with busy_timeout 0.
func TestIntegrationBusy(t *testing.T) {
	busy := want{true, sr.NotApplied, "SQLITE_BUSY"}
	for _, journal := range []string{"delete", "wal"} {
		t.Run(journal, func(t *testing.T) {
			d := dsn(t, journal, 0)
			a, b := conn(t, d), conn(t, d)
			mustExec(t, a, "BEGIN IMMEDIATE", "UPDATE t SET v = v + 1 WHERE id = 1")
			checkClass(t, "BEGIN IMMEDIATE while another connection writes", exec(t, b, "BEGIN IMMEDIATE"), busy)
			checkClass(t, "autocommit UPDATE while another connection writes", exec(t, b, "UPDATE t SET v = v + 1 WHERE id = 2"), busy)
			mustExec(t, a, "COMMIT")
			// What failed had no effect: only A's update is there.
			var sum int
			if err := b.QueryRowContext(ctxT(t), "SELECT sum(v) FROM t").Scan(&sum); err != nil {
				t.Fatal(err)
			}
			if sum != 1 {
				t.Errorf("sum(v) after the busy statements = %d, want 1 (only the holder's update)", sum)
			}
		})
	}
}

// TestIntegrationBusyUpgrade: in rollback-journal mode two deferred
// transactions that both read and then both write deadlock on the lock
// upgrade. SQLite returns SQLITE_BUSY to the second writer without calling
// the busy handler, although its busy_timeout is 5 s; the first writer's
// COMMIT is SQLITE_BUSY while the other still holds its read lock, and that
// COMMIT, unlike any other statement, can itself be retried: it succeeds
// once the other transaction has rolled back.
func TestIntegrationBusyUpgrade(t *testing.T) {
	d := dsn(t, "delete", 5000)
	a, b := conn(t, d), conn(t, d)
	mustExec(t, a, "PRAGMA busy_timeout = 0", "BEGIN", "SELECT sum(v) FROM t")
	mustExec(t, b, "BEGIN", "SELECT sum(v) FROM t")
	mustExec(t, a, "UPDATE t SET v = v + 1 WHERE id = 1")
	busy := want{true, sr.NotApplied, "SQLITE_BUSY"}
	checkClass(t, "second writer upgrading its read lock", exec(t, b, "UPDATE t SET v = v + 1 WHERE id = 2"), busy)
	checkClass(t, "first writer's COMMIT while a reader holds its lock", exec(t, a, "COMMIT"), busy)
	mustExec(t, b, "ROLLBACK")
	if err := exec(t, a, "COMMIT"); err != nil {
		t.Fatalf("COMMIT again after the reader rolled back: got %v, want success", err)
	}
	var v int
	if err := b.QueryRowContext(ctxT(t), "SELECT v FROM t WHERE id = 1").Scan(&v); err != nil {
		t.Fatal(err)
	}
	if v != 1 {
		t.Errorf("row 1 after the retried COMMIT: v = %d, want 1", v)
	}
}

// TestIntegrationBusySnapshot: in WAL mode a read transaction whose snapshot
// another connection has overtaken cannot become a write transaction:
// SQLITE_BUSY_SNAPSHOT (517), only a whole-transaction retry can succeed.
func TestIntegrationBusySnapshot(t *testing.T) {
	d := dsn(t, "wal", 0)
	a, b := conn(t, d), conn(t, d)
	mustExec(t, a, "BEGIN", "SELECT sum(v) FROM t")
	mustExec(t, b, "UPDATE t SET v = v + 1 WHERE id = 2")
	checkClass(t, "write on a stale WAL snapshot", exec(t, a, "UPDATE t SET v = v + 1 WHERE id = 1"), want{true, sr.NotApplied, "SQLITE_BUSY_SNAPSHOT"})
	mustExec(t, a, "ROLLBACK")
}

// TestIntegrationPermanent: errors that retrying cannot fix.
func TestIntegrationPermanent(t *testing.T) {
	d := dsn(t, "wal", 0)
	c := conn(t, d)
	for _, tc := range []struct {
		what, q string
		w       want
	}{
		{"syntax error", "SELEC 1", want{false, sr.NotApplied, "SQLITE_ERROR"}},
		{"missing table", "SELECT * FROM no_such_table", want{false, sr.NotApplied, "SQLITE_ERROR"}},
		{"primary key violation", "INSERT INTO t VALUES (1, 0)", want{false, sr.NotApplied, "SQLITE_CONSTRAINT_PRIMARYKEY"}},
		{"NOT NULL violation", "INSERT INTO t VALUES (3, NULL)", want{false, sr.NotApplied, "SQLITE_CONSTRAINT_NOTNULL"}},
	} {
		checkClass(t, tc.what, exec(t, c, tc.q), tc.w)
	}
	mustExec(t, c, "CREATE TABLE u (k TEXT UNIQUE)", "INSERT INTO u VALUES ('a')")
	checkClass(t, "unique violation", exec(t, c, "INSERT INTO u VALUES ('a')"), want{false, sr.NotApplied, "SQLITE_CONSTRAINT_UNIQUE"})

	// A read-only connection: SQLite's "permission denied".
	ro := conn(t, d+"&mode=ro")
	checkClass(t, "write on a read-only connection", exec(t, ro, "INSERT INTO t VALUES (9, 9)"), want{false, sr.NotApplied, "SQLITE_READONLY"})
}

// TestIntegrationInterrupt: a caller's cancellation while a statement runs.
// modernc.org/sqlite interrupts the statement (sqlite3_interrupt); what the
// caller gets is classified as a context error or SQLITE_INTERRUPT, never
// retryable.
func TestIntegrationInterrupt(t *testing.T) {
	d := dsn(t, "wal", 0)
	c := conn(t, d)
	ctx, cancel := context.WithCancel(ctxT(t))
	rows, err := c.QueryContext(ctx, "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT n FROM r")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for i := 0; i < 3 && rows.Next(); i++ {
	}
	cancel()
	for i := 0; i < 1_000_000 && rows.Next(); i++ { // ends once the interrupt lands
	}
	err = rows.Err()
	if err == nil {
		t.Fatalf("an endless query after cancel: rows ended without an error")
	}
	cl := sqlite.Classify(err)
	t.Logf("cancelled query: %T %q -> Retryable=%v Phase=%v Code=%q", err, err.Error(), cl.Retryable, cl.Phase, cl.Code)
	if cl.Retryable {
		t.Errorf("cancelled query: error %q classified retryable, want not retryable (the caller cancelled)", err)
	}
}
