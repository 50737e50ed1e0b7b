package sqlretry

// A scripted fake database/sql driver, in the manner of database/sql's
// fakedb_test.go: a fakeServer holds committed integer values by key, a log
// of calls and a script of faults that fire on chosen calls.
//
// Statements (placeholders ? take the arguments in order):
//
//	SET k v    data[k] = v
//	ADD k n    data[k] += n
//	GET k      one row, one column: data[k] (a read IsReadOnly cannot see)
//	SELECT k   the same, read-only to IsReadOnly
//	SELECT 1   one row, one column: 1
//	BAD        a permanent error (errSyntax)
//	ADD k n RETURNING   (query) data[k] += n, one row: the new data[k]
//	A; B; …    (exec) the parts in order, each committed as it runs; a
//	           fault matching a later part fires after the earlier ones applied

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Test errors, classified by testClassifier.
var (
	errDeadlock = errors.New("fake: deadlock detected")          // retryable, not applied
	errLost     = errors.New("fake: connection lost after send") // retryable, unknown
	errSyntax   = errors.New("fake: syntax error")               // permanent
	errAuth     = errors.New("fake: password authentication failed")
	errRefused  = errors.New("fake: connection refused") // retryable, not sent
)

// testClassifier classifies the fake server's errors. The fake server is
// in-process: every attempt has ended when its call returns (Class.Ended),
// as with SQLite. serverClassifier is the same without that fact, as a
// server that may run on after its client gave up would be.
var testClassifier = ClassifierFunc(func(err error) Class {
	c := serverClassifier(err)
	c.Ended = true
	return c
})

var serverClassifier = ClassifierFunc(func(err error) Class {
	switch {
	case errors.Is(err, errDeadlock):
		return Class{Retryable: true, Phase: NotApplied, Code: "40P01"}
	case errors.Is(err, errLost):
		return Class{Retryable: true, Phase: Unknown, Code: "lost"}
	case errors.Is(err, errRefused):
		return Class{Retryable: true, Phase: NotSent, Code: "refused"}
	case errors.Is(err, errAuth):
		return Class{Phase: NotSent, Code: "28P01"}
	case errors.Is(err, errSyntax):
		return Class{Phase: NotApplied, Code: "42601"}
	}
	return ClassifyNeutral(err)
})

// testPolicy returns a Policy with the test classifier, no budget and no
// sleeping; waits are recorded in *waits if waits is not nil.
func testPolicy(t testing.TB, c Config) *Policy {
	t.Helper()
	if c.Classifier == nil {
		c.Classifier = testClassifier
	}
	if c.Budget == nil {
		c.Budget = NoBudget
	}
	p, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	p.sleep = func(ctx context.Context, d time.Duration) error { return ctx.Err() }
	return p
}

// A fault fires on a call of kind op whose statement contains match.
type fault struct {
	op    string // connect, begin, exec, query, prepare, commit, rollback, ping, reset, next
	match string // substring of the statement; "" matches any
	err   error
	apply bool // the command takes effect before the error: an ambiguous failure
	kill  bool // the connection is dead afterwards
	times int  // how many times it fires; 0 means once
	block bool // wait until the context is done, then return its error
	// keepOpen: a refused COMMIT leaves the transaction open on the
	// session (a Galera node's 1047, SQLite's busy COMMIT); the session's
	// next BEGIN commits it, as MySQL's does.
	keepOpen bool
}

type fakeServer struct {
	mu     sync.Mutex
	data   map[string]int64
	faults []*fault
	log    []string
	opened int // connections ever opened
	live   int // connections open now
	conns  []*fakeConn
	nolog  bool // benchmarks: keep no call log
}

// conn returns the i-th connection opened.
func (s *fakeServer) conn(i int) *fakeConn {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conns[i]
}

// kill marks every open connection dead, as a server restart would.
func (s *fakeServer) kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		c.dead = true
	}
}

func newFakeServer(faults ...*fault) *fakeServer {
	return &fakeServer{data: map[string]int64{}, faults: faults}
}

func (s *fakeServer) addFaults(f ...*fault) {
	s.mu.Lock()
	s.faults = append(s.faults, f...)
	s.mu.Unlock()
}

func (s *fakeServer) get(k string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.data[k]
}

// count returns how many logged calls start with prefix.
func (s *fakeServer) count(prefix string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, l := range s.log {
		if strings.HasPrefix(l, prefix) {
			n++
		}
	}
	return n
}

// take logs the call and returns the fault that fires on it, if any.
func (s *fakeServer) take(op, stmt string) *fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.nolog && len(s.faults) == 0 {
		return nil
	}
	if stmt == "" {
		s.log = append(s.log, op)
	} else {
		s.log = append(s.log, op+" "+stmt)
	}
	for i, f := range s.faults {
		if f.op != op || !strings.Contains(stmt, f.match) {
			continue
		}
		if f.times <= 1 {
			s.faults = append(s.faults[:i:i], s.faults[i+1:]...)
		} else {
			f.times--
		}
		return f
	}
	return nil
}

