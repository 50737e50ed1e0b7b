package sqlretry_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	sr "github.com/sqlretry/sqlretry"
)

func sprintf(f string, a ...any) string { return fmt.Sprintf(f, a...) }

// waitSessionGone waits until the session id has left the server's process list.
func waitSessionGone(t *testing.T, admin *sql.DB, driver string, id int) {
	t.Helper()
	q := "SELECT count(*) FROM pg_stat_activity WHERE pid = $1"
	if driver == "mysql" {
		q = "SELECT count(*) FROM information_schema.PROCESSLIST WHERE ID = ?"
	}
	for i := 0; i < 500; i++ {
		var n int
		if err := admin.QueryRow(q, id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("session %d still there", id)
}

// afterSessionDies ends the session pid (kill: the statement, with %d for
// the id) under conn, which holds an open transaction with row 1 written,
// and checks what the Connector then tells the caller: a read on conn must
// fail (never run on a new session, outside the transaction), and an
// INSERT of row 2 and a COMMIT must not both report success unless the
// table holds both rows.
func afterSessionDies(t *testing.T, ctx context.Context, conn *sql.Conn, admin *sql.DB, driver, kill string, pid int) {
	t.Helper()
	if _, err := admin.ExecContext(ctx, sprintf(kill, pid)); err != nil {
		t.Fatal(err)
	}
	waitSessionGone(t, admin, driver, pid)
	var n int
	readErr := conn.QueryRowContext(ctx, "SELECT count(*) FROM t").Scan(&n)
	if readErr == nil {
		t.Errorf("a read in a transaction whose session died was retried on a new session (count %d), outside the transaction", n)
	}
	_, insErr := conn.ExecContext(ctx, "INSERT INTO t VALUES (2)")
	_, commitErr := conn.ExecContext(ctx, "COMMIT")
	var rows []int
	r, err := admin.QueryContext(ctx, "SELECT a FROM t ORDER BY a")
	if err != nil {
		t.Fatal(err)
	}
	for r.Next() {
		var a int
		r.Scan(&a)
		rows = append(rows, a)
	}
	r.Close()
	t.Logf("read err %v, insert err %v, commit err %v, table now %v", readErr, insErr, commitErr, rows)
	if insErr == nil && commitErr == nil && len(rows) != 2 {
		t.Errorf("INSERT and COMMIT of the transaction reported success, yet the table holds %v (want [1 2]): the first write is lost and the second committed alone", rows)
	}
}

// trackedSession opens dsn through the Connector (classifier c) and as a
// plain admin pool, runs setup on the admin pool (CREATE TABLE t ...), and
// returns one session of the wrapped pool, whose tracker the test drives,
// and the admin pool; all are closed at the test's end.
func trackedSession(t *testing.T, ctx context.Context, driver, dsn string, c sr.Classifier, setup ...string) (*sql.Conn, *sql.DB) {
	t.Helper()
	db, err := sr.Open(driver, dsn, newPolicy(t, sr.Config{Classifier: c}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	admin, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	for _, q := range setup {
		if _, err := admin.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn, admin
}
