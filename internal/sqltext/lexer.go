package sqltext

// dialect selects the lexical rules the lexer follows. The analysis does not
// know which engine will run a text, so [IsReadOnly] and [Analyze] read it
// under the rules of every engine sqlretry supports, and of every setting
// that changes those rules, and trust only what all of them agree on: a text
// is read-only only if it is read-only in every dialect, and one statement
// only if it is one statement in every dialect.
//
// The rules followed, from each engine's documentation:
//
//   - PostgreSQL: '…' with a doubled quote for a quote and, when
//     standard_conforming_strings is off, backslash escapes; E'…' always
//     with backslash escapes; U&'…', B'…', X'…' never; "…" and U&"…"
//     identifiers; $tag$…$tag$ strings whose tag follows identifier rules
//     (letters include every byte above 0x7F); $1 parameters; "--" comments
//     to the end of the line (\n or \r); nested /* */ comments. "[", "#"
//     and "`" are operator characters.
//   - MySQL and MariaDB: '…' and, unless sql_mode has ANSI_QUOTES, "…"
//     strings with backslash escapes unless sql_mode has
//     NO_BACKSLASH_ESCAPES; `…` identifiers; "#" comments; "--" a comment
//     only before a space or a control character; /* */ comments that do
//     not nest; /*! … */, /*!NNNNN … */ and /*M! … */ comments whose
//     content the server runs; "$" is an identifier character. Under a
//     connection character set such as GBK, Big5, SJIS or GB18030 a byte
//     from 0x81 to 0xFE starts a two-byte character whose second byte may
//     be a "\" or a "`".
//   - SQL Server: '…' and N'…' without backslash escapes; […] identifiers
//     with ]] for "]"; "…" identifiers (or strings, with the same
//     boundaries); nested /* */ comments; "@" and "#" begin identifiers; a
//     batch needs no ";" between statements.
//   - SQLite: '…' without backslash escapes; "…", `…` and […] identifiers
//     ("]" cannot be escaped); /* */ comments that do not nest and may run
//     to the end of the text; "--" comments to \n.
type dialect uint8

const (
	// anyDialect, the zero value, knows every engine's quotes at once
	// ('…', "…", `…`, […], $tag$…$tag$) and sets unsure where the engines
	// read the text differently. [Verb] and [Session] use it.
	anyDialect        dialect = iota
	dlPostgres                // standard_conforming_strings on, the default since 9.1
	dlPostgresEscape          // standard_conforming_strings off: '…' takes backslash escapes
	dlMySQL                   // MySQL and MariaDB, default sql_mode: "…" is a string, backslash escapes
	dlMySQLNoEscape           // sql_mode NO_BACKSLASH_ESCAPES
	dlMySQLANSIQuotes         // sql_mode ANSI_QUOTES: "…" is an identifier
	dlMySQLMultibyte          // a GBK, Big5 or SJIS connection: 0x81-0xFE starts a two-byte character
	dlSQLServer
	dlSQLite
	numDialects
)

func (d dialect) postgres() bool { return d == dlPostgres || d == dlPostgresEscape }
func (d dialect) mysql() bool {
	return d == dlMySQL || d == dlMySQLNoEscape || d == dlMySQLANSIQuotes || d == dlMySQLMultibyte
}

// mbLead reports whether, in dialect d, s[j] starts a two-byte character
// whose second byte may be ASCII.
func (d dialect) mbLead(s string, j int) bool {
	return d == dlMySQLMultibyte && s[j] >= 0x81 && s[j] <= 0xfe && j+1 < len(s) && s[j+1] >= 0x40
}

