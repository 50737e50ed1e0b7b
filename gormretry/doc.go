// Package gormretry runs GORM transactions under sqlretry: [Transaction] is
// gorm's db.Transaction under [sqlretry.RunTx] — the whole transaction is
// run again after a failure that proves it did not commit, and a COMMIT of
// unknown outcome is settled by the Op's Verify or the Policy's
// CommitVerifier, never replayed blindly.
//
// Open gorm over a sqlretry handle, so that statements outside
// transactions are retried by the Connector's rules:
//
//	sdb, err := sqlretry.Open("pgx", dsn, p)
//	db, err := gorm.Open(postgres.New(postgres.Config{Conn: sdb}),
//		&gorm.Config{SkipDefaultTransaction: true})
//
// (mysql.New(mysql.Config{Conn: sdb}) for MySQL and MariaDB.)
//
// # SkipDefaultTransaction
//
// By default GORM wraps every Create, Save, Update and Delete in a
// transaction of its own. The Connector never replays a statement inside a
// transaction, and GORM's default transaction is not retried as a whole,
// so such a write is not retried at all: a deadlock or a lost connection
// is returned to the caller, and a COMMIT whose reply was lost comes back
// as a plain error although the row may be in the table. When the
// statement fails and the rollback fails too (the connection is gone),
// GORM also keeps the driver's error only as text, so errors.As and the
// classifier no longer see it.
//
// Set SkipDefaultTransaction: a single-statement write is then an
// autocommit statement, which the Connector retries when the failure
// proves it was not applied, and settles with [sqlretry.WithOp] when the
// outcome is unknown. A write that GORM makes in several statements
// (associations, hooks that write, CreateInBatches with more than one
// batch) is atomic only in a transaction: run it in Transaction.
//
// # Errors GORM flattened
//
// GORM's AddError keeps the second of two errors as an error and the
// first as text ("%v; %w"), and its MySQL driver's TranslateError
// replaces a driver error with gorm.ErrDuplicatedKey. Inside Transaction
// the first error the transaction's connection returned is put back into
// the chain ([FlattenedError]): on PostgreSQL it is the one that aborted
// the transaction, so the Policy classifies the deadlock, not the 25P02
// that followed it. An error that still cannot be read is treated as the
// classifier treats any unknown error — never as proof that nothing was
// applied: before COMMIT the transaction is rolled back whatever the
// error, and after COMMIT RunTx settles.
//
// This module is separate from the library's so that sqlretry itself never
// requires GORM.
package gormretry
