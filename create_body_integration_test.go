package sqlretry_test

import (
	"context"
	"database/sql"
	"testing"

	sr "github.com/sqlretry/sqlretry"
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
	dsn := dbtest.FreshMySQL(t)
	p := newPolicy(t, sr.Config{Classifier: srmysql.Classifier})
	db, err := sr.Open("mysql", dsn, p)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	admin, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := db.ExecContext(ctx, "CREATE TABLE t (a int) ENGINE=InnoDB"); err != nil {
		t.Fatal(err)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
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
