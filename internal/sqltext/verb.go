package sqltext

import "strings"

// Verb returns the statement's verb, lower-cased: the first keyword past
// leading whitespace, "--" and "/* */" comments (nested or not), opening
// parentheses and semicolons, and past a common table expression prefix
//
//	WITH [RECURSIVE] name [(columns)] AS [[NOT] MATERIALIZED] (body)
//	     [SEARCH … SET col] [CYCLE … USING col] [, …]
//
// so that "WITH x AS (SELECT …) UPDATE t …" gives "update". Strings, quoted
// identifiers ("…", […], `…`), dollar-quoted strings and comments inside a
// CTE body are skipped, so parentheses inside them do not confuse it.
//
// The result is always empty or made of lower-case ASCII letters: a first word
// that is not all letters ("sp_who", "_x", "1") gives "", and so does a
// WITH prefix that does not parse ("with" is returned for it instead, so that
// it is never mistaken for a read). Verb does not allocate for the verbs of
// standard SQL and the dialects' common statements; an unknown verb written
// in upper case costs one allocation. Package crl's "verb" filter mode and the
// database/sql layer use it.
func Verb(statement string) string {
	l := lexer{s: statement}
	t := l.first()
	if t.kind == tokWord && l.is(t, "with") {
		t = l.skipCTEs()
		if t.kind == tokInvalid {
			return "with"
		}
	}
	if t.kind != tokWord {
		return ""
	}
	return l.lowerWord(t)
}

// IsReadOnly reports whether replaying statement cannot change what the
// database holds, judged from its text alone. It is conservative: when in
// doubt it says false, and false only means "ask the operation's consent".
//
// Read-only: SELECT (including SELECT … FOR UPDATE/SHARE: its locks are
// released when an autocommit statement ends, and a statement inside an
// explicit transaction is never replayed on its own), VALUES, TABLE, SHOW,
// and EXPLAIN/DESCRIBE/DESC without ANALYZE (which only plans); EXPLAIN
// ANALYZE runs its statement, so it is read-only only when that statement is.
//
// Not read-only: everything else, and also
//   - a statement with a data-modifying CTE (WITH x AS (DELETE …) SELECT …);
//   - SELECT … INTO (it creates a table, or writes a file or variables);
//   - several statements (a ";" followed by more text, or a T-SQL batch
//     such as "SELECT 1 DELETE t" — any write keyword anywhere gives false);
//   - nextval/setval calls (they advance a sequence);
//   - PRAGMA (SQLite: most pragmas set state; mark a reading pragma's Op
//     Idempotent yourself);
//   - text whose meaning differs between dialects: a backslash inside a
//     quoted string, "#", "/*!", a nested "/*", "--" not followed by a space.
//
// Functions with side effects called from a SELECT cannot be seen in the
// text; an Op that calls one must not rely on IsReadOnly.
func IsReadOnly(statement string) bool {
	return readOnly(statement, 0)
}

func readOnly(s string, depth int) bool {
	if depth > 4 {
		return false
	}
	l := lexer{s: s}
	t := l.first()
	if t.kind == tokWord && l.is(t, "with") {
		t = l.skipCTEs()
	}
	if t.kind != tokWord {
		return false
	}
	switch {
	case l.is(t, "select"), l.is(t, "values"), l.is(t, "table"):
		return noWrites(s, true)
	case l.is(t, "show"):
		// SHOW CREATE TABLE names a write verb but only reads.
		return noWrites(s, false)
	case l.is(t, "explain"), l.is(t, "describe"), l.is(t, "desc"):
		analyze := false
		for {
			t = l.next()
			switch t.kind {
			case tokEOF:
				return !l.unsure
			case tokInvalid:
				return false
			case tokPunct:
				if s[t.start] == ';' {
					return l.onlyTrivia()
				}
				continue
			case tokWord:
				if l.is(t, "analyze") || l.is(t, "analyse") {
					analyze = true
					continue
				}
				if !isStatementVerb(&l, t) {
					continue
				}
				if !analyze {
					// The plan only: but a second statement may follow.
					for {
						t = l.next()
						if t.kind == tokEOF {
							return !l.unsure
						}
						if t.kind == tokInvalid {
							return false
						}
						if t.kind == tokPunct && s[t.start] == ';' {
							return l.onlyTrivia()
						}
					}
				}
				return readOnly(s[t.start:], depth+1)
			}
		}
	}
	return false
}

