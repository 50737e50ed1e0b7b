package pgxretry_test

import (
	"context"
	"errors"
	"log"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/pgxretry"
	"github.com/sqlretry/sqlretry/postgres"
)

// WithMarker settles a COMMIT whose reply was lost by a marker row sent in
// the same message as COMMIT: no extra round trip, and a verdict that
// survives a failover to a standby (pg_xact_status's does not). It needs a
// server, so it only compiles here.
func ExampleWithMarker() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:5432/test")
	if err != nil {
		log.Fatal(err)
	}
	p, err := sqlretry.New(sqlretry.Config{Classifier: postgres.Classifier})
	if err != nil {
		log.Fatal(err)
	}
	// The table is sqlretry_commit_marks (postgres.MarkerTableDDL), created
	// here on first use; a settle waits at most 2 s for a transaction still
	// in flight.
	db := pgxretry.New(pool, p, pgxretry.WithMarker(&postgres.MarkerVerifier{CreateTable: true, MaxWait: 2 * time.Second}))
	defer db.Close()

	err = db.RunTx(ctx, sqlretry.Write("ship-order", nil), pgx.TxOptions{}, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "UPDATE orders SET shipped = true WHERE id = $1", 42)
		return err
	})
	switch {
	case errors.Is(err, sqlretry.ErrAmbiguous):
		log.Print("the COMMIT's outcome is unknown and could not be settled")
	case err != nil:
		log.Fatal(err) // not applied
	}
}
