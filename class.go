package sqlretry

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"io"
	"math/bits"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/sqlretry/sqlretry/internal/enum"
	"github.com/sqlretry/sqlretry/internal/typecache"
)

// Phase says what is known about the effect of a failed attempt.
//
// The zero value is [Unknown]: a classifier that says nothing is treated as
// ambiguous, which is the safe reading.
type Phase uint8

const (
	// Unknown: the attempt may have been applied (a command timeout, a
	// connection lost after the command was sent, an unknown commit outcome).
	Unknown Phase = iota
	// NotSent: the command never left the client (a dial failure,
	// driver.ErrBadConn, pgconn.SafeToRetry).
	NotSent
	// NotApplied: the server received the command and rejected or rolled it
	// back (a deadlock victim, a serialization failure).
	NotApplied
)

var phaseNames = []string{"unknown", "not-sent", "not-applied"}

// String returns "unknown", "not-sent" or "not-applied".
func (p Phase) String() string { return enum.Name(phaseNames, p, "Phase") }

// ParsePhase is the inverse of [Phase.String].
func ParsePhase(s string) (Phase, error) {
	return enum.Parse[Phase](phaseNames, s, s, "sqlretry: unknown phase")
}

// Kind says what a transient failure is a sign of, whatever its phase: lock
// contention between transactions, or a database that is unavailable. The
// two call for different retries: contention is resolved by running again
// (a deadlock victim's rival has finished), and is no sign of a server in
// trouble, so its retries draw nothing from the budget that protects a
// recovering server; unavailability is what the budget is for.
type Kind uint8

const (
	// KindUnknown: the classifier did not say; budgeted like Unavailable.
	KindUnknown Kind = iota
	// Contention: a deadlock victim, a serialization failure, a lock wait
	// timeout, NOWAIT, SQLITE_BUSY and SQLITE_LOCKED.
	Contention
	// Unavailable: a lost or refused connection, a failover, throttling, a
	// restart, a command timeout.
	Unavailable
)

var kindNames = []string{"unknown", "contention", "unavailable"}

// String returns "unknown", "contention" or "unavailable".
func (k Kind) String() string { return enum.Name(kindNames, k, "Kind") }

// Class is the verdict on one error: may a later attempt succeed, and what is
// known about whether the failed attempt reached the database.
type Class struct {
	// Retryable reports whether a later attempt has a reasonable chance.
	Retryable bool
	// Phase is what is known about the failed attempt's effect.
	Phase Phase
	// Code is the engine's code as text: "1205", "40P01", "SQLITE_BUSY".
	// Engine-neutral conditions use short names such as "bad-conn",
	// "dial" or "command-timeout".
	Code string
	// Reason is one line, for logs.
	Reason string
	// MinDelay is a server-requested floor for the next wait (Azure SQL
	// 40501 asks for 10 s); 0 if none.
	MinDelay time.Duration
	// Kind is what a transient failure is a sign of: Contention or
	// Unavailable. The engine classifiers set it on every retryable verdict.
	Kind Kind
	// Ended reports that the failed attempt has provably stopped: nothing it
	// sent can still change the database, so what a verify reads now is
	// final. An in-process engine (SQLite) ends every attempt before the call
	// returns; an injected fault (package faults) fires after its attempt
	// finished; an error whose chain holds a method AttemptEnded() bool that
	// returns true says so itself. A server may go on running a statement
	// whose connection was lost or whose command timeout fired: for such a
	// failure Ended is false, and a verify's "not applied" is trusted only
	// after the session was fenced (see [Fencer]).
	Ended bool
}

// A Classifier gives the verdict on one error. Classify is never called with
// a nil error by the Policy, but implementations must not panic on one.
type Classifier interface {
	Classify(err error) Class
}

// ClassifierFunc adapts a function to a [Classifier], like http.HandlerFunc.
type ClassifierFunc func(err error) Class

// Classify calls f(err).
func (f ClassifierFunc) Classify(err error) Class { return f(err) }

// NeutralClassifier is the engine-neutral [Classifier]: it knows only what the
// standard library can tell. Engine classifiers fall back to it.
var NeutralClassifier Classifier = ClassifierFunc(ClassifyNeutral)

