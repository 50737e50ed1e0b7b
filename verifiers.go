package sqlretry

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"strings"
)

// A TxSetup is a [CommitVerifier] that keeps records in the database (the
// marker verifiers of packages postgres, mysql, sqlite and mssql) and needs
// the database handle outside any transaction: to create its table on first
// use (MySQL's DDL would commit the user's transaction; concurrent CREATE
// TABLE IF NOT EXISTS can fail a PostgreSQL transaction) and to delete old
// records without taking locks inside a user's transaction.
type TxSetup interface {
	// BeforeTx runs before each attempt of RunTx that the verifier will
	// mark, before the attempt takes its connection from db, under the
	// attempt's context. An error fails the attempt before BEGIN: it is
	// retried under the usual rules.
	BeforeTx(ctx context.Context, db *sql.DB) error
}

// beforeTx runs v's BeforeTx, if v has one.
func beforeTx(ctx context.Context, v CommitVerifier, db *sql.DB) error {
	if s, ok := v.(TxSetup); ok {
		return s.BeforeTx(ctx, db)
	}
	return nil
}

// A ReadOnlyMarker is a [CommitVerifier] whose Mark writes (the marker
// verifiers insert a row), which a transaction begun with
// sql.TxOptions.ReadOnly cannot: [RunTx] marks such a transaction with the
// verifier ForReadOnly returns instead, none if nil. A CommitVerifier that
// is not a ReadOnlyMarker marks read-only transactions as it marks any
// (postgres.CommitVerifier reads the transaction id, which a read-only
// transaction may take).
type ReadOnlyMarker interface {
	ForReadOnly() CommitVerifier
}

// forReadOnly returns the verifier that marks a read-only transaction for
// v, nil if none.
func forReadOnly(v CommitVerifier) CommitVerifier {
	if r, ok := v.(ReadOnlyMarker); ok {
		return r.ForReadOnly()
	}
	return v
}

// Verifiers returns a [CommitVerifier] that marks each transaction with
// both first and fallback, and settles an ambiguous COMMIT with first,
// asking fallback only when first returns an error. Either may be nil; then
// the other is returned as it is.
//
// Use it to keep the cheap answer while it is available and a sure one when
// it is not: on PostgreSQL,
//
//	sqlretry.Verifiers(postgres.CommitVerifier{}, &postgres.MarkerVerifier{})
//
// settles by pg_xact_status, and by the marker table after a failover, when
// pg_xact_status cannot answer (postgres.ErrHistoryChanged). Each
// transaction then pays for both marks. A fallback that also fails makes
// Committed return both errors, joined. It is safe for concurrent use if
// first and fallback are; it calls BeforeTx of each that is a [TxSetup].
func Verifiers(first, fallback CommitVerifier) CommitVerifier {
	switch {
	case first == nil:
		return fallback
	case fallback == nil:
		return first
	}
	return &verifiers{first: first, fallback: fallback}
}

type verifiers struct {
	first, fallback CommitVerifier
}

// Mark marks with both, and joins the two marks into one: the first's
// length, a colon, the first, the second.
func (v *verifiers) Mark(ctx context.Context, tx *sql.Tx) (string, error) {
	m1, err := v.first.Mark(ctx, tx)
	if err != nil {
		return "", err
	}
	m2, err := v.fallback.Mark(ctx, tx)
	if err != nil {
		return "", err
	}
	return strconv.Itoa(len(m1)) + ":" + m1 + m2, nil
}

// Committed asks first, and fallback if first fails.
func (v *verifiers) Committed(ctx context.Context, db *sql.DB, mark string) (bool, error) {
	m1, m2, err := splitMark(mark)
	if err != nil {
		return false, err
	}
	committed, err1 := v.first.Committed(ctx, db, m1)
	if err1 == nil {
		return committed, nil
	}
	committed, err2 := v.fallback.Committed(ctx, db, m2)
	if err2 == nil {
		return committed, nil
	}
	return false, errors.Join(err1, err2)
}

// ForReadOnly keeps those of the two that can mark a read-only transaction.
func (v *verifiers) ForReadOnly() CommitVerifier {
	return Verifiers(forReadOnly(v.first), forReadOnly(v.fallback))
}

// BeforeTx runs the BeforeTx of each verifier that has one.
func (v *verifiers) BeforeTx(ctx context.Context, db *sql.DB) error {
	if err := beforeTx(ctx, v.first, db); err != nil {
		return err
	}
	return beforeTx(ctx, v.fallback, db)
}

// splitMark undoes the joining of Mark.
func splitMark(mark string) (m1, m2 string, err error) {
	n, rest, ok := strings.Cut(mark, ":")
	length, aerr := strconv.Atoi(n)
	if !ok || aerr != nil || length < 0 || length > len(rest) {
		return "", "", errors.New("sqlretry: Verifiers: not a mark of theirs: " + strconv.Quote(mark))
	}
	return rest[:length], rest[length:], nil
}
