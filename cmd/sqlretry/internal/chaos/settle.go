package chaos

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"

	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/cmd/sqlretry/internal/engine"
	"github.com/sqlretry/sqlretry/mysql"
	"github.com/sqlretry/sqlretry/postgres"
	"github.com/sqlretry/sqlretry/sqlite"
)

// The --verifier choices: which CommitVerifier settles the ambiguous
// COMMIT of a transaction that runs through RunTx without a Verify of its
// own (Config.CommitVerifier of the policy under test).
const (
	// VerifierAuto is the engine's best: on PostgreSQL pg_xact_status, with
	// the marker table when pg_xact_status cannot answer (the server's
	// history changed: a failover, a restart); on MySQL/MariaDB and SQLite
	// the marker table.
	VerifierAuto = "auto"
	// VerifierNone leaves such a COMMIT ambiguous: the caller is told
	// ErrAmbiguous.
	VerifierNone = "none"
	// VerifierXact is pg_xact_status alone (PostgreSQL only).
	VerifierXact = "xact"
	// VerifierMarker is the marker table alone.
	VerifierMarker = "marker"
)

// VerifierScope says which COMMITs the commit verifier settles, in the
// command's help and its reports alike: the contention scenario's, whose
// transactions run through RunTx without a Verify of their own; none of
// the task store's.
const VerifierScope = "The commit verifier (--verifier) settles the ambiguous COMMIT of a transaction that has no Verify of its own: " +
	"the contention scenario's transactions. In the tasks scenario it settles none: " + tasksVerifyReason + "."

// tasksVerifyReason is why the tasks scenario leaves the commit verifier
// nothing to settle.
const tasksVerifyReason = "every task-store write has a Verify of its own (the per-shape table's verified columns), " +
	"and claims and recovery are idempotent"

// Verifiers are the --verifier choices.
var Verifiers = []string{VerifierAuto, VerifierNone, VerifierXact, VerifierMarker}

// validateVerifier checks c.Verifier (defaults applied) against c.Engine.
func (c Config) validateVerifier() error {
	switch c.Verifier {
	case VerifierAuto, VerifierNone, VerifierMarker:
		return nil
	case VerifierXact:
		if c.Engine != engine.Postgres {
			return inputErr("--verifier", fmt.Errorf("xact (pg_xact_status) is PostgreSQL's; %s has auto, marker or none", c.Engine))
		}
		return nil
	}
	return inputErr("--verifier", fmt.Errorf("unknown verifier %q (want %s)", c.Verifier, strings.Join(Verifiers, ", ")))
}

// commitVerifier builds the CommitVerifier c.Verifier names, and its name
// for the report. A marker verifier creates its table (CreateTable) in the
// run's own schema or database, where the run's connections point. nil for
// VerifierNone.
func (c Config) commitVerifier() (sqlretry.CommitVerifier, string) {
	if c.Verifier == VerifierNone {
		return nil, "none"
	}
	switch c.Engine {
	case engine.Postgres:
		marker := &postgres.MarkerVerifier{CreateTable: true}
		switch c.Verifier {
		case VerifierXact:
			return postgres.CommitVerifier{}, "pg_xact_status"
		case VerifierMarker:
			return marker, "marker table"
		}
		// pg_xact_status answers without a table read while the server
		// that ran the transaction is the one the pool reaches; the marker
		// answers after a failover, when pg_xact_status cannot.
		return sqlretry.Verifiers(postgres.CommitVerifier{}, marker), "pg_xact_status, then the marker table"
	case engine.MySQL:
		return &mysql.MarkerVerifier{CreateTable: true}, "marker table"
	}
	return &sqlite.MarkerVerifier{CreateTable: true}, "marker table"
}

