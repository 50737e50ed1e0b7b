package postgres

import (
	"context"
	"database/sql/driver"
	"errors"
	"net"
	"os"
	"reflect"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	sr "github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/internal/codes"
)

// Entry is one row of a classification table.
type Entry struct {
	// Code is the SQLSTATE ("40001"), or a whole class written "53xxx".
	Code string
	// Class is the verdict for the code. For a class row, Lookup and
	// Classify replace Class.Code with the exact code.
	Class sr.Class
	// Source says where the verdict comes from.
	Source string
}

// The behaviour methods the drivers export, so this package needs no driver.
type (
	// sqlStater: *pgconn.PgError, *pq.Error (and crdb uses the same).
	sqlStater interface {
		error
		SQLState() string
	}
	// safeToRetrier: pgconn's transport errors; true means nothing was sent.
	safeToRetrier interface {
		error
		SafeToRetry() bool
	}
)

// table is an engine's compiled table.
type table struct {
	index           codeIndex // exact rows ("40001") and class rows ("53", from "53xxx")
	rows            []Entry   // sorted by Code
	unlisted        sr.Class  // the verdict on a code not listed, but for its Code
	unlistedStartup sr.Class  // ... in reply to a connection's startup
}

// atStartup is verdict c given in reply to a connection's startup: the
// server refused it (08001, 08004, 53300, 57P03, 55000 "not currently
// accepting connections", 28xxx, 3D000...), and pgconn wraps what it got
// before the connection was established in a *pgconn.ConnectError: no
// statement of the caller's was sent. The code still decides whether a
// retry can help. Computed once per row, so that the verdict allocates
// nothing.
func atStartup(c sr.Class) sr.Class {
	if c.Phase != sr.NotSent {
		c.Phase = sr.NotSent
		c.Reason += " (in reply to the connection's startup, inside a pgconn.ConnectError: nothing was sent)"
	}
	return c
}

func compile(lists ...[]Entry) *table {
	t := &table{}
	byCode := map[string]Entry{}
	for _, list := range lists { // later lists override earlier ones
		for _, e := range list {
			byCode[e.Code] = e
		}
	}
	verdicts := map[uint64]sr.Class{}
	t.unlisted = sr.Class{Phase: sr.NotApplied, Reason: "SQLSTATE not listed as transient: not retried"}
	t.unlistedStartup = atStartup(t.unlisted)
	for code, e := range byCode {
		e.Class = codes.Tag(e.Class, contention)
		if isClassRow(code) {
			verdicts[classKey(code)] = e.Class
		} else {
			k, ok := exactKey(code)
			if !ok {
				panic("postgres: table row " + codes.Quote(code) + " is not a 5-character SQLSTATE")
			}
			verdicts[k] = e.Class
		}
		t.rows = append(t.rows, e)
	}
	t.index = newCodeIndex(verdicts)
	sort.Slice(t.rows, func(i, j int) bool { return t.rows[i].Code < t.rows[j].Code })
	return t
}

func isClassRow(code string) bool { return len(code) == 5 && code[2:] == "xxx" }

var (
	pgTable   = compile(entries)
	crdbTable = compile(entries, cockroachEntries)
)

// lookup finds code, as the server sent it (a code that is not five bytes
// is no row's): the exact row, then its class. It writes the verdict to c, the one given at a connection's
// startup when startup is true (see atStartup), and reports whether a row
// was found.
func (t *table) lookup(code string, startup bool, c *sr.Class) bool {
	s := (*codeSlot)(nil)
	if k, ok := exactKey(code); ok {
		if s = t.index.find(k); s == nil {
			s = t.index.find(classKey(code))
		}
	}
	switch {
	case s == nil && startup:
		*c = t.unlistedStartup
	case s == nil:
		*c = t.unlisted
	case startup:
		*c = s.startup
	default:
		*c = s.class
	}
	c.Code = code
	return s != nil
}

// Classifier is the PostgreSQL [sr.Classifier]: pass it as
// sqlretry.Config.Classifier. It is safe for concurrent use.
var Classifier sr.Classifier = sr.ClassifierFunc(Classify)

// CockroachClassifier is the CockroachDB [sr.Classifier]: 40001 and the
// legacy CR000 are retryable and not applied, 40003 is retryable with an
// unknown outcome, and every other code is read as PostgreSQL reads it.
var CockroachClassifier sr.Classifier = sr.ClassifierFunc(ClassifyCockroach)

