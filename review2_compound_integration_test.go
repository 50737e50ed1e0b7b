package sqlretry_test

import (
	"context"
	"database/sql"
	"testing"

	sr "github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/internal/dbtest"
	srmysql "github.com/sqlretry/sqlretry/mysql"
)

// Review finding (wrong outcome, lost write): MariaDB's anonymous compound
// statement, BEGIN NOT ATOMIC … END, run in autocommit can open a
// transaction that outlives it (START TRANSACTION inside the block). The
// Session tracker splits the block at its inner ";", reads the leading
// BEGIN NOT … as opening a transaction and the closing END as COMMIT, and
// ends up "autocommit, no transaction open, sure" while the server holds an
// open transaction with the block's INSERT. After the session dies, the
// next statement is retried on a new session in autocommit; the caller's
// COMMIT then "succeeds" and the block's write is gone.
func TestReview2MariaDBCompoundLeavesTxOpen(t *testing.T) {
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
	block := "BEGIN NOT ATOMIC START TRANSACTION; INSERT INTO t VALUES (1); END"
	if _, err := conn.ExecContext(ctx, block); err != nil {
		t.Fatalf("%s: %v", block, err)
	}
	var inTx, pid int
	if err := conn.QueryRowContext(ctx, "SELECT @@in_transaction, CONNECTION_ID()").Scan(&inTx, &pid); err != nil {
		t.Fatal(err)
	}
	if inTx != 1 {
		t.Fatalf("@@in_transaction = %d after the block: scenario invalid", inTx)
	}
	afterSessionDies(t, ctx, conn, admin, "mysql", "KILL CONNECTION %d", pid)
}