// isStatementVerb reports whether t starts a statement EXPLAIN can explain.
func isStatementVerb(l *lexer, t token) bool {
	for _, v := range [...]string{"select", "insert", "update", "delete", "merge", "with", "values", "table", "replace", "upsert", "create", "declare", "execute", "exec", "call", "do"} {
		if l.is(t, v) {
			return true
		}
	}
	return false
}

// writeWords are the keywords whose presence anywhere (outside strings,
// quoted identifiers and comments) makes a statement not read-only.
var writeWords = [...]string{
	"insert", "update", "delete", "merge", "upsert", "replace", "into",
	"drop", "create", "alter", "truncate", "exec", "execute", "call",
	"grant", "revoke", "deny", "set", "declare", "begin", "commit",
	"rollback", "kill", "backup", "restore", "dbcc", "bulk", "lock",
	"nextval", "setval",
}

// noWrites scans the whole statement for a second statement, for
// dialect-ambiguous text and, if words, for write keywords.
func noWrites(s string, words bool) bool {
	l := lexer{s: s}
	var prev token
	for {
		t := l.next()
		switch t.kind {
		case tokEOF:
			return !l.unsure
		case tokInvalid:
			return false
		case tokPunct:
			if s[t.start] == ';' {
				return l.onlyTrivia()
			}
		case tokWord:
			if !words {
				break
			}
			for _, w := range writeWords {
				if !l.is(t, w) {
					continue
				}
				switch w {
				case "update":
					// SELECT … FOR UPDATE, FOR NO KEY UPDATE.
					if prev.kind == tokWord && (l.is(prev, "for") || l.is(prev, "key")) {
						continue
					}
				case "insert", "replace":
					// MySQL's INSERT(str, …) and everyone's REPLACE(str, …).
					if l.peekPunct('(') {
						continue
					}
				case "lock":
					// MySQL's LOCK IN SHARE MODE.
					if n := l.peek(); n.kind == tokWord && l.is(n, "in") {
						continue
					}
				}
				return false
			}
		}
		prev = t
	}
}

type tokKind uint8

const (
	tokEOF     tokKind = iota
	tokWord            // an unquoted identifier or keyword
	tokQuoted          // a quoted identifier
	tokString          // a string literal
	tokNumber          // a number or a $n parameter
	tokPunct           // one other character
	tokInvalid         // an unterminated string, identifier or parenthesis
)

type token struct {
	kind       tokKind
	start, end int
}

// lexer splits SQL text into tokens without allocating. It knows the quoting
// and comment rules that PostgreSQL, SQL Server, MySQL and SQLite share, and
// sets unsure when the text has a construct they read differently.
type lexer struct {
	s      string
	i      int
	unsure bool
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}

func isLetter(c byte) bool { return c|0x20 >= 'a' && c|0x20 <= 'z' }

func isWordByte(c byte) bool {
	return isLetter(c) || c >= '0' && c <= '9' || c == '_' || c == '$' || c >= 0x80
}

// skipTrivia skips whitespace and comments.
func (l *lexer) skipTrivia() {
	s := l.s
	for l.i < len(s) {
		c := s[l.i]
		switch {
		case isSpace(c):
			l.i++
		case c == '-' && l.i+1 < len(s) && s[l.i+1] == '-':
			// MySQL needs a space after "--"; elsewhere "--1" is a comment.
			if l.i+2 < len(s) && !isSpace(s[l.i+2]) {
				l.unsure = true
			}
			l.i += 2
			for l.i < len(s) && s[l.i] != '\n' {
				l.i++
			}
		case c == '/' && l.i+1 < len(s) && s[l.i+1] == '*':
			if l.i+2 < len(s) && s[l.i+2] == '!' {
				l.unsure = true // MySQL runs /*! … */
			}
			l.i += 2
			depth := 1
			for l.i < len(s) && depth > 0 {
				switch {
				case s[l.i] == '*' && l.i+1 < len(s) && s[l.i+1] == '/':
					depth--
					l.i += 2
				case s[l.i] == '/' && l.i+1 < len(s) && s[l.i+1] == '*':
					depth++
					l.unsure = true // MySQL does not nest comments
					l.i += 2
				default:
					l.i++
				}
			}
		default:
			return
		}
	}
}