// ClassifyNeutral classifies err using engine-neutral facts only:
//
//   - driver.ErrBadConn: retryable, not sent (the database/sql contract says a
//     driver returns it only when the server cannot have performed the work);
//   - a dial error (*net.OpError with Op "dial", *net.DNSError), ECONNREFUSED:
//     retryable, not sent;
//   - a net.Error timeout, io.ErrUnexpectedEOF, io.EOF, ECONNRESET, EPIPE,
//     ECONNABORTED: retryable, unknown (the command may have been sent);
//   - sql.ErrConnDone, sql.ErrTxDone, driver.ErrSkip: not retryable
//     (client-side programming errors);
//   - context errors: not retryable (the Policy tells a command timeout from
//     a caller's cancellation before it asks a classifier);
//   - anything else: not retryable.
func ClassifyNeutral(err error) Class {
	if err == nil {
		return Class{Phase: NotApplied, Reason: "no error"}
	}
	var f facts
	f.scan(err)
	// As verdict does, written out: returned through verdict, the Class
	// is copied once more (13 instructions a call, measured).
	if f.bits == 0 {
		return Class{Phase: Unknown, Code: "", Reason: "not a known transient error"}
	}
	return neutralVerdicts[bits.TrailingZeros16(f.bits)].class
}

// ClassifyNeutralVisit is [ClassifyNeutral] for an engine's classifier: in
// the same single walk of err's tree, it calls visit with each error of the
// tree, in the order errors.As visits them, except the types a network
// failure is made of (*net.OpError, *os.SyscallError, syscall.Errno) and
// the Policy's *Error, which it reads through: none of them is an engine's
// error. So the classifier looks for its own errors without walking the
// tree again. chain reports that the error is reached from err by single
// Unwrap() error calls (errors.Unwrap's chain), not inside an *Error or
// several errors joined. When visit returns true, the walk ends there: the
// classifier has found what decides its verdict, and the Class returned is
// the zero Class then. The walk follows a chain at most maxChain (10,000)
// errors deep. It allocates
// nothing unless visit does; it is safe for concurrent use if visit is.
// err must not be nil.
func ClassifyNeutralVisit(err error, visit func(err error, chain bool) (stop bool)) Class {
	var f facts
	if f.scanVisit(err, true, visit) {
		return Class{}
	}
	return f.verdict()
}

// verdict is ClassifyNeutral's verdict on the facts found.
func (f *facts) verdict() Class {
	if f.bits == 0 {
		return Class{Phase: Unknown, Code: "", Reason: "not a known transient error"}
	}
	// neutralVerdicts is in the order of the fact bits, so the lowest bit
	// set is the verdict that takes precedence.
	return neutralVerdicts[bits.TrailingZeros16(f.bits)].class
}

// neutralVerdicts are ClassifyNeutral's answers in order of precedence, one
// per fact bit in the bits' order: the first whose fact the walk found wins,
// so a client-side misuse or a done context outranks a network symptom found
// deeper in the same chain.
var neutralVerdicts = [...]struct {
	fact  uint16
	class Class
}{
	{factClientState, Class{Phase: NotSent, Code: "client-state", Reason: "database/sql: operation on a finished connection or transaction"}},
	{factSkip, Class{Phase: NotSent, Code: "driver-skip", Reason: "driver.ErrSkip leaked: a driver or wrapper bug"}},
	{factContext, Class{Phase: Unknown, Code: "context", Reason: "context done"}},
	{factBadConn, Class{Retryable: true, Phase: NotSent, Code: "bad-conn", Reason: "driver.ErrBadConn: connection unusable, command not sent", Kind: Unavailable}},
	{factDNS, Class{Retryable: true, Phase: NotSent, Code: "dns", Reason: "name resolution failed: nothing was sent", Kind: Unavailable}},
	{factDial, Class{Retryable: true, Phase: NotSent, Code: "dial", Reason: "dial failed: nothing was sent", Kind: Unavailable}},
	{factRefused, Class{Retryable: true, Phase: NotSent, Code: "conn-refused", Reason: "connection refused: nothing was sent", Kind: Unavailable}},
	{factTimeout, Class{Retryable: true, Phase: Unknown, Code: "net-timeout", Reason: "network timeout: the command may have run", Kind: Unavailable}},
	{factEOF, Class{Retryable: true, Phase: Unknown, Code: "eof", Reason: "connection closed mid-exchange: the command may have run", Kind: Unavailable}},
	{factReset, Class{Retryable: true, Phase: Unknown, Code: "conn-reset", Reason: "connection lost: the command may have run", Kind: Unavailable}},
}

