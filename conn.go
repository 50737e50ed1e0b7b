package sqlretry

import (
	"context"
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/sqlretry/sqlretry/internal/rawsql"
	"github.com/sqlretry/sqlretry/internal/sqltext"
)

// conn wraps one inner connection, and replaces it underneath when a
// failure outside a transaction left it unusable. database/sql never uses
// a driver.Conn concurrently, so its fields need no lock.
//
// conn implements driver.Conn, ConnPrepareContext, ConnBeginTx,
// ExecerContext, QueryerContext, NamedValueChecker, Validator, Pinger and
// SessionResetter; the types below hide Pinger or SessionResetter when the
// inner connection lacks them.
type conn struct {
	c       *connector
	inner   driver.Conn            // nil after a failed reconnect
	gen     uint64                 // bumped at each reconnect; statements re-prepare when it moves
	inTx    bool                   // a transaction begun with BeginTx is open
	taint   bool                   // ... and a statement in it may have committed part of it (see taints)
	sess    sqltext.Session        // what the SQL text run on this session says of its transaction state; set by setSession
	pinned  bool                   // sess.Pinned(), kept with it: idle asks at every statement
	broken  bool                   // inner is unusable: replace it before the next command
	sid     string                 // the server's id of the session, for the Policy's Fencer; "" if unknown
	fenced  atomic.Pointer[string] // a session id fenced after the call that failed on it returned
	refused bool                   // a COMMIT or ROLLBACK failed: the session may hold the transaction still
	recent  [8]recentText          // the last texts this connection read, by a cheap hash (see analyze)
	plain   bool                   // the connector's plain, copied (see idle)
	budget  *Budget                // the Policy's, copied

	// endQuery cancels the command timeout of the last query, whose rows
	// may be read after QueryContext returned. It runs at the connection's
	// next use, ResetSession or Close.
	endQuery context.CancelFunc

	// The inner connection's optional interfaces, nil when it lacks them.
	execer    driver.ExecerContext
	queryer   driver.QueryerContext
	execerV   driver.Execer  //nolint:staticcheck // the pre-context interface, still honoured by database/sql
	queryerV  driver.Queryer //nolint:staticcheck
	preparer  driver.ConnPrepareContext
	beginner  driver.ConnBeginTx
	pinger    driver.Pinger
	resetter  driver.SessionResetter
	validator driver.Validator
	checker   driver.NamedValueChecker
}

// conn itself has Ping and ResetSession: every driver sqlretry knows
// (pgx, lib/pq, go-sql-driver/mysql, go-mssqldb, modernc.org/sqlite) has
// both, and database/sql then calls conn's methods with no wrapper between,
// on every statement's path. For an inner connection that lacks one, the
// Connector returns one of the types below instead: a field named as the
// method it lacks hides conn's (a selector finds the shallowest name, and
// a field is not a method), so its method set has only what the inner one
// has.
type (
	// connNoPing: the inner connection has no Pinger.
	connNoPing struct {
		*conn
		Ping struct{}
	}
	// connNoReset: the inner connection has no SessionResetter.
	connNoReset struct {
		*conn
		ResetSession struct{}
	}
	// connBare: the inner connection has neither.
	connBare struct {
		*conn
		Ping, ResetSession struct{}
	}
	// connNoCheck: the inner connection has both, and no NamedValueChecker
	// (modernc.org/sqlite). database/sql then checks arguments itself, as
	// it would for the inner connection, rather than call a CheckNamedValue
	// that answers driver.ErrSkip ("as if unimplemented") and check them
	// after that: some 60 instructions an argument. It embeds the conn
	// itself, so its promoted methods are jumps. An inner connection that
	// lacks a NamedValueChecker and Pinger or SessionResetter too gets
	// conn's CheckNamedValue, which answers driver.ErrSkip.
	connNoCheck struct {
		conn
		CheckNamedValue struct{}
	}
)

// Ping pings the inner connection (see ping). Only a conn whose inner
// connection is a driver.Pinger advertises it.
func (c *conn) Ping(ctx context.Context) error { return c.ping(ctx) }

// IsValid reports false when the inner connection is unusable and was not
// replaced, or says so itself, so that database/sql drops it without being
// handed driver.ErrBadConn.
func (c *conn) IsValid() bool {
	return !c.broken && !c.refused && c.inner != nil && (c.validator == nil || c.validator.IsValid())
}

// Prepare is the pre-context entry point; database/sql calls PrepareContext.
func (c *conn) Prepare(query string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), query)
}

// Begin is the pre-context entry point; database/sql calls BeginTx.
func (c *conn) Begin() (driver.Tx, error) { return c.BeginTx(context.Background(), driver.TxOptions{}) }

// wrap returns the wrapper type whose method set matches ic's.
func (c *connector) wrap(ctx context.Context, ic driver.Conn) driver.Conn {
	_, pinger := ic.(driver.Pinger)
	_, resetter := ic.(driver.SessionResetter)
	_, checker := ic.(driver.NamedValueChecker)
	var (
		cn = new(conn)
		dc driver.Conn
	)
	switch {
	case pinger && resetter && checker:
		dc = cn
	case pinger && resetter:
		w := new(connNoCheck)
		cn, dc = &w.conn, w
	case pinger:
		dc = connNoReset{conn: cn}
	case resetter:
		dc = connNoPing{conn: cn}
	default:
		dc = connBare{conn: cn}
	}
	cn.c, cn.plain, cn.budget = c, c.plain, c.budget
	cn.setInner(ic)
	cn.sid = c.sessionID(ctx, ic)
	cn.setSession(c.newSession(ctx, ic))
	return dc
}

