package pgxretry_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/sqlretry/sqlretry"
)

// raise makes the server fail with SQLSTATE code, as a deadlock or a
// serialization failure would.
func raise(code string) string {
	return "DO $$BEGIN RAISE EXCEPTION 'raised' USING ERRCODE = '" + code + "'; END$$"
}

// TestErrorChain checks what a caller gets after retries and give-ups: the
// server's *pgconn.PgError is still in the chain, beside the sentinel that
// says why the call ended.
func TestErrorChain(t *testing.T) {
	noLeaks(t)
	f := newFixture(t, nil)
	ctx := context.Background()
	var pgErr *pgconn.PgError
	var re *sqlretry.Error

	// A transaction that deadlocks on every attempt: re-run until the
	// contention retries run out.
	attempts := 0
	err := f.w.RunTx(ctx, sqlretry.Write("always-deadlocks", nil), pgx.TxOptions{}, func(ctx context.Context, tx pgx.Tx) error {
		attempts++
		_, err := tx.Exec(ctx, raise("40P01"))
		return err
	})
	if !errors.Is(err, sqlretry.ErrRetriesExhausted) || !errors.As(err, &pgErr) || pgErr.Code != "40P01" || !errors.As(err, &re) || re.Attempts != attempts || attempts != 51 {
		t.Fatalf("RunTx: %v after %d attempts; want ErrRetriesExhausted with the 40P01 PgError after 51", err, attempts)
	}

	// A DO block shows no body: its failure may follow a commit inside it,
	// so even a serialization failure leaves it of unknown outcome.
	_, err = f.w.Exec(ctx, raise("40001"))
	if !errors.Is(err, sqlretry.ErrAmbiguous) || !errors.As(err, &pgErr) || pgErr.Code != "40001" {
		t.Fatalf("Exec of DO: %v; want ErrAmbiguous with the 40001 PgError", err)
	}

	// A permanent error on the first attempt is pgx's own, unwrapped.
	_, err = f.w.Exec(ctx, "SELECT * FROM no_such_table")
	if !errors.As(err, &pgErr) || pgErr.Code != "42P01" || errors.As(err, &re) {
		t.Fatalf("Exec of a missing table: %v (%T); want the 42P01 PgError as it is", err, err)
	}
}
