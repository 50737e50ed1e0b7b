package faults

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/sqlretry/sqlretry/internal/rawsql"
)

// Connector wraps inner so that every connection it makes obeys plan. The
// wrapper forwards every optional driver interface inner's connections
// implement (Pinger, SessionResetter, Validator, NamedValueChecker,
// ConnBeginTx, ConnPrepareContext, ExecerContext, QueryerContext, and on
// statements StmtExecContext, StmtQueryContext and ColumnConverter), answering
// driver.ErrSkip or the database/sql default where inner lacks one; rows and
// results are inner's own, so every Rows interface survives. A nil plan
// injects nothing.
//
//	db := sql.OpenDB(faults.Connector(inner, plan))
func Connector(inner driver.Connector, plan *Plan) driver.Connector {
	if plan == nil {
		plan = MustPlan(Config{})
	}
	return &connector{inner: inner, plan: plan}
}

// Open opens a *sql.DB on the driver registered as driverName, with every
// connection obeying plan.
func Open(driverName, dsn string, plan *Plan) (*sql.DB, error) {
	db, err := sql.Open(driverName, dsn)
	if err != nil {
		return nil, err
	}
	d := db.Driver()
	db.Close()
	ic, err := innerConnector(d, dsn)
	if err != nil {
		return nil, err
	}
	return sql.OpenDB(Connector(ic, plan)), nil
}

// Driver is a driver.Driver wrapping Inner under Plan, for sql.Register:
//
//	sql.Register("pgx-faults", &faults.Driver{Inner: stdlib.GetDefaultDriver(), Plan: plan})
type Driver struct {
	Inner driver.Driver
	Plan  *Plan
}

// Open opens one connection to name under d.Plan.
func (d *Driver) Open(name string) (driver.Conn, error) {
	c, err := d.OpenConnector(name)
	if err != nil {
		return nil, err
	}
	return c.Connect(context.Background())
}

// OpenConnector returns a connector to name under d.Plan.
func (d *Driver) OpenConnector(name string) (driver.Connector, error) {
	ic, err := innerConnector(d.Inner, name)
	if err != nil {
		return nil, err
	}
	return &connector{inner: ic, plan: d.plan(), drv: d}, nil
}

func (d *Driver) plan() *Plan {
	if d.Plan == nil {
		d.Plan = MustPlan(Config{})
	}
	return d.Plan
}

func innerConnector(d driver.Driver, dsn string) (driver.Connector, error) {
	if dc, ok := d.(driver.DriverContext); ok {
		return dc.OpenConnector(dsn)
	}
	return dsnConnector{d: d, dsn: dsn}, nil
}

type dsnConnector struct {
	d   driver.Driver
	dsn string
}

func (c dsnConnector) Connect(context.Context) (driver.Conn, error) { return c.d.Open(c.dsn) }
func (c dsnConnector) Driver() driver.Driver                        { return c.d }

type connector struct {
	inner driver.Connector
	plan  *Plan
	drv   *Driver
}

func (c *connector) Connect(ctx context.Context) (driver.Conn, error) {
	cl := call{op: OpConnect}
	r, fired := c.plan.decide(cl)
	if fired {
		switch r.Kind {
		case Latency:
			if err := c.plan.sleep(ctx, r.Delay); err != nil {
				return nil, err
			}
		case Hang:
			<-ctx.Done()
			return nil, &Error{Kind: Hang, Op: OpConnect, Err: ctx.Err()}
		default:
			return nil, errFor(r, cl)
		}
	}
	c.plan.passed(OpConnect)
	ic, err := c.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &conn{inner: ic, plan: c.plan}, nil
}

func (c *connector) Driver() driver.Driver {
	if c.drv != nil {
		return c.drv
	}
	return &Driver{Inner: c.inner.Driver(), Plan: c.plan}
}

// Close closes the inner connector if it is an io.Closer (sql.DB.Close calls
// it).
func (c *connector) Close() error {
	if cl, ok := c.inner.(io.Closer); ok {
		return cl.Close()
	}
	return nil
}

// conn wraps one inner connection. database/sql never uses a driver.Conn
// from two goroutines at once, so only dead, which Close and IsValid read,
// is atomic.
type conn struct {
	inner driver.Conn
	plan  *Plan
	tx    *tx // the open transaction, nil outside one
	// skipped is an exec or query the inner driver answered with
	// driver.ErrSkip: database/sql comes back with a prepare and a
	// statement call for the same text, which take over its decision so
	// the call is counted, delayed and faulted once.
	skipped *skippedCall
	dead    atomic.Bool
	closed  bool
}

