package marker_test

import (
	"context"
	"database/sql"
	"strings"
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

// TestRunTxMarkerIgnoresTheTransactionsSchema: a transaction that switches
// its own schema (PostgreSQL: SET LOCAL search_path, a schema per tenant;
// MySQL: USE another database) where a table of the marker's name exists
// must still mark in the verifier's table. Unqualified, the marker landed
// in the tenant's table, the settle on another session found no key in its
// own, its tombstone landed, and RunTx ran a committed transaction again:
// two rows. The pool's own schema may need quotes (a PostgreSQL schema
// "App", as Prisma or EF Core create them; a MySQL database shop-main): a
// first fix that qualified only plain names left those unqualified, and the
// bug was back.
func TestRunTxMarkerIgnoresTheTransactionsSchema(t *testing.T) {
	for _, e := range []struct {
		name, driver string
		classifier   sr.Classifier
		verifier     func() sr.CommitVerifier
		// setup returns the DSN, the orders table's name as the test
		// writes it, and the statement that switches the transaction to
		// the tenant.
		setup func(t *testing.T) (dsn, orders, switchTo string)
	}{
		{"postgres", "pgx", postgres.Classifier, pgMarker, func(t *testing.T) (string, string, string) {
			return pgTenant(t, "")
		}},
		{"postgres, a schema that needs quotes", "pgx", postgres.Classifier, pgMarker, func(t *testing.T) (string, string, string) {
			return pgTenant(t, "App")
		}},
		{"mariadb", "mysql", mysql.Classifier, myMarker, func(t *testing.T) (string, string, string) {
			return myTenant(t, "")
		}},
		{"mariadb, a database that needs quotes", "mysql", mysql.Classifier, myMarker, func(t *testing.T) (string, string, string) {
			return myTenant(t, "-main")
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
			p, err := sr.New(sr.Config{Classifier: e.classifier, CommitVerifier: e.verifier(), Budget: sr.NoBudget,
				BaseDelay: time.Millisecond, MaxDelay: time.Millisecond, Jitter: sr.NoJitter})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var runs atomic.Int32
			err = sr.RunTx(ctx, db, p, sr.Write("tenant-order", nil), nil, func(ctx context.Context, tx *sql.Tx) error {
				runs.Add(1)
				if _, err := tx.ExecContext(ctx, "INSERT INTO "+orders+" (id) VALUES (1)"); err != nil {
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

func pgMarker() sr.CommitVerifier { return &postgres.MarkerVerifier{CreateTable: true} }
func myMarker() sr.CommitVerifier { return &mysql.MarkerVerifier{CreateTable: true} }

// pgTenant makes a fresh PostgreSQL database whose pool's schema is schema
// (public if ""), with an orders table there, and a schema tenant holding
// a marker table of its own; it returns the DSN, the orders table's name
// and the statement that moves a transaction to the tenant.
func pgTenant(t *testing.T, schema string) (dsn, orders, switchTo string) {
	dsn = dbtest.FreshPostgres(t)
	plain := open(t, "pgx", dsn)
	mustExec(t, plain, "CREATE SCHEMA tenant", "SET search_path TO tenant", postgres.MarkerTableDDL, "SET search_path TO DEFAULT")
	if schema == "" {
		mustExec(t, plain, "CREATE TABLE orders (id int NOT NULL)")
		return dsn, "orders", "SET LOCAL search_path TO tenant, public"
	}
	var db string
	if err := plain.QueryRow("SELECT current_database()").Scan(&db); err != nil {
		t.Fatal(err)
	}
	q := `"` + schema + `"`
	mustExec(t, plain, "CREATE SCHEMA "+q, "CREATE TABLE "+q+".orders (id int NOT NULL)",
		`ALTER DATABASE "`+db+`" SET search_path TO `+q+`, public`)
	return dsn, q + ".orders", "SET LOCAL search_path TO tenant, public"
}

// myTenant makes a fresh MariaDB database (its name with suffix added, if
// any: "-main" needs quotes) holding orders, and a database <fresh>_tenant
// holding a marker table of its own; it returns the DSN, the orders
// table's name and the statement that moves a transaction to the tenant.
func myTenant(t *testing.T, suffix string) (dsn, orders, switchTo string) {
	dsn = dbtest.FreshMySQL(t)
	plain := open(t, "mysql", dsn)
	var db string
	if err := plain.QueryRow("SELECT DATABASE()").Scan(&db); err != nil {
		t.Fatal(err)
	}
	tenant := db + "_tenant"
	mustExec(t, plain, "CREATE DATABASE "+tenant, "USE "+tenant, mysql.MarkerTableDDL, "USE "+db)
	t.Cleanup(func() { plain.Exec("DROP DATABASE IF EXISTS " + tenant) })
	if suffix == "" {
		mustExec(t, plain, "CREATE TABLE orders (id int NOT NULL)")
		return dsn, "`" + db + "`.orders", "USE " + tenant
	}
	main := db + suffix
	mustExec(t, plain, "CREATE DATABASE `"+main+"`", "CREATE TABLE `"+main+"`.orders (id int NOT NULL)")
	t.Cleanup(func() { plain.Exec("DROP DATABASE IF EXISTS `" + main + "`") })
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.DBName = main
	return cfg.FormatDSN(), "`" + main + "`.orders", "USE " + tenant
}

// open opens a pool of one session on dsn, closed at the test's end.
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
