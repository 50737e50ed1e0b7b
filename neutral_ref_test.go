package sqlretry

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/sqlretry/sqlretry/internal/errsample"
)

// The engine-neutral walk as it was before issue 20 made it fast, kept as the
// reference the fast walk must agree with on every error.

func refClassifyNeutral(err error) Class {
	if err == nil {
		return ClassifyNeutral(nil)
	}
	var f refFacts
	f.scan(err)
	refBits := [...]uint16{refClientState, refSkip, refContext, refBadConn, refDNS, refDial, refRefused, refTimeout, refEOF, refReset}
	for i, b := range refBits {
		if f.has(b) {
			return neutralVerdicts[i].class
		}
	}
	return Class{Phase: Unknown, Code: "", Reason: "not a known transient error"}
}

// refFacts is what one walk over an error tree found, so ClassifyNeutral reads
// the chain once instead of once per question, and allocates nothing.
type refFacts struct {
	bits    uint16
	netSeen bool // the first net.Error met decides refTimeout, as errors.As would
}

const (
	refClientState uint16 = 1 << iota
	refSkip
	refContext
	refBadConn
	refDNS
	refDial
	refRefused
	refTimeout
	refEOF
	refReset
)

func (f *refFacts) has(b uint16) bool { return f.bits&b != 0 }

// refSentinels are the errors ClassifyNeutral looks for with errors.Is
// semantics: by identity, or by an Is method in the chain.
var refSentinels = [...]struct {
	err error
	bit uint16
}{
	{sql.ErrConnDone, refClientState},
	{sql.ErrTxDone, refClientState},
	{driver.ErrSkip, refSkip},
	{context.Canceled, refContext},
	{context.DeadlineExceeded, refContext},
	{driver.ErrBadConn, refBadConn},
	{io.ErrUnexpectedEOF, refEOF},
	{io.EOF, refEOF},
	{net.ErrClosed, refReset},
}

// scan walks err's tree depth first, as errors.Is and errors.As do.
func (f *refFacts) scan(err error) {
	for depth := 0; err != nil && depth < maxChain; depth++ {
		f.node(err)
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				f.scan(e)
			}
			return
		default:
			return
		}
	}
}

func (f *refFacts) node(err error) {
	is, hasIs := err.(interface{ Is(error) bool })
	for _, s := range refSentinels {
		if err == s.err || (hasIs && is.Is(s.err)) {
			f.bits |= s.bit
		}
	}
	switch e := err.(type) {
	case *net.DNSError:
		f.bits |= refDNS
	case *net.OpError:
		if e.Op == "dial" {
			f.bits |= refDial
		}
	case syscall.Errno:
		switch e {
		case syscall.ECONNREFUSED:
			f.bits |= refRefused
		case syscall.ECONNRESET, syscall.EPIPE, syscall.ECONNABORTED:
			f.bits |= refReset
		}
	}
	if ne, ok := err.(net.Error); ok && !f.netSeen {
		f.netSeen = true
		if ne.Timeout() {
			f.bits |= refTimeout
		}
	}
}

// isEOF matches io.EOF through an Is method, as a driver's error type may.
type isEOF struct{}

func (isEOF) Error() string        { return "is eof" }
func (isEOF) Is(target error) bool { return target == io.EOF }

// netTimeout is a net.Error of a driver's own.
type netTimeout struct{ timeout bool }

func (e netTimeout) Error() string   { return "net timeout" }
func (e netTimeout) Timeout() bool   { return e.timeout }
func (e netTimeout) Temporary() bool { return false }

