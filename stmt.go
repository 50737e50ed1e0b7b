package sqlretry

import (
	"context"
	"database/sql/driver"

	"github.com/sqlretry/sqlretry/internal/rawsql"
	"github.com/sqlretry/sqlretry/internal/sqltext"
)

// stmt wraps a prepared statement. Outside a transaction its Exec and Query
// are retried like the connection's, and when the connection was replaced
// underneath, the statement is prepared again on the new one.
//
// stmt implements driver.Stmt, StmtExecContext, StmtQueryContext and
// NamedValueChecker; stmtCC adds ColumnConverter when the inner statement
// has it.
type stmt struct {
	c     *conn
	query string
	info  sqltext.Info // read once, at prepare
	inner driver.Stmt
	gen   uint64 // the connection generation inner was prepared on
	plain bool   // a plain Policy's, and no transaction control: Exec may take the fast path (see conn.idle)
	read  bool   // ... and a read of one statement: Query may too

	execer  driver.StmtExecContext
	queryer driver.StmtQueryContext
	checker driver.NamedValueChecker
}

type stmtCC struct{ *stmt } // + ColumnConverter

// ColumnConverter forwards to the inner statement.
func (s stmtCC) ColumnConverter(idx int) driver.ValueConverter {
	if cc, ok := s.inner.(driver.ColumnConverter); ok { //nolint:staticcheck // forwarded for drivers that still use it
		return cc.ColumnConverter(idx)
	}
	return driver.DefaultParameterConverter
}

func newStmt(c *conn, query string, si driver.Stmt) driver.Stmt {
	s := &stmt{c: c, query: query, info: sqltext.Analyze(query), gen: c.gen}
	s.plain = c.plain && !s.info.TxControl
	s.read = s.plain && s.info.ReadOnly && s.info.OneStatement()
	s.setInner(si)
	if _, ok := si.(driver.ColumnConverter); ok { //nolint:staticcheck
		return stmtCC{s}
	}
	return s
}

func (s *stmt) setInner(si driver.Stmt) {
	s.inner = si
	s.execer, _ = si.(driver.StmtExecContext)
	s.queryer, _ = si.(driver.StmtQueryContext)
	s.checker, _ = si.(driver.NamedValueChecker)
}

// Close closes the inner statement.
func (s *stmt) Close() error { return s.inner.Close() }

// NumInput forwards to the inner statement.
func (s *stmt) NumInput() int { return s.inner.NumInput() }

// Exec is the pre-context entry point; database/sql calls ExecContext.
func (s *stmt) Exec(args []driver.Value) (driver.Result, error) {
	return s.ExecContext(context.Background(), valuesToNamedArgs(args))
}

// Query is the pre-context entry point; database/sql calls QueryContext.
func (s *stmt) Query(args []driver.Value) (driver.Rows, error) {
	return s.QueryContext(context.Background(), valuesToNamedArgs(args))
}

// CheckNamedValue forwards to the inner statement, else to the inner
// connection (database/sql consults the statement's checker before the
// connection's), else returns driver.ErrSkip.
func (s *stmt) CheckNamedValue(nv *driver.NamedValue) error {
	if s.checker != nil {
		return s.checker.CheckNamedValue(nv)
	}
	return s.c.CheckNamedValue(nv)
}

// reprepare prepares the statement again if the connection was replaced
// since it was last prepared.
func (s *stmt) reprepare(ctx context.Context) error {
	if s.gen == s.c.gen {
		return nil
	}
	si, err := s.c.prepare(ctx, s.query)
	if err != nil {
		return s.c.notSent(ctx, err)
	}
	_ = s.inner.Close() // it belonged to the lost connection
	s.setInner(si)
	s.gen = s.c.gen
	return nil
}

// ExecContext executes the statement, retried outside a transaction.
func (s *stmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	c := s.c
	if s.execer != nil && s.plain && s.gen == c.gen && c.idle() && (s.info.ReadOnly || !opsAttached.Load()) {
		// The connection's fast path (see conn.ExecContext).
		res, err := s.execer.ExecContext(ctx, args)
		if err == nil {
			c.succeeded()
			return res, nil
		}
		if err == driver.ErrSkip {
			return nil, err
		}
		r := call{c: c, query: s.query, info: &s.info, args: args, st: s}
		err = c.retryCall(ctx, &r, &s.info, nil, err)
		return r.res, err
	}
	r := call{c: c, query: s.query, info: &s.info, args: args, st: s}
	err := c.call(ctx, &r)
	return r.res, err
}

// QueryContext runs the statement's query, retried outside a transaction
// until its rows are returned.
func (s *stmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	c := s.c
	if s.queryer != nil && s.read && s.gen == c.gen && c.idle() {
		// The connection's fast path (see conn.QueryContext).
		rows, err := s.queryer.QueryContext(ctx, args)
		if err == nil {
			c.succeeded()
			return rows, nil
		}
		if err == driver.ErrSkip {
			return nil, err
		}
		r := call{c: c, query: s.query, info: &s.info, args: args, st: s, rows: true}
		err = c.retryCall(ctx, &r, &s.info, nil, err)
		return r.out, err
	}
	r := call{c: c, query: s.query, info: &s.info, args: args, st: s, rows: true}
	err := c.call(ctx, &r)
	return r.out, err
}

// exec is database/sql's ctxDriverStmtExec.
func (s *stmt) exec(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	if s.execer != nil {
		return s.execer.ExecContext(ctx, args)
	}
	return rawsql.Legacy(ctx, args, errNamedArgs, s.inner.Exec) //nolint:staticcheck // the fallback database/sql uses
}

// queryOnce is database/sql's ctxDriverStmtQuery.
func (s *stmt) queryOnce(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	if s.queryer != nil {
		return s.queryer.QueryContext(ctx, args)
	}
	return rawsql.Legacy(ctx, args, errNamedArgs, s.inner.Query) //nolint:staticcheck
}

func valuesToNamedArgs(args []driver.Value) []driver.NamedValue {
	nv := make([]driver.NamedValue, len(args))
	for i, a := range args {
		nv[i] = driver.NamedValue{Ordinal: i + 1, Value: a}
	}
	return nv
}
