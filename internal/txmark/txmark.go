// Package txmark marks the context a transaction function receives from
// sqlretry.RunTx or pgxretry's RunTx, so that every layer below it knows a
// statement made with it belongs to a transaction retried whole: the
// Connector does not retry the connect and BEGIN on their own, Policy.Do
// does not replay a statement of the transaction by itself, and a nested
// RunTx is refused.
package txmark

import "context"

// Key is the context key; its value is true.
type Key struct{}

// In reports whether ctx is (derived from) a transaction function's.
func In(ctx context.Context) bool { return ctx.Value(Key{}) != nil }

// With returns ctx marked.
func With(ctx context.Context) context.Context { return context.WithValue(ctx, Key{}, true) }
