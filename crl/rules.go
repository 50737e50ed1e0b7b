package crl

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sqlretry/sqlretry/internal/enum"
)

// Limits that keep every rule bounded. The JDBC driver has none: a large
// retryCount allocates that many waits, and a large product overflows.
const (
	// MaxRetries is the largest retryCount a statement rule may set.
	MaxRetries = 255
	// MaxWait is the longest wait a statement rule may compute.
	MaxWait = 24 * time.Hour
)

// Syntax says how a rule writes an error code: it must match the codes the
// Policy's classifier reports (Class.Code).
type Syntax uint8

const (
	// Numbers rules name decimal error numbers ("1205,1222"), as in the
	// JDBC driver: SQL Server's numbers (package mssql), MySQL's and
	// MariaDB's (package mysql). The zero value. The built-in connection
	// list ([Builtin]) and the authentication failures ([NeverRetried]) of
	// this syntax are SQL Server's, the JDBC driver's: with MySQL, write a
	// retryConn value in replace mode (no "+").
	Numbers Syntax = iota
	// SQLState rules name five-character SQLSTATE codes ("40001,40P01"),
	// as PostgreSQL and CockroachDB report them (package postgres). Codes
	// are matched upper-cased.
	SQLState
)

var syntaxNames = []string{"numbers", "sqlstate"}

// String returns "numbers" or "sqlstate".
func (s Syntax) String() string { return enum.Name(syntaxNames, s, "Syntax") }

// ParseSyntax is the inverse of [Syntax.String], ignoring case.
func ParseSyntax(s string) (Syntax, error) {
	return enum.Parse[Syntax](syntaxNames, strings.ToLower(s), s, "crl: unknown code syntax")
}

// FilterMode says how a statement rule's query filter is matched against
// the failed statement.
type FilterMode uint8

const (
	// FilterJDBC matches the statement's first whitespace-delimited token,
	// lower-cased, as the JDBC driver does: "/* c */ SELECT" has the token
	// "/*" and "WITH x AS (…) UPDATE" has "with". The zero value.
	FilterJDBC FilterMode = iota
	// FilterVerb matches the statement's real verb, [sqlretry.Verb]: past
	// comments, parentheses and a WITH … AS (…) prefix.
	FilterVerb
)

var filterModeNames = []string{"jdbc", "verb"}

// String returns "jdbc" or "verb".
func (m FilterMode) String() string { return enum.Name(filterModeNames, m, "FilterMode") }

// ParseFilterMode is the inverse of [FilterMode.String].
func ParseFilterMode(s string) (FilterMode, error) {
	return enum.Parse[FilterMode](filterModeNames, s, s, "crl: unknown filter mode")
}

// Entry is one statement rule for one error code, as the driver expands a
// rule that names several: they share retries, waits and filter.
type Entry struct {
	Error   string          // the error code: "1205", or a SQLSTATE such as "40P01"
	Retries int             // retries after the first failure; 0 disables
	Waits   []time.Duration // the wait before retry i+1, computed at parse time; len(Waits) == Retries
	Filter  []string        // lower-case keywords; empty: every statement
}

// Exec is a parsed retryExec value: statement rules. The zero value has no
// rules. An Exec is immutable and safe for concurrent use; it belongs to
// whoever holds it (there is no process-wide rule set).
type Exec struct {
	syntax  Syntax
	rules   []execRule     // as written, for String
	entries []Entry        // one per error code, in order of first mention
	index   map[string]int // error code → entries index
}

type execRule struct {
	errors          []string
	retries         int
	initial, change int
	op              byte // '+' or '*'
	filter          []string
	n               int  // rule number in the parsed value
	timings         span // the timings section as written
}

// ParseExec parses a retryExec value whose rules name error numbers
// ([Numbers]: SQL Server, MySQL):
//
//	errors:retryCount[,initialRetryTime[op retryChange]][:queryFilter]
//
// with rules separated by ";", each optionally wrapped in {…}, and the whole
// list too. See the package documentation for the language. The error is an
// [*Error].
func ParseExec(s string) (Exec, error) { return Numbers.ParseExec(s) }

