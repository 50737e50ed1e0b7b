package sqltext

import "strings"

// Session is what the SQL text a connection has run says about its
// transaction state. The zero Session is a session known to be in
// autocommit mode with no transaction open: the only state in which a
// statement may be replayed on its own or on a new connection.
//
// It is tracked from the text alone, conservatively: whatever it cannot read
// for sure (a prepared "SET autocommit = ?", a CALL whose procedure may leave
// a transaction open, a multi-part text that failed half way, a nested
// BEGIN) leaves the session Unsure, which pins it like an open transaction.
// A new connection starts a new Session of its engine ([NewSession]), in
// the state the connection reported, or Unsure where it could not.
type Session struct {
	engine    Engine
	open      bool // a transaction opened in SQL text is open
	savepoint bool // ... and SAVEPOINT opened it (SQLite: RELEASE of it commits)
	manual    bool // autocommit is off (SET autocommit=0, SET IMPLICIT_TRANSACTIONS ON)
	txUnsure  bool // a transaction may be open; cleared by a plain ROLLBACK
	modeOff   bool // autocommit may be off; cleared by a definite SET autocommit=1
	chain     bool // MySQL completion_type=CHAIN: a plain COMMIT or ROLLBACK opens the next transaction
	lost      bool // nothing the text says can be trusted until the session ends
}

// Engine is the database engine a session is on, for the few statements
// whose effect on the transaction state differs between engines. The zero
// value, AnyEngine, assumes whatever any engine may do.
type Engine uint8

const (
	AnyEngine Engine = iota
	Postgres         // a procedure or DO block cannot leave a transaction open
	MySQL            // a procedure may leave one open and set autocommit
	SQLServer        // a procedure that leaves one open fails with error 266
	SQLite           // no procedures
)

// straysAct reports whether a word of transaction control inside a
// statement can act on the session: on SQL Server, whose batches need no
// ";" between statements (UPDATE t SET a = 1 COMMIT), and on SQLite, whose
// INSERT OR ROLLBACK rolls the transaction back. On PostgreSQL and MySQL a
// statement starts only after a ";": ON COMMIT DROP or a column named
// begin changes nothing.
func (e Engine) straysAct() bool { return e != Postgres && e != MySQL }

// hasAutocommitMode reports whether the engine's sessions can turn
// autocommit off (MySQL's SET autocommit, SQL Server's
// IMPLICIT_TRANSACTIONS). On PostgreSQL and SQLite nothing can, and a
// session taken as "autocommit may be off" could never be cleared: it
// would stay pinned, without retries, until it closed.
func (e Engine) hasAutocommitMode() bool { return e != Postgres && e != SQLite }

// notACall reports whether t, at this lexer's position, is EXEC or EXECUTE
// standing as a word of another statement rather than starting a call:
// PostgreSQL's CREATE TRIGGER … EXECUTE FUNCTION f(), GRANT or REVOKE
// EXECUTE ON …, a privilege list (GRANT SELECT, EXECUTE ON …). A T-SQL
// EXEC is never followed by ON, FUNCTION or PROCEDURE (reserved words) or
// a comma.
func (l *lexer) notACall(t token) bool {
	if t.kind != tokWord || !l.isAny(t, "exec", "execute") {
		return false
	}
	n := l.peek()
	return l.punct(n, ',') || n.kind == tokWord && l.isAny(n, "on", "function", "procedure")
}

// blockNesting counts the blocks of a body that runs later, not now:
// PostgreSQL's BEGIN ATOMIC … END (a SQL-standard function body), and in a
// CREATE statement (body) MySQL's BEGIN … END of a procedure, function,
// trigger or event, whose statements end in ";". Inside one, CASE, IF,
// LOOP, WHILE and REPEAT open blocks too, and END (END IF, END LOOP …)
// closes one. open is the count so far. Counting too many (IF(a, b, c) is
// a function) only keeps the rest of the text in the body, which is read as
// running nothing: a transaction believed open stays pinned. Counting too
// few would read a body's COMMIT or SET autocommit as run now.
func (l *lexer) blockNesting(t token, open int, body bool) int {
	switch {
	case t.kind != tokWord:
		return 0
	case l.is(t, "begin") && (body || open > 0 || l.peekWordIs("atomic")):
		return 1
	case open > 0 && l.isAny(t, blockWords[:]...):
		return 1
	case open > 0 && l.is(t, "end"):
		if n := l.peek(); n.kind == tokWord && l.isAny(n, blockWords[:]...) {
			l.next() // END IF closes the IF, and opens nothing
		}
		return -1
	}
	return 0
}