// LibPQClassifier is [Classifier] for github.com/lib/pq, which returns
// driver.ErrBadConn even after a command was sent (lib/pq#939): it reads
// driver.ErrBadConn as retryable with an unknown outcome instead of not sent.
var LibPQClassifier sr.Classifier = sr.ClassifierFunc(ClassifyLibPQ)

// Classify gives PostgreSQL's verdict on err. It recognises a server error
// through its SQLState() method (pgx's *pgconn.PgError, lib/pq's *pq.Error)
// and pgconn's proof that nothing was sent through SafeToRetry(), and falls
// back to [sr.ClassifyNeutral]. It never panics, whatever err is.
func Classify(err error) (c sr.Class) {
	classifyWith(pgTable, err, &c)
	return c
}

// ClassifyCockroach gives CockroachDB's verdict on err; see
// [CockroachClassifier].
func ClassifyCockroach(err error) (c sr.Class) {
	classifyWith(crdbTable, err, &c)
	return c
}

// ClassifyLibPQ is [Classify] with driver.ErrBadConn read as unknown; see
// [LibPQClassifier].
func ClassifyLibPQ(err error) (c sr.Class) {
	classifyWith(pgTable, err, &c)
	if c.Code != "bad-conn" {
		return c
	}
	// The retryable verdict "bad-conn" is the neutral verdict's, given only
	// when its walk found driver.ErrBadConn (by identity or an Is method),
	// as errors.Is would: no second walk is needed to know it. A server
	// error's verdict may carry the code too, its SQLSTATE being whatever
	// the wire said, and is never retryable (the tables list no such code):
	// for it alone the tree is walked again.
	if c.Retryable {
		return libpqBadConn(c)
	}
	return serverBadConn(err, c)
}

// libpqBadConn is ClassifyLibPQ's reading of driver.ErrBadConn: c with an
// unknown outcome.
func libpqBadConn(c sr.Class) sr.Class {
	c.Phase = sr.Unknown
	c.Reason = "driver.ErrBadConn from lib/pq: the connection broke, but lib/pq also returns it after sending (lib/pq#939), so the command may have run"
	return c
}

// serverBadConn is ClassifyLibPQ's reading of a server error's verdict c
// whose code is "bad-conn": lib/pq's when err's tree also holds
// driver.ErrBadConn (errors.Is), c otherwise, and Panicked when an error's
// method panics in that walk, so that ClassifyLibPQ never panics.
func serverBadConn(err error, c sr.Class) (v sr.Class) {
	defer codes.Recover(&v)
	if codes.Is(err, driver.ErrBadConn) {
		return libpqBadConn(c)
	}
	return c
}

// classifyWith is the classifiers' frame around classify with table t,
// with the verdict written to *c (see codes.TagIn): a Class returned by
// value is copied at every level it passes through, and this frame had
// five.
func classifyWith(t *table, err error, c *sr.Class) {
	if err == nil {
		*c = sr.ClassifyNeutral(nil)
		return
	}
	defer codes.Recover(c)
	classify(t, err, c)
	codes.TagIn(c, contention)
}

// classify reads a non-nil err with table t into *c; Classify frames it.
func classify(t *table, err error, c *sr.Class) {
	var w walk
	*c = sr.ClassifyNeutralVisit(err, w.visit)
	if w.foundS {
		w.serverVerdict(t, c)
		return
	}
	if w.foundR {
		// A context that was already done is the caller's business, not a
		// database fault: leave it to the neutral classifier.
		if contextDone(err, c.Code) {
			return
		}
		if w.r.SafeToRetry() {
			*c = safeToRetry
			return
		}
		if connClosed(err) {
			*c = connClosedMidReply
			return
		}
	}
	if !c.Retryable && w.conn && strings.Contains(err.Error(), "ValidateConnect failed") {
		*c = validateConnect
		return
	}
	if c.Retryable && w.conn {
		// A reset or timeout during the handshake (a server shutting down,
		// seen in dbtest's restart tests) cannot have run a statement.
		c.Phase = sr.NotSent
		c.Reason = connectReason(c.Code)
	}
}

// The verdicts on pgconn's transport errors.
var (
	safeToRetry        = sr.Class{Retryable: true, Phase: sr.NotSent, Code: "safe-to-retry", Reason: "pgconn SafeToRetry: the error happened before anything was sent"}
	connClosedMidReply = sr.Class{Retryable: true, Phase: sr.Unknown, Code: "conn-closed", Reason: "pgconn: connection closed while receiving the response; the command may have run"}
)

