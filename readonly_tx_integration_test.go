package sqlretry_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"

	sr "github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/faults/proxy"
	"github.com/sqlretry/sqlretry/mysql"
	"github.com/sqlretry/sqlretry/postgres"
)

// A read-only transaction cannot take the marker's INSERT: RunTx with
// ReadOnly and a marker verifier (alone or inside Verifiers) failed every
// time with 25006 on PostgreSQL and 1792 on MariaDB, although fn succeeded.
// It is marked only by a verifier that can mark it without writing now.
func TestReadOnlyTxWithMarkerVerifier(t *testing.T) {
	ro := &sql.TxOptions{ReadOnly: true}
	read := func(ctx context.Context, tx *sql.Tx) error {
		var n int
		return tx.QueryRowContext(ctx, "SELECT count(*) FROM pay").Scan(&n)
	}
	pgVerifiers := map[string]sr.CommitVerifier{
		"marker":           &postgres.MarkerVerifier{CreateTable: true},
		"pg_xact + marker": sr.Verifiers(postgres.CommitVerifier{}, &postgres.MarkerVerifier{CreateTable: true}),
		"marker + pg_xact": sr.Verifiers(&postgres.MarkerVerifier{CreateTable: true}, postgres.CommitVerifier{}),
	}
	for name, v := range pgVerifiers {
		t.Run("PostgreSQL/"+name, func(t *testing.T) {
			raw, _, dsn := pgViaProxy(t)
			mustExec(t, raw, "CREATE TABLE pay (id int PRIMARY KEY)")
			p := newPolicy(t, sr.Config{Classifier: postgres.Classifier, CommitVerifier: v})
			db := openPgx(t, dsn, p, true)
			if err := sr.RunTx(context.Background(), db, p, sr.Write("read", nil), ro, read); err != nil {
				t.Errorf("RunTx(ReadOnly) = %v, want nil", err)
			}
		})
	}
	t.Run("MariaDB/marker", func(t *testing.T) {
		db, raw, p := openMySQL(t, sr.Config{CommitVerifier: &mysql.MarkerVerifier{CreateTable: true}}, nil)
		mustExec(t, raw, "CREATE TABLE pay (id int PRIMARY KEY)")
		if err := sr.RunTx(context.Background(), db, p, sr.Write("read", nil), ro, read); err != nil {
			t.Errorf("RunTx(ReadOnly) = %v, want nil", err)
		}
	})
}

// A read-only transaction's COMMIT whose answer is lost is settled by the
// part of the verifiers that can mark it (pg_xact_status), and ends in
// ErrAmbiguous, saying why, where none can (a marker alone).
func TestReadOnlyTxLostCommit(t *testing.T) {
	for _, withXact := range []bool{true, false} {
		t.Run(map[bool]string{true: "pg_xact + marker", false: "marker"}[withXact], func(t *testing.T) {
			raw, px, dsn := pgViaProxy(t)
			mustExec(t, raw, "CREATE TABLE pay (id int PRIMARY KEY)")
			var v sr.CommitVerifier = &postgres.MarkerVerifier{CreateTable: true}
			if withXact {
				v = sr.Verifiers(postgres.CommitVerifier{}, v)
			}
			p := newPolicy(t, sr.Config{Classifier: postgres.Classifier, CommitVerifier: v})
			db := openPgx(t, dsn, p, true)
			runs := 0
			err := sr.RunTx(context.Background(), db, p, sr.Write("read", nil), &sql.TxOptions{ReadOnly: true}, func(ctx context.Context, tx *sql.Tx) error {
				runs++
				var n int
				if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM pay").Scan(&n); err != nil {
					return err
				}
				return px.SetFault(proxy.Fault{Mode: proxy.CutAfterCommit})
			})
			_ = px.SetFault(proxy.Fault{Mode: proxy.Pass})
			if px.Counts().CutAfterCommit != 1 {
				t.Fatalf("%d COMMITs cut, want 1", px.Counts().CutAfterCommit)
			}
			switch {
			case withXact && (err != nil || runs != 1):
				t.Errorf("RunTx = %v after %d runs; want nil after 1 (pg_xact_status settles it)", err, runs)
			case !withXact && !errors.Is(err, sr.ErrAmbiguous):
				t.Errorf("RunTx = %v; want ErrAmbiguous: nothing can mark a read-only transaction", err)
			}
		})
	}
}

// A transaction that is read-only without sql.TxOptions saying so — SET
// TRANSACTION READ ONLY in fn, a session whose default is read-only — made
// the marker's INSERT fail: RunTx returned 25006 (PostgreSQL) or 1792
// (MariaDB) although fn succeeded. The marker says so (ErrTxReadOnly) and
// RunTx runs it again, marked as a read-only one.
func TestUndeclaredReadOnlyTxWithMarkerVerifier(t *testing.T) {
	read := func(setTx string) func(ctx context.Context, tx *sql.Tx) error {
		return func(ctx context.Context, tx *sql.Tx) error {
			if setTx != "" {
				if _, err := tx.ExecContext(ctx, setTx); err != nil {
					return err
				}
			}
			var n int
			return tx.QueryRowContext(ctx, "SELECT count(*) FROM pay").Scan(&n)
		}
	}
	for _, how := range []string{"SET TRANSACTION", "default_transaction_read_only"} {
		t.Run("PostgreSQL/"+how, func(t *testing.T) {
			raw, _, dsn := pgViaProxy(t)
			mustExec(t, raw, "CREATE TABLE pay (id int PRIMARY KEY)")
			mustExec(t, raw, postgres.MarkerTableDDL)
			setTx := "SET TRANSACTION READ ONLY"
			if how == "default_transaction_read_only" {
				dsn += "&options=-c%20default_transaction_read_only%3Don"
				setTx = ""
			}
			p := newPolicy(t, sr.Config{Classifier: postgres.Classifier, CommitVerifier: sr.Verifiers(postgres.CommitVerifier{}, &postgres.MarkerVerifier{})})
			db := openPgx(t, dsn, p, true)
			if err := sr.RunTx(context.Background(), db, p, sr.Write("read", nil), nil, read(setTx)); err != nil {
				t.Errorf("RunTx = %v although fn succeeded", err)
			}
		})
	}
	t.Run("MariaDB/tx_read_only", func(t *testing.T) {
		db, raw, p := openMySQL(t, sr.Config{CommitVerifier: &mysql.MarkerVerifier{}}, func(cfg *gomysql.Config) {
			cfg.Params["tx_read_only"] = "1" // every transaction of the session is read-only
		})
		mustExec(t, raw, "CREATE TABLE pay (id int PRIMARY KEY)")
		mustExec(t, raw, mysql.MarkerTableDDL)
		if err := sr.RunTx(context.Background(), db, p, sr.Write("read", nil), nil, read("")); err != nil {
			t.Errorf("RunTx = %v although fn succeeded", err)
		}
	})
}