// blockWords open a block that END closes inside a body.
var blockWords = [...]string{"case", "if", "loop", "while", "repeat"}

// NewSession returns the state of a new session on engine: autocommit on
// with no transaction open when autocommit is true, autocommit off when it
// is false. A session whose state could not be read should be started
// Unknown instead.
func NewSession(engine Engine, autocommit bool) Session {
	return Session{engine: engine, manual: !autocommit}
}

// UnknownSession returns the state of a new session on engine whose
// transaction state could not be read: Unsure until a plain ROLLBACK and a
// definite SET autocommit=1 settle it.
func UnknownSession(engine Engine) Session {
	return Session{engine: engine, txUnsure: true, modeOff: true}
}

// Pinned reports whether a statement on the session must run as it is, on
// this connection, with no retry and no reconnect: a transaction is or may
// be open, or autocommit is or may be off. A statement replayed on its own
// there would run outside the transaction its earlier statements belong to.
func (s Session) Pinned() bool {
	return s.open || s.manual || s.txUnsure || s.modeOff || s.lost
}

// hidden reports whether the session's engine may read in text a word of
// transaction control the shared reading does not see: a dialect's quoting
// (a BEGIN after a string MySQL ends elsewhere), or a MySQL executable
// comment, whose body MySQL and MariaDB run (/*! START TRANSACTION */,
// /*!40101 SET autocommit=0 */).
func (s Session) hidden(text string) bool {
	mysql := s.engine == AnyEngine || s.engine == MySQL
	if mysql && execComment(text) {
		return true
	}
	if !divergent(text) {
		return false
	}
	if _, _, c := shapeIn(text, anyDialect); c {
		return false
	}
	for d := dlPostgres; d < numDialects; d++ {
		if s.engine.reads(d) {
			if _, _, c := shapeIn(text, d); c {
				return true
			}
		}
	}
	return false
}

// execComment reports whether text may hold a MySQL executable comment
// (/*! … */, MariaDB's /*M! … */), whose body MySQL runs as code.
func execComment(text string) bool {
	return strings.Contains(text, "/*!") || strings.Contains(text, "/*M!") || strings.Contains(text, "/*m!")
}

// MayAutocommit reports whether a statement run now may commit as it ends:
// no transaction is known to be open and autocommit is not known to be off
// (an Unsure session may be in autocommit mode).
func (s Session) MayAutocommit() bool { return !s.open && !s.manual }

// Unsure reports whether the state is not known for certain.
func (s Session) Unsure() bool { return s.txUnsure || s.modeOff || s.lost }

// After returns the session's state after it ran text, which failed if
// failed is set. A text with no [Info.TxControl] leaves the state as it is.
//
// A text of transaction control that failed may have done its work or not
// (a COMMIT refused before it was sent leaves the transaction open; one that
// failed in flight may have committed): the state is whatever it was, or
// whatever the text would have made it, so it turns Unsure.
func (s Session) After(text string, failed bool) Session {
	before := s
	tx, mode := false, false
	stray := forEachStatement(text, func(l *lexer, first token) {
		var c, m bool
		s, c, m = s.apply(l, first)
		tx, mode = tx || c, mode || m
	})
	if stray && s.engine.straysAct() || s.hidden(text) {
		// A word of transaction control inside a statement (a T-SQL batch
		// with no ";", SQLite's INSERT OR ROLLBACK), or one only some
		// engine's reading shows (MySQL's /*!…*/): what it did to the
		// session cannot be read from the text.
		s.txUnsure = true
		s.modeOff = s.modeOff || s.engine.hasAutocommitMode()
	}
	if (tx || mode) && divergent(text) && before.readsOtherwise(text, s) {
		// The session's engine reads this text otherwise than the shared
		// reading that acted on it (a # comment, a backslash escape, an
		// E-string): the word it acted on may stand inside a comment or a
		// string there, and the engine never ran it.
		s.txUnsure = true
		s.modeOff = s.modeOff || mode || s.engine.hasAutocommitMode()
	}
	if failed && tx {
		s = before
		s.txUnsure = true
		s.modeOff = s.modeOff || mode
	}
	return s
}