// walk is what one walk of an error's tree found: the first server error
// and the first transport error (errors.As), a *pgconn.ConnectError on the
// chain.
type walk struct {
	s                    sqlStater
	code                 string
	r                    safeToRetrier
	foundS, foundR, conn bool
}

// visit is shown each error of the tree by sr.ClassifyNeutralVisit, which
// gives the neutral verdict in the same walk; it returns true once nothing
// that follows can change the verdict.
func (w *walk) visit(e error, chain bool) bool {
	tb := pgTypes.Bits(e, pgTypeBits)
	// errors.As's two questions, with the error's As method looked up once
	// for both; each asked only of a type that can answer yes.
	if !w.foundS && tb&tSQLState != 0 {
		w.s, w.foundS = e.(sqlStater)
	}
	if !w.foundR && tb&tSafe != 0 {
		w.r, w.foundR = e.(safeToRetrier)
	}
	if (!w.foundS || !w.foundR) && tb&codes.HasAs != 0 {
		x := e.(interface{ As(any) bool })
		if !w.foundS {
			w.s, w.foundS = asBy[sqlStater](x)
		}
		if !w.foundR {
			w.r, w.foundR = asBy[safeToRetrier](x)
		}
	}
	if w.foundS && w.code == "" {
		w.code = w.s.SQLState()
	}
	if chain && !w.conn && tb&tConnect != 0 {
		w.conn = true
	}
	// A server error decides, with what the chain above it said of the
	// connection's startup, once nothing that follows can change the
	// verdict: a ConnectError further down the chain (none below a server
	// error that unwraps no further), or, for an 08 code, the transport
	// error that says whether anything was sent.
	return w.foundS && (!chain || w.conn || tb&tUnwraps == 0) && (w.foundR || !connectionException(w.code))
}

// What the walk asks of an error's type (pgTypeBits), after codes.HasAs.
const (
	tSQLState = codes.FirstFree << iota // sqlStater
	tSafe                               // safeToRetrier
	tUnwrap1                            // Unwrap() error
	tUnwraps                            // Unwrap() error or Unwrap() []error
	tConnect                            // *pgconn.ConnectError (isConnectError)
)

// pgTypes keeps pgTypeBits for each type of error met.
var pgTypes codes.TypeCache

// pgTypeBits answers, from err's dynamic type alone, what visit and
// connClosed ask of it.
func pgTypeBits(err error) uint32 {
	b := codes.MethodBits(err)
	if _, ok := err.(sqlStater); ok {
		b |= tSQLState
	}
	if _, ok := err.(safeToRetrier); ok {
		b |= tSafe
	}
	if maybeConnectError(err) {
		b |= tUnwrap1
		if isConnectError(err) {
			b |= tConnect
		}
	}
	if unwraps(err) {
		b |= tUnwraps
	}
	return b
}

// serverVerdict is the verdict on the server error the walk found.
func (w *walk) serverVerdict(t *table, c *sr.Class) {
	t.lookup(w.code, w.conn, c)
	if w.code == "08P01" {
		if r := bouncerRowOf(w.s); r != nil {
			if *c = r.class; w.conn {
				*c = r.startup
			}
			return
		}
	}
	if w.conn {
		return // the server refused the connection's startup (atStartup)
	}
	if connectionException(w.code) && c.Retryable && w.foundR && w.r.SafeToRetry() {
		c.Phase = sr.NotSent
		c.Reason = "connection_exception before anything was sent (SafeToRetry)"
	}
}

// validateConnect is the verdict on a connection pgx opened and then
// refused because the server is not what target_session_attrs asks for
// ("ValidateConnect failed: read only connection", "… server is not in
// hot standby mode"): a primary not promoted yet, or a standby, during a
// failover. Nothing of the caller's was sent, and a retry may reach the
// promoted server.
var validateConnect = sr.Class{Retryable: true, Phase: sr.NotSent, Kind: sr.Unavailable, Code: "validate-connect",
	Reason: "pgconn.ConnectError: ValidateConnect failed (target_session_attrs): the server is not the kind asked for yet; nothing was sent"}

// contextDone reports whether err's tree holds context.Canceled or
// context.DeadlineExceeded (errors.Is), from the neutral verdict on it,
// whose walk read that: its "context" fact is outranked only by a
// database/sql client-state error or a leaked driver.ErrSkip, and only
// then is the tree walked again.
func contextDone(err error, neutralCode string) bool {
	switch neutralCode {
	case "context":
		return true
	case "client-state", "driver-skip":
		return codes.Is(err, context.Canceled) || codes.Is(err, context.DeadlineExceeded)
	}
	return false
}