// facts is what one walk over an error tree found, so ClassifyNeutral reads
// the chain once instead of once per question, and allocates nothing.
type facts struct {
	bits    uint16
	netSeen bool // the first net.Error met decides factTimeout, as errors.As would
}

const (
	factClientState uint16 = 1 << iota
	factSkip
	factContext
	factBadConn
	factDNS
	factDial
	factRefused
	factTimeout
	factEOF
	factReset
)

func (f *facts) has(b uint16) bool { return f.bits&b != 0 }

// sentinels are the errors ClassifyNeutral looks for with errors.Is
// semantics: by identity (node's switch lists the same), or by an Is method
// in the chain.
var sentinels = [...]struct {
	err error
	bit uint16
}{
	{sql.ErrConnDone, factClientState},
	{sql.ErrTxDone, factClientState},
	{driver.ErrSkip, factSkip},
	{context.Canceled, factContext},
	{context.DeadlineExceeded, factContext},
	{driver.ErrBadConn, factBadConn},
	{io.ErrUnexpectedEOF, factEOF},
	{io.EOF, factEOF},
	{net.ErrClosed, factReset},
}

// maxChain bounds how many errors of one chain a walk follows: far deeper
// than any real wrapping (errors.As, which has no bound, finds an engine's
// error 101 wrappers down, and so must a classifier: at 100 a deadlock so
// wrapped lost its retry), yet finite for a chain that unwraps to itself.
const maxChain = 10000

// scan walks err's tree depth first, as errors.Is and errors.As do. The
// types every network failure is made of (*net.OpError, *os.SyscallError,
// syscall.Errno) and the Policy's own *Error are read directly: none of
// them has an Is method that could match a sentinel, and reading *Error's
// two causes in Unwrap's order spares the slice its Unwrap allocates.
// TestNeutralAgreesWithReference holds the shortcut to the general walk.
// scanVisit is the same walk with ClassifyNeutralVisit's visit: kept apart,
// so that ClassifyNeutral's walk pays nothing for it.
func (f *facts) scan(err error) {
	for depth := 0; err != nil && depth < maxChain; depth++ {
		switch e := err.(type) {
		case *net.OpError:
			f.opError(e)
			err = e.Err
			continue
		case *os.SyscallError:
			err = e.Err
			continue
		case syscall.Errno:
			f.errno(e)
			return
		case *Error:
			if !policyCause(e.Cause) {
				f.scan(e.Cause)
			}
			f.scan(e.Err)
			return
		}
		tb := typeBitsOf(err)
		if tb&tNode != 0 { // a plain wrapper says nothing itself
			f.nodeBits(err, tb)
		}
		switch {
		case tb&tUnwrap != 0:
			err = err.(interface{ Unwrap() error }).Unwrap()
		case tb&tUnwrapN != 0:
			for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
				f.scan(e)
			}
			return
		default:
			return
		}
	}
}

// scanVisit is scan that shows visit each error node reads, before node
// reads it; chain says that err is on the single-Unwrap chain of the error
// classified. It reports whether visit stopped the walk.
func (f *facts) scanVisit(err error, chain bool, visit func(error, bool) bool) (stopped bool) {
	for depth := 0; err != nil && depth < maxChain; depth++ {
		switch e := err.(type) {
		case *net.OpError:
			f.opError(e)
			err = e.Err
			continue
		case *os.SyscallError:
			err = e.Err
			continue
		case syscall.Errno:
			f.errno(e)
			return false
		case *Error:
			if !policyCause(e.Cause) && f.scanVisit(e.Cause, false, visit) {
				return true
			}
			return f.scanVisit(e.Err, false, visit)
		}
		if visit(err, chain) {
			return true
		}
		tb := typeBitsOf(err)
		if tb&tNode != 0 { // a plain wrapper says nothing itself
			f.nodeBits(err, tb)
		}
		switch {
		case tb&tUnwrap != 0:
			err = err.(interface{ Unwrap() error }).Unwrap()
		case tb&tUnwrapN != 0:
			for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
				if f.scanVisit(e, false, visit) {
					return true
				}
			}
			return false
		default:
			return false
		}
	}
	return false
}

// opError records what a *net.OpError says itself: a dial, a timeout.
func (f *facts) opError(e *net.OpError) {
	if e.Op == "dial" {
		f.bits |= factDial
	}
	f.netError(e.Timeout)
}