// setInner makes ic the inner connection (nil: none) and reads its
// optional interfaces.
func (c *conn) setInner(ic driver.Conn) {
	c.inner = ic
	c.execer, _ = ic.(driver.ExecerContext)
	c.queryer, _ = ic.(driver.QueryerContext)
	c.execerV, _ = ic.(driver.Execer)   //nolint:staticcheck
	c.queryerV, _ = ic.(driver.Queryer) //nolint:staticcheck
	c.preparer, _ = ic.(driver.ConnPrepareContext)
	c.beginner, _ = ic.(driver.ConnBeginTx)
	c.pinger, _ = ic.(driver.Pinger)
	c.resetter, _ = ic.(driver.SessionResetter)
	c.validator, _ = ic.(driver.Validator)
	c.checker, _ = ic.(driver.NamedValueChecker)
}

// Close closes the inner connection.
func (c *conn) Close() error {
	c.finishQuery()
	if c.inner == nil {
		return nil
	}
	err := c.inner.Close()
	c.inner = nil
	return err
}

func (c *conn) finishQuery() {
	if c.endQuery != nil {
		c.endQuery()
		c.endQuery = nil
	}
	if c.refused {
		// The next command runs on a new session (see tx.Commit).
		c.refused, c.broken = false, true
	}
}

// CheckNamedValue forwards to the inner connection, or returns
// driver.ErrSkip, which database/sql documents as "as if unimplemented".
func (c *conn) CheckNamedValue(nv *driver.NamedValue) error {
	if c.checker == nil {
		return driver.ErrSkip
	}
	return c.checker.CheckNamedValue(nv)
}

// fast reports whether a statement may take the fast path: one plain
// attempt, the Policy consulted only if it fails.
func (p *Policy) fast() bool {
	return p.commandTimeout <= 0 && (p.breaker == nil || BreakerState(p.breaker.state.Load()) == BreakerClosed)
}

// countCall counts a call and its first attempt, as Policy.Do does.
func (p *Policy) countCall() {
	if p.countCalls {
		p.calls.Add(1)
		p.attempts.Add(1)
	}
}

// stmtOp is the consent for replaying statement q outside a transaction.
//
// A read-only single statement is idempotent. Anything else is a write: a
// failure of unknown outcome is never passed off as a plain error (rephase),
// and a text that is not provably one statement — several statements, a
// CALL, DO or EXEC of a body the text does not show — is a write of unknown
// outcome after any failure but one that proves nothing was sent: the
// failure describes the part that failed, and earlier parts may have
// committed. The rule schedule's consent to replay is asked only for a single
// statement.
//
// A read that calls functions by names a user's function may take on the
// engine (in.Calls: SELECT log('msg'), count(*), t.f on PostgreSQL) is such
// a write, whose verify asks the engine's catalog for a function of a
// user's by those names (userFuncVerify): none, and it is replayed as a
// read; one, or a catalog that cannot be read or asked (an engine the
// Connector does not know), and it ends in ErrAmbiguous.
func (c *connector) stmtOp(q string, in sqltext.Info) Op {
	name := in.Verb
	if name == "" {
		name = "statement"
	}
	op := Op{Name: name, Statement: q}
	read := in.ReadOnly && in.OneStatement()
	var names []string
	if read && in.Calls {
		names, read = sqltext.CalledNames(c.engine, q)
	}
	switch {
	case read && len(names) == 0:
		op.idempotent = true
	case in.OneStatement():
		op.rephase = rephaseStatement
		if sc, ok := c.p.schedule.(StatementConsent); ok {
			op.consent = sc // asked per failure, with its code
		}
		if read {
			op.verify = c.userFuncVerify(names)
			op.fence = verifyWaits
		}
	default:
		op.rephase = rephaseParts
	}
	return op
}

// rephaseStatement revises the class of a single write's failure: one of
// unknown outcome that the classifier does not call transient (a TLS error, a
// protocol error, a severity-20 error after the send) is settled like a
// transient one — by a verify, else ErrAmbiguous — rather than returned as a
// plain error about a write that may have landed.
func rephaseStatement(_ error, c Class) Class {
	if c.Phase == Unknown && !c.Retryable && c.Code != "context" {
		c.Retryable = true
		c.Reason += " (a write of unknown outcome: settled, not returned as a plain error)"
	}
	return c
}

// rephaseParts revises the class of a failure of a text that is not provably
// one statement: whatever the failed part's class, only NotSent proves that
// nothing of the text was applied.
func rephaseParts(_ error, c Class) Class {
	if c.Phase != NotSent && c.Code != "context" {
		c.Phase = Unknown
		c.Retryable = true
		c.Reason += " (the text holds several statements or a body it does not show: earlier parts may have committed)"
	}
	return c
}

