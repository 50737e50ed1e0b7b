// Package codes holds what the engine classifiers (postgres, mysql, mssql,
// sqlite) share: the verdict when an error's own methods panic, and the
// checks and messages of their code look-ups. Standard library and the
// root package only.
package codes

import (
	"errors"
	"net"
	"os"
	"slices"
	"strconv"
	"sync/atomic"
	"syscall"

	sr "github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/internal/typecache"
)

// TypeCache is typecache.Cache, which the engine classifiers keep their
// answers per type of error in.
type TypeCache = typecache.Cache

// Panicked is the verdict when the error's own methods panic while it is
// classified: not retried, outcome unknown.
var Panicked = sr.Class{Phase: sr.Unknown, Code: "panic", Reason: "the error's methods panicked while being classified: not retried"}

// Recover, deferred by a classifier, turns a panic of the error's own
// methods into the verdict Panicked, so a classifier never panics.
func Recover(c *sr.Class) {
	if recover() != nil {
		*c = Panicked
	}
}

// Quote quotes a code for an error message, cut after 40 bytes.
func Quote(s string) string {
	if len(s) > 40 {
		s = s[:40] + "..."
	}
	return strconv.Quote(s)
}

// Itoa is strconv.FormatInt(n, 10) for an error number a table does not
// list, which a classifier puts in its verdict's Code: the text is kept in
// a small cache, so that a number met again, as a failing program meets
// the same one over and over, costs no allocation. Safe for concurrent
// use.
func Itoa(n int64) string {
	slot := &numberTexts[uint64(n)%uint64(len(numberTexts))]
	if e := slot.Load(); e != nil && e.n == n {
		return e.s
	}
	e := &numberText{n: n, s: strconv.FormatInt(n, 10)}
	slot.Store(e)
	return e.s
}

type numberText struct {
	n int64
	s string
}

// numberTexts is Itoa's cache, one number a slot: 256 numbers at most, the
// last met in each slot.
var numberTexts [256]atomic.Pointer[numberText]

// A Number describes an engine's decimal error numbers, for ValidCode.
type Number struct {
	What    string // "MySQL error number"
	Example string // "1213"
	Min     int64
	Max     int64
	Signed  bool // a leading minus sign is allowed (SQL Server's -2)
}

// Parse reads code as a Number, or says what is wrong with it.
func (n Number) Parse(code string) (int64, error) {
	if code == "" {
		return 0, errors.New(n.What + " is empty; want a number like " + n.Example)
	}
	digits := code
	if n.Signed && digits[0] == '-' {
		digits = digits[1:]
	}
	if digits == "" {
		return 0, errors.New(n.What + " " + Quote(code) + " has no digits; want a number like " + n.Example)
	}
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			sign := ""
			if n.Signed {
				sign = ", optionally after a minus sign"
			}
			return 0, errors.New(n.What + " " + Quote(code) + " must be decimal digits" + sign + ", like " + n.Example)
		}
	}
	v, err := strconv.ParseInt(code, 10, 64)
	if err != nil || v < n.Min || v > n.Max {
		return 0, errors.New(n.What + " " + Quote(code) + " is out of range (" + strconv.FormatInt(n.Min, 10) + " to " + strconv.FormatInt(n.Max, 10) + ")")
	}
	return v, nil
}

// Tag sets the Kind of a retryable verdict: Contention when contention says
// its code is one of lock contention, Unavailable otherwise. A verdict that
// is not retryable keeps KindUnknown.
func Tag(c sr.Class, contention func(code string) bool) sr.Class {
	switch {
	case !c.Retryable:
	case contention(c.Code):
		c.Kind = sr.Contention
	default:
		c.Kind = sr.Unavailable
	}
	return c
}

// TagIn is Tag on *c, in place. Every engine classifier has the same
// frame: nil gets the neutral verdict of nil, a panic of the error's own
// methods the verdict Panicked (Recover), a retryable verdict its Kind
// (TagIn). It writes its verdict through a pointer: a Class returned by
// value is copied at every level it passes through (~45 instructions
// each, and a stall where a copy reads what byte writes just stored:
// 130 → 90 ns for a wrapped pgconn connect error, measured).
func TagIn(c *sr.Class, contention func(code string) bool) {
	if c.Retryable {
		if contention(c.Code) {
			c.Kind = sr.Contention
		} else {
			c.Kind = sr.Unavailable
		}
	}
}

