package sqlxretry

import (
	"context"
	"database/sql"
	"errors"
	"reflect"
	"unsafe"

	"github.com/jmoiron/sqlx"

	"github.com/sqlretry/sqlretry"
)

// RunTx runs fn in a transaction of db under [sqlretry.RunTx]: the whole
// transaction is run again when a failure proves it was not committed (a
// deadlock victim, a serialization failure, a connection lost before
// COMMIT), and a COMMIT of unknown outcome is settled by op's Verify or the
// Policy's CommitVerifier, never replayed blindly. The rules of
// sqlretry.RunTx hold for fn: it may run more than once, must return the
// database's errors (wrapped or not), and must not commit or roll back tx.
//
// fn's *sqlx.Tx binds like db: NamedExec, Rebind and BindNamed use db's
// driver name ($1 for "pgx" and "postgres", ? for "mysql"), and it is
// unsafe if db is. Open db with the inner driver's name over a sqlretry
// handle, so that statements outside transactions are retried too:
//
//	sdb, _ := sqlretry.Open("pgx", dsn, p)
//	db := sqlx.NewDb(sdb, "pgx")
func RunTx(ctx context.Context, db *sqlx.DB, p *sqlretry.Policy, op sqlretry.Op, opts *sql.TxOptions, fn func(ctx context.Context, tx *sqlx.Tx) error) error {
	return sqlretry.RunTx(ctx, db.DB, p, op, opts, func(ctx context.Context, tx *sql.Tx) error {
		xtx, err := NewTx(db, tx)
		if err != nil {
			return err
		}
		return fn(ctx, xtx)
	})
}

// ErrLayout is returned by [NewTx] when sqlx.Tx no longer has the unexported
// fields it sets (a sqlx release changed them): it refuses rather than hand
// out a Tx that binds with the wrong placeholders.
var ErrLayout = errors.New("sqlxretry: sqlx.Tx has no driverName and unsafe fields: this sqlx version is not supported")

// NewTx returns a *sqlx.Tx for tx that binds like db, as db.BeginTxx would
// have made it. sqlx has no constructor for a Tx around a *sql.Tx it did not
// begin, and a struct literal leaves the driver name empty — NamedExec then
// binds '?' on PostgreSQL — so the two unexported fields, driverName and
// unsafe, are set by reflection (GORM reads *sql.Tx's db field the same
// way). A test holds the layout to it; a sqlx that changes it gets
// [ErrLayout], never a Tx that binds wrongly.
func NewTx(db *sqlx.DB, tx *sql.Tx) (*sqlx.Tx, error) {
	xtx := &sqlx.Tx{Tx: tx, Mapper: db.Mapper}
	dst := reflect.ValueOf(xtx).Elem()
	src := reflect.ValueOf(db).Elem()
	name, unsafeFlag := dst.FieldByName("driverName"), dst.FieldByName("unsafe")
	srcUnsafe := src.FieldByName("unsafe")
	if name.Kind() != reflect.String || unsafeFlag.Kind() != reflect.Bool || srcUnsafe.Kind() != reflect.Bool {
		return nil, ErrLayout
	}
	settable(name).SetString(db.DriverName())
	settable(unsafeFlag).SetBool(srcUnsafe.Bool())
	return xtx, nil
}

// settable returns an addressable, settable view of the unexported field f.
func settable(f reflect.Value) reflect.Value {
	return reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem()
}
