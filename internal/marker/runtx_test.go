package marker_test

// RunTx with a marker verifier and no Op Verify settles an ambiguous COMMIT
// on each engine, both ways: PostgreSQL, MariaDB and SQLite through the
// fault driver (the COMMIT lands and its reply is lost, or it is lost before
// it arrives and the connection dies), SQL Server through go-mssqldb and the
// TDS responder (the same two faults), whose script keeps the marker table
// from what the marker's INSERTs (arguments included) committed.

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
	_ "github.com/microsoft/go-mssqldb"
	_ "modernc.org/sqlite"

	sr "github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/faults"
	"github.com/sqlretry/sqlretry/faults/proxy"
	"github.com/sqlretry/sqlretry/internal/dbtest"
	"github.com/sqlretry/sqlretry/internal/tdstest"
	"github.com/sqlretry/sqlretry/mssql"
	"github.com/sqlretry/sqlretry/mysql"
	"github.com/sqlretry/sqlretry/postgres"
	"github.com/sqlretry/sqlretry/sqlite"
)

// markerVerifier is what every engine's MarkerVerifier is.
type markerVerifier interface {
	sr.CommitVerifier
	sr.TxSetup
}

// liar answers Committed with a fixed verdict: the scenarios must catch it.
type liar struct {
	markerVerifier
	answer bool
}

func (l liar) Committed(context.Context, *sql.DB, string) (bool, error) { return l.answer, nil }

// cut is how the first COMMIT fails.
type cut int

const (
	appliedReplyLost cut = iota // COMMIT lands; its reply is lost
	lostBeforeCommit            // COMMIT is lost before it arrives; the connection dies
)

// engineRig opens, for one scenario, a handle whose first COMMIT fails by
// c, and reports how many rows the scenario's transaction left and how many
// faults fired.
type engineRig struct {
	name       string
	classifier sr.Classifier
	verifier   func() markerVerifier
	open       func(t *testing.T, c cut, honest bool) (db *sql.DB, rows func() int, fired func() int)
}

