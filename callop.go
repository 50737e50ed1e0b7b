package sqlretry

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
)

// opKey carries the Op attached to one call's context.
type opKey struct{}

// WithOp returns a context that carries op for the database/sql calls made
// with it through a [Connector]: a failure of unknown outcome is settled by
// op's Verify (applied: the call succeeds; not applied, with the attempt
// provably ended: it is replayed) instead of ending in ErrAmbiguous, and an
// Idempotent op consents to replaying the statement whatever its text. The
// Op's Name names the call in errors, logs and events.
//
// It is how ORM, sqlc and sqlx code, which has nowhere else to put a
// verify, settles its autocommit writes:
//
//	key := sqlretry.NewKey()
//	ctx := sqlretry.WithOp(ctx, sqlretry.Write("create-order",
//		sqlretry.Exists(db, "SELECT 1 FROM orders WHERE idem_key = $1", key)))
//	_, err := q.CreateOrder(ctx, sqlc.CreateOrderParams{IdemKey: key, …})
//
// Statements run inside a transaction, or that open or end one, are not
// settled by it: RunTx settles a transaction's COMMIT. A context value costs
// nothing on the success path: it is read only after a failure.
func WithOp(ctx context.Context, op Op) context.Context {
	return context.WithValue(ctx, opKey{}, op)
}

// attachedOp revises the Connector's op for a statement with the Op the
// caller attached to ctx, if any.
func attachedOp(ctx context.Context, op Op) Op {
	u, ok := ctx.Value(opKey{}).(Op)
	if !ok {
		return op
	}
	if u.Name != "" {
		op.Name = u.Name
	}
	if u.idempotent {
		op.idempotent = true
	}
	if u.verify != nil {
		op.verify = u.verify
	}
	return op
}

// Exists returns a VerifyFunc that reports whether query, run on db with
// args, returns a row: the verify of a write that leaves a row it can be
// found by, such as an INSERT carrying a client-generated key ([NewKey]).
// It reads through db, which should be the Connector's handle, so that the
// read is retried and, with a Fencer, reads a final answer.
func Exists(db *sql.DB, query string, args ...any) VerifyFunc {
	return func(ctx context.Context) (bool, error) {
		rows, err := db.QueryContext(ctx, query, args...)
		if err != nil {
			return false, err
		}
		defer rows.Close()
		found := rows.Next()
		return found, rows.Err()
	}
}

// NewKey returns a random idempotency key: 32 hexadecimal digits (128
// bits from crypto/rand), for a write's unique column that [Exists] looks up.
func NewKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}