// failed records what a failed command says about the connection, and
// returns the error to classify.
func (c *conn) failed(err error) error {
	if err == nil {
		return nil
	}
	if c.c.pq && errors.Is(err, driver.ErrBadConn) {
		c.broken = true
		return lostAfter(&badConnError{msg: err.Error()})
	}
	if !c.broken && unusable(err, c.validator) {
		c.broken = true
	}
	return err
}

// probe decides, for an inner connection without a Validator (pgx's
// stdlib), whether a retryable failure left it unusable: it pings it, which
// for pgx costs nothing on a closed connection. It runs outside
// transactions, on failures only, and returns err.
func (c *conn) probe(ctx context.Context, err error) error {
	if c.broken || c.validator != nil || c.pinger == nil || !c.c.p.Classify(err).Retryable {
		return err
	}
	if c.pinger.Ping(ctx) != nil {
		c.broken = true
	}
	return err
}

// sessionLost revises a write's failure that the classifier calls
// NotApplied when the session did not survive it: an autocommit statement
// commits as it ends, and a session that ended in reply to it (PostgreSQL
// 57P01 after pg_terminate_backend, while the COMMIT waits for a synchronous
// standby) may have committed first, as RunTx's COMMIT rule says. A
// rollback the server reports and survives (a deadlock victim) is trusted.
func (c *conn) sessionLost(op Op, err error) error {
	if op.idempotent || !c.broken || c.c.p.Classify(err).Phase != NotApplied {
		return err
	}
	return lostAfter(err)
}

// txTainted reports whether a statement in the last transaction may have
// committed part of it (see taints). RunTx asks after the transaction
// failed, when database/sql may be rolling it back from another goroutine:
// it reads only taint, which the statements' goroutine wrote.
func (c *conn) txTainted() bool { return c.taint }

// sessionState returns the inner connection and whether it is known to be
// unusable, for RunTx's check after a failed COMMIT.
func (c *conn) sessionState() (driver.Conn, bool) { return c.inner, c.broken }

// unusable reports whether err left the connection unusable.
func unusable(err error, v driver.Validator) bool {
	if errors.Is(err, driver.ErrBadConn) {
		return true
	}
	if v != nil {
		return !v.IsValid()
	}
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// ready replaces a broken inner connection by a new one: one connect
// attempt, whose failure is the attempt's failure.
func (c *conn) ready(ctx context.Context) error {
	if !c.broken && c.inner != nil {
		return nil
	}
	if c.inner != nil {
		_ = c.inner.Close()
		c.setInner(nil)
	}
	ic, err := c.c.connectOnce(ctx)
	if err != nil {
		return c.notSent(ctx, err)
	}
	c.setInner(ic)
	c.sid = c.c.sessionID(ctx, ic)
	c.gen++
	c.broken = false
	c.setSession(c.c.newSession(ctx, ic))
	return nil
}

// notSent returns the error of a step before the statement itself (a
// reconnect, a re-prepare) as an error of phase NotSent: whatever the step's
// own phase, the statement was not sent. A step that ran out of the
// attempt's CommandTimeout (a dial or login waiting out a failover) is a
// retryable NotSent failure, not a context error; a permanent error, such as
// an authentication failure, keeps its verdict. The step's own error stays
// in the chain.
func (c *conn) notSent(ctx context.Context, err error) error {
	cl := c.c.p.Classify(err)
	switch {
	case cl.Retryable:
	case ctx.Err() != nil && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)):
		cl = Class{Retryable: true, Code: "connect-timeout", Reason: "connecting ran out of the attempt's command timeout: nothing was sent", Kind: Unavailable}
	default:
		return err
	}
	return notSentBefore(err, cl)
}

// retry runs fn under the Policy for statement op, after a first failure
// firstErr (nil: run the first attempt too), reconnecting before each
// attempt if the connection is broken.
func (c *conn) retry(ctx context.Context, op Op, firstErr error, fn func(ctx context.Context) error) error {
	attempt := func(ctx context.Context) error {
		if err := c.ready(ctx); err != nil {
			return err
		}
		if err := fn(ctx); err != nil {
			return c.sessionLost(op, c.probe(ctx, c.failed(err)))
		}
		return nil
	}
	if firstErr != nil {
		firstErr = c.sessionLost(op, c.probe(ctx, c.failed(firstErr)))
	}
	if c.c.p.fencer != nil && op.fence == nil {
		// (An Op whose verify needs no fence keeps it: a read's catalog
		// check, a verify that waits.)
		// Read at the time of the verify: the session of the attempt that
		// failed, not yet replaced. A fenced session is dead.
		op.fence = func(ctx context.Context) error {
			err := c.c.fence(ctx, c.sid)
			if err == nil {
				c.broken = true
			}
			return err
		}
	}
	err := c.c.p.run(ctx, op, attempt, firstErr, c.c.p.schedule)
	if errors.Is(err, driver.ErrSkip) {
		// database/sql compares with ==: it must see the bare sentinel to
		// fall back to prepare (go-sql-driver/mysql returns it for any
		// statement with arguments, also after a reconnect).
		return driver.ErrSkip
	}
	err = hideBadConn(err)
	if re, ok := err.(*Error); ok && op.fence != nil && errors.Is(err, ErrAmbiguous) {
		// An outer Do's verify may settle it: it fences the session
		// first, on demand (see Policy.nested).
		re.fence = c.fenceFunc()
	}
	return err
}

