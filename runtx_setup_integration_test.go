package sqlretry_test

import (
	"context"
	"database/sql"
	"errors"
	"net/url"
	"testing"
	"time"

	sr "github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/internal/dbtest"
	"github.com/sqlretry/sqlretry/postgres"
)

// TestRunTxVerifierSetupFailureIsNotTheTransactions: before its first
// transaction, a MarkerVerifier resolves its table's schema in autocommit
// (BeforeTx), which RunTx runs before BEGIN. When that statement's session
// had died idle (its backend terminated: the next statement reads FATAL
// 57P01), the Connector's own loop cannot tell whether it ran (the text
// analysis cannot prove the resolve's SELECT reads only: it calls
// pg_catalog.to_regclass) and gives up with ErrAmbiguous. RunTx's Policy
// took that inner error for its own and settled it with the transaction's
// verify, which says "may have committed part of it (a CALL …, a MySQL
// statement …)" of any failure before COMMIT: a plain one-INSERT
// transaction that never began was told ErrAmbiguous, no row — the
// session-mode pgbouncer run's 5,051 calls. Nothing of the transaction ran:
// the outcome is knowable, and the call must say so (run it, or fail it
// plainly), directly and behind pgbouncer.
func TestRunTxVerifierSetupFailureIsNotTheTransactions(t *testing.T) {
	for _, pooled := range []bool{false, true} {
		t.Run(map[bool]string{false: "direct", true: "pgbouncer-session"}[pooled], func(t *testing.T) {
			dsn := dbtest.FreshPostgres(t)
			raw, err := sql.Open("pgx", dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer raw.Close()
			mustExec(t, raw, "CREATE TABLE items (k int PRIMARY KEY)")
			mustExec(t, raw, postgres.MarkerTableDDL)
			via := dsn + "&application_name=setup_under_test"
			if pooled {
				u, err := url.Parse(dsn)
				if err != nil {
					t.Fatal(err)
				}
				via = dbtest.StartPgBouncer(t, u.Host, dbtest.PgBouncerOptions{}).DSN(via)
			}
			p := newPolicy(t, sr.Config{Classifier: postgres.Classifier, Budget: sr.NoBudget, CommitVerifier: &postgres.MarkerVerifier{}})
			db, err := sr.Open("pgx", via, p)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			db.SetMaxOpenConns(1)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			// Twice: pgx's ResetSession pings a connection idle for more than
			// a second, and notes the time of each reset.
			for i := 0; i < 2; i++ {
				if err := db.PingContext(ctx); err != nil {
					t.Fatal(err)
				}
			}
			// The pooled connection's backend dies while it sits idle.
			var killed int
			if err := raw.QueryRowContext(ctx, "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "+
				"WHERE datname = current_database() AND application_name = 'setup_under_test'").Scan(&killed); err != nil || killed != 1 {
				t.Fatalf("terminated %d backends (%v), want 1", killed, err)
			}
			for n := 1; n > 0; {
				if err := raw.QueryRowContext(ctx, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'setup_under_test'").Scan(&n); err != nil {
					t.Fatal(err)
				}
			}
			err = sr.RunTx(ctx, db, p, sr.Write("insert", nil), nil, func(ctx context.Context, tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, "INSERT INTO items VALUES (1)")
				return err
			})
			var rows int
			if err := raw.QueryRowContext(ctx, "SELECT count(*) FROM items").Scan(&rows); err != nil {
				t.Fatal(err)
			}
			switch {
			case errors.Is(err, sr.ErrAmbiguous):
				t.Errorf("RunTx: %v (%d rows); the transaction never began, so its outcome is known", err, rows)
			case err == nil && rows != 1, err != nil && rows != 0:
				t.Errorf("RunTx: %v, %d rows", err, rows)
			}
			t.Logf("RunTx: %v, %d rows", err, rows)
		})
	}
}
