package sqlretry

import "context"

// VerifyFunc settles an ambiguous write: it reads what the database holds and
// reports whether the failed attempt was applied. It runs under the Policy as
// an idempotent read, so it is itself retried on transient failures.
type VerifyFunc func(ctx context.Context) (applied bool, err error)

// An Op is one storage operation and the caller's consent to replay it.
//
// Build one with [Idempotent] or [Write]; the zero Op is a write without a
// verify, the most conservative consent. Ops are small values: build them
// once and reuse them, or build them per call, at no cost.
type Op struct {
	// Name identifies the operation in errors, logs and events.
	Name string
	// Statement is the SQL text the operation runs, if known. Rule schedules
	// (package crl) match their query filters against it.
	Statement string

	idempotent bool
	verify     VerifyFunc
	// rephase, if set, revises a failure's class with what the caller knows
	// and the classifier cannot: RunTx knows that a failure before COMMIT
	// was sent left nothing applied.
	rephase func(err error, c Class) Class
	// consent, if set, may consent per failure to replaying a statement
	// whose outcome is unknown (the database/sql layer's rule schedule).
	consent StatementConsent
	// fence, if set, makes a failed attempt's outcome final before the
	// verify reads it: it ends the attempt's session on the server and
	// returns once the server confirms it gone. RunTx's is a no-op for a
	// CommitVerifier, whose answers are final by contract.
	fence func(ctx context.Context) error
	// unsettled, if set, is the cause of the ErrAmbiguous a failure of
	// unknown outcome ends in when there is no verify: it says why.
	unsettled error
	// writes, for an idempotent Op, says that what it runs may write (a
	// RunTx transaction that is not read-only, a Connector's write given
	// an Idempotent Op with WithOp). Cut off by the caller's context,
	// which forbids the replay its consent allows, a failure of unknown
	// outcome is ErrAmbiguous then, not the context's error alone.
	writes bool
}

// Idempotent returns an Op that may be replayed after any retryable failure,
// including one whose outcome is unknown: a read, or a write whose repetition
// is harmless (an upsert to a fixed value, a delete by key).
//
// A caller's context that ends an attempt forbids the replay. Policy.Do
// cannot tell a read from a write, so an Idempotent Do cut off that way
// ends in the context's error; give a write that must report whether it
// landed a [Write] Op with a verify. RunTx (a transaction not declared
// read-only) and the Connector (a statement that is not a read) know
// better: there the failure of unknown outcome ends in ErrAmbiguous as well.
func Idempotent(name string) Op { return Op{Name: name, idempotent: true} }

// Write returns an Op for a write that must not be applied twice. It is
// replayed freely when a failure proves the attempt was not applied (phase
// [NotSent] or [NotApplied]). After a failure of phase [Unknown], verify is
// called: applied → the call succeeds without a replay; not applied → it is
// retried; verify failed → the call fails with [ErrAmbiguous]. With a nil
// verify, an Unknown failure ends the call with [ErrAmbiguous] at once.
func Write(name string, verify VerifyFunc) Op { return Op{Name: name, verify: verify} }

// mustSettle reports whether a failure of class c leaves o's outcome
// unknown with no consent to replay it: it must be settled first.
func (o Op) mustSettle(c Class) bool {
	return c.Phase == Unknown && !o.idempotent && (o.consent == nil || !o.consent.ConsentsToReplay(o.Statement, c.Code))
}

// VerifyWaits returns a copy of o whose Verify is known to wait, before it
// reads, until the attempt it judges has ended on the server — say by taking
// a lock that attempt holds until it commits or rolls back, as a
// transaction's verify can (the attempt's COMMIT was sent only after its
// last statement was answered, so the lock is held until the COMMIT
// resolves). Its "not applied" is then final without a [Fencer]. Claim it
// only of a verify that does wait: one that reads at once may read before
// the write lands, and the write would be applied twice.
func (o Op) VerifyWaits() Op {
	o.fence = verifyWaits
	return o
}

// verifyWaits is the fence of an Op whose Verify waits out the attempt.
func verifyWaits(context.Context) error { return nil }

// IsIdempotent reports whether o may be replayed after an ambiguous failure.
func (o Op) IsIdempotent() bool { return o.idempotent }

// Verify returns the Op's verify function, nil if none.
func (o Op) Verify() VerifyFunc { return o.verify }

// WithStatement returns a copy of o whose Statement is sql.
func (o Op) WithStatement(sql string) Op { o.Statement = sql; return o }
