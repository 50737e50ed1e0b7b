package entretry_test

import (
	"context"
	"database/sql"
	"errors"
	"log"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"

	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/entretry"
	sqlpg "github.com/sqlretry/sqlretry/postgres"
)

// A transfer in ent's SQL builder; with a generated client, build it on
// the transaction's driver instead: ent.NewClient(ent.Driver(tx)).
func ExampleRunTx() {
	ctx := context.Background()
	p, err := sqlretry.New(sqlretry.Config{Classifier: sqlpg.Classifier, CommitVerifier: sqlpg.CommitVerifier{}})
	if err != nil {
		log.Fatal(err)
	}
	sdb, err := sqlretry.Open("pgx", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable", p)
	if err != nil {
		log.Fatal(err)
	}
	drv := entsql.OpenDB(dialect.Postgres, sdb)
	err = entretry.RunTx(ctx, drv, p, sqlretry.Write("transfer", nil), nil, func(ctx context.Context, tx dialect.Driver) error {
		b := entsql.Dialect(tx.Dialect())
		for id, delta := range map[int]int{1: -40, 2: 40} {
			q, args := b.Update("accounts").Add("balance", delta).Where(entsql.EQ("id", id)).Query()
			var res sql.Result
			if err := tx.Exec(ctx, q, args, &res); err != nil {
				return err
			}
		}
		return nil
	})
	if errors.Is(err, sqlretry.ErrAmbiguous) {
		log.Print("the transfer may have committed: reconcile")
	}
}