// asBy asks an error's As method for a T, as errors.As does. The T it
// fills is allocated here, only for an error that has an As method: were
// it the caller's variable, that would move to the heap on every call.
func asBy[T any](x interface{ As(any) bool }) (T, bool) {
	p := new(T)
	ok := x.As(p)
	return *p, ok
}

func asSQLStater(err error) (sqlStater, bool)         { e, ok := err.(sqlStater); return e, ok }
func asSafeToRetrier(err error) (safeToRetrier, bool) { e, ok := err.(safeToRetrier); return e, ok }

// connectReason is the reason for a retryable transport failure inside a
// pgconn.ConnectError, written out for the neutral codes so that the
// verdict costs no allocation.
func connectReason(code string) string {
	const (
		prefix = "pgconn.ConnectError: the connection was never established, nothing was sent ("
	)
	switch code {
	case "dial":
		return prefix + "dial)"
	case "dns":
		return prefix + "dns)"
	case "conn-refused":
		return prefix + "conn-refused)"
	case "conn-reset":
		return prefix + "conn-reset)"
	case "net-timeout":
		return prefix + "net-timeout)"
	case "eof":
		return prefix + "eof)"
	case "bad-conn":
		return prefix + "bad-conn)"
	}
	return prefix + code + ")"
}

// connectionException reports whether code is of class 08,
// connection_exception, but for 08007 (transaction_resolution_unknown):
// the codes for which SafeToRetry may prove that nothing was sent.
func connectionException(code string) bool {
	return len(code) == 5 && code[0] == '0' && code[1] == '8' && code != "08007"
}

// unwraps reports whether err wraps another error.
func unwraps(err error) bool {
	switch err.(type) {
	case interface{ Unwrap() error }, interface{ Unwrap() []error }:
		return true
	}
	return false
}

// maybeConnectError turns away, with one type assertion, the errors that
// cannot be a *pgconn.ConnectError, which wraps the error of the attempt:
// those that wrap nothing. isConnectError's reflection is the dearer test.
func maybeConnectError(err error) bool {
	_, ok := err.(interface{ Unwrap() error })
	return ok
}

// isConnectError reports whether err is a *pgconn.ConnectError,
// recognised by its type's name and package path so as not to import
// pgconn. The type's String, one look-up, turns every other type away
// before the package path is read; Name would scan the string.
// The answer for the last few types is kept (typeAnswers): a wrapper such as
// fmt's is met on every error, and its name costs more than the look-up.
func isConnectError(err error) bool {
	t := reflect.TypeOf(err)
	for i := range typeAnswers {
		if a := typeAnswers[i].Load(); a != nil && a.t == t {
			return a.connect
		}
	}
	is := t.Kind() == reflect.Pointer && t.String() == "*pgconn.ConnectError" && t.Elem().PkgPath() == "github.com/jackc/pgx/v5/pgconn"
	typeAnswers[nextAnswer.Add(1)%uint32(len(typeAnswers))].Store(&typeAnswer{t: t, connect: is})
	return is
}

// typeAnswer is isConnectError's answer for one type.
type typeAnswer struct {
	t       reflect.Type
	connect bool
}

// typeAnswers are isConnectError's last answers, replaced in turn
// (nextAnswer); safe for concurrent use.
var (
	typeAnswers [4]atomic.Pointer[typeAnswer]
	nextAnswer  atomic.Uint32
)

// connClosed reports whether err's chain holds pgconn.ErrConnClosed, which
// it recognises by its text ("conn closed") so as not to import pgconn.
func connClosed(err error) bool {
	for i := 0; err != nil && i < 32; i++ {
		tb := pgTypes.Bits(err, pgTypeBits)
		if tb&tSafe == 0 && !otherMessage(err) {
			if err.Error() == "conn closed" {
				return true
			}
		}
		// errors.Unwrap, with the answer of err's type known.
		if tb&tUnwrap1 == 0 {
			return false
		}
		err = err.(interface{ Unwrap() error }).Unwrap()
	}
	return false
}

// otherMessage reports that err's message cannot be "conn closed", so it
// need not be built (a *net.OpError's and an *os.SyscallError's allocate):
// a system error number's comes from the system's table, a network or
// system call error's has a ": " before its cause, and the Policy's own
// error's starts with "sqlretry: ".
func otherMessage(err error) bool {
	switch e := err.(type) {
	case syscall.Errno, *sr.Error:
		return true
	case *net.OpError:
		return e.Err != nil
	case *os.SyscallError:
		return e.Err != nil
	}
	return false
}

