// Package errsample lists the errors a classifier meets in practice, for the
// classifiers' benchmarks and for the tests that hold their verdicts still:
// the network failures the standard library reports, the context and
// database/sql sentinels, each bare, wrapped by fmt.Errorf and wrapped by the
// caller's own wrapper. Standard library only; tests add their engine's
// error types.
package errsample

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
)

// Case is one named error.
type Case struct {
	Name string
	Err  error
}

// netErr is what a net.Conn's Read, Write or Dial returns for errno.
func netErr(op, syscallName string, errno syscall.Errno) error {
	return &net.OpError{Op: op, Net: "tcp", Err: os.NewSyscallError(syscallName, errno)}
}

// Neutral returns the engine-neutral errors of practice: each network
// failure a driver passes up from net, io's end-of-stream errors, the
// context errors, the database/sql sentinels and a foreign error.
func Neutral() []Case {
	return []Case{
		{"net-reset", netErr("read", "read", syscall.ECONNRESET)},
		{"net-epipe", netErr("write", "write", syscall.EPIPE)},
		{"net-refused", netErr("dial", "connect", syscall.ECONNREFUSED)},
		{"net-timeout", &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}},
		{"net-closed", &net.OpError{Op: "write", Net: "tcp", Err: net.ErrClosed}},
		{"dns", &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: "db", IsNotFound: true}}},
		{"eof", io.EOF},
		{"unexpected-eof", io.ErrUnexpectedEOF},
		{"canceled", context.Canceled},
		{"deadline", context.DeadlineExceeded},
		{"bad-conn", driver.ErrBadConn},
		{"conn-done", sql.ErrConnDone},
		{"foreign", errors.New("boom")},
	}
}

// Wrapped returns each case bare, wrapped once by fmt.Errorf ("fmt/" name),
// and wrapped by each of wrappers (its name, "/" name).
func Wrapped(cases []Case, wrappers ...Wrapper) []Case {
	out := make([]Case, 0, len(cases)*(2+len(wrappers)))
	for _, c := range cases {
		out = append(out, c, Case{"fmt/" + c.Name, fmt.Errorf("query: %w", c.Err)})
		for _, w := range wrappers {
			out = append(out, Case{w.Name + "/" + c.Name, w.Wrap(c.Err)})
		}
	}
	return out
}

// Wrapper is a caller's own wrapping, such as an outer sqlretry.Error.
type Wrapper struct {
	Name string
	Wrap func(error) error
}

// Check compares each case's verdict, as describe writes it, with the golden
// file at path, one "name: verdict" line a case, so that a change to a
// classifier's speed cannot change a verdict unseen. With
// SQLRETRY_UPDATE_GOLDEN=1 it writes the file instead.
func Check(t testing.TB, path string, cases []Case, describe func(error) string) {
	t.Helper()
	var b strings.Builder
	for _, c := range cases {
		b.WriteString(c.Name + ": " + describe(c.Err) + "\n")
	}
	if os.Getenv("SQLRETRY_UPDATE_GOLDEN") == "1" {
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (SQLRETRY_UPDATE_GOLDEN=1 writes it)", err)
	}
	got := strings.Split(b.String(), "\n")
	for i, w := range strings.Split(string(want), "\n") {
		if i >= len(got) || got[i] != w {
			g := "(none)"
			if i < len(got) {
				g = got[i]
			}
			t.Errorf("%s:%d: got\n\t%s\nwant\n\t%s", path, i+1, g, w)
		}
	}
	if len(got) > len(strings.Split(string(want), "\n")) {
		t.Errorf("%s: %d verdicts, the file has fewer", path, len(got))
	}
}