// divergent reports whether s holds a byte sequence that some dialects read
// differently from PostgreSQL's default rules. When it does not, every
// dialect splits s into the same tokens, except that SQL Server reads "@x"
// as one word where the others read "@" and "x" (which only shows them more
// keywords), so the PostgreSQL reading stands for all of them. FuzzAnalyze
// checks that claim.
func divergent(s string) bool {
	comments := 0
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= 0x81 && c <= 0xfe && i+1 < len(s) && s[i+1] >= 0x40 && s[i+1] <= 0x7f && !isWordByte(s[i+1]) {
			// A multibyte connection (GBK, Big5, SJIS) reads the pair as
			// one character of a name: "\x99^lower(" calls a function
			// named \x99^lower there, where the others read \x99, "^" and
			// lower(.
			return true
		}
		switch s[i] {
		case '\\', '#', '[', '`', '$', 0, '\r':
			return true
		case '@':
			if i > 0 && isWordByte(s[i-1]) || i+1 < len(s) && isWordByte(s[i+1]) {
				// SQL Server: "a@b" is one name, "@commit" a variable
				// where others read the operator @ before COMMIT.
				return true
			}
		case '-':
			if i+1 < len(s) && s[i+1] == '-' {
				if i+2 < len(s) && !mysqlDashSpace(s[i+2]) {
					return true // a comment everywhere but in MySQL
				}
				i++
			}
		case '/':
			if i+1 < len(s) && s[i+1] == '*' {
				comments++
				if comments > 1 {
					return true // a comment may nest in one dialect and not in another
				}
				if i+2 < len(s) && (s[i+2] == '!' || s[i+2] == 'M') {
					return true // MySQL runs /*! … */ and /*M! … */
				}
				i++
			}
		}
	}
	return false
}

// mysqlDashSpace reports whether c, after "--", makes a comment in MySQL and
// MariaDB: a space or a control character.
func mysqlDashSpace(c byte) bool { return c <= ' ' || c == 0x7f }

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

// lexer splits SQL text into tokens without allocating, under the rules of
// dialect d. It sets unsure when the text has a construct that the dialect
// itself may read in more than one way (anyDialect: that the engines read
// differently).
type lexer struct {
	s      string
	i      int
	d      dialect
	unsure bool
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}

func isLetter(c byte) bool { return c|0x20 >= 'a' && c|0x20 <= 'z' }

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isHex(c byte) bool { return isDigit(c) || c|0x20 >= 'a' && c|0x20 <= 'f' }

func isWordByte(c byte) bool {
	return isLetter(c) || isDigit(c) || c == '_' || c == '$' || c >= 0x80
}

// isTagByte reports whether c may stand in a PostgreSQL dollar-quote tag
// (digits only after the first byte).
func isTagByte(c byte) bool { return isLetter(c) || c == '_' || c >= 0x80 }

// skipTrivia skips whitespace and comments.
func (l *lexer) skipTrivia() {
	s := l.s
	for l.i < len(s) {
		c := s[l.i]
		switch {
		case isSpace(c):
			l.i++
		case c == 0:
			// PostgreSQL and SQLite stop reading at a NUL; MySQL reads on.
			l.unsure = true
			l.i++
		case c == '-' && l.i+1 < len(s) && s[l.i+1] == '-':
			if l.d.mysql() && l.i+2 < len(s) && !mysqlDashSpace(s[l.i+2]) {
				return // "--1" is minus minus one
			}
			if l.d == anyDialect && l.i+2 < len(s) && !isSpace(s[l.i+2]) {
				l.unsure = true
			}
			l.lineComment(l.i + 2)
		case c == '#' && l.d.mysql():
			l.lineComment(l.i + 1)
		case c == '/' && l.i+1 < len(s) && s[l.i+1] == '*':
			l.blockComment()
		default:
			return
		}
	}
}

// lineComment skips a comment whose text starts at j, to the end of its line.
func (l *lexer) lineComment(j int) {
	s := l.s
	for ; j < len(s) && s[j] != '\n'; j++ {
		if s[j] == '\r' {
			switch l.d {
			case dlPostgres, dlPostgresEscape:
				l.i = j // PostgreSQL ends a comment at \r too
				return
			case anyDialect, dlSQLServer:
				if j+1 >= len(s) || s[j+1] != '\n' {
					l.unsure = true // where SQL Server ends it is not documented
				}
			}
		}
	}
	l.i = j
}

