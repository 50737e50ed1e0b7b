package codes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"

	sr "github.com/sqlretry/sqlretry"
)

func TestNumberParse(t *testing.T) {
	n := Number{What: "X error number", Example: "1205", Min: -5, Max: 9000, Signed: true}
	for code, want := range map[string]string{
		"":                     "is empty",
		"-":                    "has no digits",
		"12a":                  "must be decimal digits, optionally after a minus sign",
		"9001":                 "is out of range (-5 to 9000)",
		"-6":                   "is out of range",
		"99999999999999999999": "is out of range",
	} {
		if _, err := n.Parse(code); err == nil || !strings.Contains(err.Error(), want) || !strings.HasPrefix(err.Error(), "X error number") {
			t.Errorf("Parse(%q) = %v, want an error saying %q", code, err, want)
		}
	}
	if v, err := n.Parse("-2"); err != nil || v != -2 {
		t.Errorf("Parse(-2) = %d, %v", v, err)
	}
	if _, err := (Number{What: "Y", Example: "1", Max: 9}).Parse("-1"); err == nil || strings.Contains(err.Error(), "minus") {
		t.Errorf("unsigned Parse(-1) = %v, want an error that does not offer a minus sign", err)
	}
}

func TestRecover(t *testing.T) {
	classify := func() (c sr.Class) {
		defer Recover(&c)
		panic("boom")
	}
	if got := classify(); got != Panicked {
		t.Errorf("got %+v, want Panicked", got)
	}
}

func TestFile(t *testing.T) {
	byNumber := map[int]sr.Class{}
	contention := func(code string) bool { return code == "1" }
	got := File(byNumber, 1, sr.Class{Retryable: true, Code: "1"}, contention, "x: number 1")
	if got.Kind != sr.Contention || byNumber[1] != got {
		t.Errorf("File = %+v, filed %+v; want the verdict tagged Contention and filed", got, byNumber[1])
	}
	defer func() {
		if r := recover(); r != "x: number 1 listed twice" {
			t.Errorf("a number filed twice: recovered %v, want a panic naming it", r)
		}
	}()
	File(byNumber, 1, sr.Class{}, contention, "x: number 1")
}

func TestLookup(t *testing.T) {
	parse := func(code string) (int, error) {
		if code == "bad" {
			return 0, errors.New("bad")
		}
		return len(code), nil
	}
	find := func(n int) (sr.Class, bool) { return sr.Class{Code: strconv.Itoa(n)}, n == 3 }
	if c, ok := Lookup("abc", parse, "error number", find); !ok || c.Code != "3" {
		t.Errorf("Lookup(abc) = %+v, %v, want find's verdict on 3, true", c, ok)
	}
	if c, ok := Lookup("ab", parse, "error number", find); ok || c.Code != "2" {
		t.Errorf("Lookup(ab) = %+v, %v, want find's verdict on 2, false", c, ok)
	}
	want := sr.Class{Phase: sr.Unknown, Code: "bad", Reason: "malformed error number"}
	if c, ok := Lookup("bad", parse, "error number", find); ok || c != want {
		t.Errorf("Lookup(bad) = %+v, %v, want %+v, false", c, ok, want)
	}
}

// The interfaces the engine classifiers look for with As.
type (
	sqlStater interface {
		error
		SQLState() string
	}
	safeToRetrier interface{ SafeToRetry() bool }
	numberer      interface{ SQLErrorNumber() int32 }
	coder         interface{ Code() int }
)

// TestAsPassesThroughNetworkErrors: the types As passes through implement
// none of the driver interfaces the classifiers look for, and no As method.
func TestAsPassesThroughNetworkErrors(t *testing.T) {
	for _, e := range []any{&net.OpError{}, &os.SyscallError{}, syscall.ECONNRESET, &sr.Error{}} {
		_, a := e.(sqlStater)
		_, b := e.(safeToRetrier)
		_, c := e.(numberer)
		_, d := e.(coder)
		_, f := e.(interface{ As(any) bool })
		if a || b || c || d || f {
			t.Errorf("%T implements an interface As looks for: it must not pass through it", e)
		}
	}
}

type stater struct{ error }

func (stater) SQLState() string { return "40001" }

// TestAsFindsWhatErrorsAsFinds: As and errors.AsType agree on chains and
// trees that hold a match behind the types As passes through, or none.
func TestAsFindsWhatErrorsAsFinds(t *testing.T) {
	match := func(err error) (sqlStater, bool) { s, ok := err.(sqlStater); return s, ok }
	hit := stater{errors.New("x")}
	for _, err := range []error{
		hit,
		&net.OpError{Op: "read", Err: os.NewSyscallError("read", syscall.ECONNRESET)},
		&net.OpError{Op: "read", Err: hit},
		&sr.Error{Err: hit, Cause: sr.ErrRetriesExhausted},
		&sr.Error{Cause: hit},
		errors.Join(syscall.EPIPE, hit),
		&os.SyscallError{Err: fmt.Errorf("w: %w", hit)},
	} {
		want, wok := errors.AsType[sqlStater](err)
		got, ok := As(err, match)
		if ok != wok || got != want {
			t.Errorf("As(%v) = %v, %v, want %v, %v", err, got, ok, want, wok)
		}
	}
}

// TestIsFindsWhatErrorsIsFinds: Is and errors.Is agree on chains and trees
// around the types Is passes through.
func TestIsFindsWhatErrorsIsFinds(t *testing.T) {
	target := errors.New("target")
	for _, err := range []error{
		target, io.EOF, context.Canceled,
		&net.OpError{Op: "read", Err: os.NewSyscallError("read", syscall.ECONNRESET)},
		&net.OpError{Op: "read", Err: fmt.Errorf("w: %w", target)},
		&net.OpError{Op: "read", Err: context.Canceled},
		&sr.Error{Err: target, Cause: sr.ErrRetriesExhausted},
		&sr.Error{Err: io.EOF, Cause: context.Canceled},
		errors.Join(syscall.EPIPE, target),
		&os.SyscallError{Err: target},
	} {
		for _, tg := range []error{target, context.Canceled, context.DeadlineExceeded} {
			if got, want := Is(err, tg), errors.Is(err, tg); got != want {
				t.Errorf("Is(%v, %v) = %v, want %v", err, tg, got, want)
			}
		}
	}
}

// Itoa spells every number as strconv does, a number met again from its
// cache, and two numbers that share a slot each as itself.
func TestItoa(t *testing.T) {
	for _, n := range []int64{0, 7, 9999, -2, 50001, 9999 + 256, 9999, 1<<31 - 1, -1 << 31} {
		if got, want := Itoa(n), strconv.FormatInt(n, 10); got != want {
			t.Errorf("Itoa(%d) = %q, want %q", n, got, want)
		}
	}
	Itoa(123456)
	if n := testing.AllocsPerRun(10, func() { _ = Itoa(123456) }); n != 0 {
		t.Errorf("Itoa of a number met before: %v allocations, want 0", n)
	}
}
