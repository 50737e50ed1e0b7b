package sqlretry_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	_ "modernc.org/sqlite"

	sr "github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/sqlite"
)

// A COMMIT that fails can leave the transaction open on its session:
// SQLite's COMMIT answered SQLITE_BUSY keeps the transaction active (so
// that COMMIT can be tried again), as does a Galera node's COMMIT refused
// with 1047. database/sql hands the session back to the pool all the same,
// and the next statements on it ran inside the dead attempt's transaction:
// an autocommit INSERT reported success and was never committed. RunTx
// must not hand such a session back, nor must the Connector.
func TestFailedCommitLeavesNoOpenTransactionSQLite(t *testing.T) {
	for _, viaConnector := range []bool{false, true} {
		name := "plain handle"
		if viaConnector {
			name = "Connector"
		}
		t.Run(name, func(t *testing.T) {
			dsn := "file:" + filepath.Join(t.TempDir(), "x.db") + "?_pragma=journal_mode(delete)"
			p := newPolicy(t, sr.Config{Classifier: sqlite.Classifier, MaxRetries: sr.NoRetries, ContentionRetries: sr.NoRetries})
			var db *sql.DB
			var err error
			if viaConnector {
				db, err = sr.Open("sqlite", dsn, p)
			} else {
				db, err = sql.Open("sqlite", dsn)
			}
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			db.SetMaxOpenConns(1) // the session the failed COMMIT left is the one reused
			ctx := context.Background()
			if _, err := db.ExecContext(ctx, "CREATE TABLE t (v int)"); err != nil {
				t.Fatal(err)
			}
			reader, err := sql.Open("sqlite", dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer reader.Close()
			if _, err := reader.ExecContext(ctx, "INSERT INTO t VALUES (0), (0)"); err != nil {
				t.Fatal(err)
			}
			// A read in progress holds a SHARED lock: the writer's COMMIT
			// cannot take the EXCLUSIVE lock it needs and fails busy.
			rows, err := reader.QueryContext(ctx, "SELECT v FROM t")
			if err != nil {
				t.Fatal(err)
			}
			rows.Next()
			err = sr.RunTx(ctx, db, p, sr.Write("insert-1", nil), nil, func(ctx context.Context, tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, "INSERT INTO t VALUES (1)")
				return err
			})
			if err == nil {
				t.Fatal("RunTx succeeded although its COMMIT could not take the lock; the test proves nothing")
			}
			t.Logf("RunTx: %v", err)
			rows.Close()
			if _, err := db.ExecContext(ctx, "INSERT INTO t VALUES (2)"); err != nil {
				t.Fatalf("an autocommit INSERT after the failed COMMIT: %v", err)
			}
			var ones, twos int
			if err := reader.QueryRowContext(ctx, "SELECT count(*) FILTER (WHERE v = 1), count(*) FILTER (WHERE v = 2) FROM t").Scan(&ones, &twos); err != nil {
				t.Fatal(err)
			}
			if ones != 0 || twos != 1 {
				t.Errorf("another connection sees %d rows of the failed transaction and %d of the INSERT reported done; want 0 and 1", ones, twos)
			}
		})
	}
}