// policyCause reports whether cause is one the Policy itself puts in an
// *Error's Cause: none of them is a sentinel ClassifyNeutral looks for or
// matches one through an Is method, and none is an engine's error, so scan
// need not read it. The commonest first: a comparison that finds the
// errors' types equal calls the runtime. Not inlined: scan's other paths
// would pay for its frame (measured: +20 instructions on a bare io.EOF).
//
//go:noinline
func policyCause(cause error) bool {
	if _, ok := cause.(*ambiguity); ok {
		return true
	}
	switch cause {
	case ErrRetriesExhausted, ErrAmbiguous, ErrBudgetExhausted, ErrCircuitOpen, ErrDeadline, ErrValueUnknown:
		return true
	}
	return false
}

// node records what an error of any other type says: a sentinel it is or
// matches through its Is method, a DNS failure, a network timeout.
func (f *facts) node(err error) { f.nodeBits(err, typeBitsOf(err)) }

// nodeBits is node with the answers of err's type (typeBitsOf) known: only
// the questions its type can answer yes to are asked, each as node asks it.
func (f *facts) nodeBits(err error, tb uint8) {
	if tb&tSentinel != 0 {
		f.sentinel(err)
	}
	if tb&tIs != 0 {
		is := err.(interface{ Is(error) bool })
		for i := range sentinels {
			if is.Is(sentinels[i].err) {
				f.bits |= sentinels[i].bit
			}
		}
	}
	if tb&tDNS != 0 {
		f.bits |= factDNS
	}
	if tb&tNetError != 0 {
		f.netError(err.(net.Error).Timeout)
	}
}

// sentinel records the sentinel err is, if any.
func (f *facts) sentinel(err error) {
	// An error is at most one sentinel: a switch finds it without the
	// table's loop, the commonest first.
	switch err {
	case io.EOF, io.ErrUnexpectedEOF:
		f.bits |= factEOF
	case context.Canceled, context.DeadlineExceeded:
		f.bits |= factContext
	case driver.ErrBadConn:
		f.bits |= factBadConn
	case net.ErrClosed:
		f.bits |= factReset
	case sql.ErrConnDone, sql.ErrTxDone:
		f.bits |= factClientState
	case driver.ErrSkip:
		f.bits |= factSkip
	}
}

// What an error's dynamic type answers to the walk's questions: the
// methods it has, and whether it is the type of one of the sentinels (so
// that comparing it with them can match at all).
const (
	tUnwrap   uint8 = 1 << iota // Unwrap() error
	tUnwrapN                    // Unwrap() []error
	tIs                         // Is(error) bool
	tNetError                   // net.Error
	tDNS                        // *net.DNSError
	tSentinel                   // the dynamic type of one of sentinels

	tNode = tIs | tNetError | tDNS | tSentinel // what nodeBits reads
)

// typeBits computes the answers of err's dynamic type.
func typeBits(err error) uint8 {
	var b uint8
	switch err.(type) {
	case interface{ Unwrap() error }:
		b |= tUnwrap
	case interface{ Unwrap() []error }:
		b |= tUnwrapN
	}
	if _, ok := err.(interface{ Is(error) bool }); ok {
		b |= tIs
	}
	if _, ok := err.(net.Error); ok {
		b |= tNetError
	}
	if _, ok := err.(*net.DNSError); ok {
		b |= tDNS
	}
	for i := range sentinels {
		if typecache.SameType(err, sentinels[i].err) {
			b |= tSentinel
		}
	}
	return b
}

// typeCache holds typeBits's answers, one type a slot (see
// typecache.Cache): practice meets a dozen types, so after the first call
// of each no answer is computed again and nothing is allocated.
var typeCache typecache.Cache

// typeBitsOf is typeBits(err), computed once per dynamic type.
func typeBitsOf(err error) uint8 { return uint8(typeCache.Bits(err, typeBits32)) }

func typeBits32(err error) uint32 { return uint32(typeBits(err)) }

// errno records what a system error number says.
func (f *facts) errno(e syscall.Errno) {
	switch e {
	case syscall.ECONNREFUSED:
		f.bits |= factRefused
	case syscall.ECONNRESET, syscall.EPIPE, syscall.ECONNABORTED:
		f.bits |= factReset
	}
	f.netError(e.Timeout) // an Errno is a net.Error
}

// netError records a net.Error's timeout: only the first one met counts,
// as errors.As would find it.
func (f *facts) netError(timeout func() bool) {
	if !f.netSeen {
		f.netSeen = true
		if timeout() {
			f.bits |= factTimeout
		}
	}
}