// readsOtherwise reports whether one of the readings of text by s's engine
// (each of its dialects) leaves the session in another state than shared,
// the state after the shared reading.
func (s Session) readsOtherwise(text string, shared Session) bool {
	for d := dlPostgres; d < numDialects; d++ {
		if !s.engine.reads(d) {
			continue
		}
		t := s
		forEachStatementIn(text, d, func(l *lexer, first token) { t, _, _ = t.apply(l, first) })
		if t != shared {
			return true
		}
	}
	return false
}

// reads reports whether dialect d is one of the ways the engine reads text.
func (e Engine) reads(d dialect) bool {
	return e == AnyEngine || e == Postgres && d.postgres() || e == MySQL && d.mysql() ||
		e == SQLServer && d == dlSQLServer || e == SQLite && d == dlSQLite
}

// EndsTx reports whether text, run inside an open transaction on engine,
// may end it, commit part of it or leave its state unknown, as [Session.After]
// reads it; a word of transaction control that acts on nothing there (ON
// COMMIT DROP on PostgreSQL) does not.
func EndsTx(engine Engine, text string) bool {
	s := Session{engine: engine, open: true}
	return s.After(text, false) != s
}

// apply returns the state after one statement whose first token is first,
// whether the statement is one of transaction control, and whether it may
// change the autocommit mode.
func (s Session) apply(l *lexer, first token) (Session, bool, bool) {
	if first.kind != tokWord {
		return s, false, false
	}
	switch {
	case l.is(first, "begin"):
		return s.begin(l), true, false
	case l.is(first, "start"):
		if n := l.next(); n.kind == tokWord && l.is(n, "transaction") {
			return s.opens(false), true, false
		}
		return s, false, false
	case l.is(first, "savepoint"):
		if !s.open {
			return s.opens(true), true, false
		}
		return s, true, false
	case l.is(first, "release"):
		if s.savepoint {
			// SQLite: releasing the savepoint that opened the
			// transaction commits it; releasing an inner one does not.
			s.txUnsure = true
		}
		return s, true, false
	case l.isAny(first, "commit", "end", "rollback", "abort"):
		if l.isAny(first, "commit", "rollback") && l.peekWordIs("prepared") {
			return s, true, false // PostgreSQL: ends a prepared transaction, not the session's
		}
		return s.ends(l, l.isAny(first, "rollback", "abort")), true, false
	case l.is(first, "prepare"):
		// PostgreSQL's PREPARE TRANSACTION 'id' ends the session's
		// transaction; PREPARE name AS … prepares a statement.
		if l.peekWordIs("transaction") {
			s.open, s.savepoint = false, false
			return s, true, false
		}
		return s, false, false
	case l.is(first, "xa"):
		return s.xa(l), true, false
	case l.is(first, "set"):
		return s.set(l)
	case l.isAny(first, "call", "exec", "execute", "if", "while"):
		return s.code(l.isAny(first, "if", "while"))
	}
	return s, false, false
}

// begin reads BEGIN: a transaction, or a T-SQL block (BEGIN … END, BEGIN
// TRY) or MariaDB compound statement (BEGIN NOT ATOMIC … END), which may
// open or end anything.
func (s Session) begin(l *lexer) Session {
	if l.peekWordIs("not") {
		c := *l
		c.next()
		if c.peekWordIs("atomic") {
			s, _, _ = s.code(true)
			return s
		}
	}
	switch n := l.next(); {
	case n.kind == tokEOF, l.punct(n, ';'),
		n.kind == tokWord && l.isAny(n, "transaction", "work", "tran", "deferred", "immediate", "exclusive",
			"isolation", "read", "deferrable", "not", "distributed"):
		return s.opens(false)
	}
	s.txUnsure = true
	return s
}

