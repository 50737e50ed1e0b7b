package sqlretry_test

import (
	"context"
	"testing"

	"github.com/sqlretry/sqlretry/internal/dbtest"
	"github.com/sqlretry/sqlretry/postgres"
)

// Review finding (wrong outcome, lost write): a PostgreSQL 14+ SQL-standard
// function body (CREATE FUNCTION/PROCEDURE … BEGIN ATOMIC …; END) run inside
// a transaction opened with a plain BEGIN makes the Session tracker believe
// the transaction ended: forEachStatement splits the text at the body's ";"
// and reads the trailing END as PostgreSQL's END (= COMMIT), and since
// straysAct() is false on PostgreSQL the stray BEGIN no longer turns the
// session Unsure (it did before 9f07b97..HEAD). The connection is then
// unpinned: after its backend dies, the next statement is retried on a new
// session in autocommit, the caller's later COMMIT "succeeds", and the
// transaction's earlier write is gone.
func TestReview2BeginAtomicEndsTrackedTx(t *testing.T) {
	ctx := context.Background()
	conn, admin := trackedSession(t, ctx, "pgx", dbtest.FreshPostgres(t), postgres.Classifier, "CREATE TABLE t (a int)")
	for _, q := range []string{
		"BEGIN",
		"INSERT INTO t VALUES (1)",
		"CREATE FUNCTION f() RETURNS int LANGUAGE sql BEGIN ATOMIC SELECT 1; END",
	} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	var pid int
	if err := conn.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	afterSessionDies(t, ctx, conn, admin, "pgx", "SELECT pg_terminate_backend(%d)", pid)
}
