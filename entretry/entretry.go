package entretry

import (
	"context"
	"database/sql"
	"errors"
	"sync/atomic"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"

	"github.com/sqlretry/sqlretry"
)

// ErrNotDB is returned when the driver given to RunTx does not run on a
// *sql.DB (a driver bound to a transaction already, or a wrapped one).
var ErrNotDB = errors.New("entretry: the ent driver does not run on a *sql.DB: give RunTx the driver of entsql.OpenDB(dialect, db)")

// ErrRolledBack is returned when fn rolled back a transaction it opened on
// the driver it was given (tx.Rollback() of client.Tx) and then returned
// nil: that transaction is RunTx's own, so nothing is committed.
var ErrRolledBack = errors.New("entretry: the transaction function rolled back its transaction and returned nil: nothing was committed")

// errClose is returned by Close on the driver fn gets.
var errClose = errors.New("entretry: the driver of a RunTx transaction cannot be closed")

// RunTx runs fn in a transaction of drv's database under
// [sqlretry.RunTx]: the whole transaction is run again when a failure
// proves it was not committed (a deadlock victim, a serialization failure,
// a connection lost before COMMIT), and a COMMIT of unknown outcome is
// settled by op's Verify or the Policy's CommitVerifier, never replayed
// blindly. The rules of sqlretry.RunTx hold for fn: it may run more than
// once, and must return the database's errors, wrapped or not.
//
// fn gets an ent driver bound to the transaction; a generated client runs
// on it with ent.NewClient(ent.Driver(tx)). A transaction fn opens on it
// (client.Tx, or ent's own for a create that spans statements) is RunTx's
// transaction: its Commit does nothing, and its Rollback makes RunTx roll
// back (see [ErrRolledBack]).
//
// drv must run on a *sql.DB — a sqlretry handle, so that statements
// outside transactions are retried too:
//
//	sdb, err := sqlretry.Open("pgx", dsn, p)
//	drv := entsql.OpenDB(dialect.Postgres, sdb)
func RunTx(ctx context.Context, drv *entsql.Driver, p *sqlretry.Policy, op sqlretry.Op, opts *sql.TxOptions, fn func(ctx context.Context, tx dialect.Driver) error) error {
	db, ok := drv.ExecQuerier.(*sql.DB)
	if !ok {
		return ErrNotDB
	}
	return sqlretry.RunTx(ctx, db, p, op, opts, func(ctx context.Context, tx *sql.Tx) error {
		d := &txDriver{Driver: entsql.NewDriver(drv.Dialect(), entsql.Conn{ExecQuerier: tx})}
		err := fn(ctx, d)
		if err == nil && d.rolledBack.Load() {
			return ErrRolledBack
		}
		return err
	})
}

// txDriver is the ent driver of one attempt's transaction, as ent's
// generated txDriver is of client.Tx's: a transaction opened on it is the
// one it is bound to.
type txDriver struct {
	*entsql.Driver
	rolledBack atomic.Bool
}

// Tx returns the transaction the driver is bound to.
func (d *txDriver) Tx(context.Context) (dialect.Tx, error) { return innerTx{d}, nil }

// BeginTx returns the transaction the driver is bound to; its options were
// given to RunTx.
func (d *txDriver) BeginTx(ctx context.Context, _ *entsql.TxOptions) (dialect.Tx, error) {
	return d.Tx(ctx)
}

// Close refuses: the transaction and its connection are RunTx's.
func (d *txDriver) Close() error { return errClose }

// innerTx is a transaction opened inside RunTx's.
type innerTx struct{ *txDriver }

// Commit does nothing: the work commits with RunTx's transaction.
func (innerTx) Commit() error { return nil }

// Rollback marks RunTx's transaction for rollback.
func (t innerTx) Rollback() error {
	t.rolledBack.Store(true)
	return nil
}
