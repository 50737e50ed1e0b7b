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
	"github.com/sqlretry/sqlretry/postgres"
)

// TestRunTxMarkerSchemaNeedingQuotes: the fix of 44f0510 qualifies the
// marker table only with a schema it can write unquoted. A PostgreSQL
// schema with upper case ("App", as Prisma or EF Core create them) or a
// MySQL database with a hyphen ("shop-main") is left unqualified, silently,
// and the original bug is back: a transaction that switches its schema
// (SET LOCAL search_path, USE) marks into the tenant's table, the settle on
// another session finds no key in the pool's, its tombstone lands, and
// RunTx runs a committed transaction again: 2 rows.
func TestRunTxMarkerSchemaNeedingQuotes(t *testing.T) {
	for _, e := range []struct {
		name, driver string
		classifier   sr.Classifier
		verifier     sr.CommitVerifier
		// setup returns the DSN whose default schema/database needs quotes,
		// the orders table's quoted name, and the statement that switches
		// the transaction to the tenant.
		setup func(t *testing.T) (dsn, orders, switchTo string)
	}{
		{"postgres", "pgx", postgres.Classifier, &postgres.MarkerVerifier{CreateTable: true}, func(t *testing.T) (string, string, string) {
			dsn := dbtest.FreshPostgres(t)
			plain := open(t, "pgx", dsn)
			var db string
			if err := plain.QueryRow("SELECT current_database()").Scan(&db); err != nil {
				t.Fatal(err)
			}
			mustExec(t, plain, `CREATE SCHEMA "App"`, `CREATE TABLE "App".orders (id int NOT NULL)`,
				"CREATE SCHEMA tenant", "SET search_path TO tenant", postgres.MarkerTableDDL, "SET search_path TO DEFAULT",
				`ALTER DATABASE "`+db+`" SET search_path TO "App", public`)
			return dsn, `"App".orders`, "SET LOCAL search_path TO tenant, public"
		}},
		{"mariadb", "mysql", mysql.Classifier, &mysql.MarkerVerifier{CreateTable: true}, func(t *testing.T) (string, string, string) {
			dsn := dbtest.FreshMySQL(t)
			plain := open(t, "mysql", dsn)
			var db string
			if err := plain.QueryRow("SELECT DATABASE()").Scan(&db); err != nil {
				t.Fatal(err)
			}
			main, tenant := db+"-main", db+"_tenant"
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
			return cfg.FormatDSN(), "`" + main + "`.orders", "USE " + tenant
		}},
	} {
		t.Run(e.name, func(t *testing.T) {
			dsn, orders, switchTo := e.setup(t)
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
				if _, err := tx.ExecContext(ctx, "INSERT INTO orders (id) VALUES (1)"); err != nil {
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
			if err := open(t, e.driver, dsn).QueryRow("SELECT count(*) FROM " + orders).Scan(&rows); err != nil {
				t.Fatal(err)
			}
			if rows != 1 || runs.Load() != 1 {
				t.Errorf("%d rows after %d runs; want 1 after 1 (the committed transaction ran again: its marker went to the tenant's table)", rows, runs.Load())
			}
		})
	}
}

func open(t *testing.T, driver, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	return db
}
