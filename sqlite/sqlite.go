package sqlite

import (
	"cmp"
	"errors"
	"reflect"
	"slices"
	"strconv"
	"strings"

	sr "github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/internal/codes"
)

// Entry is one row of the classification table.
type Entry struct {
	// Code is the result code as a decimal number: "517". Lookup also takes
	// the name, Class.Code.
	Code string
	// Number is the result code, primary or extended.
	Number int
	// Class is the verdict; Class.Code is the name, "SQLITE_BUSY_SNAPSHOT".
	Class sr.Class
	// Source says where the verdict comes from.
	Source string
}

// coder is modernc.org/sqlite's *sqlite.Error: Code() is the extended
// result code (modernc turns extended codes on for every connection).
type coder interface {
	error
	Code() int
}

// mattnPkg is github.com/mattn/go-sqlite3's import path; its Error has no
// method to read the code by, so its fields are read by reflection.
const mattnPkg = "github.com/mattn/go-sqlite3"

var (
	byNumber = map[int]sr.Class{}
	byName   = map[string]int{}
	rows     []Entry // sorted by Number
)

func init() {
	for _, e := range entries {
		e.Class = codes.File(byNumber, e.Number, e.Class, contention, "sqlite: result code "+e.Code)
		byName[e.Class.Code] = e.Number
		rows = append(rows, e)
	}
	for n, name := range names {
		byName[name] = n
	}
	slices.SortFunc(rows, func(a, b Entry) int { return cmp.Compare(a.Number, b.Number) })
}

func itoa(n int) string { return strconv.Itoa(n) }

// Classifier is the SQLite [sr.Classifier] for modernc.org/sqlite and
// github.com/mattn/go-sqlite3: pass it as sqlretry.Config.Classifier. It is
// safe for concurrent use.
var Classifier sr.Classifier = sr.ClassifierFunc(Classify)

// Classify gives SQLite's verdict on err: modernc.org/sqlite's errors through
// their Code() method, mattn/go-sqlite3's sqlite3.Error by its fields, read
// by reflection so as not to import it (cgo), and anything else by
// [sr.ClassifyNeutral]. An extended code that is not listed is read as its
// primary code. It never panics.
//
// Every verdict has Ended set: SQLite runs in the caller's process, and both
// drivers return only once the statement has stopped (an interrupted one
// included), so a verify that reads "not applied" afterwards reads a final
// answer and no Fencer is needed.
func Classify(err error) (c sr.Class) {
	classifyFramed(err, &c)
	c.Ended = true
	return c
}

// classifyFramed is the classifiers' frame around classifyIn, with the
// verdict written to *c (see codes.TagIn).
func classifyFramed(err error, c *sr.Class) {
	if err == nil {
		*c = sr.ClassifyNeutral(nil)
		return
	}
	defer codes.Recover(c)
	classifyIn(err, mattnPkg, c)
	codes.TagIn(c, contention)
}

// contention reports whether a result code name is one of lock contention:
// SQLITE_BUSY and SQLITE_LOCKED with their extended codes
// (sqlite.org/rescode.html).
func contention(code string) bool {
	return strings.HasPrefix(code, "SQLITE_BUSY") || strings.HasPrefix(code, "SQLITE_LOCKED")
}

// classify reads a non-nil err, with mattn's import path a parameter, for
// tests; Classify frames it.
func classify(err error, mattn string) (c sr.Class) {
	classifyIn(err, mattn, &c)
	return c
}

// classifyIn is classify written to *c.
func classifyIn(err error, mattn string, c *sr.Class) {
	// One walk of the tree finds the first error with a Code method
	// (errors.As), the first of mattn's types and the neutral verdict.
	var (
		e              coder
		n              int
		found, foundMN bool
	)
	*c = sr.ClassifyNeutralVisit(err, func(x error, _ bool) bool {
		tb := types.Bits(x, typeBits)
		if tb&(tCoder|codes.HasAs) != 0 {
			if e, found = codes.AsOneBits(x, tb, asCoder); found {
				return true // it decides, whatever follows
			}
		}
		// typeBits knows mattn's real package alone (tests pass another).
		if !foundMN && (tb&tMattn != 0 || mattn != mattnPkg) {
			n, foundMN = mattnNode(x, mattn)
		}
		return false
	})
	switch {
	case found:
		byCodeIn(e.Code(), c)
	case foundMN:
		byCodeIn(n, c)
	}
}

