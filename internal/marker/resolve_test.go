package marker_test

import (
	"context"
	"database/sql"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sr "github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/faults"
	"github.com/sqlretry/sqlretry/internal/dbtest"
	"github.com/sqlretry/sqlretry/mysql"
	"github.com/sqlretry/sqlretry/postgres"
)

// TestRunTxMarkerIgnoresTheTransactionsSchema: a transaction that switches
// its own schema (PostgreSQL: SET LOCAL search_path, a schema per tenant;
// MySQL: USE another database) where a table of the marker's name exists
// must still mark in the verifier's table. Unqualified, the marker landed
// in the tenant's table, the settle on another session found no key in its
// own, its tombstone landed, and RunTx ran a committed transaction again:
// two rows.
func TestRunTxMarkerIgnoresTheTransactionsSchema(t *testing.T) {
	for _, e := range []struct {
		name, driver string
		classifier   sr.Classifier
		verifier     sr.CommitVerifier
		fresh        func(testing.TB) string
		tenant       func(t *testing.T, plain *sql.DB) (switchTo string) // creates the tenant's marker table
	}{
		{"postgres", "pgx", postgres.Classifier, &postgres.MarkerVerifier{CreateTable: true}, dbtest.FreshPostgres,
			func(t *testing.T, plain *sql.DB) string {
				mustExec(t, plain, "CREATE SCHEMA tenant", "SET search_path TO tenant", postgres.MarkerTableDDL, "SET search_path TO DEFAULT")
				return "SET LOCAL search_path TO tenant, public"
			}},
		{"mariadb", "mysql", mysql.Classifier, &mysql.MarkerVerifier{CreateTable: true}, dbtest.FreshMySQL,
			func(t *testing.T, plain *sql.DB) string {
				var db string
				if err := plain.QueryRow("SELECT DATABASE()").Scan(&db); err != nil {
					t.Fatal(err)
				}
				tenant := db + "_tenant"
				mustExec(t, plain, "CREATE DATABASE "+tenant, "USE "+tenant, mysql.MarkerTableDDL)
				t.Cleanup(func() { plain.Exec("DROP DATABASE IF EXISTS " + tenant) })
				return "USE " + tenant
			}},
	} {
		t.Run(e.name, func(t *testing.T) {
			dsn := e.fresh(t)
			plain, err := sql.Open(e.driver, dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer plain.Close()
			plain.SetMaxOpenConns(1) // the tenant setup's USE stays on its session
			mustExec(t, plain, "CREATE TABLE orders (id int NOT NULL)")
			switchTo := e.tenant(t, plain)
			table := "orders"
			if e.name == "mariadb" {
				var db string
				if err := plain.QueryRow("SELECT DATABASE()").Scan(&db); err != nil {
					t.Fatal(err)
				}
				table = strings.TrimSuffix(db, "_tenant") + ".orders"
			}
			plan := faults.MustPlan(faults.Config{Rules: []faults.Rule{{Kind: faults.CommitAppliedReplyLost}}})
			db, err := faults.Open(e.driver, dsn, plan)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			p, err := sr.New(sr.Config{Classifier: e.classifier, CommitVerifier: e.verifier, Budget: sr.NoBudget,
				BaseDelay: time.Millisecond, MaxDelay: time.Millisecond, Jitter: sr.NoJitter})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var runs atomic.Int32
			err = sr.RunTx(ctx, db, p, sr.Write("tenant-order", nil), nil, func(ctx context.Context, tx *sql.Tx) error {
				runs.Add(1)
				if _, err := tx.ExecContext(ctx, "INSERT INTO "+table+" (id) VALUES (1)"); err != nil {
					return err
				}
				_, err := tx.ExecContext(ctx, switchTo)
				return err
			})
			if err != nil {
				t.Fatalf("RunTx: %v", err)
			}
			if n := plan.Counts().Faults[faults.CommitAppliedReplyLost]; n != 1 {
				t.Fatalf("COMMIT faults: %d, want 1: the test proved nothing", n)
			}
			var rows int
			if err := plain.QueryRow("SELECT count(*) FROM " + table).Scan(&rows); err != nil {
				t.Fatal(err)
			}
			if rows != 1 || runs.Load() != 1 {
				t.Errorf("%d rows after %d runs; want 1 after 1 (the committed transaction ran again)", rows, runs.Load())
			}
		})
	}
}

func mustExec(t *testing.T, db *sql.DB, stmts ...string) {
	t.Helper()
	for _, s := range stmts {
		for _, one := range strings.Split(s, ";\n") {
			if strings.TrimSpace(one) == "" {
				continue
			}
			if _, err := db.Exec(one); err != nil {
				t.Fatalf("%s: %v", one, err)
			}
		}
	}
}
