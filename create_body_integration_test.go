package sqlretry_test

import (
	"context"
	"testing"

	"github.com/sqlretry/sqlretry/internal/dbtest"
	srmysql "github.com/sqlretry/sqlretry/mysql"
)

// A procedure's body runs when it is called, not when it is created: the
// tracker read the SET autocommit = 1 inside CREATE PROCEDURE … BEGIN …
// END as run, and took a session with autocommit off for one with it on.
// The next INSERT (in the session's implicit transaction) was then followed,
// after the session died, by statements replayed on a new session in
// autocommit: INSERT and COMMIT reported success, the first write was gone.
func TestCreateProcedureBodyRunsNothingMariaDB(t *testing.T) {
	ctx := context.Background()
	conn, admin := trackedSession(t, ctx, "mysql", dbtest.FreshMySQL(t), srmysql.Classifier, "CREATE TABLE t (a int) ENGINE=InnoDB")
	for _, q := range []string{
		"SET autocommit = 0",
		"CREATE PROCEDURE p() BEGIN DECLARE x INT; SET autocommit = 1; END",
		"INSERT INTO t VALUES (1)",
	} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	var ac, pid int
	if err := conn.QueryRowContext(ctx, "SELECT @@autocommit, CONNECTION_ID()").Scan(&ac, &pid); err != nil {
		t.Fatal(err)
	}
	if ac != 0 {
		t.Fatalf("@@autocommit = %d after CREATE PROCEDURE: scenario invalid", ac)
	}
	afterSessionDies(t, ctx, conn, admin, "mysql", "KILL CONNECTION %d", pid)
}
