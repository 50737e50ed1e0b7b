package pgxretry

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sqlretry/sqlretry"
)

// Query runs a query outside a transaction. It is retried, under
// [Pool.Exec]'s rules, until its first row (or its end) has arrived: the
// attempt reads the first row before Query returns. A failure after that
// is not replayed — the caller may have read rows — and, for a text that
// may write (INSERT … RETURNING), a failure of unknown outcome is reported
// by Err as an error matching sqlretry.ErrAmbiguous.
func (w *Pool) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	r := &rows{w: w, ctx: ctx, sql: sql}
	if err := w.query(r, args); err != nil {
		return errRows{err: err}, err
	}
	return r, nil
}

// QueryRow runs a query outside a transaction and scans its first row,
// retried under [Pool.Exec]'s rules as one call: the query is sent when
// Scan is called (pgx sends it at QueryRow, but defers every error to
// Scan), so a failure anywhere before Scan returns — the first row, the
// rows after it, the end of the statement — is judged and, where the rules
// allow, replayed, overwriting dest. Call Scan, as with pgx: a row never
// scanned runs nothing.
func (w *Pool) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return &row{w: w, ctx: ctx, sql: sql, args: args}
}

// query opens r under the Policy.
func (w *Pool) query(r *rows, args []any) error {
	op, s := w.opFor(r.ctx, queryOp, r.sql)
	r.s = s
	return w.p.Do(r.ctx, op, func(actx context.Context) error {
		r.attempts++
		err := r.open(actx, args)
		if err != nil && r.c != nil {
			s.note(r.c)
			closed := r.c.Conn().IsClosed()
			r.release()
			return w.failedAs(r.ctx, op, err, shapeOf(r.sql), closed, r.sql)
		}
		return err
	})
}

// rows is a query's rows, its first row read ahead by the attempt that
// opened them.
type rows struct {
	w        *Pool
	ctx      context.Context // the caller's
	sql      string
	attempts int
	s        *session // the failed attempt's backend, for a fence; nil if none

	c      *pgxpool.Conn // released when the rows end
	inner  pgx.Rows
	cancel context.CancelFunc // the query's own CommandTimeout; nil if none
	ahead  bool               // inner's current row was read ahead, not yet handed out
	done   bool               // the rows ended: c released, err set
	err    error              // the rows' error, once done
	scan   error              // the last Scan or Values error, the caller's own
}

// open runs one attempt: acquire, query, read the first row. The Policy
// cancels the attempt's context when the attempt returns, but rows are
// read afterwards: under a CommandTimeout the query gets a context of its
// own with the attempt's deadline, ended when the rows end.
func (r *rows) open(actx context.Context, args []any) error {
	qctx := actx
	if dl, ok := actx.Deadline(); ok {
		if cdl, cok := r.ctx.Deadline(); !cok || dl.Before(cdl) {
			qctx, r.cancel = context.WithDeadline(r.ctx, dl)
		}
	}
	c, err := r.w.pool.Acquire(qctx)
	if err != nil {
		r.endTimer()
		return r.w.acquireFailed(r.ctx, err)
	}
	r.c = c
	r.s.acquired(qctx, c)
	r.inner, err = c.Query(qctx, r.sql, args...)
	if err != nil {
		return err
	}
	if r.inner.Next() {
		r.ahead = true
		return nil
	}
	if err := r.inner.Err(); err != nil {
		return err
	}
	r.finish()
	return nil
}

// release gives back the failed attempt's connection.
func (r *rows) release() {
	if r.inner != nil {
		r.inner.Close()
		r.inner = nil
	}
	r.c.Release()
	r.c = nil
	r.endTimer()
}

func (r *rows) endTimer() {
	if r.cancel != nil {
		r.cancel()
		r.cancel = nil
	}
}

// finish ends the rows: the connection goes back to the pool, and an error
// while reading is judged.
func (r *rows) finish() {
	if r.done {
		return
	}
	r.done = true
	r.inner.Close()
	closed := r.c.Conn().IsClosed()
	r.c.Release()
	r.c = nil
	if err := r.inner.Err(); err != nil && err != r.scan {
		r.err = r.w.lateFailure(r.ctx, r.sql, r.attempts, err, closed)
	} else {
		r.err = err
	}
	r.endTimer()
}

