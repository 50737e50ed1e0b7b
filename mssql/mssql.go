package mssql

import (
	"cmp"
	"reflect"
	"slices"
	"strconv"
	"sync/atomic"

	sr "github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/internal/codes"
)

// Entry is one row of the classification table.
type Entry struct {
	// Code is the error number as text: "1205", "-2".
	Code string
	// Number is the error number.
	Number int32
	// Class is the verdict for the number as SQL Server sends it, which is
	// what [Lookup] reads. For a number no server message has (20, 64, 997,
	// 10060: SqlClient's own network errors), it is Network.
	Class sr.Class
	// Source says where the verdict comes from; several lists may agree.
	Source string
	// Network is set (its Code is not empty) for the numbers Microsoft's
	// SqlClient stamps on its own client-side network errors, at class 20.
	// It is the verdict [Classify] gives such a number only when the error
	// came with class 20 or above; below that the number is the server's
	// (Class, or for a number no server message has, the severity rules).
	// go-mssqldb reports only server errors, so through it the network
	// verdict is never met.
	Network sr.Class
}

// userDefined is the first number of RAISERROR/THROW's application range.
const userDefined = 50000

// The behaviour methods go-mssqldb's mssql.Error exports ("so callers can
// check ... without having to import this package directly").
type (
	numberer interface {
		error
		SQLErrorNumber() int32
	}
	severitier interface{ SQLErrorClass() uint8 }
)

var (
	byNumber  = map[int32]sr.Class{} // what Lookup reads
	byNetwork = map[int32]sr.Class{} // SqlClient's network numbers, at class 20 and above
	byServer  = map[int32]sr.Class{} // the server's message with a network number
	rows      []Entry                // sorted by Number
)

func init() {
	for _, b := range blocks {
		src := b.sources[0]
		for _, s := range b.sources[1:] {
			src += "; " + s
		}
		for _, r := range b.rows {
			code := strconv.Itoa(int(r.n))
			c := sr.Class{Retryable: b.retryable, Phase: r.phase, Code: code, Reason: r.reason, MinDelay: minDelay[r.n]}
			if !b.retryable {
				c.Reason += ": permanent"
			}
			c = codes.File(byNumber, r.n, c, contention, "mssql: error number "+code)
			rows = append(rows, Entry{Code: code, Number: r.n, Class: c, Source: src})
		}
	}
	for _, r := range network {
		code := strconv.Itoa(int(r.n))
		if _, dup := byNumber[r.n]; dup {
			panic("mssql: error number " + code + " listed twice")
		}
		src := "at class 20 and above, SqlClient's client-side network error: " + srcSNI
		for _, s := range r.sources {
			src += "; " + s
		}
		net := sr.Class{Retryable: true, Phase: r.phase, Code: code, Reason: r.reason + " (SqlClient's network error, class 20)", Kind: sr.Unavailable}
		byNetwork[r.n] = net
		e := Entry{Code: code, Number: r.n, Class: net, Source: src, Network: net}
		if m := r.server; m != nil {
			e.Class = sr.Class{Phase: sr.NotApplied, Code: code, Reason: m.text + " (server message, severity " + strconv.Itoa(int(m.severity)) + "): permanent"}
			e.Source = "below class 20, the server's message: " + m.source + "; " + src
			byServer[r.n] = e.Class
		}
		byNumber[r.n] = e.Class
		rows = append(rows, e)
	}
	slices.SortFunc(rows, func(a, b Entry) int { return cmp.Compare(a.Number, b.Number) })
	for n, c := range byNumber {
		v := &numberVerdicts{number: c}
		v.net, v.isNet = byNetwork[n]
		v.server, v.hasServer = byServer[n]
		byNumberAll[n] = v
	}
	userDefinedClass = byNumber[userDefined]
}

// numberVerdicts is what byNumber, byNetwork and byServer hold for one
// number, so that verdict looks a number up once, not twice (a map look-up
// is ~100 instructions).
type numberVerdicts struct {
	number, net, server sr.Class
	isNet, hasServer    bool
}

var (
	byNumberAll      = map[int32]*numberVerdicts{}
	userDefinedClass sr.Class // byNumber[userDefined]
)

// Classifier is the SQL Server [sr.Classifier] for go-mssqldb: pass it as
// sqlretry.Config.Classifier. It is safe for concurrent use.
var Classifier sr.Classifier = sr.ClassifierFunc(Classify)