// ParseConn parses a retryConn value whose rules name error numbers
// ([Numbers]):
// [+]errors, rules separated by ";". The error is an [*Error].
func ParseConn(s string) (Conn, error) { return Numbers.ParseConn(s) }

// ParseExec parses a retryExec value whose rules name e's error codes.
func (e Syntax) ParseExec(s string) (Exec, error) {
	pieces, err := splitRules(s)
	if err != nil {
		return Exec{}, err
	}
	x := Exec{syntax: e}
	for _, p := range pieces {
		r, err := e.parseExecRule(p)
		if err != nil {
			return Exec{}, err
		}
		x.add(r)
	}
	return x, nil
}

func (x *Exec) add(r execRule) {
	x.rules = append(x.rules, r)
	waits := make([]time.Duration, r.retries)
	for i := range waits {
		waits[i] = time.Duration(waitSeconds(r, i)) * time.Second
	}
	if x.index == nil {
		x.index = map[string]int{}
	}
	for _, code := range r.errors {
		ent := Entry{Error: code, Retries: r.retries, Waits: waits, Filter: r.filter}
		// A later rule for the same error replaces the earlier one, as in
		// the driver (its rule map is keyed by error number).
		if i, ok := x.index[code]; ok {
			x.entries[i] = ent
			continue
		}
		x.index[code] = len(x.entries)
		x.entries = append(x.entries, ent)
	}
}

// waitSeconds is the wait before retry i+1 (i from 0), saturating at
// MaxWait+1 second so that overflow cannot hide a too-long wait.
func waitSeconds(r execRule, i int) int64 {
	limit := int64(MaxWait/time.Second) + 1
	w := int64(r.initial)
	for k := 0; k < i; k++ {
		if r.op == '*' {
			w *= int64(r.change)
		} else {
			w += int64(r.change)
		}
		if w > limit {
			return limit
		}
	}
	return min(w, limit)
}

// Entries returns the rules expanded to one entry per error code, in the
// order the codes were first named. The slices are copies.
func (x Exec) Entries() []Entry {
	out := make([]Entry, len(x.entries))
	for i, e := range x.entries {
		e.Waits = slices.Clone(e.Waits)
		e.Filter = slices.Clone(e.Filter)
		out[i] = e
	}
	return out
}

// Lookup returns the entry for an error code, as a classifier reports it.
func (x Exec) Lookup(code string) (Entry, bool) {
	i, ok := x.index[code]
	if !ok {
		return Entry{}, false
	}
	return x.entries[i], true
}

// Syntax returns how the rules write error codes.
func (x Exec) Syntax() Syntax { return x.syntax }

// Len returns the number of error codes with a rule.
func (x Exec) Len() int { return len(x.entries) }

// CheckQueryTimeout applies the driver's queryTimeout check to every wait, at
// parse time rather than when the rule fires: with queryTimeout >= 0, a wait
// longer than queryTimeout seconds is an R_InvalidRetryInterval error (so 0
// rejects every positive wait); a negative queryTimeout, the driver's
// default -1, skips the check. The [*Error] names the first offending rule
// and its timings as parsed.
func (x Exec) CheckQueryTimeout(queryTimeout int) error {
	if queryTimeout < 0 {
		return nil
	}
	for _, r := range x.rules {
		for i := 0; i < r.retries; i++ {
			w := waitSeconds(r, i)
			if w > int64(queryTimeout) {
				return &Error{Key: KeyInvalidRetryInterval, Rule: r.n, Token: r.timings.text, Pos: r.timings.pos,
					Msg: "the wait before retry " + strconv.Itoa(i+1) + " is " + strconv.FormatInt(w, 10) +
						" s, above queryTimeout " + strconv.Itoa(queryTimeout) + " s"}
			}
		}
	}
	return nil
}

// String formats the rules so that parsing the result gives back an equal
// Exec: codes canonical, timings in their shortest form, filter lower-case.
func (x Exec) String() string {
	var b strings.Builder
	for i, r := range x.rules {
		if i > 0 {
			b.WriteByte(';')
		}
		b.WriteString(r.String())
	}
	return b.String()
}