func TestRunTxSettlesAmbiguousCommitWithMarker(t *testing.T) {
	for _, rig := range []engineRig{postgresRig(t), mariaRig(t), sqliteRig(t), mssqlRig()} {
		t.Run(rig.name, func(t *testing.T) {
			for _, sc := range []struct {
				name     string
				cut      cut
				lie      *bool
				wantRuns int32
				wantRows int
			}{
				{"applied: success, not replayed", appliedReplyLost, nil, 1, 1},
				{"not applied: replayed once", lostBeforeCommit, nil, 2, 1},
				// A verifier that always says "committed" or "not
				// committed" breaks the honest cases' wants.
				{"liar true, not applied: the write is lost", lostBeforeCommit, ptr(true), 1, 0},
				{"liar false, applied: the write doubles", appliedReplyLost, ptr(false), 2, 2},
			} {
				t.Run(sc.name, func(t *testing.T) {
					db, rows, fired := rig.open(t, sc.cut, sc.lie == nil)
					var v sr.CommitVerifier = rig.verifier()
					if sc.lie != nil {
						v = liar{rig.verifier(), *sc.lie}
					}
					p, err := sr.New(sr.Config{Classifier: rig.classifier, CommitVerifier: v, Budget: sr.NoBudget,
						BaseDelay: time.Millisecond, MaxDelay: time.Millisecond, Jitter: sr.NoJitter})
					if err != nil {
						t.Fatal(err)
					}
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					defer cancel()
					var runs atomic.Int32
					err = sr.RunTx(ctx, db, p, sr.Write("place-order", nil), nil, func(ctx context.Context, tx *sql.Tx) error {
						runs.Add(1)
						_, err := tx.ExecContext(ctx, "INSERT INTO orders (id) VALUES (1)")
						return err
					})
					if err != nil {
						t.Fatalf("RunTx: %v", err)
					}
					if got := fired(); got != 1 {
						t.Fatalf("COMMIT faults: got %d, want 1: the test proved nothing", got)
					}
					if got := runs.Load(); got != sc.wantRuns {
						t.Errorf("runs: got %d, want %d", got, sc.wantRuns)
					}
					if got := rows(); got != sc.wantRows {
						t.Errorf("rows: got %d, want %d", got, sc.wantRows)
					}
				})
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// faultRule is the fault driver's rule for c.
func faultRule(c cut) faults.Rule {
	if c == appliedReplyLost {
		return faults.Rule{Kind: faults.CommitAppliedReplyLost}
	}
	// Lost before it arrived, yet the client cannot tell: a reset, not
	// driver.ErrBadConn (which would prove it unsent).
	return faults.Rule{Kind: faults.CommitNotApplied, Err: faults.ResetError()}
}

// sqlRig opens a scenario's handle on a real engine through the fault
// driver, in a table of its own (each scenario needs a fresh orders table:
// the name is the same, so each scenario gets its own database or schema
// via fresh).
func sqlRig(name, driverName string, classifier sr.Classifier, verifier func() markerVerifier, fresh func(t testing.TB) string) engineRig {
	return engineRig{name: name, classifier: classifier, verifier: verifier,
		open: func(t *testing.T, c cut, _ bool) (*sql.DB, func() int, func() int) {
			dsn := fresh(t)
			plain, err := sql.Open(driverName, dsn)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { plain.Close() })
			if _, err := plain.Exec("CREATE TABLE orders (id int NOT NULL)"); err != nil {
				t.Fatal(err)
			}
			plan := faults.MustPlan(faults.Config{Rules: []faults.Rule{faultRule(c)}})
			db, err := faults.Open(driverName, dsn, plan)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			rows := func() int {
				var n int
				if err := plain.QueryRow("SELECT count(*) FROM orders").Scan(&n); err != nil {
					t.Fatal(err)
				}
				return n
			}
			kind := faultRule(c).Kind
			return db, rows, func() int { return plan.Counts().Faults[kind] }
		}}
}

func postgresRig(*testing.T) engineRig {
	return sqlRig("postgres", "pgx", postgres.Classifier, func() markerVerifier { return &postgres.MarkerVerifier{CreateTable: true} }, dbtest.FreshPostgres)
}

func mariaRig(*testing.T) engineRig {
	return sqlRig("mariadb", "mysql", mysql.Classifier, func() markerVerifier { return &mysql.MarkerVerifier{CreateTable: true} }, dbtest.FreshMySQL)
}

func sqliteRig(*testing.T) engineRig {
	return sqlRig("sqlite", "sqlite", sqlite.Classifier, func() markerVerifier { return &sqlite.MarkerVerifier{CreateTable: true} },
		func(t testing.TB) string {
			return "file:" + filepath.Join(t.TempDir(), "t.db") + "?_pragma=journal_mode(wal)&_pragma=busy_timeout(5000)"
		})
}

// mssqlRig: the responder's first COMMIT is dropped after it commits
// (DropAfterApply) or before (Drop); the script answers the marker's
// statements from the marker INSERTs that took effect.
func mssqlRig() engineRig {
	return engineRig{name: "mssql", classifier: mssql.Classifier,
		verifier: func() markerVerifier { return &mssql.MarkerVerifier{CreateTable: true} },
		open: func(t *testing.T, c cut, honest bool) (*sql.DB, func() int, func() int) {
			fault := tdstest.DropAfterApply
			if c == lostBeforeCommit {
				fault = tdstest.Drop
			}
			srv := tdstest.Start(t, tdstest.Script{
				Rules: []tdstest.Rule{{Kind: tdstest.Commit, Times: 1, Reply: tdstest.Faulty(fault)}},
				Func:  markerTable,
			})
			db, err := sql.Open("sqlserver", srv.DSN())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			rows := func() int {
				// The marker's statements travelled through go-mssqldb.
				if srv.Count(tdstest.Statement, "INSERT INTO sqlretry_commit_marks") == 0 {
					t.Errorf("no marker INSERT arrived")
				}
				if honest && srv.Count(tdstest.Statement, "SELECT tombstone") == 0 {
					t.Errorf("the marker was never looked up")
				}
				return srv.Applied("INSERT INTO orders")
			}
			fired := func() int {
				n := 0
				for _, tx := range srv.Transactions() {
					if tx.ReplyLost {
						n++
					}
				}
				return n
			}
			return db, rows, fired
		}}
}

// markerTable answers the marker verifier's statements as SQL Server would
// with the table sqlretry_commit_marks holding the marker INSERTs that took
// effect: a duplicate key is error 2627; the look-up returns the tombstone
// flag of the key's row.
func markerTable(r tdstest.Request) tdstest.Reply {
	const insert, lookup = "INSERT INTO sqlretry_commit_marks", "SELECT tombstone FROM sqlretry_commit_marks"
	switch {
	case strings.HasPrefix(r.SQL, insert):
		if _, ok := markerRow(r, insert, r.Args[0]); ok {
			return tdstest.Fail(2627, 14, fmt.Sprintf("Violation of PRIMARY KEY constraint. Cannot insert duplicate key in object 'dbo.sqlretry_commit_marks'. The duplicate key value is (%v).", r.Args[0]))
		}
		return tdstest.Affected(1)
	case strings.HasPrefix(r.SQL, lookup):
		cols := []tdstest.Column{{Name: "tombstone", Type: tdstest.BigInt}}
		if tomb, ok := markerRow(r, insert, r.Args[0]); ok {
			return tdstest.Rows(cols, []any{tomb})
		}
		return tdstest.Rows(cols)
	}
	return tdstest.Affected(1)
}

// markerRow finds the committed marker INSERT of key and returns its
// tombstone argument.
func markerRow(r tdstest.Request, insert string, key any) (any, bool) {
	for _, a := range r.Server().AppliedRequests(insert) {
		if len(a.Args) == 3 && a.Args[0] == key {
			return a.Args[2], true
		}
	}
	return nil, false
}

// TestRunTxMarkerAfterProxyCut: the TCP proxy cuts the connection after the
// real server received COMMIT and before its reply comes back, so the
// driver's own error reaches RunTx; the marker finds the transaction
// committed and the call succeeds without a replay.
func TestRunTxMarkerAfterProxyCut(t *testing.T) {
	for _, e := range []struct {
		name, driver, target string
		dsn                  func(testing.TB) string
		classifier           sr.Classifier
		verifier             sr.CommitVerifier
	}{
		{"postgres", "pgx", "127.0.0.1:5432", dbtest.FreshPostgres, postgres.Classifier, &postgres.MarkerVerifier{CreateTable: true}},
		{"mariadb", "mysql", "127.0.0.1:3306", dbtest.FreshMySQL, mysql.Classifier, &mysql.MarkerVerifier{CreateTable: true}},
	} {
		t.Run(e.name, func(t *testing.T) {
			dsn := e.dsn(t)
			if !strings.Contains(dsn, e.target) {
				t.Skipf("the shared server is not at %s: %s", e.target, dsn)
			}
			px, err := proxy.New(proxy.Config{Target: e.target})
			if err != nil {
				t.Fatal(err)
			}
			defer px.Close()
			db, err := sql.Open(e.driver, strings.Replace(dsn, e.target, px.Addr(), 1))
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if _, err := db.Exec("CREATE TABLE orders (id int NOT NULL)"); err != nil {
				t.Fatal(err)
			}
			p, err := sr.New(sr.Config{Classifier: e.classifier, CommitVerifier: e.verifier, Budget: sr.NoBudget, BaseDelay: time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var runs atomic.Int32
			err = sr.RunTx(ctx, db, p, sr.Write("place-order", nil), nil, func(ctx context.Context, tx *sql.Tx) error {
				if runs.Add(1) == 1 {
					if err := px.SetFault(proxy.Fault{Mode: proxy.CutAfterCommit}); err != nil {
						return err
					}
				}
				_, err := tx.ExecContext(ctx, "INSERT INTO orders (id) VALUES (1)")
				return err
			})
			_ = px.SetFault(proxy.Fault{Mode: proxy.Pass})
			if err != nil {
				t.Fatalf("RunTx: %v", err)
			}
			if got := px.Counts().CutAfterCommit; got != 1 {
				t.Fatalf("COMMITs cut: got %d, want 1: the test proved nothing", got)
			}
			var n int
			if err := db.QueryRow("SELECT count(*) FROM orders").Scan(&n); err != nil {
				t.Fatal(err)
			}
			if runs.Load() != 1 || n != 1 {
				t.Errorf("got %d runs and %d rows, want 1 and 1", runs.Load(), n)
			}
		})
	}
}