// next returns the next token past trivia.
func (l *lexer) next() token {
	l.skipTrivia()
	s := l.s
	start := l.i
	if start >= len(s) {
		return token{kind: tokEOF, start: start, end: start}
	}
	c := s[start]
	switch {
	case isLetter(c) || c == '_' || c >= 0x80:
		l.i++
		for l.i < len(s) && isWordByte(s[l.i]) {
			l.i++
		}
		return token{tokWord, start, l.i}
	case c >= '0' && c <= '9':
		l.i++
		for l.i < len(s) && (isWordByte(s[l.i]) || s[l.i] == '.') {
			l.i++
		}
		return token{tokNumber, start, l.i}
	case c == '\'':
		return l.quoted(start, '\'', tokString)
	case c == '"':
		return l.quoted(start, '"', tokQuoted)
	case c == '`':
		return l.quoted(start, '`', tokQuoted)
	case c == '[':
		return l.quoted(start, ']', tokQuoted)
	case c == '$':
		// $1 parameter, or $tag$ … $tag$ dollar quoting.
		j := start + 1
		if j < len(s) && s[j] >= '0' && s[j] <= '9' {
			for j < len(s) && s[j] >= '0' && s[j] <= '9' {
				j++
			}
			l.i = j
			return token{tokNumber, start, j}
		}
		for j < len(s) && (isLetter(s[j]) || s[j] == '_' || s[j] >= '0' && s[j] <= '9' && j > start+1) {
			j++
		}
		if j < len(s) && s[j] == '$' {
			tag := s[start : j+1]
			if k := strings.Index(s[j+1:], tag); k >= 0 {
				l.i = j + 1 + k + len(tag)
				return token{tokString, start, l.i}
			}
			l.i = len(s)
			return token{tokInvalid, start, l.i}
		}
		l.i++
		return token{tokPunct, start, l.i}
	case c == '#':
		l.unsure = true // a comment in MySQL, an operator or a temp table elsewhere
	}
	l.i++
	return token{tokPunct, start, l.i}
}

// quoted reads a token quoted by s[start] and closed by end, where a doubled
// closing character stands for itself.
func (l *lexer) quoted(start int, end byte, kind tokKind) token {
	s := l.s
	j := start + 1
	for j < len(s) {
		switch s[j] {
		case '\\':
			if end != ']' && end != '`' {
				l.unsure = true // MySQL escapes with backslashes; the others do not
			}
		case end:
			if j+1 < len(s) && s[j+1] == end {
				j += 2
				continue
			}
			l.i = j + 1
			return token{kind, start, l.i}
		}
		j++
	}
	l.i = len(s)
	return token{tokInvalid, start, l.i}
}

// first returns the first token past leading "(" and ";".
func (l *lexer) first() token {
	for {
		t := l.next()
		if t.kind == tokPunct && (l.s[t.start] == '(' || l.s[t.start] == ';') {
			continue
		}
		return t
	}
}

func (l *lexer) peek() token {
	c := *l
	return c.next()
}

func (l *lexer) peekPunct(c byte) bool {
	t := l.peek()
	return t.kind == tokPunct && l.s[t.start] == c
}

// onlyTrivia reports whether nothing but trivia and semicolons is left.
func (l *lexer) onlyTrivia() bool {
	for {
		t := l.next()
		switch {
		case t.kind == tokEOF:
			return !l.unsure
		case t.kind == tokPunct && l.s[t.start] == ';':
		default:
			return false
		}
	}
}