// xa reads MySQL's XA START/BEGIN (opens), XA COMMIT/ROLLBACK (ends), and
// leaves the others (END, PREPARE, RECOVER) as they are.
func (s Session) xa(l *lexer) Session {
	switch n := l.next(); {
	case n.kind != tokWord:
		s.txUnsure = true
	case l.isAny(n, "start", "begin"):
		return s.opens(false)
	case l.isAny(n, "commit", "rollback"):
		s.open, s.savepoint = false, false
	}
	return s
}

// code reads a procedure call (CALL, EXEC, EXECUTE) or a T-SQL block (IF,
// WHILE): what it does to the transaction depends on the engine.
func (s Session) code(block bool) (Session, bool, bool) {
	switch {
	case s.engine == Postgres:
		// A procedure or EXECUTE of a prepared statement cannot leave a
		// transaction open, nor is there an autocommit mode.
		return s, true, false
	case s.engine == SQLServer && !block:
		// A procedure that leaves a transaction open fails (error 266),
		// and SET options made in it end with it; a failed one turns the
		// session Unsure in After.
		return s, true, false
	}
	// A procedure (MySQL) or a T-SQL block may leave a transaction open,
	// and a MySQL procedure may set autocommit: nothing in the text says.
	s.txUnsure = true
	if s.engine != SQLServer && s.engine.hasAutocommitMode() {
		s.modeOff = true
	}
	return s, true, true
}

func (s Session) opens(bySavepoint bool) Session {
	if s.open || s.manual {
		// A nested BEGIN: SQL Server counts it, MySQL commits the open
		// transaction and starts another, PostgreSQL warns and ignores it.
		s.txUnsure = true
		return s
	}
	s.open, s.savepoint = true, bySavepoint
	return s
}

// ends reads the rest of COMMIT/END or ROLLBACK/ABORT.
func (s Session) ends(l *lexer, rollback bool) Session {
	chain, to, named := s.chain, false, false // completion_type=CHAIN chains a plain COMMIT
	for n := l.next(); n.kind == tokWord || n.kind == tokQuoted; n = l.next() {
		switch {
		case l.isAny(n, "work", "transaction", "tran"):
		case l.is(n, "and"):
			if m := l.next(); m.kind == tokWord && l.is(m, "no") {
				l.next() // CHAIN
				chain = false
			} else {
				chain = true
			}
		case l.is(n, "to"):
			to = true
		case l.isAny(n, "release", "no"):
			// MySQL: COMMIT RELEASE / NO RELEASE (the session ends after
			// a RELEASE; a new one starts clean).
		default:
			named = true // SQL Server: ROLLBACK TRAN name, which may be a savepoint
		}
		if to || named {
			break
		}
	}
	switch {
	case to:
		return s // ROLLBACK TO SAVEPOINT: the transaction goes on
	case chain:
		s.open, s.savepoint = true, false // AND CHAIN: a new transaction begins at once
		return s
	case named && rollback:
		s.txUnsure = true
		return s
	}
	s.open, s.savepoint = false, false
	if rollback && !named {
		s.txUnsure = false // a plain ROLLBACK leaves no transaction open on any engine
	}
	return s
}

