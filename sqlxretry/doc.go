// Package sqlxretry runs sqlx transactions under sqlretry: [RunTx] is
// [sqlretry.RunTx] for a *sqlx.DB, whose transaction function gets a
// *sqlx.Tx that binds like the DB (NamedExec works on PostgreSQL and
// MariaDB alike).
//
// Statements outside transactions need nothing from this package: open the
// *sqlx.DB over a sqlretry handle, with the inner driver's name, and every
// Get, Select, Exec and NamedExec is retried by the Connector's rules:
//
//	sdb, err := sqlretry.Open("pgx", dsn, p)
//	db := sqlx.NewDb(sdb, "pgx")
//
// A transaction begun with db.Beginx or db.MustBegin is not retried: the
// Connector never replays a statement inside a transaction on its own.
// Run it with RunTx instead, which retries the whole transaction and
// settles an ambiguous COMMIT:
//
//	err := sqlxretry.RunTx(ctx, db, p, sqlretry.Write("add-order", verify), nil,
//		func(ctx context.Context, tx *sqlx.Tx) error {
//			_, err := tx.NamedExecContext(ctx, "INSERT INTO orders (id, total) VALUES (:id, :total)", order)
//			return err
//		})
//
// This module is separate from the library's so that sqlretry itself never
// requires sqlx.
package sqlxretry