// blockComment skips a /* */ comment, nested or not as the dialect has it.
// An unterminated one runs to the end of the text (SQLite's rule; the other
// engines reject the text).
func (l *lexer) blockComment() {
	s := l.s
	if (l.d == anyDialect || l.d.mysql()) && l.i+2 < len(s) &&
		(s[l.i+2] == '!' || s[l.i+2] == 'M' && l.i+3 < len(s) && s[l.i+3] == '!') {
		l.unsure = true // MySQL and MariaDB run what /*! … */ and /*M! … */ hold
	}
	nest := l.d == anyDialect || l.d.postgres() || l.d == dlSQLServer
	l.i += 2
	depth := 1
	for l.i < len(s) && depth > 0 {
		switch {
		case s[l.i] == '*' && l.i+1 < len(s) && s[l.i+1] == '/':
			depth--
			l.i += 2
		case nest && s[l.i] == '/' && l.i+1 < len(s) && s[l.i+1] == '*':
			depth++
			if l.d == anyDialect {
				l.unsure = true // MySQL and SQLite do not nest comments
			}
			l.i += 2
		default:
			l.i++
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
	d := l.d
	switch {
	case isLetter(c) || c == '_' || c >= 0x80 || c == '$' && d.mysql() ||
		(c == '@' || c == '#') && d == dlSQLServer:
		return l.word(start)
	case isDigit(c):
		l.i = l.number(start)
		return token{tokNumber, start, l.i}
	case c == '\'':
		bs := d == dlPostgresEscape || d == dlMySQL || d == dlMySQLANSIQuotes || d == dlMySQLMultibyte
		return l.quoted(start, '\'', tokString, bs)
	case c == '"':
		if d == dlMySQL || d == dlMySQLNoEscape || d == dlMySQLMultibyte {
			return l.quoted(start, '"', tokString, d != dlMySQLNoEscape)
		}
		return l.quoted(start, '"', tokQuoted, false)
	case c == '`' && (d == anyDialect || d.mysql() || d == dlSQLite):
		return l.quoted(start, '`', tokQuoted, false)
	case c == '[' && (d == anyDialect || d == dlSQLServer):
		return l.quoted(start, ']', tokQuoted, false)
	case c == '[' && d == dlSQLite:
		// SQLite: […] has no escape; the first "]" ends it.
		for j := start + 1; j < len(s); j++ {
			if s[j] == ']' {
				l.i = j + 1
				return token{tokQuoted, start, l.i}
			}
		}
		l.i = len(s)
		return token{tokInvalid, start, l.i}
	case c == '$' && (d == anyDialect || d.postgres()):
		if t, ok := l.dollar(start); ok {
			return t
		}
	case c == '#' && d == anyDialect:
		l.unsure = true // a comment in MySQL, an operator or a temp table elsewhere
	}
	l.i = start + 1
	return token{tokPunct, start, l.i}
}

// word reads the word that starts at start, or PostgreSQL's prefixed strings:
// E'…' takes backslash escapes, B'…', X'…', U&'…' and U&"…" never do.
func (l *lexer) word(start int) token {
	s, d, c := l.s, l.d, l.s[start]
	j := start
	for j < len(s) && (j == start || isWordByte(s[j]) || d == dlSQLServer && (s[j] == '@' || s[j] == '#')) {
		if d.mbLead(s, j) {
			j++
		}
		j++
	}
	if d.postgres() && j == start+1 && j < len(s) {
		switch c | 0x20 {
		case 'e':
			if s[j] == '\'' {
				return l.quoted(j, '\'', tokString, true)
			}
		case 'b', 'x':
			if s[j] == '\'' {
				return l.quoted(j, '\'', tokString, false)
			}
		case 'u':
			if s[j] == '&' && j+1 < len(s) && s[j+1] == '\'' {
				return l.quoted(j+1, '\'', tokString, false)
			}
			if s[j] == '&' && j+1 < len(s) && s[j+1] == '"' {
				return l.quoted(j+1, '"', tokQuoted, false)
			}
		}
	}
	l.i = j
	return token{tokWord, start, j}
}

// dollar reads a $1 parameter or a $tag$ … $tag$ dollar-quoted string at
// start; ok is false for a lone "$".
func (l *lexer) dollar(start int) (token, bool) {
	s := l.s
	j := start + 1
	if j < len(s) && isDigit(s[j]) {
		for j < len(s) && isDigit(s[j]) {
			j++
		}
		l.i = j
		return token{tokNumber, start, j}, true
	}
	if j < len(s) && isTagByte(s[j]) {
		for j < len(s) && (isTagByte(s[j]) || isDigit(s[j])) {
			j++
		}
	}
	if j >= len(s) || s[j] != '$' {
		return token{}, false
	}
	tag := s[start : j+1]
	for k := j + 1; k+len(tag) <= len(s); k++ {
		if s[k] == '$' && s[k:k+len(tag)] == tag {
			l.i = k + len(tag)
			return token{tokString, start, l.i}, true
		}
	}
	l.i = len(s)
	return token{tokInvalid, start, l.i}, true
}

// number returns the end of the number that starts at start: digits with an
// optional fraction and exponent, or 0x and hex digits. Letters right after
// it start a new token, as in SQL Server and PostgreSQL ("1delete" is 1 and
// DELETE there, an identifier in MySQL, where reading it as a keyword is only
// more careful).
func (l *lexer) number(start int) int {
	s := l.s
	j := start + 1
	if s[start] == '0' && j+1 < len(s) && s[j]|0x20 == 'x' && isHex(s[j+1]) {
		j++
		for j < len(s) && isHex(s[j]) {
			j++
		}
		return j
	}
	for j < len(s) && isDigit(s[j]) {
		j++
	}
	if j < len(s) && s[j] == '.' {
		j++
		for j < len(s) && isDigit(s[j]) {
			j++
		}
	}
	if j < len(s) && s[j]|0x20 == 'e' {
		k := j + 1
		if k < len(s) && (s[k] == '+' || s[k] == '-') {
			k++
		}
		if k < len(s) && isDigit(s[k]) {
			for k < len(s) && isDigit(s[k]) {
				k++
			}
			j = k
		}
	}
	return j
}

// quoted reads a token quoted by s[start] and closed by end, where a doubled
// closing character stands for itself and, if bs, a backslash escapes the
// character after it.
func (l *lexer) quoted(start int, end byte, kind tokKind, bs bool) token {
	s := l.s
	j := start + 1
	for j < len(s) {
		if l.d.mbLead(s, j) {
			j += 2
			continue
		}
		switch s[j] {
		case '\\':
			if bs {
				j += 2
				continue
			}
			if l.d == anyDialect && end != ']' && end != '`' {
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

// punct reports whether t is the punctuation character c.
func (l *lexer) punct(t token, c byte) bool { return t.kind == tokPunct && l.s[t.start] == c }

// onlyTrivia reports whether nothing but trivia and semicolons is left.
func (l *lexer) onlyTrivia() bool {
	for {
		t := l.next()
		switch {
		case t.kind == tokEOF:
			return !l.unsure
		case l.punct(t, ';'):
		default:
			return false
		}
	}
}

// is reports whether word token t is kw (lower-case), ignoring ASCII case.
func (l *lexer) is(t token, kw string) bool { return EqualFold(l.s[t.start:t.end], kw) }

// EqualFold reports whether w is kw (lower-case), ignoring ASCII case: the
// one fold the SQL text analysis and crl's query filters share.
func EqualFold(w, kw string) bool {
	if len(w) != len(kw) {
		return false
	}
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

// hasPrefix reports whether word token t starts with prefix (lower-case),
// ignoring ASCII case.
func (l *lexer) hasPrefix(t token, prefix string) bool {
	if t.end-t.start < len(prefix) {
		return false
	}
	return l.is(token{t.kind, t.start, t.start + len(prefix)}, prefix)
}

// skipBalanced skips from just past an opening parenthesis to just past its
// matching closing one. It reports false if there is none.
func (l *lexer) skipBalanced() bool {
	depth := 1
	for depth > 0 {
		t := l.next()
		if t.kind == tokEOF || t.kind == tokInvalid {
			return false
		}
		depth += l.nesting(t)
	}
	return true
}

// nesting is how token t moves the parenthesis depth: +1 for "(", -1 for
// ")", 0 for anything else. Every walk that tracks the depth uses it.
func (l *lexer) nesting(t token) int {
	switch {
	case l.punct(t, '('):
		return 1
	case l.punct(t, ')'):
		return -1
	}
	return 0
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
		// The name: a word or a quoted identifier ("…" is a string in
		// MySQL's default mode, where the engine rejects it).
		if t.kind != tokWord && t.kind != tokQuoted && t.kind != tokString {
			return bad
		}
		t = l.next()
		if l.punct(t, '(') {
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
		if !l.punct(t, '(') || !l.skipBalanced() {
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
		if l.punct(t, ',') {
			t = l.next()
			continue
		}
		for l.punct(t, '(') {
			t = l.next()
		}
		if t.kind == tokWord && l.is(t, "with") {
			// A nested WITH after the list: (WITH a AS (…) SELECT …).
			return l.skipCTEs()
		}
		return t
	}
}