// Lookup returns PostgreSQL's verdict on a bare SQLSTATE, as the command
// sees it: ok is false when the code is not listed (it is then not
// retryable) or malformed (see [ValidCode]). Lower-case letters are
// accepted.
func Lookup(code string) (sr.Class, bool) {
	c, ok := lookupIn(pgTable, code)
	return codes.Tag(c, contention), ok
}

// CockroachLookup is [Lookup] for CockroachDB.
func CockroachLookup(code string) (sr.Class, bool) {
	c, ok := lookupIn(crdbTable, code)
	return codes.Tag(c, contention), ok
}

// contention reports whether a SQLSTATE is one of lock contention between
// transactions: serialization_failure, deadlock_detected,
// lock_not_available (NOWAIT, lock_timeout) and object_in_use (PostgreSQL
// manual, Appendix A; §13.2 and §13.3 on what each means).
func contention(code string) bool {
	switch code {
	case "40001", "40P01", "55P03", "55006":
		return true
	}
	return false
}

func lookupIn(t *table, code string) (sr.Class, bool) {
	if ValidCode(code) != nil {
		return sr.Class{Phase: sr.Unknown, Code: code, Reason: "malformed SQLSTATE"}, false
	}
	var c sr.Class
	ok := t.lookup(strings.ToUpper(code), false, &c)
	return c, ok
}

// ValidCode reports why code is not a well-formed SQLSTATE (five
// characters, each a digit or a letter), or nil. The same rule serves
// CockroachDB, whose CR000 is well-formed.
func ValidCode(code string) error {
	if len(code) != 5 {
		return errors.New("SQLSTATE " + codes.Quote(code) + " must be 5 characters (digits and letters), like 40001")
	}
	for i := 0; i < len(code); i++ {
		b := code[i]
		if !('0' <= b && b <= '9' || 'A' <= b && b <= 'Z' || 'a' <= b && b <= 'z') {
			return errors.New("SQLSTATE " + codes.Quote(code) + " may hold only digits and letters")
		}
	}
	return nil
}

// Table returns PostgreSQL's table sorted by code: a fresh copy each call.
func Table() []Entry { return append([]Entry(nil), pgTable.rows...) }

// CockroachTable returns CockroachDB's table (PostgreSQL's with the
// CockroachDB rows in place) sorted by code.
func CockroachTable() []Entry { return append([]Entry(nil), crdbTable.rows...) }

// bouncerRowOf returns the row of bouncerRows that e, a server error of
// SQLSTATE 08P01, is one of: severity FATAL and the row's message. nil if
// it is none (a server's own protocol_violation, or a driver whose error
// has no Severity and Message fields).
func bouncerRowOf(e error) *bouncerRow {
	sev, msg, ok := severityMessage(e)
	if !ok || sev != "FATAL" {
		return nil
	}
	for i := range bouncerRows {
		r := &bouncerRows[i]
		if msg == r.text || r.prefix && strings.HasPrefix(msg, r.text) {
			return r
		}
	}
	return nil
}

// severityMessage reads the Severity and Message fields (strings) of e, a
// pointer to a struct: pgx's *pgconn.PgError and lib/pq's *pq.Error both
// have them. The fields' indexes are found once per type (messageFields),
// so that the reading allocates nothing.
func severityMessage(e error) (severity, message string, ok bool) {
	v := reflect.ValueOf(e)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return "", "", false
	}
	s := v.Elem()
	f, found := messageFields.Load(s.Type())
	if !found {
		f, _ = messageFields.LoadOrStore(s.Type(), fieldsOf(s.Type()))
	}
	idx := f.([2]int)
	if idx[0] < 0 || idx[1] < 0 {
		return "", "", false
	}
	return s.Field(idx[0]).String(), s.Field(idx[1]).String(), true
}

// messageFields maps a struct type to the indexes of its Severity and
// Message string fields ([2]int, -1 for one it lacks).
var messageFields sync.Map

func fieldsOf(t reflect.Type) [2]int {
	idx := [2]int{-1, -1}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if f.Type.Kind() != reflect.String || !f.IsExported() {
			continue
		}
		switch f.Name {
		case "Severity":
			idx[0] = i
		case "Message":
			idx[1] = i
		}
	}
	return idx
}
