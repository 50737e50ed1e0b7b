package sqlretry_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	sr "github.com/sqlretry/sqlretry"
)

// TestDoInsideRunTxRunsOnceMariaDB: Policy.Do around a statement of a RunTx
// transaction, whose statement is a deadlock victim. MariaDB's 1213 rolls the
// whole transaction back; Do replayed the statement on its own, in autocommit
// mode on the same session, and RunTx returned nil for a transaction applied
// in part (log 0, v1 1, v2 0, on both a plain handle and the Connector). Do
// runs a transaction's statement once now, and RunTx retries the whole.
func TestDoInsideRunTxRunsOnceMariaDB(t *testing.T) {
	for _, viaConnector := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain handle", true: "Connector"}[viaConnector], func(t *testing.T) {
			db, raw, p := openMySQL(t, sr.Config{}, nil)
			if !viaConnector {
				db = raw
			}
			mustExec(t, raw, "CREATE TABLE acct (id int PRIMARY KEY, v int NOT NULL)")
			mustExec(t, raw, "CREATE TABLE log (s varchar(10))")
			mustExec(t, raw, "CREATE TABLE heavy (i int)")
			mustExec(t, raw, "INSERT INTO acct VALUES (1, 0), (2, 0)")
			ctx := context.Background()
			rival, err := raw.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer rival.Rollback()
			if _, err := rival.Exec("UPDATE acct SET v = v WHERE id = 1"); err != nil {
				t.Fatal(err)
			}
			// The rival has done more work, so InnoDB picks ours as victim.
			if _, err := rival.Exec("INSERT INTO heavy SELECT seq FROM seq_1_to_200"); err != nil {
				t.Fatal(err)
			}
			closed := make(chan struct{})
			go func() {
				defer close(closed)
				// Once our UPDATE of row 1 waits, close the cycle.
				for count(t, raw, "SELECT count(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE 'UPDATE acct SET v = v + 1 WHERE id = 1%'") == 0 {
					time.Sleep(2 * time.Millisecond)
				}
				if _, err := rival.Exec("UPDATE acct SET v = v WHERE id = 2"); err != nil {
					t.Error(err)
				}
				_ = rival.Commit()
			}()
			runs := 0
			err = sr.RunTx(ctx, db, p, sr.Write("pay", nil), nil, func(ctx context.Context, tx *sql.Tx) error {
				runs++
				if _, err := tx.ExecContext(ctx, "INSERT INTO log VALUES ('a')"); err != nil {
					return err
				}
				if _, err := tx.ExecContext(ctx, "UPDATE acct SET v = v + 1 WHERE id = 2"); err != nil {
					return err
				}
				return p.Do(ctx, sr.Idempotent("upd"), func(ctx context.Context) error {
					_, err := tx.ExecContext(ctx, "UPDATE acct SET v = v + 1 WHERE id = 1")
					return err
				})
			})
			<-closed
			logs := count(t, raw, "SELECT count(*) FROM log")
			v1 := count(t, raw, "SELECT v FROM acct WHERE id = 1")
			v2 := count(t, raw, "SELECT v FROM acct WHERE id = 2")
			if err != nil || logs != 1 || v1 != 1 || v2 != 1 {
				t.Fatalf("RunTx = %v after %d runs; log %d, v1 %d, v2 %d; want nil and each applied once", err, runs, logs, v1, v2)
			}
			if runs < 2 {
				t.Errorf("fn ran %d times; the test needs our transaction to be the deadlock victim", runs)
			}
		})
	}
}
