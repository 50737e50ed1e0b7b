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
