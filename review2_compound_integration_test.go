package sqlretry_test

import (
	"context"
	"testing"

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
	conn, admin := trackedSession(t, ctx, "mysql", dbtest.FreshMySQL(t), srmysql.Classifier, "CREATE TABLE t (a int) ENGINE=InnoDB")
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