// ExecContext runs a statement, retried outside a transaction. It returns
// driver.ErrSkip when the inner connection has no Execer, so database/sql
// prepares the statement instead, as it would for the inner connection.
//
// Its first lines are the fast path (see idle): the same text as one the
// connection read lately, of no transaction control, with no Op attached
// to take. They stay small, so the function's frame does too; execSlow
// does the rest.
func (c *conn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	if e := c.same(query); e != nil && e.plain && c.execer != nil && c.idle() && (e.ro || !opsAttached.Load()) {
		res, err := c.execer.ExecContext(ctx, query, args)
		if err != nil {
			return c.execFailed(ctx, query, args, e.in, err)
		}
		c.succeeded()
		return res, nil
	}
	return c.execSlow(ctx, query, args)
}

func (c *conn) execSlow(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	if e := c.hit(query); e != nil && e.plain && c.execer != nil && c.idle() && (e.ro || !opsAttached.Load()) {
		// The fast path, for a text equal to the one read but not the
		// same string.
		res, err := c.execer.ExecContext(ctx, query, args)
		if err != nil {
			return c.execFailed(ctx, query, args, e.in, err)
		}
		c.succeeded()
		return res, nil
	}
	if c.execer == nil && c.execerV == nil {
		return nil, driver.ErrSkip
	}
	r := call{c: c, query: query, args: args}
	err := c.call(ctx, &r)
	return r.res, err
}

// execFailed goes on from the fast path's failed attempt as call would.
func (c *conn) execFailed(ctx context.Context, query string, args []driver.NamedValue, in *sqltext.Info, err error) (driver.Result, error) {
	if err == driver.ErrSkip {
		return nil, err
	}
	r := call{c: c, query: query, args: args}
	err = c.retryCall(ctx, &r, in, nil, err)
	return r.res, err
}

// QueryContext runs a query, retried outside a transaction until its rows
// are returned; errors while reading them are not retried (a write's are
// settled: see watchRows). It returns driver.ErrSkip when the inner
// connection has no Queryer.
//
// Its first lines are the fast path (see idle): the same text as one the
// connection read lately, a read of one statement, whose rows are returned
// as they are. querySlow does the rest.
func (c *conn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	if e := c.same(query); e != nil && e.read && c.queryer != nil && c.idle() {
		rows, err := c.queryer.QueryContext(ctx, query, args)
		if err != nil {
			return c.queryFailed(ctx, query, args, e.in, err)
		}
		c.succeeded()
		return rows, nil
	}
	return c.querySlow(ctx, query, args)
}

func (c *conn) querySlow(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	if e := c.hit(query); e != nil && e.read && c.queryer != nil && c.idle() {
		// The fast path, for a text equal to the one read but not the
		// same string.
		rows, err := c.queryer.QueryContext(ctx, query, args)
		if err != nil {
			return c.queryFailed(ctx, query, args, e.in, err)
		}
		c.succeeded()
		return rows, nil
	}
	if c.queryer == nil && c.queryerV == nil {
		return nil, driver.ErrSkip
	}
	r := call{c: c, query: query, args: args, rows: true}
	err := c.call(ctx, &r)
	return r.out, err
}

// queryFailed goes on from the fast path's failed attempt as call would.
func (c *conn) queryFailed(ctx context.Context, query string, args []driver.NamedValue, in *sqltext.Info, err error) (driver.Rows, error) {
	if err == driver.ErrSkip {
		return nil, err
	}
	r := call{c: c, query: query, args: args, rows: true}
	err = c.retryCall(ctx, &r, in, nil, err)
	return r.out, err
}

// idle reports whether a statement may take the fast path, which skips
// prologue and call and does what they would do for it, no more. The Policy
// must be plain (see connector.plain): the flags of a text (recentText) or
// prepared statement that allow the fast path say so too, so idle does not
// ask again. The connection must be in the state where
// prologue has nothing to do and call runs a first plain attempt — no
// refused COMMIT, no fence, not broken, no transaction open or possibly
// open on the session. (No query's timeout to end either: with no
// CommandTimeout, endQuery is never set.) The text must then not
// be one of transaction control (which pins its statement), and what
// succeeds is returned as call would return it: a read of one statement's
// rows unwrapped, an Exec's result. A failure takes call's own way on from
// there (retryCall), as if call had run the attempt.
func (c *conn) idle() bool {
	return !c.inTx && !c.broken && !c.refused && !c.pinned && c.fenced.Load() == nil
}

// setSession sets the session's state, and pinned with it.
func (c *conn) setSession(s sqltext.Session) {
	c.sess, c.pinned = s, s.Pinned()
}

// succeeded records a fast path's success, as Policy.succeeded does for a
// plain Policy: with no breaker, only the budget counts it.
func (c *conn) succeeded() {
	if b := c.budget; b != nil {
		b.success()
	}
}

