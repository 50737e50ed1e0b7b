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