func (r execRule) String() string {
	var b strings.Builder
	b.WriteString(strings.Join(r.errors, ","))
	b.WriteByte(':')
	b.WriteString(strconv.Itoa(r.retries))
	switch {
	case r.op == '+' && r.change == 2 && r.initial == 0:
	case r.op == '+' && r.change == 2:
		b.WriteByte(',')
		b.WriteString(strconv.Itoa(r.initial))
	default:
		b.WriteByte(',')
		b.WriteString(strconv.Itoa(r.initial))
		b.WriteByte(r.op)
		b.WriteString(strconv.Itoa(r.change))
	}
	if len(r.filter) > 0 {
		b.WriteByte(':')
		b.WriteString(strings.Join(r.filter, ","))
	}
	return b.String()
}

func (e Syntax) parseExecRule(p piece) (execRule, error) {
	secs := split(p.span, ':')
	switch {
	case len(secs) > 3:
		return execRule{}, &Error{Key: KeyInvalidRuleFormat, Rule: p.n, Token: p.text, Pos: p.pos,
			Msg: strconv.Itoa(len(secs)) + " sections separated by ':', at most 3 (errors:timings:filter)"}
	case len(secs) == 1:
		return execRule{}, &Error{Key: KeyInvalidRuleFormat, Rule: p.n, Token: p.text, Pos: p.pos,
			Msg: "no timings: a rule with only error numbers is a connection rule (retryConn); a statement rule needs at least retryCount"}
	}
	r := execRule{n: p.n, timings: trim(secs[1])}
	var err error
	if r.errors, err = e.parseCodes(secs[0], p.n); err != nil {
		return r, err
	}
	if err = parseTimings(secs[1], p.n, &r); err != nil {
		return r, err
	}
	if len(secs) == 3 {
		if r.filter, err = parseFilter(secs[2], p.n); err != nil {
			return r, err
		}
	}
	for i := 0; i < r.retries; i++ {
		if w := waitSeconds(r, i); w > int64(MaxWait/time.Second) {
			return r, &Error{Key: KeyInvalidRetryInterval, Rule: p.n, Token: secs[1].text, Pos: secs[1].pos,
				Msg: "the wait before retry " + strconv.Itoa(i+1) + " is above the " + MaxWait.String() + " limit"}
		}
	}
	return r, nil
}

func parseTimings(sp span, rule int, r *execRule) error {
	r.op, r.change = '+', 2
	parts := split(sp, ',')
	if len(parts) > 2 {
		return &Error{Key: KeyInvalidParameterNumber, Rule: rule, Token: sp.text, Pos: sp.pos,
			Msg: "more than one comma in the timings (retryCount[,initialRetryTime[op retryChange]])"}
	}
	n, err := number(parts[0], rule, "retryCount")
	if err != nil {
		return err
	}
	if n > MaxRetries {
		return &Error{Key: KeyInvalidParameterNumber, Rule: rule, Token: parts[0].text, Pos: parts[0].pos,
			Msg: "retryCount above the limit " + strconv.Itoa(MaxRetries)}
	}
	r.retries = n
	if len(parts) == 1 {
		return nil
	}
	t := parts[1]
	opAt := strings.IndexAny(t.text, "+*")
	if opAt < 0 {
		r.initial, err = number(t, rule, "initialRetryTime")
		return err
	}
	if r.initial, err = number(span{t.text[:opAt], t.pos}, rule, "initialRetryTime"); err != nil {
		return err
	}
	r.op = t.text[opAt]
	rest := span{t.text[opAt+1:], t.pos + opAt + 1}
	if strings.TrimSpace(rest.text) == "" {
		if r.op == '*' {
			r.change = r.initial // the driver's rule: * alone multiplies by initialRetryTime
		}
		return nil
	}
	r.change, err = number(rest, rule, "retryChange")
	return err
}