// Classify gives SQL Server's verdict on err. It reads the error number
// through the SQLErrorNumber() method go-mssqldb's mssql.Error exports, and
// its class (severity) through SQLErrorClass(); when the last error the
// server sent is not retryable it also looks at the earlier ones in
// mssql.Error.All, as EF Core walks every SqlError. The numbers SqlClient
// stamps on its own network errors (see [Entry].Network) count as network
// errors only at class 20 and above: below that they are the server's
// messages with the same numbers, permanent errors (121, 203, 233, 10053,
// 10054, 11001). An unlisted number is judged by its severity: 13
// (deadlock) is retryable and not applied, 20 and above (fatal, the
// connection is severed) is not retried with an unknown outcome, the rest
// is permanent. driver.ErrBadConn, which go-mssqldb's RetryableError
// matches, is retryable and not sent. Anything else goes to
// [sr.ClassifyNeutral]. It never panics.
func Classify(err error) (c sr.Class) {
	// The classifiers' frame, with the verdict written through a pointer
	// (see codes.TagIn).
	if err == nil {
		return sr.ClassifyNeutral(nil)
	}
	defer codes.Recover(&c)
	classify(err, &c)
	codes.TagIn(&c, contention)
	return c
}

func classify(err error, c *sr.Class) {
	// One walk of the tree finds the first numbered error (errors.As) and
	// the neutral verdict.
	var (
		e     numberer
		found bool
	)
	*c = sr.ClassifyNeutralVisit(err, func(x error, _ bool) bool {
		tb := types.Bits(x, typeBits)
		if tb&(tNumberer|codes.HasAs) == 0 {
			return false
		}
		e, found = codes.AsOneBits(x, tb, asNumberer)
		return found // it decides, whatever follows
	})
	if found {
		n := e.SQLErrorNumber()
		var sev uint8
		if s, ok := e.(severitier); ok {
			sev = s.SQLErrorClass()
		}
		listed := verdict(n, sev, c)
		if listed && c.Retryable {
			return
		}
		if retryableInAll(e, c) || listed {
			return
		}
		*c = bySeverity(n, sev)
		return
	}
	if c.Code == "bad-conn" {
		c.Reason = "driver.ErrBadConn (go-mssqldb RetryableError): the request was not sent; from Commit, the transaction was not committed, so re-run it whole"
	}
}

// tNumberer: the type is a numberer, after codes.HasAs.
const tNumberer = codes.FirstFree

// types keeps typeBits for each type of error met.
var types codes.TypeCache

// typeBits answers, from err's dynamic type alone, what the walk asks of it.
func typeBits(err error) uint32 {
	b := codes.MethodBits(err)
	if _, ok := err.(numberer); ok {
		b |= tNumberer
	}
	return b
}

func asNumberer(err error) (numberer, bool) { e, ok := err.(numberer); return e, ok }

// verdict finds the listed verdict on number n sent with class sev, into
// *c: a network number's at class 20 and above, else the server's. It
// reports whether the number is listed; *c is left alone when not.
func verdict(n int32, sev uint8, c *sr.Class) bool {
	v, ok := byNumberAll[n]
	switch {
	case ok && v.isNet:
		if sev >= fatalClass {
			*c = v.net
			return true
		}
		if v.hasServer {
			*c = v.server
		}
		return v.hasServer // no server message: judged by severity
	case ok:
		*c = v.number
		return true
	}
	u, ok := userDefinedNumber(n)
	if ok {
		*c = u
	}
	return ok
}

// lookupNumber finds a listed number, the user-defined range included.
func lookupNumber(n int32) (sr.Class, bool) {
	if c, ok := byNumber[n]; ok {
		return c, true
	}
	return userDefinedNumber(n)
}

// userDefinedNumber is the verdict on an unlisted number: the user-defined
// range's, or none.
func userDefinedNumber(n int32) (sr.Class, bool) {
	if n >= userDefined {
		c := userDefinedClass
		c.Code = codes.Itoa(int64(n))
		return c, true
	}
	return sr.Class{}, false
}

// bySeverity judges an unlisted number by the TDS class (severity) it came
// with (r2dbc-mssql's fallback, and the Database Engine error severities
// page: https://learn.microsoft.com/sql/relational-databases/errors-events/database-engine-error-severities).
func bySeverity(n int32, sev uint8) sr.Class {
	code := codes.Itoa(int64(n))
	switch {
	case sev == 13:
		return sr.Class{Retryable: true, Phase: sr.NotApplied, Code: code, Reason: "severity 13, transaction deadlock: the transaction was rolled back; re-run it whole"}
	case sev >= 20:
		return sr.Class{Phase: sr.Unknown, Code: code, Reason: "fatal severity: the server severed the connection; in-flight work may have been applied; not retried"}
	}
	return sr.Class{Phase: sr.NotApplied, Code: code, Reason: "error number not listed as transient: not retried"}
}