// call is one statement of the database/sql layer, on the connection or
// through a prepared statement: every entry point takes the path of
// conn.call, as database/sql's take db.retry.
type call struct {
	c     *conn
	query string
	info  *sqltext.Info // the prepared statement's reading; nil: read the text
	args  []driver.NamedValue
	st    *stmt // nil: run on the connection
	rows  bool  // a query: its rows are returned, read after the call

	res driver.Result
	out driver.Rows
}

// run runs the statement once on the current inner connection.
func (r *call) run(ctx context.Context) (err error) {
	switch {
	case r.st != nil && r.rows:
		r.out, err = r.st.queryOnce(ctx, r.args)
	case r.st != nil:
		r.res, err = r.st.exec(ctx, r.args)
	// The inner connection's context methods are called here, not through
	// query and exec, on every statement's path: a call less.
	case r.rows && r.c.queryer != nil:
		r.out, err = r.c.queryer.QueryContext(ctx, r.query, r.args)
	case r.rows:
		r.out, err = r.c.query(ctx, r.query, r.args)
	case r.c.execer != nil:
		r.res, err = r.c.execer.ExecContext(ctx, r.query, r.args)
	default:
		r.res, err = r.c.exec(ctx, r.query, r.args)
	}
	return err
}

// ready prepares the statement again on a connection replaced since.
func (r *call) ready(ctx context.Context) error {
	if r.st == nil {
		return nil
	}
	return r.st.reprepare(ctx)
}

// call runs r: once, as it is, on a session pinned to a transaction (or by a
// statement of transaction control); otherwise under the Policy, with a
// first attempt that costs nothing beyond the driver's call, and retries on
// a connection replaced underneath when the failure left it unusable.
func (c *conn) call(ctx context.Context, r *call) error {
	in, pinned := c.prologue(r.query, r.info)
	own := takeOp(ctx, in.ReadOnly)
	if pinned {
		err := c.callPinned(ctx, r, *in)
		if err == driver.ErrSkip {
			own.release()
		}
		return err
	}
	p := c.c.p
	p.countCall()
	var err error
	if p.fast() && !c.broken && (r.st == nil || r.st.gen == c.gen) {
		if err = r.run(ctx); err == nil {
			p.succeeded(false)
			r.watch(ctx, in)
			return nil
		}
		if err == driver.ErrSkip {
			own.release()
			return err
		}
	}
	return c.retryCall(ctx, r, in, own, err)
}

// retryCall runs r under the Policy after its first attempt failed with
// firstErr (nil: no first attempt was made), with own the Op taken for it.
func (c *conn) retryCall(ctx context.Context, r *call, in *sqltext.Info, own *attached, err error) error {
	// Only a failure gets here: rr, not r, is what the retry's closure
	// holds, so r stays on the caller's stack on the fast path.
	rr := *r
	attempt := func(ctx context.Context) error {
		if err := rr.ready(ctx); err != nil {
			return err
		}
		return rr.run(ctx)
	}
	if rr.rows {
		attempt = c.timed(ctx, attempt)
	}
	op := c.c.attachedOp(own, c.c.stmtOp(r.query, *in))
	if err = c.retry(ctx, op, err, attempt); err != nil {
		if err == driver.ErrSkip {
			own.release()
		}
		return err
	}
	*r = rr
	if r.out == nil && r.res == nil {
		// No attempt succeeded: a verify found the write applied. What it
		// would have returned was never read.
		if r.rows {
			return &Error{Op: op.Name, Cause: ErrValueUnknown}
		}
		r.res = unknownResult{}
	}
	r.watch(ctx, in)
	return nil
}

// unknownResult is the Result of a statement a verify found applied after
// an attempt whose outcome was unknown: the count and id it would have
// reported were never read.
type unknownResult struct{}

func (unknownResult) LastInsertId() (int64, error) { return 0, ErrValueUnknown }
func (unknownResult) RowsAffected() (int64, error) { return 0, ErrValueUnknown }

// callPinned runs a pinned statement once, as it is. One that may commit as
// it ends (autocommit, for all the layer knows) keeps the Policy's
// CommandTimeout and has a write's rows watched, as an unpinned one would; a
// statement inside a transaction that may commit part of it marks the
// transaction tainted for RunTx.
func (c *conn) callPinned(ctx context.Context, r *call, in sqltext.Info) error {
	if c.inner == nil {
		return errConnGone
	}
	if err := r.ready(ctx); err != nil {
		return hideBadConn(c.failed(err))
	}
	autocommit := !c.inTx && c.sess.MayAutocommit()
	if c.inTx && taints(c.c.engine, r.query, in) {
		c.taint = true
	}
	rctx, cancel := ctx, context.CancelFunc(nil)
	if d := c.c.p.commandTimeout; d > 0 && autocommit {
		rctx, cancel = context.WithTimeout(ctx, d)
	}
	err := r.run(rctx)
	timedOut := err != nil && rctx.Err() != nil && ctx.Err() == nil
	if cancel != nil {
		if err == nil && r.rows {
			c.endQuery = cancel // the rows are read after the call
		} else {
			cancel()
		}
	}
	if err = c.pinnedDone(ctx, r.query, in, autocommit, timedOut, err); err != nil {
		return err
	}
	if autocommit || in.TxControl {
		r.watch(ctx, &in)
	}
	return nil
}