func parseFilter(sp span, rule int) ([]string, error) {
	if t := strings.TrimSpace(sp.text); t == "" || t == "0" {
		return nil, nil // the driver reads "errors:timings:" and ":0" as no filter
	}
	var out []string
	for _, it := range split(sp, ',') {
		it = trim(it)
		if it.text == "" {
			continue
		}
		for i := 0; i < len(it.text); i++ {
			c := it.text[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || i > 0 && c >= '0' && c <= '9') {
				return nil, &Error{Key: KeyInvalidRuleFormat, Rule: rule, Token: it.text, Pos: it.pos,
					Msg: "a filter item is a keyword (a letter or _, then letters, digits, _)"}
			}
		}
		w := strings.ToLower(it.text)
		if !slices.Contains(out, w) {
			out = append(out, w)
		}
	}
	return out, nil
}

// parseCodes parses a comma-separated list of error codes.
func (e Syntax) parseCodes(sp span, rule int) ([]string, error) {
	var out []string
	for _, it := range split(sp, ',') {
		code, err := e.parseCode(trim(it), rule)
		if err != nil {
			return nil, err
		}
		if !slices.Contains(out, code) {
			out = append(out, code)
		}
	}
	return out, nil
}

func (e Syntax) parseCode(it span, rule int) (string, error) {
	if e == SQLState {
		ok := len(it.text) == 5
		for i := 0; ok && i < 5; i++ {
			c := it.text[i]
			ok = c >= '0' && c <= '9' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z'
		}
		if !ok {
			return "", &Error{Key: KeyInvalidParameterNumber, Rule: rule, Token: it.text, Pos: it.pos,
				Msg: "not a SQLSTATE code (five letters or digits, such as 40001 or 40P01)"}
		}
		return strings.ToUpper(it.text), nil
	}
	n, err := number(it, rule, "error number")
	if err != nil {
		return "", err
	}
	return strconv.Itoa(n), nil
}

// number parses a non-negative decimal number of at most 9 digits.
func number(sp span, rule int, what string) (int, error) {
	sp = trim(sp)
	bad := &Error{Key: KeyInvalidParameterNumber, Rule: rule, Token: sp.text, Pos: sp.pos}
	if sp.text == "" {
		bad.Msg = "empty " + what + ": a whole number was expected"
		return 0, bad
	}
	for i := 0; i < len(sp.text); i++ {
		if c := sp.text[i]; c < '0' || c > '9' {
			bad.Msg = what + " is not a whole number >= 0"
			return 0, bad
		}
	}
	if len(strings.TrimLeft(sp.text, "0")) > 9 {
		bad.Msg = what + " is too large"
		return 0, bad
	}
	n, _ := strconv.Atoi(sp.text)
	return n, nil
}

// Conn is a parsed retryConn value: connection rules that add to (+) or
// replace the built-in list of transient connection errors. The zero value
// has no rules: the built-in list applies. A Conn is immutable and safe for
// concurrent use.
type Conn struct {
	syntax    Syntax
	rules     []connRule
	replace   bool
	errs      []string
	effective map[string]bool
}

type connRule struct {
	add    bool
	errors []string
}

// ConnMode is how connection rules combine with the built-in list.
type ConnMode uint8

const (
	// Append: the rules add to the built-in list (every rule has "+", or
	// there are no rules).
	Append ConnMode = iota
	// Replace: only the listed errors are retried. One rule without "+"
	// switches the whole value to Replace, as in the driver.
	Replace
)

// String returns "append" or "replace".
func (m ConnMode) String() string {
	if m == Replace {
		return "replace"
	}
	return "append"
}

// ParseConn parses a retryConn value whose rules name e's error codes.
func (e Syntax) ParseConn(s string) (Conn, error) {
	pieces, err := splitRules(s)
	if err != nil {
		return Conn{}, err
	}
	c := Conn{syntax: e}
	for _, p := range pieces {
		secs := split(p.span, ':')
		if len(secs) > 3 {
			return Conn{}, &Error{Key: KeyInvalidRuleFormat, Rule: p.n, Token: p.text, Pos: p.pos,
				Msg: strconv.Itoa(len(secs)) + " sections separated by ':', at most 3"}
		}
		if len(secs) > 1 {
			return Conn{}, &Error{Key: KeyInvalidRuleFormat, Rule: p.n, Token: p.text, Pos: p.pos,
				Msg: "a connection rule has only error numbers ([+]errors); timings and filters belong to retryExec"}
		}
		sp := trim(p.span)
		r := connRule{}
		if strings.HasPrefix(sp.text, "+") {
			r.add = true
			sp = span{sp.text[1:], sp.pos + 1}
		}
		if r.errors, err = e.parseCodes(sp, p.n); err != nil {
			return Conn{}, err
		}
		c.add(r)
	}
	c.finish()
	return c, nil
}

