package pgxretry_test

import (
	"context"
	"errors"
	"log"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/pgxretry"
	"github.com/sqlretry/sqlretry/postgres"
)

// New wraps a pool once; everything written against *pgxpool.Pool (or
// sqlc's pgx/v5 DBTX) takes the wrapper instead. It needs a server, so it
// only compiles here.
func ExampleNew() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:5432/test")
	if err != nil {
		log.Fatal(err)
	}
	p, err := sqlretry.New(sqlretry.Config{Classifier: postgres.Classifier})
	if err != nil {
		log.Fatal(err)
	}
	db := pgxretry.New(pool, p)
	defer db.Close()

	// A read: replayed after any transient failure.
	var payload string
	if err := db.QueryRow(ctx, "SELECT payload FROM tasks WHERE id = $1", 42).Scan(&payload); err != nil {
		log.Fatal(err)
	}

	// A write: replayed only when it provably did not apply. An attached
	// Op's verify settles a failure of unknown outcome.
	key := sqlretry.NewKey()
	ctx = sqlretry.WithOp(ctx, sqlretry.Write("create-task", func(ctx context.Context) (bool, error) {
		var n int
		err := pool.QueryRow(ctx, "SELECT count(*) FROM tasks WHERE idem_key = $1", key).Scan(&n)
		return n > 0, err
	}))
	_, err = db.Exec(ctx, "INSERT INTO tasks (idem_key, payload) VALUES ($1, $2)", key, "hello")
	if errors.Is(err, sqlretry.ErrAmbiguous) {
		log.Print("the write may have landed and could not be settled: reconcile")
	}
}

// RunTx re-runs the whole transaction after a deadlock, a serialization
// failure or a lost connection, and settles a COMMIT whose reply was lost
// (here by pg_xact_status, as the Op has no Verify). It needs a server, so
// it only compiles here.
func ExamplePool_RunTx() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:5432/test")
	if err != nil {
		log.Fatal(err)
	}
	p, err := sqlretry.New(sqlretry.Config{Classifier: postgres.Classifier})
	if err != nil {
		log.Fatal(err)
	}
	db := pgxretry.New(pool, p)
	defer db.Close()

	err = db.RunTx(ctx, sqlretry.Write("move-money", nil), pgx.TxOptions{IsoLevel: pgx.Serializable},
		func(ctx context.Context, tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "UPDATE accounts SET balance = balance - 10 WHERE id = $1", 1); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "UPDATE accounts SET balance = balance + 10 WHERE id = $1", 2)
			return err
		})
	switch {
	case errors.Is(err, sqlretry.ErrAmbiguous):
		log.Print("the COMMIT's outcome is unknown and could not be settled")
	case err != nil:
		log.Fatal(err) // not applied
	}
}