// checkFenced drops the session if a fence ended it since its last use. It
// is small enough to be inlined into every statement's path, where the
// fence is almost never set; dropFenced does the rest.
func (c *conn) checkFenced() {
	if id := c.fenced.Load(); id != nil {
		c.dropFenced(id)
	}
}

func (c *conn) dropFenced(id *string) {
	if c.fenced.CompareAndSwap(id, nil) && *id == c.sid {
		c.broken = true
	}
}

// errConnGone: the connection was lost and could not be replaced, while
// its session was pinned; database/sql drops it (IsValid reports false).
var errConnGone = &verdictError{err: errConnLost, class: Class{Retryable: true, Phase: NotSent, Code: "conn-gone", Reason: "the connection was lost and could not be replaced", Kind: Unavailable}}

var errConnLost = errors.New("sqlretry: the connection was lost and could not be replaced")

// watch wraps a query's rows for their errors (see watchRows).
func (r *call) watch(ctx context.Context, in *sqltext.Info) {
	if r.rows && !(in.ReadOnly && in.OneStatement()) {
		r.out = r.c.watchRows(ctx, r.query, *in, r.out)
	}
}

// prologue starts a statement: it ends the last query's command timeout and
// reads the text (in, if not nil, is the prepared statement's reading).
// pinned reports that the statement must run once, as it is, on this
// session: a transaction is or may be open on it, or the statement itself
// may open or end one. The Info returned is shared: it must not be changed.
func (c *conn) prologue(query string, in *sqltext.Info) (*sqltext.Info, bool) {
	c.finishQuery()
	c.checkFenced()
	if in == nil {
		if in = c.cached(query); in == nil {
			in = c.analyze(query)
		}
	}
	return in, c.inTx || c.sess.Pinned() || in.TxControl
}

// recentText is a text a connection read and what it says: a pointer to the
// connector's reading, which is never changed, so a hit copies nothing, and
// what the fast path asks of it, read once when the text was stored.
type recentText struct {
	q     string
	in    *sqltext.Info
	plain bool // a plain Policy's, and no transaction control: an Exec may take the fast path
	ro    bool // read-only: no Op attached is taken for it
	read  bool // plain, and a read of one statement: a Query may take the fast path
}

// analyze returns what query says, from the connection's own small cache
// when it ran the same text lately, else from the connector's. A program
// runs a few texts over and over, and the same text is usually the same
// string (a constant), whose comparison ends at the pointer: a hit costs a
// few instructions, where the connector's sync.Map hashes the whole text
// (about 200 instructions a statement, measured with callgrind).
func (c *conn) analyze(query string) *sqltext.Info {
	if e := c.hit(query); e != nil {
		return e.in
	}
	in := c.c.analyze(query)
	if query != "" {
		plain := c.plain && !in.TxControl
		c.recent[recentSlot(query)] = recentText{q: query, in: in, plain: plain, ro: in.ReadOnly, read: plain && in.ReadOnly && in.OneStatement()}
	}
	return in
}

// hit returns the connection's cache entry for query if it read it lately,
// or nil. It is inlined into every statement's path.
func (c *conn) hit(query string) *recentText {
	if query == "" {
		return nil
	}
	if e := &c.recent[recentSlot(query)]; e.q == query {
		return e
	}
	return nil
}

// same is hit for the usual case, a constant text run again: the same
// string as the one stored, which it compares by length and data pointer
// alone (unsafe.StringData: two strings with the same pointer and length
// hold the same bytes), so that it is inlined with no call to compare bytes.
// nil means "not the same string", not "not read": ask hit.
func (c *conn) same(query string) *recentText {
	if query == "" {
		return nil
	}
	if e := &c.recent[recentSlot(query)]; len(e.q) == len(query) && unsafe.StringData(e.q) == unsafe.StringData(query) {
		return e
	}
	return nil
}

// cached returns the connection's reading of query if it read it lately,
// or nil. It is inlined into prologue, so a hit costs no call.
func (c *conn) cached(query string) *sqltext.Info {
	if e := c.hit(query); e != nil {
		return e.in
	}
	return nil
}

// recentSlot is query's slot in conn.recent: a hash of its length and end
// bytes. query must not be empty.
func recentSlot(query string) int {
	return (len(query) ^ int(query[0]) ^ int(query[len(query)-1])<<1) & (len(conn{}.recent) - 1)
}

