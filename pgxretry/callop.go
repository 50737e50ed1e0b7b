package pgxretry

import (
	"context"
	"sync/atomic"

	"github.com/sqlretry/sqlretry"
)

// opKey carries the Op attached to one call's context.
type opKey struct{}

// attached is an Op attached to a context, for the first write made with it.
type attached struct {
	op   sqlretry.Op
	used atomic.Bool
}

// opsAttached is set once any WithOp was made: only then does a statement
// look in its context for one.
var opsAttached atomic.Bool

// WithOp returns a context that carries op for the first statement through
// a [Pool] that is not one read-only statement: a failure of unknown
// outcome is settled by op's Verify (applied: the call succeeds; not
// applied: it is replayed) instead of ending in sqlretry.ErrAmbiguous, and
// an Idempotent op consents to replaying it whatever its text. It is
// sqlretry.WithOp for this package: the root package keeps its attached Op
// to itself (see the README's proposed root change), so a context made by
// sqlretry.WithOp carries nothing this package can read.
//
// The statements after the first write carry no Op: a verify written for
// one write must never settle another. A write inside [Pool.RunTx] uses it
// up without being settled by it: RunTx settles a transaction's COMMIT.
//
// Before "not applied" is believed, the session of the failed attempt is
// ended on the server (pg_terminate_backend) and confirmed gone
// (pg_stat_activity): a server may go on running a statement whose client
// gave up. That needs the right to terminate the pool's own backends (the
// same role suffices).
func WithOp(ctx context.Context, op sqlretry.Op) context.Context {
	opsAttached.Store(true)
	return context.WithValue(ctx, opKey{}, &attached{op: op})
}

// takeOp returns the Op attached to ctx if sql is the first write made
// with it. It reads the text only when an Op is attached.
func takeOp(ctx context.Context, sql string) (sqlretry.Op, bool) {
	if !opsAttached.Load() {
		return sqlretry.Op{}, false
	}
	a, ok := ctx.Value(opKey{}).(*attached)
	if !ok || a.used.Load() || shapeOf(sql) == shapeRead || !a.used.CompareAndSwap(false, true) {
		return sqlretry.Op{}, false
	}
	return a.op, true
}

// takeWriteOp returns the Op attached to ctx for a write that is known to
// be one (a COPY, a batch with a write).
func takeWriteOp(ctx context.Context) (sqlretry.Op, bool) {
	if !opsAttached.Load() {
		return sqlretry.Op{}, false
	}
	a, ok := ctx.Value(opKey{}).(*attached)
	if !ok || !a.used.CompareAndSwap(false, true) {
		return sqlretry.Op{}, false
	}
	return a.op, true
}