// File files c, tagged with its Kind (see Tag), under n in byNumber and
// returns the tagged verdict. A number already filed panics with what
// (`mysql: error number 1213`) "listed twice": the tables are written by
// hand, and a number listed twice would silently shadow one of its rows.
func File[N comparable](byNumber map[N]sr.Class, n N, c sr.Class, contention func(code string) bool, what string) sr.Class {
	if _, dup := byNumber[n]; dup {
		panic(what + " listed twice")
	}
	c = Tag(c, contention)
	byNumber[n] = c
	return c
}

// Lookup is an engine's Lookup of a bare code, as the command sees it: the
// verdict find gives on the number parse reads (ok false when the table
// does not list it), or, when parse refuses the code, a verdict that says
// the code is malformed (what: "error number").
func Lookup[N any](code string, parse func(string) (N, error), what string, find func(N) (sr.Class, bool)) (sr.Class, bool) {
	n, err := parse(code)
	if err != nil {
		return sr.Class{Phase: sr.Unknown, Code: code, Reason: "malformed " + what}, false
	}
	return find(n)
}

// AsOne is errors.As's test of one error of a tree for an interface type
// T, for a classifier that walks the tree once with
// sr.ClassifyNeutralVisit: match's type assertion (`e, ok := err.(T)`,
// outside generic code: there the runtime caches the assertion at its call
// site, where errors.AsType's generic one looks T's method table up again
// at every link), then the error's own As method, as errors.As tries each
// error. T must be a driver error's interface, which none of the network
// error types implements (TestAsPassesThroughNetworkErrors).
func AsOne[T any](err error, match func(error) (T, bool)) (T, bool) {
	if e, ok := match(err); ok {
		return e, true
	}
	if x, ok := err.(interface{ As(any) bool }); ok {
		p := new(T)
		if x.As(p) {
			return *p, true
		}
	}
	var zero T
	return zero, false
}

// IsOne is errors.Is's test of one error of a tree (see AsOne).
func IsOne(err, target error) bool {
	if err == target {
		return true
	}
	x, ok := err.(interface{ Is(error) bool })
	return ok && x.Is(target)
}

// Is is errors.Is (see walk). Target must not be one of the four errors
// syscall.Errno.Is matches (fs.ErrPermission, fs.ErrExist, fs.ErrNotExist,
// errors.ErrUnsupported).
func Is(err, target error) bool {
	return walk(err, func(err error) bool { return IsOne(err, target) })
}

// walk visits err's tree depth first, as errors.Is and errors.As do, until
// visit reports a match. It passes through the types a network failure is
// made of (*net.OpError, *os.SyscallError, syscall.Errno) and the Policy's
// *sr.Error without visiting them: none of them is a sentinel a classifier
// looks for, or has an Is or As method that could match one, and reading
// *sr.Error's two causes in Unwrap's order spares the slice its Unwrap
// allocates.
func walk(err error, visit func(error) bool) bool {
	for err != nil {
		switch e := err.(type) {
		case *net.OpError:
			err = e.Err
		case *os.SyscallError:
			err = e.Err
		case syscall.Errno:
			return false
		case *sr.Error:
			return walk(e.Cause, visit) || walk(e.Err, visit)
		default:
			if visit(err) {
				return true
			}
			switch x := err.(type) {
			case interface{ Unwrap() error }:
				err = x.Unwrap()
			case interface{ Unwrap() []error }:
				return slices.ContainsFunc(x.Unwrap(), func(e error) bool { return walk(e, visit) })
			default:
				return false
			}
		}
	}
	return false
}

// Methods found by MethodBits, for AsOneBits and IsOneBits.
const (
	HasAs uint32 = 1 << iota // As(any) bool
	HasIs                    // Is(error) bool
	// The bits from here on are the caller's own.
	FirstFree
)

// MethodBits is the part of a TypeCache compute that AsOneBits and IsOneBits
// read.
func MethodBits(err error) uint32 {
	var b uint32
	if _, ok := err.(interface{ As(any) bool }); ok {
		b |= HasAs
	}
	if _, ok := err.(interface{ Is(error) bool }); ok {
		b |= HasIs
	}
	return b
}

// AsOneBits is AsOne with err's MethodBits known: the As method is asked
// only of a type that has one.
func AsOneBits[T any](err error, bits uint32, match func(error) (T, bool)) (T, bool) {
	if e, ok := match(err); ok {
		return e, true
	}
	if bits&HasAs != 0 {
		p := new(T)
		if err.(interface{ As(any) bool }).As(p) {
			return *p, true
		}
	}
	var zero T
	return zero, false
}

// IsOneBits is IsOne with err's MethodBits known.
func IsOneBits(err error, bits uint32, target error) bool {
	return err == target || bits&HasIs != 0 && err.(interface{ Is(error) bool }).Is(target)
}
