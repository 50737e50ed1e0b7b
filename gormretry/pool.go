package gormretry

import (
	"context"
	"database/sql"
	"errors"
	"sync"
)

// txPool is the gorm.ConnPool of one attempt's transaction: the *sql.Tx,
// which records the errors its statements returned, so that an error GORM
// flattened into text can be put back, and which refuses Commit and
// Rollback from fn. It implements gorm.Tx (a *sql.Tx's methods) and
// gorm.GetDBConnector, so gorm treats it as a transaction: no default
// transaction inside it, savepoints for a nested Transaction.
type txPool struct {
	*sql.Tx
	db *sql.DB

	mu      sync.Mutex  // statements of one transaction may run on several goroutines
	errs    []error     // every error a statement returned, in order
	rows    []*sql.Rows // the rows it returned: an error while reading them is theirs
	control bool        // fn called Commit or Rollback
}

func (t *txPool) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	res, err := t.Tx.ExecContext(ctx, query, args...)
	t.saw(err, nil)
	return res, err
}

func (t *txPool) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	rows, err := t.Tx.QueryContext(ctx, query, args...)
	t.saw(err, rows)
	return rows, err
}

func (t *txPool) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	row := t.Tx.QueryRowContext(ctx, query, args...)
	t.saw(row.Err(), nil)
	return row
}

func (t *txPool) PrepareContext(ctx context.Context, query string) (*sql.Stmt, error) {
	stmt, err := t.Tx.PrepareContext(ctx, query)
	t.saw(err, nil)
	return stmt, err
}

// Commit refuses: Transaction commits when fn returns nil.
func (t *txPool) Commit() error { return t.refuse() }

// Rollback refuses: Transaction rolls back when fn returns an error.
func (t *txPool) Rollback() error { return t.refuse() }

// GetDBConn gives gorm's db.DB() the handle the transaction came from.
func (t *txPool) GetDBConn() (*sql.DB, error) { return t.db, nil }

func (t *txPool) refuse() error {
	t.mu.Lock()
	t.control = true
	t.mu.Unlock()
	return ErrTxControl
}

func (t *txPool) saw(err error, rows *sql.Rows) {
	if err == nil && rows == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if err != nil {
		t.errs = append(t.errs, err)
	}
	if rows != nil {
		t.rows = append(t.rows, rows)
	}
}

// outcome is what the attempt returns to RunTx for fn's error err: err, or
// ErrTxControl if fn took control of the transaction, or err with the
// driver's first error put back if GORM's chain lost it.
func (t *txPool) outcome(err error) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.control {
		return errors.Join(ErrTxControl, err)
	}
	if err == nil {
		return nil
	}
	first := t.firstError()
	if first == nil || errors.Is(err, first) {
		return err
	}
	return &FlattenedError{Err: err, Cause: first}
}

// firstError returns the first error a statement of the attempt returned,
// or else the first error met while reading rows (RETURNING, a SELECT):
// on PostgreSQL the first error aborts the transaction and every later one
// is 25P02, and a MySQL deadlock rolls it back, so the first is the one
// that decides whether a retry can help.
func (t *txPool) firstError() error {
	if len(t.errs) > 0 {
		return t.errs[0]
	}
	for _, r := range t.rows {
		if err := r.Err(); err != nil {
			return err
		}
	}
	return nil
}

// FlattenedError is a transaction function's error whose chain did not
// hold the driver's error that ended the transaction: GORM's AddError
// keeps a statement's second error as an error and its first as text
// ("%v; %w"), TranslateError turns a driver error into
// gorm.ErrDuplicatedKey, and user code may format with %v. Cause is the
// first error the transaction's connection returned, put back so that the
// Policy's classifier and errors.As see it. Its text is Err's.
type FlattenedError struct {
	Err   error // what fn returned
	Cause error // the first error the transaction's connection returned
}

func (e *FlattenedError) Error() string { return e.Err.Error() }

// Unwrap returns Cause first, so errors.As finds the driver's error that
// aborted the transaction before a later one it caused (PostgreSQL's 25P02),
// then Err, so errors.Is(err, gorm.ErrRecordNotFound) keeps working.
func (e *FlattenedError) Unwrap() []error { return []error{e.Cause, e.Err} }