// fire turns a fault into the call's error; apply runs the command's effect.
func (f *fault) fire(ctx context.Context, c *fakeConn, apply func()) error {
	if f.apply && apply != nil {
		apply()
	}
	if f.block {
		<-ctx.Done()
		return ctx.Err()
	}
	if f.kill && c != nil {
		c.dead = true
	}
	return f.err
}

// fakeConnector opens fakeConns; mk, if set, wraps each in a type with
// fewer optional interfaces.
type fakeConnector struct {
	s  *fakeServer
	mk func(*fakeConn) driver.Conn
}

func (c *fakeConnector) Connect(ctx context.Context) (driver.Conn, error) {
	if f := c.s.take("connect", ""); f != nil {
		return nil, f.fire(ctx, nil, nil)
	}
	c.s.mu.Lock()
	c.s.opened++
	c.s.live++
	fc := &fakeConn{s: c.s}
	c.s.conns = append(c.s.conns, fc)
	c.s.mu.Unlock()
	if c.mk != nil {
		return c.mk(fc), nil
	}
	return fc, nil
}

func (c *fakeConnector) Driver() driver.Driver { return fakeDriver{c} }

type fakeDriver struct{ c *fakeConnector }

func (d fakeDriver) Open(string) (driver.Conn, error) { return d.c.Connect(context.Background()) }

// fakeConn implements every optional connection interface.
type fakeConn struct {
	s      *fakeServer
	dead   bool
	closed bool
	tx     *fakeTx
}

var (
	_ driver.Conn               = (*fakeConn)(nil)
	_ driver.ConnBeginTx        = (*fakeConn)(nil)
	_ driver.ConnPrepareContext = (*fakeConn)(nil)
	_ driver.ExecerContext      = (*fakeConn)(nil)
	_ driver.QueryerContext     = (*fakeConn)(nil)
	_ driver.Pinger             = (*fakeConn)(nil)
	_ driver.SessionResetter    = (*fakeConn)(nil)
	_ driver.Validator          = (*fakeConn)(nil)
	_ driver.NamedValueChecker  = (*fakeConn)(nil)
)

func (c *fakeConn) Prepare(q string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), q)
}

func (c *fakeConn) PrepareContext(ctx context.Context, q string) (driver.Stmt, error) {
	if c.dead {
		return nil, driver.ErrBadConn
	}
	if f := c.s.take("prepare", q); f != nil {
		return nil, f.fire(ctx, c, nil)
	}
	return &fakeStmt{c: c, q: q}, nil
}

func (c *fakeConn) Close() error {
	if !c.closed {
		c.closed = true
		c.s.mu.Lock()
		c.s.live--
		c.s.mu.Unlock()
	}
	return nil
}

