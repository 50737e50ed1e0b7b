package sqlretry_test

import (
	"context"
	"testing"

	sr "github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/internal/dbtest"
	srmysql "github.com/sqlretry/sqlretry/mysql"
	"github.com/sqlretry/sqlretry/postgres"
)

// Review finding (wrong outcome, lost write): the Session tracker reads
// every text with the shared (any-dialect) lexer and trusts a COMMIT it
// sees there even when the engine the session is on reads no COMMIT in the
// text: MySQL's "#" comment and backslash escapes, PostgreSQL's E'…'
// strings. Session.hidden only covers the reverse case (a dialect shows a
// COMMIT the shared reading does not). A single SELECT whose comment or
// string literal contains "; COMMIT" makes the tracker believe the
// transaction ended while it is open: the connection is unpinned, and after
// the session dies the next statement of the transaction is retried on a new
// session in autocommit. The caller's COMMIT then "succeeds" and the
// transaction's earlier write is gone.
func TestReview2ForeignCommitInCommentOrString(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name, driver, text string
		class              sr.Classifier
		dsn                func(t *testing.T) string
		pid, kill          string
	}{
		{"mariadb-hash-comment", "mysql", "SELECT 1 # note; COMMIT", srmysql.Classifier, func(t *testing.T) string { return dbtest.FreshMySQL(t) },
			"SELECT CONNECTION_ID()", "KILL CONNECTION %d"},
		{"mariadb-backslash-string", "mysql", `SELECT 'it\'; COMMIT; -- '`, srmysql.Classifier, func(t *testing.T) string { return dbtest.FreshMySQL(t) },
			"SELECT CONNECTION_ID()", "KILL CONNECTION %d"},
		{"postgres-E-string", "pgx", `SELECT E'it\'; COMMIT; -- '`, postgres.Classifier, func(t *testing.T) string { return dbtest.FreshPostgres(t) },
			"SELECT pg_backend_pid()", "SELECT pg_terminate_backend(%d)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			conn, admin := trackedSession(t, ctx, c.driver, c.dsn(t), c.class, "CREATE TABLE t (a int)")
			for _, q := range []string{"BEGIN", "INSERT INTO t VALUES (1)"} {
				if _, err := conn.ExecContext(ctx, q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			var s string
			if err := conn.QueryRowContext(ctx, c.text).Scan(&s); err != nil {
				t.Fatalf("%s: %v", c.text, err)
			}
			var pid int
			if err := conn.QueryRowContext(ctx, c.pid).Scan(&pid); err != nil {
				t.Fatal(err)
			}
			// The server still has the transaction open: the text committed nothing.
			var seen int
			if err := admin.QueryRowContext(ctx, "SELECT count(*) FROM t").Scan(&seen); err != nil {
				t.Fatal(err)
			}
			if seen != 0 {
				t.Fatalf("the text committed on the server (%d rows visible): scenario invalid", seen)
			}
			afterSessionDies(t, ctx, conn, admin, c.driver, c.kill, pid)
		})
	}
}
