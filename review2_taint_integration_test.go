package sqlretry_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	sr "github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/internal/dbtest"
	"github.com/sqlretry/sqlretry/postgres"
)

// Review finding (degraded retries): on PostgreSQL, a statement whose text
// merely contains a word of transaction control — CREATE TEMP TABLE … ON
// COMMIT DROP (which only makes sense inside a transaction), a column named
// begin or "commit", a SQL-standard function body BEGIN ATOMIC — is
// Info.TxControl, and taints() marks a RunTx transaction as "partly
// committed" after it. A serialization failure later in the same attempt
// (40001: PostgreSQL rolled back the whole transaction) is then turned into
// an Unknown failure that cannot be settled, and RunTx ends in ErrAmbiguous
// instead of running the transaction again. Issue 8466b9e fixed the
// Session pinning for these texts but not the RunTx taint.
func TestReview2StrayWordTaintsRunTxPostgres(t *testing.T) {
	ctx := context.Background()
	dsn := dbtest.FreshPostgres(t)
	p := newPolicy(t, sr.Config{Classifier: postgres.Classifier, CommitVerifier: postgres.CommitVerifier{}})
	db, err := sr.Open("pgx", dsn, p)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range []string{
		"CREATE TABLE t (a int)",
		"CREATE FUNCTION fail40001() RETURNS int LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'injected' USING ERRCODE = '40001'; END $$",
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	for _, stray := range []string{
		"CREATE TEMP TABLE scratch (a int) ON COMMIT DROP",
		"SELECT 1 AS begin",
	} {
		attempts := 0
		err := sr.RunTx(ctx, db, p, sr.Write("stray", nil), nil, func(ctx context.Context, tx *sql.Tx) error {
			attempts++
			if _, err := tx.ExecContext(ctx, stray); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, "INSERT INTO t VALUES (1)"); err != nil {
				return err
			}
			if attempts == 1 {
				var x int
				return tx.QueryRowContext(ctx, "SELECT fail40001()").Scan(&x)
			}
			return nil
		})
		if err != nil || attempts != 2 {
			t.Errorf("%q then a serialization failure: RunTx = %v after %d attempts (ambiguous: %v); want nil after 2 (PostgreSQL rolled the whole transaction back)",
				stray, err, attempts, errors.Is(err, sr.ErrAmbiguous))
		}
	}
}