// Unwrap returns the inner driver connection, for code that needs a driver's
// own methods through sql.Conn.Raw.
func (c *conn) Unwrap() driver.Conn { return c.inner }

type skippedCall struct {
	c    call
	post *Rule
}

// kill makes the connection unusable, as a lost connection is: the inner
// transaction, if any, is rolled back (the server does that when a session
// dies) and every later call fails with driver.ErrBadConn. database/sql then
// closes it, which closes the inner connection.
func (c *conn) kill() {
	if c.tx != nil {
		c.tx.rollbackInner()
	}
	c.dead.Store(true)
}

// pre applies the part of a fault that happens before the inner call: it
// returns an error when the call must fail now, and the rule when the fault
// acts after the call (post).
func (c *conn) pre(ctx context.Context, cl call) (post *Rule, err error) {
	if c.dead.Load() {
		return nil, driver.ErrBadConn
	}
	if c.tx != nil && c.tx.aborted != nil && cl.op != OpCommit && cl.op != OpRollback {
		return nil, c.tx.aborted
	}
	if s := c.skipped; s != nil && (cl.op != OpPrepare || cl.stmt != s.c.stmt) {
		c.skipped = nil
		if cl == s.c {
			return s.post, nil
		}
	}
	r, fired := c.plan.decide(cl)
	if !fired {
		return nil, nil
	}
	switch r.Kind {
	case Latency:
		if err := c.plan.sleep(ctx, r.Delay); err != nil {
			return nil, err
		}
		return nil, nil
	case Hang:
		<-ctx.Done()
		c.kill()
		return nil, &Error{Kind: Hang, Op: cl.op, Statement: cl.stmt, Err: ctx.Err()}
	case AfterExec, AppliedReplyLost, CommitAppliedReplyLost:
		return &r, nil
	case ServerError:
		err := errFor(r, cl)
		if c.tx != nil {
			c.tx.rollbackInner()
			c.tx.aborted = fmt.Errorf("%w: %w", ErrTxAborted, err)
		}
		return nil, err
	}
	// BeforeSend, CommitNotApplied, Outage: the connection is gone.
	c.kill()
	return nil, errFor(r, cl)
}

// post applies a fault that acts after the inner call ran.
func (c *conn) post(r *Rule, cl call) error {
	c.kill()
	return errFor(*r, cl)
}

func (c *conn) Prepare(query string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), query)
}

func (c *conn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	if err := c.enter(ctx, call{op: OpPrepare, stmt: query, inTx: c.tx != nil}); err != nil {
		return nil, err
	}
	si, err := c.prepareInner(ctx, query)
	if err != nil {
		return nil, err
	}
	s := &stmt{inner: si, conn: c, query: query}
	if _, ok := si.(driver.ColumnConverter); ok {
		return &stmtCC{s}, nil
	}
	return s, nil
}

func (c *conn) Close() error {
	if c.closed {
		return nil
	}
	c.closed = true
	c.dead.Store(true)
	return c.inner.Close()
}