// set reads a SET statement's assignments for autocommit and
// completion_type (MySQL, MariaDB), IMPLICIT_TRANSACTIONS and ANSI_DEFAULTS
// (SQL Server), and MariaDB's SET STATEMENT … FOR <statement>, whose
// statement it reads as one of its own. It also reports whether the
// statement is one of transaction control and may change the mode.
func (s Session) set(l *lexer) (Session, bool, bool) {
	if l.peekWordIs("statement") {
		for n := l.next(); n.kind != tokEOF && n.kind != tokInvalid && !l.punct(n, ';'); n = l.next() {
			if n.kind == tokWord && l.is(n, "for") {
				return s.apply(l, l.next())
			}
		}
		return s, false, false
	}
	tx := false
	for {
		name, value, global, n := l.assignment()
		switch {
		case l.isNameAny(name, "autocommit"):
			tx = true
			on, known := l.switchValue(value)
			switch {
			case global || !known:
				// SET GLOBAL autocommit=0 reaches the sessions opened
				// later, ours included; a value not written out may be
				// anything.
				s.modeOff = true
			case on && s.manual:
				// 0 → 1: MySQL commits the open transaction.
				s = Session{engine: s.engine, chain: s.chain, lost: s.lost}
			case on:
				// 1 → 1 changes nothing, a transaction opened with START
				// TRANSACTION included; unknown → 1 may have committed.
				s.manual, s.modeOff = false, false
			default:
				s.manual = true
			}
		case l.isNameAny(name, "implicit_transactions", "ansi_defaults"):
			tx = true
			on, known := l.switchValue(value)
			switch {
			case !known:
				s.modeOff = true
			case on:
				s.manual = true
			default:
				// Turning the mode off commits nothing: an implicit
				// transaction it began may still be open.
				if s.manual || s.modeOff {
					s.txUnsure = true
				}
				s.manual, s.modeOff = false, false
			}
		case l.isNameAny(name, "completion_type"):
			tx = true
			switch w := l.valueWord(value); {
			case global || w == "":
				s.lost = true
			case w == "1" || EqualFold(w, "chain"):
				s.chain = true
			case w == "0" || w == "2" || EqualFold(w, "no_chain") || EqualFold(w, "release"):
				s.chain = false
			default:
				s.lost = true
			}
		}
		if !l.punct(n, ',') {
			return s, tx, tx
		}
	}
}

// assignment reads one assignment of a SET statement — [scope] name
// [=|:=|TO] value — up to a top-level comma or the statement's end, and
// returns its name, up to two tokens of its value, whether its scope is
// global, and the token that ended it.
func (l *lexer) assignment() (name token, value []token, global bool, end token) {
	depth := 0
	inValue := false
	n := l.next()
	for ; n.kind != tokEOF && n.kind != tokInvalid; n = l.next() {
		if n.kind == tokPunct {
			c := l.s[n.start]
			if (c == ';' || c == ',') && depth == 0 {
				break
			}
			depth += l.nesting(n)
			if !inValue && (c == '=' || c == ':') {
				inValue = inValue || c == '='
				continue
			}
		}
		if inValue {
			if len(value) < 2 {
				value = append(value, n)
			}
			continue
		}
		switch {
		case n.kind == tokWord && l.isAny(n, "global", "persist", "persist_only"):
			global = true
		case n.kind == tokWord && l.is(n, "to"):
			inValue = true
		case n.kind == tokWord && l.isNameAny(name, "implicit_transactions", "ansi_defaults"):
			// SQL Server: SET IMPLICIT_TRANSACTIONS ON (no "=").
			inValue = true
			value = append(value, n)
		case n.kind == tokWord || n.kind == tokQuoted:
			name = n
		}
	}
	return name, value, global, n
}

// valueWord returns a one-token value as text, unquoted; "" for any other.
func (l *lexer) valueWord(v []token) string {
	if len(v) != 1 {
		return ""
	}
	w := l.s[v[0].start:v[0].end]
	if v[0].kind == tokString && len(w) >= 2 {
		w = w[1 : len(w)-1]
	}
	return w
}

// switchValue reads a value of 0/1, ON/OFF, TRUE/FALSE, DEFAULT (autocommit's
// default is on) or one of those quoted.
func (l *lexer) switchValue(v []token) (on, known bool) {
	if len(v) != 1 {
		return false, false
	}
	t := v[0]
	w := l.s[t.start:t.end]
	if t.kind == tokString && len(w) >= 2 {
		w = w[1 : len(w)-1]
	}
	switch {
	case w == "1", EqualFold(w, "on"), EqualFold(w, "true"):
		// DEFAULT is not among them: MySQL's SET autocommit = DEFAULT
		// takes the server's global value, which may be off.
		return true, true
	case w == "0", EqualFold(w, "off"), EqualFold(w, "false"):
		return false, true
	}
	return false, false
}