// Settlement is what happened to the ambiguous COMMITs of transactions
// that run through RunTx without a Verify of their own: the ones the
// commit verifier (--verifier) settles.
type Settlement struct {
	Verifier string `json:"verifier"` // "marker table", "pg_xact_status", ..., or "none"
	// Ambiguous counts the COMMITs whose outcome the client could not know
	// (the reply was lost): each was settled, left ambiguous, or (the blind
	// loop) replayed without asking.
	Ambiguous      int64 `json:"ambiguous_commits"`
	Applied        int64 `json:"settled_applied"`
	NotApplied     int64 `json:"settled_not_applied"`
	StillAmbiguous int64 `json:"still_ambiguous"` // the verifier failed, or there is none: the caller was told ErrAmbiguous
	// Wrong counts verdicts the database contradicts ("applied" with the
	// attempt's row missing, "not applied" with it there); Checked says how
	// many verdicts could be held against the database.
	Wrong   int64 `json:"wrong"`
	Checked int64 `json:"checked"`
	// Note says why the numbers are what they are, when that is not
	// obvious: a scenario with no such transaction, a blind replay.
	Note string `json:"note,omitempty"`
}

// attemptKey is the context key of the *attemptID a pair transaction's
// attempt runs as: the recording verifier reads it at Mark.
type attemptKey struct{}

// attemptID names one attempt of one call.
type attemptID struct {
	call string
	n    int
}

// verdict is one answer of the commit verifier, about one attempt.
type verdict struct {
	attemptID
	known   bool // the attempt is known (a pair transaction's), so the verdict can be checked
	applied bool
}

// recorder wraps the run's CommitVerifier and keeps every verdict it
// gives, so that the run can hold each against the database afterwards.
// It is safe for concurrent use.
type recorder struct {
	inner sqlretry.CommitVerifier
	name  string

	mu       sync.Mutex
	marks    map[string]attemptID // mark → the attempt it marked
	verdicts []verdict
	failed   int64 // Committed calls that returned an error
}

func newRecorder(v sqlretry.CommitVerifier, name string) *recorder {
	return &recorder{inner: v, name: name, marks: map[string]attemptID{}}
}

// BeforeTx forwards to the inner verifier's: a marker verifier creates its
// table and prunes there.
func (r *recorder) BeforeTx(ctx context.Context, db *sql.DB) error {
	if s, ok := r.inner.(sqlretry.TxSetup); ok {
		return s.BeforeTx(ctx, db)
	}
	return nil
}

// Mark marks the transaction and remembers which attempt the mark is of.
func (r *recorder) Mark(ctx context.Context, tx *sql.Tx) (string, error) {
	m, err := r.inner.Mark(ctx, tx)
	if a, ok := ctx.Value(attemptKey{}).(*attemptID); ok && err == nil && m != "" {
		r.mu.Lock()
		r.marks[m] = *a
		r.mu.Unlock()
	}
	return m, err
}

// Committed asks the inner verifier and records its verdict.
func (r *recorder) Committed(ctx context.Context, db *sql.DB, mark string) (bool, error) {
	ok, err := r.inner.Committed(ctx, db, mark)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.failed++
		return ok, err
	}
	a, known := r.marks[mark]
	r.verdicts = append(r.verdicts, verdict{attemptID: a, known: known, applied: ok})
	return ok, err
}

// settlement counts the verdicts; r may be nil (no verifier).
func (r *recorder) settlement(cfg Config, note string) Settlement {
	_, name := cfg.commitVerifier()
	s := Settlement{Verifier: name, Note: note}
	if r == nil {
		return s
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, v := range r.verdicts {
		if v.applied {
			s.Applied++
		} else {
			s.NotApplied++
		}
	}
	s.StillAmbiguous = r.failed
	s.Ambiguous = s.Applied + s.NotApplied + s.StillAmbiguous
	return s
}

// check holds each verdict about a known attempt against rows, the
// attempts whose row the database holds, and returns how many it checked
// and how many were wrong.
func (r *recorder) check(rows map[attemptID]bool) (checked, wrong int64) {
	if r == nil {
		return 0, 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, v := range r.verdicts {
		if !v.known {
			continue
		}
		checked++
		if rows[v.attemptID] != v.applied {
			wrong++
		}
	}
	return checked, wrong
}