func (c *fakeConn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

func (c *fakeConn) BeginTx(ctx context.Context, _ driver.TxOptions) (driver.Tx, error) {
	if c.dead {
		return nil, driver.ErrBadConn
	}
	if f := c.s.take("begin", ""); f != nil {
		return nil, f.fire(ctx, c, nil)
	}
	if c.tx != nil {
		c.tx.apply() // a transaction left open: BEGIN commits it
	}
	c.tx = &fakeTx{c: c, ctx: ctx}
	return c.tx, nil
}

func (c *fakeConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	if c.dead {
		return nil, driver.ErrBadConn
	}
	if parts := strings.Split(q, "; "); len(parts) > 1 {
		for _, part := range parts {
			if _, err := c.ExecContext(ctx, part, nil); err != nil {
				return nil, err
			}
		}
		return driver.RowsAffected(len(parts)), nil
	}
	apply, _, err := c.parse(q, args)
	if err != nil {
		return nil, err
	}
	if f := c.s.take("exec", q); f != nil {
		return nil, f.fire(ctx, c, func() { c.run(apply) })
	}
	c.run(apply)
	return driver.RowsAffected(1), nil
}

func (c *fakeConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	if c.dead {
		return nil, driver.ErrBadConn
	}
	if w, ok := strings.CutSuffix(q, " RETURNING"); ok {
		apply, _, err := c.parse(w, args)
		if err != nil {
			return nil, err
		}
		if f := c.s.take("query", q); f != nil {
			return nil, f.fire(ctx, c, func() { c.run(apply) })
		}
		c.run(apply)
		return &fakeRows{c: c, ctx: ctx, vals: []int64{c.read(strings.Fields(w)[1])}}, nil
	}
	_, read, err := c.parse(q, args)
	if err != nil {
		return nil, err
	}
	if f := c.s.take("query", q); f != nil {
		return nil, f.fire(ctx, c, nil)
	}
	return &fakeRows{c: c, ctx: ctx, vals: []int64{c.read(read)}}, nil
}

func (c *fakeConn) Ping(ctx context.Context) error {
	if c.dead {
		return driver.ErrBadConn
	}
	if f := c.s.take("ping", ""); f != nil {
		return f.fire(ctx, c, nil)
	}
	return nil
}

func (c *fakeConn) ResetSession(ctx context.Context) error {
	if c.dead {
		return driver.ErrBadConn
	}
	if f := c.s.take("reset", ""); f != nil {
		return f.fire(ctx, c, nil)
	}
	return nil
}

func (c *fakeConn) IsValid() bool { return !c.dead && !c.closed }

func (c *fakeConn) CheckNamedValue(nv *driver.NamedValue) error {
	if _, ok := nv.Value.(fakeCustom); ok {
		nv.Value = int64(42)
		return nil
	}
	return driver.ErrSkip
}

// fakeCustom is an argument type only fakeConn's NamedValueChecker accepts.
type fakeCustom struct{}

// parse returns the effect of a write and the key of a read.
func (c *fakeConn) parse(q string, args []driver.NamedValue) (apply func(map[string]int64), read string, err error) {
	f := strings.Fields(q)
	ai := 0
	arg := func(s string) (int64, error) {
		if s == "?" {
			if ai >= len(args) {
				return 0, fmt.Errorf("fake: missing argument %d", ai+1)
			}
			v := args[ai].Value
			ai++
			switch v := v.(type) {
			case int64:
				return v, nil
			case string:
				return strconv.ParseInt(v, 10, 64)
			}
			return 0, fmt.Errorf("fake: argument of type %T", v)
		}
		return strconv.ParseInt(s, 10, 64)
	}
	switch {
	case len(f) == 3 && (f[0] == "SET" || f[0] == "ADD"):
		v, err := arg(f[2])
		if err != nil {
			return nil, "", err
		}
		k, set := f[1], f[0] == "SET"
		return func(m map[string]int64) {
			if set {
				m[k] = v
			} else {
				m[k] += v
			}
		}, "", nil
	case q == "SELECT 1":
		return nil, "", nil
	case q == "BEGIN" || q == "COMMIT" || q == "ROLLBACK":
		// Accepted and ignored: transactions in SQL text are the
		// Connector's business (it must pin the session), not the fake's.
		return nil, "", nil
	case len(f) == 2 && (f[0] == "GET" || f[0] == "SELECT"):
		return nil, f[1], nil
	}
	return nil, "", errSyntax
}

// run applies a write, to the transaction if one is open.
func (c *fakeConn) run(apply func(map[string]int64)) {
	if apply == nil {
		return
	}
	if c.tx != nil {
		c.tx.pending = append(c.tx.pending, apply)
		return
	}
	c.s.mu.Lock()
	apply(c.s.data)
	c.s.mu.Unlock()
}

// read returns a key's value as the connection sees it; "" reads 1.
func (c *fakeConn) read(k string) int64 {
	if k == "" {
		return 1
	}
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	v := c.s.data[k]
	if c.tx != nil {
		m := map[string]int64{k: v}
		for _, p := range c.tx.pending {
			p(m)
		}
		v = m[k]
	}
	return v
}

type fakeTx struct {
	c       *fakeConn
	ctx     context.Context // BeginTx's, which a driver such as pgx watches during COMMIT
	pending []func(map[string]int64)
}

func (t *fakeTx) Commit() error {
	c := t.c
	c.tx = nil
	if c.dead {
		return driver.ErrBadConn
	}
	if f := c.s.take("commit", ""); f != nil {
		if f.keepOpen {
			c.tx = t
		}
		return f.fire(t.ctx, c, t.apply)
	}
	if err := t.ctx.Err(); err != nil {
		// As pgx's stdlib: COMMIT runs under BeginTx's context.
		return err
	}
	t.apply()
	return nil
}

// apply makes the transaction's writes.
func (t *fakeTx) apply() {
	t.c.s.mu.Lock()
	for _, p := range t.pending {
		p(t.c.s.data)
	}
	t.pending = nil
	t.c.s.mu.Unlock()
}

func (t *fakeTx) Rollback() error {
	t.c.tx = nil
	if t.c.dead {
		return driver.ErrBadConn
	}
	t.c.s.take("rollback", "")
	return nil
}

// fakeStmt implements StmtExecContext, StmtQueryContext and ColumnConverter.
type fakeStmt struct {
	c      *fakeConn
	q      string
	closed bool
}

func (s *fakeStmt) Close() error  { s.closed = true; return nil }
func (s *fakeStmt) NumInput() int { return strings.Count(s.q, "?") }

func (s *fakeStmt) Exec(args []driver.Value) (driver.Result, error) {
	return s.ExecContext(context.Background(), valuesToNamed(args))
}

func (s *fakeStmt) Query(args []driver.Value) (driver.Rows, error) {
	return s.QueryContext(context.Background(), valuesToNamed(args))
}

func (s *fakeStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	if s.closed {
		return nil, errors.New("fake: statement closed")
	}
	return s.c.ExecContext(ctx, s.q, args)
}

func (s *fakeStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	if s.closed {
		return nil, errors.New("fake: statement closed")
	}
	return s.c.QueryContext(ctx, s.q, args)
}

func (s *fakeStmt) ColumnConverter(int) driver.ValueConverter {
	return driver.DefaultParameterConverter
}

func valuesToNamed(args []driver.Value) []driver.NamedValue {
	nv := make([]driver.NamedValue, len(args))
	for i, a := range args {
		nv[i] = driver.NamedValue{Ordinal: i + 1, Value: a}
	}
	return nv
}

// fakeRows implements RowsColumnTypeDatabaseTypeName.
type fakeRows struct {
	c    *fakeConn
	ctx  context.Context // the query's: reading fails once it is done
	vals []int64
	i    int
}

func (r *fakeRows) Columns() []string                     { return []string{"v"} }
func (r *fakeRows) Close() error                          { return nil }
func (r *fakeRows) ColumnTypeDatabaseTypeName(int) string { return "BIGINT" }
func (r *fakeRows) Next(dest []driver.Value) error {
	if f := r.c.s.take("next", ""); f != nil {
		return f.fire(context.Background(), r.c, nil)
	}
	if err := r.ctx.Err(); err != nil {
		return err
	}
	if r.i >= len(r.vals) {
		return io.EOF
	}
	dest[0] = r.vals[r.i]
	r.i++
	return nil
}

// passthroughConn is a fakeConn that also accepts statements the fake's
// parser does not know — session and transaction control (SET …, START
// TRANSACTION, XA …, BEGIN TRAN, MySQL executable comments) and CALL — as
// no-ops that reach the server's log and its faults. "CALL commit_then_fail" stands for a MySQL
// procedure whose body runs COMMIT (committing the session's open
// transaction) and then fails with a deadlock.
type passthroughConn struct{ *fakeConn }

// isPassthrough reports whether passthroughConn takes q as a no-op.
func isPassthrough(q string) bool {
	for _, p := range []string{"SET ", "START ", "XA ", "BEGIN TRAN", "CALL ", "/*"} {
		if strings.HasPrefix(q, p) {
			return true
		}
	}
	return false
}

func (c passthroughConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	if !isPassthrough(q) {
		return c.fakeConn.ExecContext(ctx, q, args)
	}
	if c.dead {
		return nil, driver.ErrBadConn
	}
	if q == "CALL commit_then_fail" {
		c.s.take("exec", q)
		if c.tx != nil {
			c.s.mu.Lock()
			for _, p := range c.tx.pending {
				p(c.s.data)
			}
			c.s.mu.Unlock()
			c.tx.pending = nil
		}
		return nil, errDeadlock
	}
	if f := c.s.take("exec", q); f != nil {
		return nil, f.fire(ctx, c.fakeConn, nil)
	}
	return driver.RowsAffected(0), nil
}

// QueryContext: "SELECT create_order()" stands for a user-defined function
// called from a SELECT that writes (PostgreSQL's usual way to call stored
// code): it adds 1 to "orders" and returns the new value.
func (c passthroughConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	if q != "SELECT create_order()" {
		return c.fakeConn.QueryContext(ctx, q, args)
	}
	if c.dead {
		return nil, driver.ErrBadConn
	}
	apply := func() {
		c.s.mu.Lock()
		c.s.data["orders"]++
		c.s.mu.Unlock()
	}
	if f := c.s.take("query", q); f != nil {
		return nil, f.fire(ctx, c.fakeConn, apply)
	}
	apply()
	return &fakeRows{c: c.fakeConn, ctx: ctx, vals: []int64{c.s.get("orders")}}, nil
}

// openPassthrough opens srv through the Connector on passthroughConns,
// with MaxRetries 2 unless c sets it.
func openPassthrough(t *testing.T, srv *fakeServer, c Config) (*sql.DB, *Policy) {
	t.Helper()
	if c.MaxRetries == 0 {
		c.MaxRetries = 2
	}
	p := testPolicy(t, c)
	fc := &fakeConnector{s: srv, mk: func(c *fakeConn) driver.Conn { return passthroughConn{c} }}
	db := sql.OpenDB(Connector(fc, p))
	t.Cleanup(func() { db.Close() })
	return db, p
}

// heldConn returns one session of db, closed at the test's end.
func heldConn(t *testing.T, db *sql.DB) *sql.Conn {
	t.Helper()
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}
