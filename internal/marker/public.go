package marker

import (
	"context"
	"database/sql"
	"time"

	sr "github.com/sqlretry/sqlretry"
)

// An Engine is an engine package's dialect as a type: the type argument of
// [MarkerVerifier], so that each engine's MarkerVerifier (an alias of
// MarkerVerifier[thatEngine]) knows its dialect in its zero value. Its
// Dialect method is called on the zero value.
type Engine interface {
	Dialect() *Dialect
}

// MarkerVerifier is the public face of the commit-marker verifier: the
// engine packages export it as their MarkerVerifier, an alias of
// MarkerVerifier[their Engine], so that its fields, methods and docs are
// written once. See postgres.MarkerVerifier for what it does.
//
// The zero value is ready to use. It is safe for concurrent use; its fields
// must not change after its first use, which reads them (an invalid one
// makes every call fail with an error naming it).
type MarkerVerifier[E Engine] struct {
	// Table names the marker table, optionally schema-qualified (SQLite: an
	// attached database). If "", sqlretry_commit_marks.
	Table string
	// CreateTable lets the verifier create the table and its index (CREATE
	// ... IF NOT EXISTS) on first use on each *sql.DB, before the first
	// transaction opens: for users allowed to run DDL.
	CreateTable bool
	// MaxWait bounds how long Committed waits for a marker key another
	// transaction holds, and how long a prune may take. If 0, 5 s.
	MaxWait time.Duration
	// TTL is the age after which a marker is pruned. It must be far longer
	// than any RunTx call (at least a minute and 10×MaxWait; clocks of
	// clients must agree far better than that). If 0, 1 h.
	TTL time.Duration
	// PruneEvery is how many transactions pass between two prunes. If 0,
	// 100; if negative, the verifier never prunes, and the table grows
	// until something else deletes old rows.
	PruneEvery int

	lazy  Lazy
	seams Config // tests set Now, Sleep and NewKey through Seams
}

// Seams returns v's test seams (Now, Sleep, NewKey), to set before v's
// first use. A function, not a method, so that users of the engine
// packages never see it.
func Seams[E Engine](v *MarkerVerifier[E]) *Config { return &v.seams }

// Built returns the Verifier v's fields configure, built on v's first use
// (or the error naming the field that is wrong): for the layers that mark
// a transaction their own way (pgxretry). A function, not a method, for the
// same reason as Seams.
func Built[E Engine](v *MarkerVerifier[E]) (*Verifier, error) { return v.verifier() }

func (v *MarkerVerifier[E]) verifier() (*Verifier, error) {
	c := v.seams
	c.Table, c.CreateTable, c.MaxWait, c.TTL, c.PruneEvery = v.Table, v.CreateTable, v.MaxWait, v.TTL, v.PruneEvery
	var e E
	return v.lazy.Get(e.Dialect(), c)
}

// Mark inserts a new key (128 random bits) into the marker table inside tx
// and returns it: one round trip, just before COMMIT.
func (v *MarkerVerifier[E]) Mark(ctx context.Context, tx *sql.Tx) (string, error) {
	m, err := v.verifier()
	if err != nil {
		return "", err
	}
	return m.Mark(ctx, tx)
}

// Committed reports whether the transaction Mark returned mark for
// committed, asking db (the server that is primary now): the key found
// means committed; not found, a tombstone of the key that lands means never
// committed; a key still locked after MaxWait, an error matching
// ErrMarkerInFlight.
func (v *MarkerVerifier[E]) Committed(ctx context.Context, db *sql.DB, mark string) (bool, error) {
	m, err := v.verifier()
	if err != nil {
		return false, err
	}
	return m.Committed(ctx, db, mark)
}

// BeforeTx creates the table on first use if CreateTable is set, and
// prunes old markers every PruneEvery calls, in autocommit. RunTx calls it
// before each attempt opens its transaction.
func (v *MarkerVerifier[E]) BeforeTx(ctx context.Context, db *sql.DB) error {
	m, err := v.verifier()
	if err != nil {
		return err
	}
	return m.BeforeTx(ctx, db)
}

// ForReadOnly returns nil: a read-only transaction cannot insert the
// marker, so RunTx does not mark one with it (sqlretry.ReadOnlyMarker).
func (v *MarkerVerifier[E]) ForReadOnly() sr.CommitVerifier { return nil }

// The interfaces RunTx looks for.
var (
	_ sr.CommitVerifier = (*MarkerVerifier[Engine])(nil)
	_ sr.TxSetup        = (*MarkerVerifier[Engine])(nil)
	_ sr.ReadOnlyMarker = (*MarkerVerifier[Engine])(nil)
)
