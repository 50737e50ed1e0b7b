package sqlretry

import (
	"database/sql/driver"
	"errors"
)

// verdictError is an error whose verdict the database/sql layer knows better
// than a classifier can read from the error itself: a reconnect that failed
// before the statement was sent (NotSent, whatever the dial error's own
// phase), a lib/pq driver.ErrBadConn that may follow a send (Unknown), a
// session that ended in reply to COMMIT (Unknown, not the NotApplied its
// code says). The Policy takes the verdict as it is. The error it carries
// stays in the chain, so errors.As still finds the driver's own error.
type verdictError struct {
	err    error
	class  Class
	prefix string // said before err's message
}

func (e *verdictError) Error() string { return e.prefix + e.err.Error() }

func (e *verdictError) Unwrap() error { return e.err }

// Verdict states the error's class, which the Policy takes as it is.
func (e *verdictError) Verdict() Class { return e.class }

// verdictOf returns the verdict an error in err's chain states with a method
// Verdict() Class, as the database/sql layer's own errors do.
func verdictOf(err error) (Class, bool) {
	var v interface{ Verdict() Class }
	if errors.As(err, &v) {
		return v.Verdict(), true
	}
	return Class{}, false
}

// attemptEnded reports whether err's chain says that its attempt has
// provably stopped (see Class.Ended).
func attemptEnded(err error) bool {
	var e interface{ AttemptEnded() bool }
	return errors.As(err, &e) && e.AttemptEnded()
}

// lostAfterSend is the verdict on a connection lost after the command left.
var lostAfterSend = Class{Retryable: true, Phase: Unknown, Code: "conn-lost", Reason: "connection lost after the command was sent: it may have run", Kind: Unavailable}

// hideBadConn returns err, changed so that it does not match
// driver.ErrBadConn if it did: database/sql would retry it again, without
// backoff, on top of the Policy's retries — or, for a statement pinned to a
// transaction, on another connection outside it. The verdict is kept: a
// driver.ErrBadConn proves the command was not sent, unless a verdictError
// in the chain says otherwise.
func hideBadConn(err error) error {
	if err == nil || !errors.Is(err, driver.ErrBadConn) {
		return err
	}
	var re *Error
	if errors.As(err, &re) {
		cp := *re
		cp.Err = hideBadConn(re.Err)
		return &cp
	}
	cl, ok := verdictOf(err)
	if !ok {
		cl = Class{Retryable: true, Phase: NotSent, Code: "bad-conn", Reason: "driver.ErrBadConn: connection unusable, command not sent", Kind: Unavailable}
	}
	return &verdictError{err: &badConnError{msg: err.Error()}, class: cl}
}

// notSentBefore returns err, from a step before the statement (a reconnect,
// a re-prepare), with the verdict cl and phase NotSent.
func notSentBefore(err error, cl Class) error {
	cl.Phase = NotSent
	return &verdictError{err: err, class: cl, prefix: "statement not sent: "}
}

// lostAfter returns err with the verdict lostAfterSend.
func lostAfter(err error) error {
	return &verdictError{err: err, class: lostAfterSend, prefix: "connection lost, the command may have run: "}
}

// badConnError stands for an error that matched driver.ErrBadConn: its
// message, without the sentinel.
type badConnError struct{ msg string }

func (e *badConnError) Error() string { return e.msg }

// ambiguity is the cause of an ErrAmbiguous that says why the outcome could
// not be settled.
type ambiguity struct{ why string }

func (a *ambiguity) Error() string        { return "sqlretry: outcome unknown: " + a.why }
func (a *ambiguity) Is(target error) bool { return target == ErrAmbiguous }
