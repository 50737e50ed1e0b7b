package sqlretry

import (
	"context"
	"database/sql/driver"
	"io"
	"reflect"

	"github.com/sqlretry/sqlretry/internal/sqltext"
)

// watchRows returns the rows of a statement run outside a transaction. A
// read's rows are returned as they are. A write's (INSERT … RETURNING, a
// CALL, several statements) are wrapped: an error met while they are read —
// the connection lost after the server committed and before the last row or
// the command's completion arrived — must not reach the caller as a plain
// error about a write that may have landed.
func (c *conn) watchRows(ctx context.Context, query string, in sqltext.Info, rows driver.Rows) driver.Rows {
	if in.ReadOnly && in.OneStatement() {
		return rows
	}
	return &writeRows{Rows: rows, ctx: ctx, c: c, query: query, in: in}
}

// writeRows are a write's rows. Errors from Next, NextResultSet and Close go
// through settle. It implements every optional Rows interface, with
// database/sql's own answer for those the inner rows lack, so that wrapping
// changes nothing a caller can see but the errors.
type writeRows struct {
	driver.Rows
	ctx    context.Context
	c      *conn
	query  string
	in     sqltext.Info
	failed error // the settled error, returned again by Close
}

func (r *writeRows) Next(dest []driver.Value) error {
	err := r.Rows.Next(dest)
	if err == nil || err == io.EOF {
		return err
	}
	return r.settle(err)
}

func (r *writeRows) Close() error {
	err := r.Rows.Close()
	if err == nil {
		return nil
	}
	if r.failed != nil {
		return r.failed
	}
	return r.settle(err)
}

func (r *writeRows) HasNextResultSet() bool {
	if n, ok := r.Rows.(driver.RowsNextResultSet); ok {
		return n.HasNextResultSet()
	}
	return false
}

func (r *writeRows) NextResultSet() error {
	n, ok := r.Rows.(driver.RowsNextResultSet)
	if !ok {
		return io.EOF
	}
	err := n.NextResultSet()
	if err == nil || err == io.EOF {
		return err
	}
	return r.settle(err)
}

func (r *writeRows) ColumnTypeScanType(i int) reflect.Type {
	if t, ok := r.Rows.(driver.RowsColumnTypeScanType); ok {
		return t.ColumnTypeScanType(i)
	}
	return reflect.TypeFor[any]()
}

func (r *writeRows) ColumnTypeDatabaseTypeName(i int) string {
	if t, ok := r.Rows.(driver.RowsColumnTypeDatabaseTypeName); ok {
		return t.ColumnTypeDatabaseTypeName(i)
	}
	return ""
}

func (r *writeRows) ColumnTypeLength(i int) (int64, bool) {
	if t, ok := r.Rows.(driver.RowsColumnTypeLength); ok {
		return t.ColumnTypeLength(i)
	}
	return 0, false
}

func (r *writeRows) ColumnTypeNullable(i int) (bool, bool) {
	if t, ok := r.Rows.(driver.RowsColumnTypeNullable); ok {
		return t.ColumnTypeNullable(i)
	}
	return false, false
}

func (r *writeRows) ColumnTypePrecisionScale(i int) (int64, int64, bool) {
	if t, ok := r.Rows.(driver.RowsColumnTypePrecisionScale); ok {
		return t.ColumnTypePrecisionScale(i)
	}
	return 0, 0, false
}

// settle decides an error met while a write's rows were read. The command
// was sent and is not replayed. The caller's own cancellation proves nothing
// of it: it ends in ErrAmbiguous as well (database/sql itself may report a
// context that ends while the rows are read as the context's error alone,
// before the driver is asked: see docs); a failure that proves the single
// statement was rolled back
// (NotApplied, on a session that survived it) is returned as it is; anything
// else — the connection lost, a command timeout, a session ended in reply to
// the statement, a failure of a multi-part text — ends in an error matching
// ErrAmbiguous that wraps the driver's.
func (r *writeRows) settle(err error) error {
	c := r.c
	err = c.failed(err)
	p := c.c.p
	if r.ctx.Err() != nil && sentNothing(err) {
		return hideBadConn(err)
	}
	class := p.Classify(err)
	if class.Phase == NotApplied && r.in.OneStatement() {
		if !c.broken && c.validator == nil && c.pinger != nil && c.pinger.Ping(r.ctx) != nil {
			c.broken = true // pgx's stdlib has no Validator: ask the session
		}
		if !c.broken {
			return hideBadConn(err)
		}
		err = lostAfter(err)
		class = p.Classify(err)
	}
	p.failures.Add(1)
	name := r.in.Verb
	if name == "" {
		name = "statement"
	}
	r.failed = p.giveUp(r.ctx, Op{Name: name, Statement: r.query}, 1, class, hideBadConn(err), withCallerEnd(r.ctx, ErrAmbiguous), true)
	return r.failed
}
