package marker_test

import (
	"context"
	"database/sql"
	"sync/atomic"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	sr "github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/faults"
	"github.com/sqlretry/sqlretry/internal/dbtest"
	"github.com/sqlretry/sqlretry/mysql"
)

// TestRunTxMarkerTableNeverSwapped: while the schema is
// unresolved (a database name the verifier will not write unquoted:
// "shop-main"), resolve asks again at every call, on whatever pooled
// session it gets. A transaction that switches nothing marks into the
// pool's table (unqualified, on its session: shop-main); another request
// of the process meanwhile left a session on the pool after USE tenant
// (MySQL's USE is per session and outlives the transaction); the
// settle's resolve gets that session, qualifies the table as
// tenant.sqlretry_commit_marks from then on, finds no key there, lands its
// tombstone, and RunTx runs the committed transaction again: 2 rows.
func TestRunTxMarkerTableNeverSwapped(t *testing.T) {
	dsn := dbtest.FreshMySQL(t)
	plain := open(t, "mysql", dsn)
	var base string
	if err := plain.QueryRow("SELECT DATABASE()").Scan(&base); err != nil {
		t.Fatal(err)
	}
	main, tenant := base+"-main", base+"_tenant"
	mustExec(t, plain, "CREATE DATABASE `"+main+"`", "CREATE TABLE `"+main+"`.orders (id int NOT NULL)",
		"CREATE DATABASE "+tenant, "USE "+tenant, mysql.MarkerTableDDL)
	t.Cleanup(func() {
		plain.Exec("DROP DATABASE IF EXISTS `" + main + "`")
		plain.Exec("DROP DATABASE IF EXISTS " + tenant)
	})
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.DBName = main
	plan := faults.MustPlan(faults.Config{Rules: []faults.Rule{{Kind: faults.CommitAppliedReplyLost}}})
	db, err := faults.Open("mysql", cfg.FormatDSN(), plan)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	p, err := sr.New(sr.Config{Classifier: mysql.Classifier, CommitVerifier: &mysql.MarkerVerifier{CreateTable: true}, Budget: sr.NoBudget,
		BaseDelay: time.Millisecond, MaxDelay: time.Millisecond, Jitter: sr.NoJitter})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var runs atomic.Int32
	err = sr.RunTx(ctx, db, p, sr.Write("order", nil), nil, func(ctx context.Context, tx *sql.Tx) error {
		if runs.Add(1) == 1 {
			// Another request of the process, on its own session of the pool.
			c, err := db.Conn(ctx)
			if err != nil {
				return err
			}
			if _, err := c.ExecContext(ctx, "USE "+tenant); err != nil {
				return err
			}
			c.Close()
		}
		_, err := tx.ExecContext(ctx, "INSERT INTO `"+main+"`.orders (id) VALUES (1)")
		return err
	})
	if err != nil {
		t.Fatalf("RunTx: %v", err)
	}
	if n := plan.Counts().Faults[faults.CommitAppliedReplyLost]; n != 1 {
		t.Fatalf("COMMIT faults: %d, want 1: the test proved nothing", n)
	}
	var rows int
	if err := plain.QueryRow("SELECT count(*) FROM `" + main + "`.orders").Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 1 || runs.Load() != 1 {
		t.Errorf("%d rows after %d runs; want 1 after 1 (marked in %s's table, settled in %s's)", rows, runs.Load(), main, tenant)
	}
}
