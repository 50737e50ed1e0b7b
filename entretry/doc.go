// Package entretry runs ent transactions under sqlretry: [RunTx] is
// [sqlretry.RunTx] for an ent driver (entgo.io/ent/dialect/sql), whose
// transaction function gets an ent driver bound to the transaction — the
// driver a generated client runs on:
//
//	sdb, err := sqlretry.Open("pgx", dsn, p)
//	drv := entsql.OpenDB(dialect.Postgres, sdb)
//	client := ent.NewClient(ent.Driver(drv)) // statements outside transactions: retried by the Connector
//
//	err = entretry.RunTx(ctx, drv, p, sqlretry.Write("add-user", verify), nil,
//		func(ctx context.Context, tx dialect.Driver) error {
//			c := ent.NewClient(ent.Driver(tx)) // the generated client, on the transaction
//			_, err := c.User.Create().SetName("a8m").Save(ctx)
//			return err
//		})
//
// A transaction begun with client.Tx is not retried: the Connector never
// replays a statement inside a transaction on its own. RunTx retries the
// whole transaction and settles an ambiguous COMMIT.
//
// This module is separate from the library's so that sqlretry itself never
// requires ent.
package entretry