// What the walk asks of an error's type, after codes.HasAs.
const (
	tCoder = codes.FirstFree << iota // coder
	tMattn                           // declared in mattnPkg
)

// types keeps typeBits for each type of error met.
var types codes.TypeCache

// typeBits answers, from err's dynamic type alone, what the walk asks of it:
// mattnNode's first test, the package path, among them.
func typeBits(err error) uint32 {
	b := codes.MethodBits(err)
	if _, ok := err.(coder); ok {
		b |= tCoder
	}
	if reflect.TypeOf(err).PkgPath() == mattnPkg {
		b |= tMattn
	}
	return b
}

func asCoder(err error) (coder, bool) { e, ok := err.(coder); return e, ok }

// byCode classifies a result code: the extended row, else the primary's.
func byCode(n int) (c sr.Class) {
	byCodeIn(n, &c)
	return c
}

// byCodeIn is byCode written to *c.
func byCodeIn(n int, c *sr.Class) {
	if v, ok := byNumber[n]; ok {
		*c = v
		return
	}
	if v, ok := byNumber[n&0xff]; ok {
		*c = v
		return
	}
	name, ok := names[n&0xff]
	if !ok {
		name = "SQLITE_RC_" + itoa(n)
	}
	*c = sr.Class{Phase: sr.NotApplied, Code: name, Reason: "result code not listed as transient: not retried"}
}

// mattnCode finds a mattn/go-sqlite3 error (type pkg.Error, or the ErrNo and
// ErrNoExtended codes themselves) in err's tree and returns its extended
// code, or its primary code when the extended one is 0. Classify asks
// mattnNode in its own walk; this is that walk alone.
func mattnCode(err error, pkg string) (n int, found bool) {
	if err == nil {
		return 0, false
	}
	sr.ClassifyNeutralVisit(err, func(e error, _ bool) bool {
		n, found = mattnNode(e, pkg)
		return found
	})
	return n, found
}

// mattnNode reads one error of a tree as mattnCode does. The network types
// and *sr.Error, which sr.ClassifyNeutralVisit does not show, are none of
// mattn's.
func mattnNode(err error, pkg string) (int, bool) {
	t := reflect.TypeOf(err)
	if t.PkgPath() != pkg {
		return 0, false
	}
	v := reflect.ValueOf(err)
	switch {
	case t.Kind() == reflect.Struct && t.Name() == "Error":
		ext, code := v.FieldByName("ExtendedCode"), v.FieldByName("Code")
		if ext.IsValid() && ext.CanInt() && ext.Int() != 0 {
			return int(ext.Int()), true
		}
		if code.IsValid() && code.CanInt() {
			return int(code.Int()), true
		}
	case (t.Name() == "ErrNo" || t.Name() == "ErrNoExtended") && v.CanInt():
		return int(v.Int()), true
	}
	return 0, false
}

// Lookup returns SQLite's verdict on a bare result code, given as a number
// ("517") or a name ("SQLITE_BUSY_SNAPSHOT", any case), as the command sees
// it: ok is false when the code is not listed (it is then not retryable) or
// malformed (see [ValidCode]). An unlisted extended code is read as its
// primary code, which counts as listed.
func Lookup(code string) (sr.Class, bool) {
	return codes.Lookup(code, parse, "result code", func(n int) (sr.Class, bool) {
		if c, ok := byNumber[n]; ok {
			return codes.Tag(c, contention), true
		}
		if c, ok := byNumber[n&0xff]; ok {
			c.Reason = "extended code " + itoa(n) + " read as its primary " + c.Code + ": " + c.Reason
			return codes.Tag(c, contention), true
		}
		return byCode(n), false
	})
}

// ValidCode reports why code is neither a result code number (0 to 65535)
// nor a known result code name, or nil.
func ValidCode(code string) error {
	_, err := parse(code)
	return err
}

var number = codes.Number{What: "SQLite result code", Example: "517, or a name like SQLITE_BUSY", Min: 0, Max: 65535}

func parse(code string) (int, error) {
	if code != "" {
		if c := code[0]; c < '0' || c > '9' {
			if n, ok := byName[strings.ToUpper(code)]; ok {
				return n, nil
			}
			return 0, errors.New("SQLite result code " + codes.Quote(code) + " is neither a number nor a known name like SQLITE_BUSY")
		}
	}
	n, err := number.Parse(code)
	return int(n), err
}

// Table returns the whole table sorted by number: a fresh copy each call.
func Table() []Entry { return slices.Clone(rows) }
