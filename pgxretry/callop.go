package pgxretry

import (
	"context"

	"github.com/sqlretry/sqlretry"
)

// An Op attached with sqlretry.WithOp settles the first statement through a
// [Pool] that is not one read-only statement: a failure of unknown outcome
// is settled by the Op's Verify (applied: the call succeeds; not applied:
// it is replayed) instead of ending in sqlretry.ErrAmbiguous, and an
// Idempotent Op consents to replaying it whatever its text. The statements
// after the first write carry no Op: a verify written for one write must
// never settle another. A write inside [Pool.RunTx] uses it up without
// being settled by it: RunTx settles a transaction's COMMIT.
//
// Before "not applied" is believed, the session of the failed attempt is
// ended on the server (pg_terminate_backend) and confirmed gone
// (pg_stat_activity): a server may go on running a statement whose client
// gave up. That needs the right to terminate the pool's own backends (the
// same role suffices).

// takeOp returns the Op attached to ctx if sql is the first write made
// with it. It reads the text only when an Op is attached.
func takeOp(ctx context.Context, sql string) (sqlretry.Op, bool) {
	if !sqlretry.HasOp(ctx) || shapeOf(sql) == shapeRead {
		return sqlretry.Op{}, false
	}
	return sqlretry.TakeOp(ctx)
}

// takeWriteOp returns the Op attached to ctx for a write that is known to
// be one (a COPY, a batch with a write).
func takeWriteOp(ctx context.Context) (sqlretry.Op, bool) {
	return sqlretry.TakeOp(ctx)
}