func (c *Conn) add(r connRule) {
	c.rules = append(c.rules, r)
	if !r.add {
		c.replace = true
	}
	for _, code := range r.errors {
		if !slices.Contains(c.errs, code) {
			c.errs = append(c.errs, code)
		}
	}
}

func (c *Conn) finish() {
	c.effective = map[string]bool{}
	for _, code := range c.Effective() {
		c.effective[code] = true
	}
}

// merge returns the rules of x followed by those of y, as if their values
// had been joined with ";".
func (x Exec) merge(y Exec) Exec {
	out := Exec{syntax: x.syntax}
	for _, r := range x.rules {
		out.add(r)
	}
	for _, r := range y.rules {
		out.add(r)
	}
	return out
}

func (c Conn) merge(d Conn) Conn {
	out := Conn{syntax: c.syntax}
	for _, r := range c.rules {
		out.add(r)
	}
	for _, r := range d.rules {
		out.add(r)
	}
	out.finish()
	return out
}

// Mode returns Replace if any rule lacks "+", else Append.
func (c Conn) Mode() ConnMode {
	if c.replace {
		return Replace
	}
	return Append
}

// Syntax returns how the rules write error codes.
func (c Conn) Syntax() Syntax { return c.syntax }

// Errors returns the codes the rules name, in order of first mention.
func (c Conn) Errors() []string { return slices.Clone(c.errs) }

// Effective returns the codes a connect is retried for: the rules' codes in
// Replace mode; in Append mode the built-in list followed by the rules'
// codes it lacks. Authentication failures are listed if named, but the
// connect schedule never retries them (see [NeverRetried]).
func (c Conn) Effective() []string {
	if c.replace {
		return slices.Clone(c.errs)
	}
	out := Builtin(c.syntax)
	for _, code := range c.errs {
		if !slices.Contains(out, code) {
			out = append(out, code)
		}
	}
	return out
}

// Retries reports whether code is in the effective list.
func (c Conn) Retries(code string) bool {
	if c.effective == nil { // the zero Conn
		return slices.Contains(builtin(c.syntax), code)
	}
	return c.effective[code]
}

// String formats the rules so that parsing the result gives back an equal
// Conn.
func (c Conn) String() string {
	var b strings.Builder
	for i, r := range c.rules {
		if i > 0 {
			b.WriteByte(';')
		}
		if r.add {
			b.WriteByte('+')
		}
		b.WriteString(strings.Join(r.errors, ","))
	}
	return b.String()
}

// The built-in transient connection errors.
var (
	// sqlServerBuiltin is mssql-jdbc's SQLServerError.TransientError enum
	// (src/main/java/com/microsoft/sqlserver/jdbc/SQLServerError.java), the
	// list the JDBC CRL documentation tabulates
	// (https://learn.microsoft.com/sql/connect/jdbc/configurable-retry-logic).
	sqlServerBuiltin = []string{
		"64", "233", "4060", "4221", "10053", "10054", "10928", "10929",
		"40020", "40143", "40166", "40197", "40501", "40540", "40613",
		"42108", "42109", "49918", "49919", "49920",
	}
	// postgresBuiltin is the connection-time part of Npgsql's transient
	// SQLSTATE set (Npgsql PostgresException.IsTransient): connection
	// exceptions, too_many_connections, server shutting down or starting.
	postgresBuiltin = []string{
		"08000", "08001", "08004", "08006", "53300", "57P01", "57P02", "57P03",
	}
	// Authentication failures: never retried by a connect schedule, even
	// when a rule names them. SQL Server: 18456 login failed, 18452
	// untrusted domain, 18486 account locked out, 18487/18488 password
	// expired or must change (Database Engine errors 18000-18999);
	// PostgreSQL class 28 (PostgreSQL manual, Appendix A).
	sqlServerAuth = []string{"18452", "18456", "18486", "18487", "18488"}
	postgresAuth  = []string{"28000", "28P01"}
)

