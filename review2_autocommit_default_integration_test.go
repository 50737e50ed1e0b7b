package sqlretry_test

import (
	"context"
	"testing"

	"github.com/sqlretry/sqlretry/internal/dbtest"
	srmysql "github.com/sqlretry/sqlretry/mysql"
)

// Review finding (wrong outcome, lost write): Session.set reads
// "SET autocommit = DEFAULT" as autocommit on (switchValue maps DEFAULT to
// on), but MySQL and MariaDB set the session value to the GLOBAL one, which
// a server configured with autocommit=0 makes off. The tracker then takes
// the session for autocommit while every write opens a transaction that
// stays open: after the session dies, the next statement is replayed on a
// new session, the caller's COMMIT "succeeds", and the earlier write is gone.
func TestReview2SetAutocommitDefault(t *testing.T) {
	ctx := context.Background()
	srv := dbtest.StartMariaDBWith(t, dbtest.Options{Settings: map[string]string{"autocommit": "0"}})
	conn, admin := trackedSession(t, ctx, "mysql", srv.DSN(), srmysql.Classifier, "CREATE TABLE t (a int) ENGINE=InnoDB", "COMMIT")
	for _, q := range []string{"SET autocommit = DEFAULT", "INSERT INTO t VALUES (1)"} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	var ac, inTx, pid int
	if err := conn.QueryRowContext(ctx, "SELECT @@autocommit, @@in_transaction, CONNECTION_ID()").Scan(&ac, &inTx, &pid); err != nil {
		t.Fatal(err)
	}
	if ac != 0 || inTx != 1 {
		t.Fatalf("@@autocommit=%d @@in_transaction=%d: scenario invalid", ac, inTx)
	}
	afterSessionDies(t, ctx, conn, admin, "mysql", "KILL CONNECTION %d", pid)
}
