package pgxretry

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sqlretry/sqlretry"
)

// Pool is a *pgxpool.Pool whose statements outside a transaction are
// retried under a Policy, and whose [Pool.RunTx] runs transactions whole.
// It has the methods of *pgxpool.Pool that application code calls, so
// sqlc's pgx/v5 DBTX interface, and code written against one, accept it.
//
// It is safe for concurrent use, as the pool is.
type Pool struct {
	pool *pgxpool.Pool
	p    *sqlretry.Policy
	mk   *markerState // WithMarker's verifier, or nil: pg_xact_status
}

// New returns pool under p. p's Classifier should be postgres.Classifier.
// pool stays the caller's: [Pool.Close] closes it. opts: [WithMarker].
func New(pool *pgxpool.Pool, p *sqlretry.Policy, opts ...Option) *Pool {
	w := &Pool{pool: pool, p: p}
	for _, o := range opts {
		o(w)
	}
	return w
}

// The Ops of statements without an attached Op. Each is a Write without a
// verify: a read's failure is made NotApplied (see classify), so a read is
// replayed and a write of unknown outcome ends in ErrAmbiguous.
var (
	execOp  = sqlretry.Write("pgx exec", nil)
	queryOp = sqlretry.Write("pgx query", nil)
	copyOp  = sqlretry.Write("pgx copy", nil)
	batchOp = sqlretry.Write("pgx batch", nil)
	pingOp  = sqlretry.Idempotent("pgx ping")
	beginOp = sqlretry.Idempotent("pgx begin")
	connOp  = sqlretry.Idempotent("pgx acquire")
)

// opFor returns the Op of one statement: op, or the Op the caller attached
// with [sqlretry.WithOp] if sql is the first write made with ctx. A Verify of the
// caller's is called only after the session of the failed attempt was
// ended on the server and confirmed gone: the attempt notes it in the
// session returned, which is nil (nothing to note) without an attached Op
// that has a Verify.
func (w *Pool) opFor(ctx context.Context, op sqlretry.Op, sql string) (sqlretry.Op, *session) {
	u, ok := takeOp(ctx, sql)
	if !ok {
		return op, nil
	}
	if u.IsIdempotent() || u.Verify() == nil {
		return w.attachedOp(op, u, nil), nil
	}
	s := &session{}
	return w.attachedOp(op, u, s), s
}

// attachedOp revises op, a statement's, with u, the caller's.
func (w *Pool) attachedOp(op, u sqlretry.Op, s *session) sqlretry.Op {
	name := op.Name
	if u.Name != "" {
		name = u.Name
	}
	switch v := u.Verify(); {
	case u.IsIdempotent():
		return sqlretry.Idempotent(name)
	case v != nil:
		fence := func(ctx context.Context) error { return s.fence(ctx, w) }
		verify := func(ctx context.Context) (bool, error) { return fencedVerify(ctx, fence, v) }
		// The verify waits out the attempt itself: it fences first.
		return sqlretry.Write(name, verify).VerifyWaits()
	}
	return sqlretry.Write(name, nil)
}

// Raw returns the pool underneath, whose calls are not retried.
func (w *Pool) Raw() *pgxpool.Pool { return w.pool }

// Policy returns the Policy the pool's calls run under.
func (w *Pool) Policy() *sqlretry.Policy { return w.p }

// Close closes the pool underneath (and WithMarker's *sql.DB over it).
func (w *Pool) Close() {
	if w.mk != nil {
		w.mk.close()
	}
	w.pool.Close()
}

// Stat returns the pool's statistics.
func (w *Pool) Stat() *pgxpool.Stat { return w.pool.Stat() }

// Config returns a copy of the pool's configuration.
func (w *Pool) Config() *pgxpool.Config { return w.pool.Config() }

// Ping pings the database, retried on transient failures.
func (w *Pool) Ping(ctx context.Context) error {
	return w.p.Do(ctx, pingOp, func(actx context.Context) error {
		if err := w.pool.Ping(actx); err != nil {
			return w.failed(ctx, err, shapeRead, false)
		}
		return nil
	})
}

// Acquire returns a connection of the pool, retried while connecting
// fails. Statements on it are pgx's own: they are not retried.
func (w *Pool) Acquire(ctx context.Context) (*pgxpool.Conn, error) {
	var c *pgxpool.Conn
	err := w.p.Do(ctx, connOp, func(actx context.Context) error {
		var err error
		if c, err = w.pool.Acquire(actx); err != nil {
			return w.failed(ctx, err, shapeRead, false)
		}
		return nil
	})
	return c, err
}

// Begin begins a transaction: [Pool.BeginTx] with default options.
func (w *Pool) Begin(ctx context.Context) (pgx.Tx, error) {
	return w.BeginTx(ctx, pgx.TxOptions{})
}

// BeginTx begins a transaction, retried on transient failures (a BEGIN
// whose outcome is unknown leaves its connection closed or inside a
// transaction, which the pool then destroys). Statements in the
// transaction are pgx's own and never replayed one by one; use
// [Pool.RunTx] to have the whole transaction run again.
func (w *Pool) BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error) {
	var tx pgx.Tx
	err := w.p.Do(ctx, beginOp, func(actx context.Context) error {
		var err error
		// BEGIN runs under the caller's context: pgx keeps no context
		// past it, and the attempt's is cancelled when it returns.
		if tx, err = w.pool.BeginTx(ctx, opts); err != nil {
			return w.failed(ctx, err, shapeRead, false)
		}
		return nil
	})
	return tx, err
}

// Exec runs a statement outside a transaction. A read is replayed after
// any transient failure; a write only when the failure proves it was not
// applied (nothing was sent, or the server's error ended it), and after a
// failure of unknown outcome the call ends in an error matching
// sqlretry.ErrAmbiguous, unless an Op attached with [sqlretry.WithOp] settles it.
func (w *Pool) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	var tag pgconn.CommandTag
	op, s := w.opFor(ctx, execOp, sql)
	err := w.p.Do(ctx, op, func(actx context.Context) error {
		c, err := w.pool.Acquire(actx)
		if err != nil {
			return w.acquireFailed(ctx, err)
		}
		s.acquired(actx, c)
		tag, err = c.Exec(actx, sql, args...)
		if err != nil {
			s.note(c)
			err = w.failedAs(ctx, op, err, shapeOf(sql), c.Conn().IsClosed(), sql)
		}
		c.Release()
		return err
	})
	return tag, err
}

// acquireFailed returns the error of an Acquire: the statement was not
// sent, whatever the connect error's own phase.
func (w *Pool) acquireFailed(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return withVerdict(err, sqlretry.Class{Phase: sqlretry.NotSent, Code: "context", Reason: "the caller's context ended while acquiring a connection: nothing was sent"})
	}
	c := w.classify(ctx, err, shapeRead, false)
	if !c.Retryable {
		return err
	}
	c.Phase = sqlretry.NotSent
	c.Reason += " (acquiring a connection: the statement was not sent)"
	return withVerdict(err, c)
}
