package sqlretry

import (
	"context"
	"errors"
	"strconv"
	"strings"
)

// The sentinels a call's error may match with errors.Is.
var (
	// ErrAmbiguous: an attempt failed with phase Unknown (it may have been
	// applied) and the Op could not be replayed safely: it is a write with no
	// verify, or its verify failed.
	ErrAmbiguous = errors.New("sqlretry: outcome unknown: the write may have been applied")
	// ErrBudgetExhausted: the Policy's retry budget had no token for a retry.
	ErrBudgetExhausted = errors.New("sqlretry: retry budget exhausted")
	// ErrCircuitOpen: the Policy's breaker is open and the call failed fast.
	ErrCircuitOpen = errors.New("sqlretry: circuit open")
	// ErrRetriesExhausted: the Op failed on every attempt MaxRetries allowed.
	ErrRetriesExhausted = errors.New("sqlretry: retries exhausted")
	// ErrValueUnknown: the write was applied — a verify found it after an
	// attempt whose outcome was unknown — but the value the operation would
	// have returned was never read ([DoValue]).
	ErrValueUnknown = errors.New("sqlretry: applied, but the result was not read: a verify found the write after an ambiguous failure")
	// ErrTxReadOnly: a CommitVerifier's Mark could not mark the transaction
	// because it is read-only, though sql.TxOptions did not say so (SET
	// TRANSACTION READ ONLY, a session whose transactions are read-only
	// by default). A marker verifier's Mark returns an error matching it;
	// RunTx then runs the transaction again, marked as a read-only one
	// (see [ReadOnlyMarker]). Nothing was committed.
	ErrTxReadOnly = errors.New("sqlretry: the transaction is read-only, so the commit verifier could not mark it")
	// ErrDeadline: the next wait would have outlived the caller's deadline,
	// so it was not started. Errors matching it also match
	// context.DeadlineExceeded.
	ErrDeadline = errors.New("sqlretry: next wait would pass the caller's deadline")
)

// Error is the error a Policy returns when it has done more than pass an
// error through: it retried, gave up, stopped for the caller's context, or
// could not settle an ambiguous write. A permanent error on the first attempt
// is returned unchanged, so code that compares errors with == keeps working.
//
// Attempts counts every time the operation ran, the first included; retries
// are Attempts-1. Verify calls are not attempts.
type Error struct {
	Op       string // the Op's name
	Attempts int    // operation runs, the first included
	Class    Class  // the verdict on the last database error
	Err      error  // the last database error; nil if the operation never ran
	Cause    error  // why the Policy stopped: a sentinel or the caller's ctx.Err(); nil for a permanent error

	// fence, if set, ends the session of the last attempt on demand, so
	// that an outer Do's verify reads a final answer (see Policy.nested).
	fence func(ctx context.Context) error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("sqlretry: ")
	if e.Op != "" {
		b.WriteString(e.Op)
		b.WriteString(": ")
	}
	if e.Cause != nil {
		b.WriteString(strings.TrimPrefix(e.Cause.Error(), "sqlretry: "))
		b.WriteString(" after ")
	} else {
		b.WriteString("failed after ")
	}
	b.WriteString(strconv.Itoa(e.Attempts))
	if e.Attempts == 1 {
		b.WriteString(" attempt")
	} else {
		b.WriteString(" attempts")
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns the cause and the last database error, so errors.Is and
// errors.As see both.
func (e *Error) Unwrap() []error {
	switch {
	case e.Cause == nil:
		return []error{e.Err}
	case e.Err == nil:
		return []error{e.Cause}
	}
	return []error{e.Cause, e.Err}
}

// deadlineErr matches both ErrDeadline and context.DeadlineExceeded.
type deadlineErr struct{}

func (deadlineErr) Error() string { return ErrDeadline.Error() }
func (deadlineErr) Is(target error) bool {
	return target == ErrDeadline || target == contextDeadlineExceeded
}

// verifyErr carries a failed verify's error beside ErrAmbiguous.
type verifyErr struct{ err error }

func (v *verifyErr) Error() string {
	return "sqlretry: outcome unknown: verify failed: " + v.err.Error()
}
func (v *verifyErr) Unwrap() []error { return []error{ErrAmbiguous, v.err} }