// pinnedDone records what a pinned statement did to the session and returns
// its error, which never matches driver.ErrBadConn: database/sql would run
// the statement again on another connection, outside the transaction.
//
// A pinned statement is never replayed, but its failure may still be of
// unknown outcome for something that commits: a text run on an idle session
// (CALL p(), which may commit inside; BEGIN; …; COMMIT), or on one that may
// be in autocommit mode for all the layer knows, or a text of
// transaction control (a COMMIT in SQL text whose connection was lost).
// Such a failure ends in ErrAmbiguous, not a plain error. A statement
// inside an open transaction commits nothing by itself: its error is
// returned as it is, and the transaction's fate is decided at COMMIT.
func (c *conn) pinnedDone(ctx context.Context, query string, in sqltext.Info, autocommit, timedOut bool, err error) error {
	if err == driver.ErrSkip {
		return err // not run: database/sql prepares it instead
	}
	if in.TxControl {
		c.setSession(c.sess.After(query, err != nil))
	}
	if err == nil {
		return nil
	}
	err = hideBadConn(c.failed(err))
	if (in.ReadOnly && !in.Calls) || !(autocommit || in.TxControl) {
		// (A read that calls functions a user's may answer is a write
		// here: there is no catalog check on a pinned session.)
		return err
	}
	p := c.c.p
	class := p.classify(err, timedOut)
	name := in.Verb
	if name == "" {
		name = "statement"
	}
	if !in.OneStatement() {
		class = rephaseParts(err, class)
	} else if class.Phase == NotApplied && c.broken {
		class = p.Classify(lostAfter(err)) // the session ended in reply: it may have committed first
	}
	if cerr := ctx.Err(); cerr != nil {
		// Cut off by the caller: it may have committed, unless it
		// provably sent nothing. There is no verify to settle it with.
		if (in.OneStatement() && sentNothing(err)) || class.Phase != Unknown {
			return p.stopped(ctx, Op{Name: name, Statement: query}, 1, class, err, cerr)
		}
		p.failures.Add(1)
		return p.giveUp(ctx, Op{Name: name, Statement: query}, 1, class, err, withCallerEnd(ctx, ErrAmbiguous), true)
	}
	if class.Phase != Unknown || class.Code == "context" {
		return err
	}
	p.failures.Add(1)
	return p.giveUp(ctx, Op{Name: name, Statement: query}, 1, class, err, ErrAmbiguous, true)
}

// exec runs one attempt of a statement on the inner connection, as
// database/sql's ctxDriverExec would.
func (c *conn) exec(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	if c.execer != nil {
		return c.execer.ExecContext(ctx, query, args)
	}
	return rawsql.Legacy(ctx, args, errNamedArgs, func(dargs []driver.Value) (driver.Result, error) {
		return c.execerV.Exec(query, dargs)
	})
}

// timed adapts a query attempt to the command timeout: the Policy cancels an
// attempt's context when the attempt returns, but a query's rows are read
// afterwards, so the query runs under a timeout of its own, derived from the
// caller's ctx and ended at the connection's next use.
func (c *conn) timed(ctx context.Context, fn func(ctx context.Context) error) func(context.Context) error {
	d := c.c.p.commandTimeout
	if d <= 0 {
		return fn
	}
	return func(context.Context) error {
		qctx, cancel := context.WithTimeout(ctx, d)
		if err := fn(qctx); err != nil {
			cancel()
			return err
		}
		c.endQuery = cancel
		return nil
	}
}

func (c *conn) query(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	if c.queryer != nil {
		return c.queryer.QueryContext(ctx, query, args)
	}
	return rawsql.Legacy(ctx, args, errNamedArgs, func(dargs []driver.Value) (driver.Rows, error) {
		return c.queryerV.Query(query, dargs)
	})
}

// PrepareContext prepares a statement, retried outside a transaction. The
// statement is prepared again on a connection that replaces this one.
func (c *conn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	c.finishQuery()
	var (
		si  driver.Stmt
		err error
	)
	if c.inTx || c.sess.Pinned() {
		if si, err = c.prepare(ctx, query); err != nil {
			return nil, hideBadConn(c.failed(err))
		}
	} else {
		p := c.c.p
		p.countCall()
		if p.fast() && !c.broken {
			if si, err = c.prepare(ctx, query); err == nil {
				p.succeeded(false)
			}
		}
		if si == nil {
			err = c.retry(ctx, Op{Name: "prepare", Statement: query, idempotent: true}, err, func(ctx context.Context) error {
				var err error
				si, err = c.prepare(ctx, query)
				return err
			})
			if err != nil {
				return nil, err
			}
		}
	}
	return newStmt(c, query, si), nil
}

func (c *conn) prepare(ctx context.Context, query string) (driver.Stmt, error) {
	if c.preparer != nil {
		return c.preparer.PrepareContext(ctx, query)
	}
	// database/sql's ctxDriverPrepare
	si, err := c.inner.Prepare(query)
	if err == nil {
		select {
		default:
		case <-ctx.Done():
			si.Close()
			return nil, ctx.Err()
		}
	}
	return si, err
}