func builtin(e Syntax) []string {
	if e == SQLState {
		return postgresBuiltin
	}
	return sqlServerBuiltin
}

// Builtin returns a copy of e's built-in list of transient connection
// errors: for Numbers, the JDBC driver's SQL Server TransientError list;
// for SQLState, PostgreSQL's connection-time transient SQLSTATEs.
func Builtin(e Syntax) []string { return slices.Clone(builtin(e)) }

// NeverRetried returns a copy of the authentication failures that a connect
// schedule never retries, whatever the rules say: a wrong password does not
// heal, and each retry counts toward the server's account lockout threshold.
func NeverRetried(e Syntax) []string {
	if e == SQLState {
		return slices.Clone(postgresAuth)
	}
	return slices.Clone(sqlServerAuth)
}

func isAuth(e Syntax, code string) bool {
	if e == SQLState {
		return strings.HasPrefix(code, "28")
	}
	return slices.Contains(sqlServerAuth, code)
}

// A span is a piece of the value with its byte offset.
type span struct {
	text string
	pos  int
}

// A piece is one rule of the value, braces removed, with its number.
type piece struct {
	span
	n int
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func trim(sp span) span {
	i, j := 0, len(sp.text)
	for i < j && isSpace(sp.text[i]) {
		i++
	}
	for j > i && isSpace(sp.text[j-1]) {
		j--
	}
	return span{sp.text[i:j], sp.pos + i}
}

func split(sp span, sep byte) []span {
	var out []span
	start := 0
	for i := 0; i <= len(sp.text); i++ {
		if i == len(sp.text) || sp.text[i] == sep {
			out = append(out, span{sp.text[start:i], sp.pos + start})
			start = i + 1
		}
	}
	return out
}

// unwrap removes braces that wrap the whole span, repeatedly.
func unwrap(sp span, rule int) (span, error) {
	for {
		sp = trim(sp)
		if sp.text == "" || sp.text[0] != '{' {
			return sp, nil
		}
		depth, match := 0, -1
		for i := 0; i < len(sp.text) && match < 0; i++ {
			switch sp.text[i] {
			case '{':
				depth++
			case '}':
				if depth--; depth == 0 {
					match = i
				}
			}
		}
		if match < 0 {
			return sp, &Error{Key: KeyInvalidRuleFormat, Rule: rule, Token: "{", Pos: sp.pos, Msg: "unbalanced brace"}
		}
		if match != len(sp.text)-1 {
			return sp, nil
		}
		sp = span{sp.text[1:match], sp.pos + 1}
	}
}

// splitRules splits a value into its rules: the optional braces around the
// whole list and around each rule removed, empty rules skipped.
func splitRules(s string) ([]piece, error) {
	whole, err := unwrap(span{s, 0}, 0)
	if err != nil {
		return nil, err
	}
	var out []piece
	depth, start, n := 0, 0, 0
	t := whole.text
	for i := 0; i <= len(t); i++ {
		if i < len(t) {
			switch t[i] {
			case '{':
				depth++
				continue
			case '}':
				if depth--; depth < 0 {
					return nil, &Error{Key: KeyInvalidRuleFormat, Rule: n + 1, Token: "}", Pos: whole.pos + i, Msg: "unbalanced brace"}
				}
				continue
			case ';':
				if depth > 0 {
					continue
				}
			default:
				continue
			}
		}
		if depth > 0 {
			return nil, &Error{Key: KeyInvalidRuleFormat, Rule: n + 1, Token: "{", Pos: whole.pos + start, Msg: "unbalanced brace"}
		}
		n++
		sp, err := unwrap(span{t[start:i], whole.pos + start}, n)
		if err != nil {
			return nil, err
		}
		if k := strings.IndexAny(sp.text, "{};"); k >= 0 {
			return nil, &Error{Key: KeyInvalidRuleFormat, Rule: n, Token: sp.text[k : k+1], Pos: sp.pos + k,
				Msg: "braces may wrap a rule or the whole list, nothing else"}
		}
		if sp.text != "" {
			out = append(out, piece{sp, n})
		}
		start = i + 1
	}
	return out, nil
}
