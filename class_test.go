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

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

func TestClassifyNeutral(t *testing.T) {
	cases := []struct {
		name      string
		err       error
		retryable bool
		phase     Phase
		code      string
	}{
		{"bad conn", driver.ErrBadConn, true, NotSent, "bad-conn"},
		{"wrapped bad conn", fmt.Errorf("pgx: %w", driver.ErrBadConn), true, NotSent, "bad-conn"},
		{"dial", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, true, NotSent, "dial"},
		{"dns", &net.DNSError{Err: "no such host", Name: "db"}, true, NotSent, "dns"},
		{"refused", fmt.Errorf("x: %w", syscall.ECONNREFUSED), true, NotSent, "conn-refused"},
		{"read timeout", &net.OpError{Op: "read", Net: "tcp", Err: &os.SyscallError{Syscall: "read", Err: timeoutErr{}}}, true, Unknown, "net-timeout"},
		{"net timeout", timeoutErr{}, true, Unknown, "net-timeout"},
		{"unexpected eof", io.ErrUnexpectedEOF, true, Unknown, "eof"},
		{"reset", &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}, true, Unknown, "conn-reset"},
		{"broken pipe", fmt.Errorf("write: %w", syscall.EPIPE), true, Unknown, "conn-reset"},
		{"conn done", sql.ErrConnDone, false, NotSent, "client-state"},
		{"tx done", sql.ErrTxDone, false, NotSent, "client-state"},
		{"skip", driver.ErrSkip, false, NotSent, "driver-skip"},
		{"canceled", context.Canceled, false, Unknown, "context"},
		{"foreign", errors.New("something else"), false, Unknown, ""},
		{"joined", errors.Join(errors.New("a"), driver.ErrBadConn), true, NotSent, "bad-conn"},
		{"nil", nil, false, NotApplied, ""},
	}
	for _, tc := range cases {
		c := ClassifyNeutral(tc.err)
		if c.Retryable != tc.retryable || c.Phase != tc.phase || c.Code != tc.code {
			t.Errorf("%s: got {%v %v %q}, want {%v %v %q}", tc.name, c.Retryable, c.Phase, c.Code, tc.retryable, tc.phase, tc.code)
		}
		if c.Reason == "" {
			t.Errorf("%s: empty Reason", tc.name)
		}
	}
}

func TestPhaseStrings(t *testing.T) {
	for _, p := range []Phase{Unknown, NotSent, NotApplied} {
		got, err := ParsePhase(p.String())
		if err != nil || got != p {
			t.Errorf("ParsePhase(%q) = %v, %v", p.String(), got, err)
		}
	}
	if Phase(0) != Unknown {
		t.Error("the zero Phase must be Unknown")
	}
	if _, err := ParsePhase("maybe"); err == nil {
		t.Error("ParsePhase accepted maybe")
	}
}

// ClassifyNeutralVisit shows an engine classifier each error of the tree in
// errors.As's order, but the network types and *Error (and the Policy's own
// cause inside it), says which are on the single-Unwrap chain, gives the
// neutral verdict, and ends the walk where visit says so.
func TestClassifyNeutralVisitShowsTheTreeInAsOrder(t *testing.T) {
	e1, e2, e3 := errors.New("e1"), errors.New("e2"), errors.New("e3")
	inner := fmt.Errorf("b: %w", e2)
	joined := errors.Join(e1, inner)
	reset := &net.OpError{Op: "read", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
	outer := fmt.Errorf("a: %w", &Error{Cause: ErrRetriesExhausted, Err: fmt.Errorf("c: %w", joined)})
	top := fmt.Errorf("top: %w", reset)
	tree := errors.Join(outer, top, e3)
	type seen struct {
		err   error
		chain bool
	}
	root := fmt.Errorf("root: %w", tree)
	var got []seen
	cl := ClassifyNeutralVisit(root, func(err error, chain bool) bool {
		got = append(got, seen{err, chain})
		return false
	})
	if want := ClassifyNeutral(root); cl != want {
		t.Errorf("verdict %+v, want ClassifyNeutral's %+v", cl, want)
	}
	var want []seen
	var walk func(error, bool)
	walk = func(err error, chain bool) { // errors.As's order
		switch e := err.(type) {
		case *net.OpError, *os.SyscallError, syscall.Errno:
		case *Error:
			walk(e.Err, false) // its Cause is the Policy's own
			return
		default:
			want = append(want, seen{err, chain})
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			walk(u.Unwrap(), chain)
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				walk(e, false)
			}
		}
	}
	walk(root, true)
	if len(got) != len(want) {
		t.Fatalf("visited %d errors, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("visit %d: %v (chain %v), want %v (chain %v)", i, got[i].err, got[i].chain, want[i].err, want[i].chain)
		}
	}
	// The walk ends where visit says so: e2 is the last error shown.
	n := 0
	ClassifyNeutralVisit(tree, func(err error, _ bool) bool {
		n++
		if err == e3 {
			t.Error("visited e3 after visit stopped the walk at e2")
		}
		return err == e2
	})
	if n == 0 {
		t.Error("visited nothing")
	}
}

// refClassifyNeutral is the engine-neutral walk as it was before it was made
// fast (issue 20), kept as the reference the fast walk must agree with on
// every error.
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

func (isEOF) Error() string { return "is eof" }

func (isEOF) Is(target error) bool { return target == io.EOF }

// netTimeout is a net.Error of a driver's own.
type netTimeout struct{ timeout bool }

func (e netTimeout) Error() string { return "net timeout" }

func (e netTimeout) Timeout() bool { return e.timeout }

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