// broadErrors is every error of practice, and odd shapes around them:
// chains and trees that mix wrappers, Is methods, several net.Errors, and a
// chain deeper than the walk reads.
func broadErrors() []error {
	var leaves []error
	for _, c := range errsample.Neutral() {
		leaves = append(leaves, c.Err)
	}
	for _, e := range []syscall.Errno{syscall.EAGAIN, syscall.ETIMEDOUT, syscall.ECONNABORTED, syscall.ENOENT, syscall.EACCES, syscall.ENOSYS, 0} {
		leaves = append(leaves, e, os.NewSyscallError("read", e), &net.OpError{Op: "read", Err: os.NewSyscallError("read", e)})
	}
	leaves = append(leaves,
		isEOF{}, netTimeout{true}, netTimeout{false}, deadlineErr{}, &verifyErr{err: io.EOF},
		sql.ErrTxDone, driver.ErrSkip, net.ErrClosed, ErrAmbiguous,
		&net.OpError{Op: "dial", Err: netTimeout{true}},
		&net.OpError{Op: "read", Err: netTimeout{false}},
		&net.OpError{Op: "dial"},
		&net.DNSError{Err: "timeout", IsTimeout: true},
		&net.DNSError{Err: "wrapped", UnwrapErr: context.DeadlineExceeded},
		&net.OpError{Op: "read", Err: &net.DNSError{IsTimeout: true}},
		&Error{Err: io.EOF}, &Error{Cause: context.Canceled}, &Error{},
	)
	all := append([]error(nil), leaves...)
	for _, l := range leaves {
		all = append(all,
			fmt.Errorf("a: %w", l),
			fmt.Errorf("a: %w: b: %w", l, io.EOF),
			fmt.Errorf("a: %w: b: %w", netTimeout{false}, l),
			errors.Join(l, driver.ErrBadConn),
			&Error{Err: l, Cause: ErrRetriesExhausted},
			&Error{Err: netTimeout{true}, Cause: l},
			&net.OpError{Op: "write", Err: l},
			&net.OpError{Op: "dial", Err: fmt.Errorf("x: %w", l)},
		)
	}
	deep := io.EOF
	for range 150 {
		deep = fmt.Errorf("w: %w", deep)
	}
	return append(all, deep, &Error{Err: deep})
}

// TestNeutralAgreesWithReference: the fast walk gives the reference walk's
// verdict on every error of the broad table.
func TestNeutralAgreesWithReference(t *testing.T) {
	for _, err := range broadErrors() {
		if got, want := ClassifyNeutral(err), refClassifyNeutral(err); got != want {
			t.Errorf("ClassifyNeutral(%v) = %+v, want %+v", err, got, want)
		}
	}
}

// TestWalkShortcutsHold checks the facts the fast walk's shortcuts rest on,
// so a Go release that changes them fails here: the network error types
// have no Is method, *os.SyscallError is no net.Error, and syscall.Errno's
// Is matches none of the sentinels.
func TestWalkShortcutsHold(t *testing.T) {
	for _, e := range []error{&net.OpError{}, &os.SyscallError{}, &Error{}} {
		if _, ok := e.(interface{ Is(error) bool }); ok {
			t.Errorf("%T has an Is method: the walk's shortcut would skip it", e)
		}
	}
	if _, ok := error(&os.SyscallError{}).(net.Error); ok {
		t.Error("*os.SyscallError is a net.Error: the walk's shortcut would miss its timeout")
	}
	for _, s := range sentinels {
		for e := syscall.Errno(0); e < 256; e++ {
			if e.Is(s.err) {
				t.Errorf("syscall.Errno(%d).Is(%v) is true", e, s.err)
			}
		}
	}
	for i, v := range neutralVerdicts {
		if v.fact != 1<<i {
			t.Errorf("neutralVerdicts[%d] is for fact %#x, want %#x: the table must follow the bits' order", i, v.fact, 1<<i)
		}
	}
}

// TestNodeKnowsEverySentinel: node's switch and the sentinels table list
// the same errors with the same facts.
func TestNodeKnowsEverySentinel(t *testing.T) {
	for _, s := range sentinels {
		var f facts
		f.node(s.err)
		if f.bits&^factTimeout != s.bit {
			t.Errorf("node(%v) found facts %#x, want %#x", s.err, f.bits, s.bit)
		}
	}
}
