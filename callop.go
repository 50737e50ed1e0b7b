package sqlretry

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"sync/atomic"

	"github.com/sqlretry/sqlretry/internal/rawsql"
)

// opKey carries the Op attached to one call's context.
type opKey struct{}

// attached is an Op attached to a context, for the first write made with it.
type attached struct {
	op   Op
	used atomic.Bool
}

// opsAttached is set once any WithOp was made: only then does a statement
// look in its context for one, so a program that never attaches an Op pays
// one atomic load per statement for the feature.
var opsAttached atomic.Bool

// WithOp returns a context that carries op for the first statement that is
// not read-only made with it through a [Connector]: a failure of unknown
// outcome is settled by op's Verify (applied: the call succeeds; not
// applied, with the attempt provably ended: it is replayed) instead of
// ending in ErrAmbiguous, and an Idempotent op consents to replaying the
// statement whatever its text. The Op's Name names the call in errors, logs
// and events. The statements after the first write carry no Op: a verify
// written for one write must never settle another (an ORM that makes
// several writes with one context).
//
// It is how ORM, sqlc and sqlx code, which has nowhere else to put a
// verify, settles its autocommit writes:
//
//	key := sqlretry.NewKey()
//	ctx := sqlretry.WithOp(ctx, sqlretry.Write("create-order",
//		sqlretry.Exists(db, "SELECT 1 FROM orders WHERE idem_key = $1", key)))
//	_, err := q.CreateOrder(ctx, sqlc.CreateOrderParams{IdemKey: key, …})
//
// A write run inside a transaction, or that opens or ends one, uses the Op
// up without being settled by it: RunTx settles a transaction's COMMIT.
//
// The verify runs while the failed call still holds its connection: give it
// a handle whose pool has a connection to spare (not a pool of one, as
// SQLite's often is), or it waits for one until ctx ends.
func WithOp(ctx context.Context, op Op) context.Context {
	opsAttached.Store(true)
	return context.WithValue(ctx, opKey{}, &attached{op: op})
}

// takeOp takes the Op attached to ctx if the statement, read-only or not,
// is the first write made with it, or returns nil. A statement the driver skips (driver.ErrSkip, which
// database/sql answers by running it again as a prepared statement) gives
// it back with release: the Op belongs to the run that happens.
func takeOp(ctx context.Context, readOnly bool) *attached {
	if readOnly || !opsAttached.Load() {
		return nil // inlined: every statement's path, where no Op is attached
	}
	return takeAttached(ctx)
}

// takeAttached is takeOp's look-up in ctx.
func takeAttached(ctx context.Context) *attached {
	a, ok := ctx.Value(opKey{}).(*attached)
	if !ok || !a.used.CompareAndSwap(false, true) {
		return nil
	}
	return a
}

// release gives back an Op taken for a statement that did not run.
func (a *attached) release() {
	if a != nil {
		a.used.Store(false)
	}
}

// HasOp reports whether ctx carries an Op attached with [WithOp] that no
// write has used yet. It costs one atomic load while no WithOp was ever
// made. With [TakeOp] it lets a package that runs statements outside
// database/sql (pgxretry) honour WithOp: it reads a statement's text only
// when HasOp says there is an Op to give it.
func HasOp(ctx context.Context) bool {
	if !opsAttached.Load() {
		return false
	}
	a, ok := ctx.Value(opKey{}).(*attached)
	return ok && !a.used.Load()
}

// TakeOp returns the Op attached to ctx with [WithOp] and marks it used, if
// no write has used it yet; ok is false otherwise. Call it only for a
// statement that is not read-only (the Op belongs to the first write): it
// is for packages that run statements outside database/sql, as the
// [Connector] does for its own. Of two goroutines sharing ctx, one gets the
// Op.
func TakeOp(ctx context.Context) (op Op, ok bool) {
	if !opsAttached.Load() {
		return Op{}, false
	}
	a, found := ctx.Value(opKey{}).(*attached)
	if !found || !a.used.CompareAndSwap(false, true) {
		return Op{}, false
	}
	return a.op, true
}

// attachedOp revises the Connector's op for a statement with the Op the
// caller attached to it, if any.
func (c *connector) attachedOp(a *attached, op Op) Op {
	if a == nil {
		return op
	}
	u := &a.op
	if u.Name != "" {
		op.Name = u.Name
	}
	if u.idempotent && !op.idempotent {
		op.idempotent, op.writes = true, true // consent to replay a write
	}
	if u.fence != nil && op.fence == nil {
		op.fence = u.fence // VerifyWaits, with no Fencer of the Policy's
	}
	if v := u.verify; v != nil {
		// The failed call holds its connection: the verify gets one of its
		// own from the connector when it asks (Exists does).
		op.verify = func(ctx context.Context) (bool, error) { return v(context.WithValue(ctx, verifyConnKey{}, c)) }
	}
	return op
}

// Exists returns a VerifyFunc that reports whether query, run with args,
// returns a row: the verify of a write that leaves a row it can be found by,
// such as an INSERT carrying a client-generated key ([NewKey]).
//
// Attached to a statement with [WithOp], it reads on a connection of its
// own that the Connector opens for it, outside db's pool: the failed call
// still holds its connection, and a pool of one would never give it
// another. Elsewhere (an Op of Policy.Do or RunTx) it reads through db.
func Exists(db *sql.DB, query string, args ...any) VerifyFunc {
	return func(ctx context.Context) (bool, error) {
		if c, ok := ctx.Value(verifyConnKey{}).(*connector); ok {
			return c.exists(ctx, query, args)
		}
		rows, err := db.QueryContext(ctx, query, args...)
		if err != nil {
			return false, err
		}
		defer rows.Close()
		found := rows.Next()
		return found, rows.Err()
	}
}

// verifyConnKey marks the context of a verify the Connector runs for a
// statement's attached Op: it carries the connector, which can open a
// connection outside the pool.
type verifyConnKey struct{}

// exists runs query on a new inner connection, closed afterwards.
func (c *connector) exists(ctx context.Context, query string, args []any) (bool, error) {
	ic, err := c.connectOnce(ctx)
	if err != nil {
		return false, err
	}
	defer ic.Close()
	return rawsql.Exists(ctx, ic, query, args)
}

// NewKey returns a random idempotency key: 32 hexadecimal digits (128
// bits from crypto/rand), for a write's unique column that [Exists] looks up.
func NewKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}