// isNameAny is isAny for a word or a quoted identifier.
func (l *lexer) isNameAny(t token, kws ...string) bool {
	if t.kind == tokQuoted && t.end-t.start >= 2 {
		w := l.s[t.start+1 : t.end-1]
		for _, kw := range kws {
			if EqualFold(w, kw) {
				return true
			}
		}
		return false
	}
	return t.kind == tokWord && l.isAny(t, kws...)
}

func (l *lexer) isAny(t token, kws ...string) bool {
	for _, kw := range kws {
		if l.is(t, kw) {
			return true
		}
	}
	return false
}

// peekWordIs reports whether the next token is the word kw.
func (l *lexer) peekWordIs(kw string) bool {
	n := l.peek()
	return n.kind == tokWord && l.is(n, kw)
}

// forEachStatement calls fn with a lexer positioned just past the first
// token of each statement of text (statements split at ";" outside
// parentheses, strings, quoted identifiers and comments), and that token.
// fn may read on; the next statement starts after the next top-level ";"
// past wherever fn stopped. It reports whether a word of [txWords] stood in
// the part of a statement fn did not read.
func forEachStatement(text string, fn func(l *lexer, first token)) (stray bool) {
	return forEachStatementIn(text, anyDialect, fn)
}

// forEachStatementIn is forEachStatement under dialect d's lexical rules.
func forEachStatementIn(text string, d dialect, fn func(l *lexer, first token)) (stray bool) {
	l := &lexer{s: text, d: d}
	for {
		t := l.next()
		for t.kind == tokPunct && (l.s[t.start] == ';' || l.s[t.start] == '(') {
			t = l.next()
		}
		if t.kind == tokEOF || t.kind == tokInvalid {
			return stray
		}
		start := l.i
		body := t.kind == tokWord && l.is(t, "create") // CREATE PROCEDURE … BEGIN … END: a body, not statements
		fn(l, t)
		if l.i < start {
			l.i = start
		}
		// Skip to the end of this statement, unless fn stopped on its ";".
		if l.i > 0 && l.i <= len(l.s) && l.s[l.i-1] == ';' {
			continue
		}
		depth, block := 0, 0
		for {
			n := l.next()
			if n.kind == tokEOF || n.kind == tokInvalid {
				return stray
			}
			inBody := block > 0
			depth += l.nesting(n)
			block += l.blockNesting(n, block, body)
			// A word of a body that runs later (CREATE PROCEDURE … BEGIN …
			// END, and the BEGIN that opens it) acts on nothing now.
			if !inBody && block == 0 && n.kind == tokWord && l.isAny(n, txWords[:txStray]...) && !l.notACall(n) {
				stray = true
			}
			if l.punct(n, ';') && depth <= 0 && block <= 0 {
				goto next
			}
		}
	next:
	}
}

// txWords are the words that make a text transaction control wherever they
// stand, since a T-SQL batch needs no ";" between statements; txStarts only
// at the start of a statement.
var txWords = [...]string{"begin", "commit", "rollback", "exec", "execute",
	"implicit_transactions", "ansi_defaults", "savepoint", "autocommit", "completion_type", "transaction"}

// txStray is how many of txWords count inside a statement: SAVEPOINT stands
// inside ROLLBACK TO SAVEPOINT and RELEASE SAVEPOINT, autocommit inside
// SELECT @@autocommit, TRANSACTION inside SET TRANSACTION and SET STATEMENT
// … FOR START TRANSACTION (which Session.set reads), and a T-SQL batch can
// set none of them.
const txStray = 7

// SET is transaction control only when it names autocommit,
// IMPLICIT_TRANSACTIONS or ANSI_DEFAULTS, which txWords finds.
var txStarts = [...]string{"start", "end", "abort", "release", "xa", "call", "if", "while", "prepare"}

// opaqueStarts begin statements whose body the text does not show.
var opaqueStarts = [...]string{"call", "do", "exec", "execute", "if", "while", "declare"}