// retryableInAll looks through mssql.Error.All (every error the server sent,
// first to last) for a retryable number, and writes its verdict to *c when
// it finds one. It reads the field by reflection so as not to import
// go-mssqldb, and runs only when the last error is not retryable.
func retryableInAll(e error, c *sr.Class) bool {
	v := reflect.ValueOf(e)
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return false
		}
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct {
		return false
	}
	l := layoutOf(v.Type())
	if l.all == nil {
		return false
	}
	all := v.FieldByIndex(l.all)
	if all.Len() < 2 || l.number == nil {
		return false
	}
	var found sr.Class
	for i := 0; i < all.Len(); i++ {
		el := all.Index(i)
		var sev uint8
		if l.class != nil {
			sev = uint8(el.FieldByIndex(l.class).Uint())
		}
		if verdict(int32(el.FieldByIndex(l.number).Int()), sev, &found) && found.Retryable {
			*c = found
			return true
		}
	}
	return false
}

// allLayout is where an error struct type keeps what retryableInAll reads:
// all, the index of a slice field All (nil if there is none); number and
// class, of the integer fields Number and Class of its elements, which must
// be structs (nil if absent or of another kind).
type allLayout struct {
	t                  reflect.Type
	all, number, class []int
}

// lastLayout is the layout of the last type retryableInAll read: in
// practice go-mssqldb's Error alone, so FieldByName runs once, not for
// every error and every element.
var lastLayout atomic.Pointer[allLayout]

func layoutOf(t reflect.Type) *allLayout {
	if l := lastLayout.Load(); l != nil && l.t == t {
		return l
	}
	l := &allLayout{t: t}
	if f, ok := t.FieldByName("All"); ok && f.Type.Kind() == reflect.Slice {
		l.all = f.Index
		if el := f.Type.Elem(); el.Kind() == reflect.Struct {
			if n, ok := el.FieldByName("Number"); ok && canInt(n.Type.Kind()) {
				l.number = n.Index
			}
			if c, ok := el.FieldByName("Class"); ok && canUint(c.Type.Kind()) {
				l.class = c.Index
			}
		}
	}
	lastLayout.Store(l)
	return l
}

func canInt(k reflect.Kind) bool { return k >= reflect.Int && k <= reflect.Int64 }
func canUint(k reflect.Kind) bool {
	return k >= reflect.Uint && k <= reflect.Uintptr
}

// Lookup returns SQL Server's verdict on a bare error number, as the command
// sees it: ok is false when the number is not listed (it is then not
// retryable) or malformed (see [ValidCode]). A bare number carries no
// severity, so the severity rules of [Classify] do not apply: a number that
// is both a server message and one of SqlClient's network errors is read as
// the server's (what go-mssqldb reports), and [Entry].Network gives the
// other reading.
func Lookup(code string) (sr.Class, bool) {
	return codes.Lookup(code, parse, "error number", func(n int32) (sr.Class, bool) {
		if c, ok := lookupNumber(n); ok {
			return codes.Tag(c, contention), true
		}
		return sr.Class{Phase: sr.NotApplied, Code: strconv.Itoa(int(n)), Reason: "error number not listed as transient: not retried"}, false
	})
}

// contention reports whether an error number is one of lock contention:
// a deadlock victim (1205), a lock request timeout (1222), a snapshot
// isolation update conflict (3960), and In-Memory OLTP's validation and
// dependency failures (41301, 41302, 41305, 41325, 41839) (SQL Server
// database engine errors; "Transactions with memory-optimized tables").
func contention(code string) bool {
	switch code {
	case "1205", "1222", "3960", "41301", "41302", "41305", "41325", "41839":
		return true
	}
	return false
}

// ValidCode reports why code is not a well-formed SQL Server error number
// (a decimal int32, optionally negative like SqlClient's -2), or nil.
func ValidCode(code string) error {
	_, err := parse(code)
	return err
}

var number = codes.Number{What: "SQL Server error number", Example: "1205 or -2", Min: -1 << 31, Max: 1<<31 - 1, Signed: true}

func parse(code string) (int32, error) {
	n, err := number.Parse(code)
	return int32(n), err
}

// Table returns the whole table sorted by number: a fresh copy each call.
func Table() []Entry { return slices.Clone(rows) }