// lateFailure judges a failure after the first row, which is not
// replayed: a text that may write, failing with an unknown outcome, ends
// in ErrAmbiguous, never a plain error.
func (w *Pool) lateFailure(ctx context.Context, sql string, attempts int, err error, closed bool) error {
	sh := shapeOf(sql)
	if sh == shapeRead {
		if texts := []string{sql}; !readCalls(texts) || w.builtinCalls(ctx, texts) == nil {
			return err
		}
		sh = shapeWrite // a function of a user's may have written
	}
	if ctx.Err() != nil {
		// The caller's context cut the rows off: the write may have
		// committed all the same.
		return &sqlretry.Error{Op: queryOp.Name, Attempts: attempts, Class: w.p.Classify(err), Err: err, Cause: ambiguousAfter(ctx)}
	}
	c := w.classify(ctx, err, sh, closed)
	if c.Phase != sqlretry.Unknown {
		return err
	}
	return &sqlretry.Error{Op: queryOp.Name, Attempts: attempts, Class: c, Err: err, Cause: sqlretry.ErrAmbiguous}
}

// ambiguousAfter is the cause of an ambiguous outcome the caller hears
// after its context ctx ended: it matches sqlretry.ErrAmbiguous and
// ctx.Err().
func ambiguousAfter(ctx context.Context) error { return &callerEnded{ctx.Err()} }

type callerEnded struct{ ctxErr error }

func (e *callerEnded) Error() string {
	return e.ctxErr.Error() + " while the write was in flight, and " + strings.TrimPrefix(sqlretry.ErrAmbiguous.Error(), "sqlretry: ")
}

func (e *callerEnded) Unwrap() []error { return []error{e.ctxErr, sqlretry.ErrAmbiguous} }

// Next prepares the next row; the first is the one read ahead.
func (r *rows) Next() bool {
	if r.ahead {
		r.ahead = false
		return true
	}
	if r.done {
		return false
	}
	if r.inner.Next() {
		return true
	}
	r.finish()
	return false
}

// Close ends the rows and gives back their connection.
func (r *rows) Close() { r.finish() }

// Err returns the rows' error; see [Pool.Query].
func (r *rows) Err() error {
	if r.done {
		return r.err
	}
	return r.inner.Err()
}

func (r *rows) Scan(dest ...any) error {
	err := r.inner.Scan(dest...)
	if err != nil {
		r.scan = err
		r.finish() // pgx closes rows on a Scan error
	}
	return err
}

func (r *rows) Values() ([]any, error) {
	v, err := r.inner.Values()
	if err != nil {
		r.scan = err
	}
	return v, err
}

func (r *rows) CommandTag() pgconn.CommandTag                { return r.inner.CommandTag() }
func (r *rows) FieldDescriptions() []pgconn.FieldDescription { return r.inner.FieldDescriptions() }
func (r *rows) RawValues() [][]byte                          { return r.inner.RawValues() }
func (r *rows) Conn() *pgx.Conn                              { return r.inner.Conn() }
func (r *rows) TypeMap() *pgtype.Map                         { return r.inner.TypeMap() }

// row is QueryRow's row: the query, run by Scan.
type row struct {
	w    *Pool
	ctx  context.Context
	sql  string
	args []any
}

// Scan runs the query and scans its first row, as pgx's QueryRow does:
// pgx.ErrNoRows if there is none.
func (r *row) Scan(dest ...any) error {
	op, s := r.w.opFor(r.ctx, queryOp, r.sql)
	return r.w.p.Do(r.ctx, op, func(actx context.Context) error {
		c, err := r.w.pool.Acquire(actx)
		if err != nil {
			return r.w.acquireFailed(r.ctx, err)
		}
		defer c.Release()
		s.acquired(actx, c)
		if err = c.QueryRow(actx, r.sql, r.args...).Scan(dest...); err != nil {
			s.note(c)
			return r.w.failedAs(r.ctx, op, err, shapeOf(r.sql), c.Conn().IsClosed(), r.sql)
		}
		return nil
	})
}

// errRows is the rows of a query that failed, as pgx returns one.
type errRows struct{ err error }

func (errRows) Close()                                       {}
func (e errRows) Err() error                                 { return e.err }
func (errRows) CommandTag() pgconn.CommandTag                { return pgconn.CommandTag{} }
func (errRows) FieldDescriptions() []pgconn.FieldDescription { return nil }
func (errRows) Next() bool                                   { return false }
func (e errRows) Scan(...any) error                          { return e.err }
func (e errRows) Values() ([]any, error)                     { return nil, e.err }
func (errRows) RawValues() [][]byte                          { return nil }
func (errRows) Conn() *pgx.Conn                              { return nil }
func (errRows) TypeMap() *pgtype.Map                         { return nil }
