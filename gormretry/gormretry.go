package gormretry

import (
	"context"
	"database/sql"
	"errors"

	"gorm.io/gorm"

	"github.com/sqlretry/sqlretry"
)

// ErrTxControl is returned when fn commits or rolls back the transaction
// Transaction gave it (tx.Commit(), tx.Rollback()): Transaction commits
// when fn returns nil and rolls back when it returns an error, and a
// transaction committed behind its back could be run again. The
// transaction is rolled back and not retried.
var ErrTxControl = errors.New("gormretry: the transaction function committed or rolled back its transaction; return nil to commit, an error to roll back")

// Transaction is gorm's db.Transaction under [sqlretry.RunTx]: it runs fn
// in a transaction, runs the whole transaction again when a failure proves
// it was not committed (a deadlock victim, a serialization failure, a
// connection lost before COMMIT), and settles a COMMIT of unknown outcome
// by op's Verify or the Policy's CommitVerifier instead of replaying it.
// It returns nil when the transaction committed once, an error matching
// [sqlretry.ErrAmbiguous] when the commit may have landed and could not be
// settled, and otherwise an error after which nothing was committed.
//
// fn gets a gorm session bound to the transaction, with ctx: every
// statement made through it runs in the transaction. It may run more than
// once, must return the errors GORM gave it (tx.Create(&v).Error …), and
// must not call tx.Commit or tx.Rollback (see [ErrTxControl]); a nested
// tx.Transaction uses a savepoint, as in gorm. db's connection pool must be
// a *sql.DB (a sqlretry.Open handle, opened with postgres.Config{Conn: …}
// or mysql.Config{Conn: …}); with PrepareStmt, statements inside the
// transaction are not prepared.
//
// When fn's error lost the driver's error that aborted the transaction —
// GORM's AddError keeps only the last of two errors as an error and the
// first as text, TranslateError swaps a driver error for
// gorm.ErrDuplicatedKey — the first error the transaction's connection
// returned is put back into the chain ([FlattenedError]), so that the
// Policy's classifier, and errors.As for the caller, see it.
func Transaction(ctx context.Context, db *gorm.DB, p *sqlretry.Policy, op sqlretry.Op, fn func(tx *gorm.DB) error, opts ...*sql.TxOptions) error {
	if _, ok := db.Statement.ConnPool.(gorm.TxCommitter); ok {
		return sqlretry.ErrNestedTx // a second transaction on another connection would not nest
	}
	sqlDB, err := db.DB()
	if err != nil {
		return err
	}
	var txOpts *sql.TxOptions
	if len(opts) > 0 {
		txOpts = opts[0]
	}
	return sqlretry.RunTx(ctx, sqlDB, p, op, txOpts, func(ctx context.Context, tx *sql.Tx) error {
		pool := &txPool{Tx: tx, db: sqlDB}
		session := db.Session(&gorm.Session{Context: ctx}) // a new Statement: db's is not touched
		session.Statement.ConnPool = pool
		return pool.outcome(fn(session))
	})
}