// is reports whether word token t is kw (lower-case), ignoring ASCII case.
func (l *lexer) is(t token, kw string) bool {
	if t.end-t.start != len(kw) {
		return false
	}
	w := l.s[t.start:t.end]
	for i := 0; i < len(kw); i++ {
		c := w[i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != kw[i] {
			return false
		}
	}
	return true
}

// skipBalanced skips from just past an opening parenthesis to just past its
// matching closing one. It reports false if there is none.
func (l *lexer) skipBalanced() bool {
	depth := 1
	for depth > 0 {
		t := l.next()
		switch t.kind {
		case tokEOF, tokInvalid:
			return false
		case tokPunct:
			switch l.s[t.start] {
			case '(':
				depth++
			case ')':
				depth--
			}
		}
	}
	return true
}

// skipCTEs skips the CTE list after WITH and returns the main statement's
// first token (past opening parentheses), or a tokInvalid token if the list
// does not parse.
func (l *lexer) skipCTEs() token {
	bad := token{kind: tokInvalid}
	t := l.next()
	if t.kind == tokWord && l.is(t, "recursive") {
		t = l.next()
	}
	for n := 0; ; n++ {
		if n > len(l.s) {
			return bad
		}
		if t.kind != tokWord && t.kind != tokQuoted {
			return bad
		}
		t = l.next()
		if t.kind == tokPunct && l.s[t.start] == '(' {
			if !l.skipBalanced() {
				return bad
			}
			t = l.next()
		}
		if t.kind != tokWord || !l.is(t, "as") {
			return bad
		}
		t = l.next()
		if t.kind == tokWord && l.is(t, "not") {
			t = l.next()
			if t.kind != tokWord || !l.is(t, "materialized") {
				return bad
			}
			t = l.next()
		} else if t.kind == tokWord && l.is(t, "materialized") {
			t = l.next()
		}
		if t.kind != tokPunct || l.s[t.start] != '(' || !l.skipBalanced() {
			return bad
		}
		t = l.next()
		// PostgreSQL 14: SEARCH … SET col, CYCLE … [SET …] USING col.
		for t.kind == tokWord && (l.is(t, "search") || l.is(t, "cycle")) {
			end := "set"
			if l.is(t, "cycle") {
				end = "using"
			}
			for {
				t = l.next()
				if t.kind == tokEOF || t.kind == tokInvalid {
					return bad
				}
				if t.kind == tokWord && l.is(t, end) {
					break
				}
			}
			l.next() // the column
			t = l.next()
		}
		if t.kind == tokPunct && l.s[t.start] == ',' {
			t = l.next()
			continue
		}
		for t.kind == tokPunct && l.s[t.start] == '(' {
			t = l.next()
		}
		if t.kind == tokWord && l.is(t, "with") {
			// A nested WITH after the list: (WITH a AS (…) SELECT …).
			return l.skipCTEs()
		}
		return t
	}
}

// knownVerbs are returned without allocating whatever their case.
var knownVerbs = [...]string{
	"select", "insert", "update", "delete", "merge", "upsert", "replace",
	"with", "values", "table", "show", "explain", "describe", "desc",
	"pragma", "call", "exec", "execute", "create", "alter", "drop",
	"truncate", "grant", "revoke", "deny", "begin", "start", "commit",
	"rollback", "savepoint", "release", "set", "reset", "declare", "lock",
	"unlock", "analyze", "analyse", "vacuum", "copy", "prepare",
	"deallocate", "listen", "notify", "unlisten", "refresh", "reindex",
	"cluster", "comment", "do", "fetch", "move", "close", "open", "use",
	"load", "handler", "import", "checkpoint", "discard", "reassign",
	"security", "waitfor", "print", "raiserror", "throw", "if", "while",
	"return", "backup", "restore", "dbcc", "bulk", "kill", "reconfigure",
	"shutdown", "save", "go", "attach", "detach", "abort", "end", "rename",
	"optimize", "repair", "check", "checksum", "flush", "purge", "reset",
	"xa", "get", "put", "remove", "list", "undrop", "use", "upsert",
}

// lowerWord returns word token t lower-cased, or "" if it is not all letters.
func (l *lexer) lowerWord(t token) string {
	w := l.s[t.start:t.end]
	lower := true
	for i := 0; i < len(w); i++ {
		c := w[i]
		if !isLetter(c) {
			return ""
		}
		if c < 'a' {
			lower = false
		}
	}
	if lower {
		return w
	}
	for _, v := range knownVerbs {
		if l.is(t, v) {
			return v
		}
	}
	return strings.ToLower(w)
}