// BeginTx begins a transaction, retried: a BEGIN whose outcome is unknown
// may have opened a transaction on the session, so the session is dropped
// and the retry begins on a new connection.
func (c *conn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	c.finishQuery()
	if c.beginner == nil {
		// database/sql's ctxDriverBegin
		if opts.Isolation != driver.IsolationLevel(0) {
			return nil, errors.New("sql: driver does not support non-default isolation level")
		}
		if opts.ReadOnly {
			return nil, errors.New("sql: driver does not support read-only transactions")
		}
	}
	p := c.c.p
	p.countCall()
	var (
		itx driver.Tx
		err error
	)
	if inRunTx(ctx) { // RunTx retries the whole attempt
		// sql.Conn.BeginTx does not retry driver.ErrBadConn: no need to hide it.
		if err = c.ready(ctx); err != nil {
			return nil, err
		}
		if itx, err = c.begin(ctx, opts); err != nil {
			c.beginFailed(err)
			return nil, c.probe(ctx, c.failed(err))
		}
	} else if p.fast() && !c.broken {
		if itx, err = c.begin(ctx, opts); err == nil {
			p.succeeded(false)
		}
	}
	if itx == nil {
		if err != nil {
			c.beginFailed(err)
		}
		// BEGIN runs under the caller's context, not the attempt's: drivers
		// (pgx's stdlib, go-mssqldb) keep BeginTx's context for the whole
		// transaction, and the attempt's is cancelled as soon as BEGIN
		// returns. So CommandTimeout does not bound a BEGIN made here; the
		// caller's context does.
		txCtx := ctx
		err = c.retry(ctx, beginOp, err, func(context.Context) error {
			var err error
			if itx, err = c.begin(txCtx, opts); err != nil {
				c.beginFailed(err)
			}
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	c.inTx, c.taint = true, false
	return &tx{c: c, inner: itx}, nil
}

var beginOp = Idempotent("begin")

// beginFailed drops the session after a BEGIN that may have run.
func (c *conn) beginFailed(err error) {
	if ph := c.c.p.Classify(err).Phase; ph != NotSent && ph != NotApplied {
		c.broken = true
	}
}

func (c *conn) begin(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if c.beginner != nil {
		return c.beginner.BeginTx(ctx, opts)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return c.inner.Begin() //nolint:staticcheck // the fallback database/sql uses
}

// ping pings the inner connection, retried with a reconnect when the
// connection is unusable.
func (c *conn) ping(ctx context.Context) error {
	c.finishQuery()
	p := c.c.p
	if c.inTx || c.sess.Pinned() {
		return hideBadConn(c.failed(c.pinger.Ping(ctx)))
	}
	var err error
	if p.fast() && !c.broken {
		if err = c.pinger.Ping(ctx); err == nil {
			return nil
		}
	}
	return c.retry(ctx, pingOp, err, func(ctx context.Context) error { return c.pinger.Ping(ctx) })
}

var pingOp = Idempotent("ping")

// ResetSession resets the inner session before database/sql reuses the
// connection. When the inner connection reports itself bad, it is replaced
// underneath (one connect attempt); only if that fails is driver.ErrBadConn
// returned, so the pool drops this connection. resetSlow does all but the
// usual case, with nothing to end first. Only a conn whose inner connection
// is a driver.SessionResetter advertises it.
func (c *conn) ResetSession(ctx context.Context) error {
	if c.endQuery != nil || c.refused || c.broken || c.inner == nil {
		return c.resetSlow(ctx)
	}
	c.inTx = false
	if err := c.resetter.ResetSession(ctx); err != nil {
		return c.resetFailed(ctx, err)
	}
	return nil
}

func (c *conn) resetSlow(ctx context.Context) error {
	c.finishQuery()
	c.inTx = false
	if !c.broken && c.inner != nil {
		err := c.resetter.ResetSession(ctx)
		if err == nil {
			return nil
		}
		return c.resetFailed(ctx, err)
	}
	return c.resetReady(ctx)
}

// resetFailed handles the inner ResetSession's failure err.
func (c *conn) resetFailed(ctx context.Context, err error) error {
	if !errors.Is(err, driver.ErrBadConn) {
		return err
	}
	c.broken = true
	return c.resetReady(ctx)
}

// resetReady replaces the broken connection, or reports driver.ErrBadConn.
func (c *conn) resetReady(ctx context.Context) error {
	if err := c.ready(ctx); err != nil { // a new session: no transaction open
		return driver.ErrBadConn
	}
	return nil
}

// tx tracks the end of a transaction.
type tx struct {
	c     *conn
	inner driver.Tx
}

// Commit commits. A COMMIT that fails may leave the transaction open on
// the session: a Galera node out of the primary component refuses COMMIT
// with 1047 and keeps it, as SQLite keeps a transaction whose COMMIT was
// busy. The session is then never used again (refused): the pool drops it
// (IsValid), a command on the same sql.Conn gets a new one, and the server
// rolls the old one back. Whether the COMMIT failed in reply (the session
// lives on) is still read by RunTx before that. PostgreSQL ends the
// transaction whatever COMMIT answers.
func (t *tx) Commit() error { return t.end(t.inner.Commit) }

// Rollback rolls back; one that fails leaves the session as a failed
// COMMIT does.
func (t *tx) Rollback() error { return t.end(t.inner.Rollback) }

// end runs the inner COMMIT or ROLLBACK, and refuses the session if it
// failed (see Commit).
func (t *tx) end(inner func() error) error {
	t.c.inTx = false
	if err := inner(); err != nil {
		t.c.refused = t.c.c.engine != sqltext.Postgres
		return hideBadConn(t.c.failed(err))
	}
	return nil
}

// errNamedArgs is database/sql's error for a named argument given to a
// driver that takes positional ones only.
var errNamedArgs = errors.New("sql: driver does not support the use of Named Parameters")