func (c *conn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

func (c *conn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if err := c.enter(ctx, call{op: OpBegin}); err != nil {
		return nil, err
	}
	it, err := c.beginInner(ctx, opts)
	if err != nil {
		return nil, err
	}
	c.tx = &tx{inner: it, conn: c, ctx: ctx}
	return c.tx, nil
}

// enter applies the plan to a call whose faults all act before the inner
// driver runs it (a prepare, a begin, a ping) and counts the call as passed.
func (c *conn) enter(ctx context.Context, cl call) error {
	if _, err := c.pre(ctx, cl); err != nil {
		return err
	}
	c.plan.passed(cl.op)
	return nil
}

// prepareInner is database/sql's ctxDriverPrepare on the inner connection.
func (c *conn) prepareInner(ctx context.Context, query string) (driver.Stmt, error) {
	if pc, ok := c.inner.(driver.ConnPrepareContext); ok {
		return pc.PrepareContext(ctx, query)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return c.inner.Prepare(query)
}

// beginInner is database/sql's ctxDriverBegin on the inner connection.
func (c *conn) beginInner(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if bt, ok := c.inner.(driver.ConnBeginTx); ok {
		return bt.BeginTx(ctx, opts)
	}
	if opts.Isolation != 0 || opts.ReadOnly {
		return nil, errors.New("faults: inner driver does not support non-default isolation or read-only transactions")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return c.inner.Begin() //nolint:staticcheck // the fallback for drivers without ConnBeginTx
}

func (c *conn) Ping(ctx context.Context) error {
	if err := c.enter(ctx, call{op: OpPing}); err != nil {
		return err
	}
	if p, ok := c.inner.(driver.Pinger); ok {
		return p.Ping(ctx)
	}
	return nil
}

func (c *conn) ResetSession(ctx context.Context) error {
	if c.dead.Load() {
		return driver.ErrBadConn
	}
	if r, ok := c.inner.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

func (c *conn) IsValid() bool {
	if c.dead.Load() {
		return false
	}
	if v, ok := c.inner.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}

func (c *conn) CheckNamedValue(nv *driver.NamedValue) error {
	if n, ok := c.inner.(driver.NamedValueChecker); ok {
		return n.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

func (c *conn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	ec, isEC := c.inner.(driver.ExecerContext)
	e, isE := c.inner.(driver.Execer) //nolint:staticcheck // legacy fallback
	if !isEC && !isE {
		return nil, driver.ErrSkip // database/sql prepares, and the stmt applies the plan
	}
	cl := call{op: OpExec, stmt: query, inTx: c.tx != nil}
	return direct(ctx, c, cl, nil, func() (driver.Result, error) {
		if isEC {
			return ec.ExecContext(ctx, query, args)
		}
		return rawsql.Legacy(ctx, args, errNamedArgs, func(vals []driver.Value) (driver.Result, error) { return e.Exec(query, vals) })
	})
}

func (c *conn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	qc, isQC := c.inner.(driver.QueryerContext)
	q, isQ := c.inner.(driver.Queryer) //nolint:staticcheck // legacy fallback
	if !isQC && !isQ {
		return nil, driver.ErrSkip
	}
	cl := call{op: OpQuery, stmt: query, inTx: c.tx != nil}
	return direct(ctx, c, cl, drainClose, func() (driver.Rows, error) {
		if isQC {
			return qc.QueryContext(ctx, query, args)
		}
		return rawsql.Legacy(ctx, args, errNamedArgs, func(vals []driver.Value) (driver.Rows, error) { return q.Query(query, vals) })
	})
}

// direct runs an exec or query that the inner connection answers itself,
// without a prepared statement, under the plan; discard, if set, disposes of
// what inner returned when a fault after the call replaces it. An inner
// driver.ErrSkip leaves the decision to the prepared statement database/sql
// falls back to, so that the call is counted and faulted once.
func direct[T any](ctx context.Context, c *conn, cl call, discard func(T), inner func() (T, error)) (T, error) {
	var none T
	post, err := c.pre(ctx, cl)
	if err != nil {
		return none, err
	}
	v, err := inner()
	if errors.Is(err, driver.ErrSkip) {
		c.skipped = &skippedCall{c: cl, post: post}
		return none, err
	}
	c.plan.passed(cl.op)
	if post != nil {
		if discard != nil {
			discard(v)
		}
		return none, c.post(post, cl)
	}
	return v, err
}

// drainClose reads rows to the end, so a statement with side effects
// (INSERT ... RETURNING) has run in full, then closes them.
func drainClose(rows driver.Rows) {
	if rows == nil {
		return
	}
	dest := make([]driver.Value, len(rows.Columns()))
	for i := 0; i < 1<<20; i++ { // bounded: a fault is not a bulk reader
		if rows.Next(dest) != nil {
			break
		}
	}
	rows.Close()
}

// errNamedArgs is the error for a named argument given to an inner driver
// that takes positional ones only.
var errNamedArgs = errors.New("faults: inner driver does not support named parameters")

// tx wraps one inner transaction.
type tx struct {
	inner     driver.Tx
	conn      *conn
	ctx       context.Context // BeginTx's: Commit has none of its own
	innerDone bool            // inner committed or rolled back
	aborted   error           // set by an injected ServerError
}

func (t *tx) rollbackInner() {
	if !t.innerDone {
		t.innerDone = true
		_ = t.inner.Rollback()
	}
}

func (t *tx) Commit() error { return t.end(OpCommit, t.aborted, t.inner.Commit) }

// Rollback of a transaction a ServerError aborted succeeds: the fault
// already rolled the inner one back.
func (t *tx) Rollback() error { return t.end(OpRollback, nil, t.inner.Rollback) }

// end runs the inner Commit or Rollback under the plan, and detaches t from
// its connection. A transaction a ServerError aborted returns ifAborted
// without a call; one a fault already ended answers driver.ErrBadConn. Only
// a commit has an outcome for a fault after the call to replace.
func (t *tx) end(op Op, ifAborted error, inner func() error) error {
	c := t.conn
	defer func() {
		if c.tx == t {
			c.tx = nil
		}
	}()
	if t.aborted != nil {
		return ifAborted
	}
	cl := call{op: op, inTx: true}
	post, err := c.pre(t.ctx, cl)
	if err != nil {
		return err
	}
	if t.innerDone { // a fault already ended it
		return driver.ErrBadConn
	}
	c.plan.passed(op)
	t.innerDone = true
	err = inner()
	if post != nil && op == OpCommit {
		return c.post(post, cl)
	}
	return err
}

// stmt wraps one inner prepared statement.
type stmt struct {
	inner driver.Stmt
	conn  *conn
	query string
}

// stmtCC is a stmt whose inner statement is a driver.ColumnConverter: the
// wrapper may only claim that interface when inner has it, since
// database/sql prefers it over its default conversion.
type stmtCC struct{ *stmt }

func (s *stmtCC) ColumnConverter(idx int) driver.ValueConverter {
	return s.inner.(driver.ColumnConverter).ColumnConverter(idx)
}

func (s *stmt) Close() error  { return s.inner.Close() }
func (s *stmt) NumInput() int { return s.inner.NumInput() }

func (s *stmt) CheckNamedValue(nv *driver.NamedValue) error {
	if n, ok := s.inner.(driver.NamedValueChecker); ok {
		return n.CheckNamedValue(nv)
	}
	return s.conn.CheckNamedValue(nv)
}

func (s *stmt) Exec(args []driver.Value) (driver.Result, error) {
	return s.ExecContext(context.Background(), valuesToNamed(args))
}

func (s *stmt) Query(args []driver.Value) (driver.Rows, error) {
	return s.QueryContext(context.Background(), valuesToNamed(args))
}

func (s *stmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	cl := call{op: OpExec, stmt: s.query, inTx: s.conn.tx != nil}
	return prepared(ctx, s.conn, cl, nil, func() (driver.Result, error) {
		if se, ok := s.inner.(driver.StmtExecContext); ok {
			return se.ExecContext(ctx, args)
		}
		return rawsql.Legacy(ctx, args, errNamedArgs, s.inner.Exec) //nolint:staticcheck // legacy fallback
	})
}

func (s *stmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	cl := call{op: OpQuery, stmt: s.query, inTx: s.conn.tx != nil}
	return prepared(ctx, s.conn, cl, drainClose, func() (driver.Rows, error) {
		if sq, ok := s.inner.(driver.StmtQueryContext); ok {
			return sq.QueryContext(ctx, args)
		}
		return rawsql.Legacy(ctx, args, errNamedArgs, s.inner.Query) //nolint:staticcheck // legacy fallback
	})
}

// prepared runs an exec or query on an inner prepared statement under the
// plan; discard, if set, disposes of what inner returned when a fault after
// the call replaces it.
func prepared[T any](ctx context.Context, c *conn, cl call, discard func(T), inner func() (T, error)) (T, error) {
	var none T
	post, err := c.pre(ctx, cl)
	if err != nil {
		return none, err
	}
	c.plan.passed(cl.op)
	v, err := inner()
	if post != nil {
		if discard != nil {
			discard(v)
		}
		return none, c.post(post, cl)
	}
	return v, err
}

func valuesToNamed(vals []driver.Value) []driver.NamedValue {
	nv := make([]driver.NamedValue, len(vals))
	for i, v := range vals {
		nv[i] = driver.NamedValue{Ordinal: i + 1, Value: v}
	}
	return nv
}

// Compile-time checks that the wrappers offer every interface they forward.
var (
	_ driver.Connector          = (*connector)(nil)
	_ io.Closer                 = (*connector)(nil)
	_ driver.DriverContext      = (*Driver)(nil)
	_ driver.Pinger             = (*conn)(nil)
	_ driver.SessionResetter    = (*conn)(nil)
	_ driver.Validator          = (*conn)(nil)
	_ driver.NamedValueChecker  = (*conn)(nil)
	_ driver.ConnBeginTx        = (*conn)(nil)
	_ driver.ConnPrepareContext = (*conn)(nil)
	_ driver.ExecerContext      = (*conn)(nil)
	_ driver.QueryerContext     = (*conn)(nil)
	_ driver.StmtExecContext    = (*stmt)(nil)
	_ driver.StmtQueryContext   = (*stmt)(nil)
	_ driver.NamedValueChecker  = (*stmt)(nil)
	_ driver.ColumnConverter    = (*stmtCC)(nil)
)
