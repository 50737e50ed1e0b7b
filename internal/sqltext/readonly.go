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
// database/sql layer use it. Verb names a statement; whether replaying it is
// safe is [IsReadOnly]'s question, which reads the text more carefully.
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
// The text is read under the lexical rules of PostgreSQL (with
// standard_conforming_strings on and off), MySQL and MariaDB (default
// sql_mode, NO_BACKSLASH_ESCAPES, ANSI_QUOTES), SQL Server and SQLite, and is
// read-only only if it is read-only under every one of them: a text that one
// engine reads as a single SELECT and another as a SELECT and a DELETE (a
// backslash in a string, a bracket, a "#", a dollar quote, a MySQL
// executable comment /*! … */) is not read-only.
//
// Read-only: SELECT (including SELECT … FOR UPDATE/SHARE: its locks are
// released when an autocommit statement ends, and a statement inside an
// explicit transaction is never replayed on its own), VALUES, TABLE, SHOW,
// and EXPLAIN/DESCRIBE/DESC without ANALYZE (which only plans); EXPLAIN
// ANALYZE runs its statement, so it is read-only only when that statement is.
// An EXPLAIN option list with a quoted name, as in EXPLAIN ("analyze") …,
// counts as ANALYZE.
//
// Not read-only: everything else, and also
//   - a statement with a data-modifying CTE (WITH x AS (DELETE …) SELECT …);
//   - SELECT … INTO (it creates a table, or writes a file or variables), and
//     MySQL's "@v := …";
//   - several statements (a ";" followed by more text, or a T-SQL batch
//     such as "SELECT 1 DELETE t" or "SELECT 1 SELECT 2");
//   - a sequence advanced: nextval, setval, NEXT VALUE FOR;
//   - the built-in functions of the engines that change state from a SELECT:
//     advisory and named locks (pg_advisory_lock, GET_LOCK), pg_notify,
//     dblink, large objects (lo_*), replication slots and origins, backend
//     signals, statistics resets, OPENQUERY/OPENROWSET, load_extension;
//   - PRAGMA (SQLite: most pragmas set state; mark a reading pragma's Op
//     Idempotent yourself), MariaDB's ANALYZE <statement> (it runs it), DO,
//     HANDLER, CALL, EXEC;
//   - text that does not lex under some dialect (an unterminated string) or
//     that a dialect reads two ways (a NUL byte, MySQL's /*! … */).
//
// A call of a function that is not a known pure built-in (pureFuncs) makes
// the text a write, and so does one qualified by a schema (audit.log(…):
// a user's schema, whatever the function's name), by a quoted name, or
// under EXPLAIN, which may evaluate it while planning: a user-defined
// function may write, and nothing in the text says it does not. A call of
// a pure built-in by its bare name may still reach a user's function of
// that name on some engines: [Analyze] reports it (Info.Calls), and
// [CalledNames] says what to ask before such a read is replayed.
func IsReadOnly(statement string) bool { return readOnlyText(statement, nil) }

// readOnlyText is IsReadOnly, telling sink of the names the text calls
// that a function of a user's may answer to.
func readOnlyText(statement string, sink *callSink) bool {
	if !divergent(statement) {
		return readOnly(statement, dlPostgres, 0, sink) && !batchMulti(statement)
	}
	for d := dlPostgres; d < numDialects; d++ {
		if !readOnly(statement, d, 0, sink) {
			return false
		}
	}
	return !batchMulti(statement)
}

// readOnly is IsReadOnly under dialect d.
func readOnly(s string, d dialect, depth int, sink *callSink) bool {
	if depth > 4 {
		return false
	}
	l := lexer{s: s, d: d}
	t := l.first()
	cte := false
	if t.kind == tokWord && l.is(t, "with") {
		cte = l.peekWordIs("recursive")
		t = l.skipCTEs()
	}
	if t.kind != tokWord {
		return false
	}
	switch {
	case l.is(t, "select"), l.is(t, "values"), l.is(t, "table"):
		return noWrites(s, d, scanRead, cte, sink)
	case l.is(t, "show"):
		return noWrites(s, d, scanShow, false, sink)
	case l.is(t, "explain"), l.is(t, "describe"), l.is(t, "desc"):
		return explainReadOnly(&l, d, depth, sink)
	}
	return false
}

// explainReadOnly reads an EXPLAIN, DESCRIBE or DESC past its verb.
func explainReadOnly(l *lexer, d dialect, depth int, sink *callSink) bool {
	s := l.s
	analyze := false
	parens := 0
	for {
		t := l.next()
		switch t.kind {
		case tokEOF:
			// EXPLAIN t, DESCRIBE t: a table's description.
			return !analyze && !l.unsure
		case tokInvalid:
			return false
		case tokPunct:
			switch s[t.start] {
			case ';':
				return !analyze && l.onlyTrivia()
			case '(':
				parens++
			case ')':
				parens--
			}
			continue
		case tokWord:
		default:
			// A quoted option name, as in EXPLAIN ("analyze") …, may be
			// ANALYZE; a quoted name outside parentheses is DESCRIBE's
			// table.
			if parens > 0 {
				analyze = true
			}
			continue
		}
		switch {
		case l.is(t, "analyze"), l.is(t, "analyse"):
			analyze = true
			continue
		case l.is(t, "into"):
			return false // MySQL 8: EXPLAIN FORMAT=JSON INTO @v …
		case !isStatementVerb(l, t):
			continue
		case parens > 0 && !analyze:
			continue // an option's value
		case l.unsure:
			return false // what comes before the statement reads two ways
		case analyze:
			// The statement runs: it must be read-only itself.
			return readOnly(s[t.start:], d, depth+1, sink)
		}
		// The plan only; but an engine may evaluate a function while
		// planning (PostgreSQL folds an IMMUTABLE function's call with
		// constant arguments, and such a function may call one that
		// writes), and a second statement may follow.
		return noWrites(s[t.start:], d, scanPlan, false, sink)
	}
}

// isStatementVerb reports whether t starts a statement EXPLAIN can explain.
func isStatementVerb(l *lexer, t token) bool {
	return l.isAny(t, "select", "insert", "update", "delete", "merge", "with", "values", "table", "replace",
		"upsert", "create", "declare", "execute", "exec", "call", "do")
}

// scanMode says what noWrites looks for.
type scanMode uint8

const (
	scanRead scanMode = iota // SELECT, VALUES, TABLE: write keywords, functions, a second statement
	scanShow                 // SHOW: the same, but SHOW CREATE … only reads
	scanPlan                 // EXPLAIN without ANALYZE: functions and a second statement
)

// writeWords are the keywords whose presence anywhere (outside strings,
// quoted identifiers and comments) makes a read not read-only: a T-SQL batch
// needs no ";" before its next statement, so "SELECT 1 DELETE FROM t" is two.
// noWrites knows the places where a read may hold some of them.
var writeWords = [...]string{
	"insert", "update", "delete", "merge", "upsert", "replace", "into",
	"drop", "create", "alter", "truncate", "exec", "execute", "call",
	"grant", "revoke", "deny", "set", "declare", "begin", "commit",
	"rollback", "savepoint", "kill", "backup", "restore", "dbcc", "bulk",
	"lock", "receive", "writetext", "updatetext", "shutdown", "reconfigure",
	"checkpoint", "raiserror",
}

// stateFuncs are built-in functions that change what the database or the
// server holds when a SELECT calls them, and stateFuncPrefixes families of
// them.
var stateFuncs = [...]string{
	"nextval", "setval", // PostgreSQL, MariaDB (and Oracle mode's seq.nextval)
	"pg_notify", "pg_terminate_backend", "pg_cancel_backend", "pg_reload_conf",
	"pg_rotate_logfile", "pg_switch_wal", "pg_switch_xlog", "pg_promote",
	"pg_start_backup", "pg_stop_backup", "pg_backup_start", "pg_backup_stop",
	"pg_import_system_collations", "pg_wal_replay_pause", "pg_wal_replay_resume",
	"pg_replication_slot_advance", "pg_stat_statements_reset",
	"gin_clean_pending_list", "lowrite",
	"get_lock", "release_lock", "release_all_locks", // MySQL, MariaDB
	"openquery", "openrowset", "opendatasource", // SQL Server: run text on a linked server
	"load_extension", // SQLite
}

var stateFuncPrefixes = [...]string{
	"pg_advisory_", "pg_try_advisory_", "pg_stat_reset", "pg_logical_",
	"pg_create_", "pg_drop_", "pg_copy_", "pg_replication_origin", "pg_file_",
	"dblink", "lo_", "brin_",
}

// noWrites scans the whole statement for a second statement, for text the
// dialect reads two ways, and for what mode looks for; sink hears of the
// names called that a user's function may answer to (see readName). cte
// reports that the statement starts WITH RECURSIVE, whose SEARCH and CYCLE
// clauses hold SET.
func noWrites(s string, d dialect, mode scanMode, cte bool, sink *callSink) bool {
	l := lexer{s: s, d: d}
	var prev, prev2 token
	var ch chain
	pendingSet := false // a SEARCH or CYCLE clause waits for its SET
	for {
		t := l.next()
		switch t.kind {
		case tokEOF:
			return !l.unsure
		case tokInvalid:
			return false
		case tokPunct:
			switch s[t.start] {
			case ';':
				return l.onlyTrivia()
			case ':':
				if t.end < len(s) && s[t.end] == '=' {
					return false // MySQL: @v := … assigns a user variable
				}
			}
			if s[t.start] != '.' {
				ch.n = 0
			}
		case tokWord:
			ch.next(&l, t, prev, prev2)
			c := l.class(t)
			if l.stateWord(t, c) {
				return false
			}
			if mode == scanShow && prev.kind == tokWord && l.is(prev, "show") {
				break // SHOW CREATE TABLE t
			}
			if mode != scanPlan {
				if cte && (l.is(t, "search") || l.is(t, "cycle")) &&
					(l.punct(prev, ')') || prev2.kind == tokWord && l.is(prev2, "set")) {
					pendingSet = true
				}
				if l.writeWord(t, c, prev, &pendingSet) {
					return false
				}
			}
			if !l.readName(t, &ch, sink) {
				return false // a function that may write (see pureFuncs)
			}
		case tokQuoted:
			ch.next(&l, t, prev, prev2)
			// A quoted name of a function that changes state ("nextval")
			// is that function, in every mode a bare one is looked for.
			if in := (token{tokWord, t.start + 1, t.end - 1}); in.end > in.start && l.stateWord(in, l.class(in)) {
				return false
			}
			if !l.readName(t, &ch, sink) {
				return false // a function called by a quoted name
			}
		default:
			ch.n = 0
		}
		prev2, prev = prev, t
	}
}

// stateWord reports whether word t calls a function that changes state, or
// begins NEXT VALUE FOR.
func (l *lexer) stateWord(t token, c kwClass) bool {
	if c&kwState != 0 || l.stateFunc(t) {
		return true
	}
	for r, ok := l.nextRun(t, t.start); ok; r, ok = l.nextRun(t, r.end) {
		if l.class(r)&kwState != 0 || l.stateFunc(r) {
			return true
		}
	}
	if l.is(t, "next") && l.peekWordIs("value") {
		return true // SQL Server, MariaDB: NEXT VALUE FOR seq advances it
	}
	return false
}

// stateFunc reports whether word t is in a family of stateFuncPrefixes.
func (l *lexer) stateFunc(t token) bool {
	if c := l.s[t.start] | 0x20; c != 'p' && c != 'd' && c != 'l' && c != 'b' {
		return false
	}
	for _, p := range stateFuncPrefixes {
		if l.hasPrefix(t, p) {
			return true
		}
	}
	return false
}

// nextRun returns, for a word t that holds bytes above 0x7F, the next run of
// ASCII bytes in it at or after from: SQL Server may read a non-ASCII space
// as white space where PostgreSQL reads a letter, so each run may be a
// keyword of its own. For an all-ASCII word it reports false.
func (l *lexer) nextRun(t token, from int) (token, bool) {
	s := l.s
	if from == t.start {
		ascii := true
		for i := t.start; i < t.end; i++ {
			if s[i] >= 0x80 {
				ascii = false
				break
			}
		}
		if ascii {
			return token{}, false
		}
	}
	i := from
	for i < t.end && s[i] >= 0x80 {
		i++
	}
	if i >= t.end {
		return token{}, false
	}
	j := i
	for j < t.end && s[j] < 0x80 {
		j++
	}
	return token{tokWord, i, j}, true
}

// writeWord reports whether word t, after prev, is a write keyword where a
// read cannot hold it.
func (l *lexer) writeWord(t token, c kwClass, prev token, pendingSet *bool) bool {
	for r, ok := l.nextRun(t, t.start); ok; r, ok = l.nextRun(t, r.end) {
		if l.class(r)&kwWrite != 0 {
			return true
		}
	}
	if c&(kwWrite|kwTSQL) == 0 {
		return false
	}
	switch {
	case l.is(t, "update"):
		// SELECT … FOR UPDATE, FOR NO KEY UPDATE.
		if prev.kind == tokWord && l.isAny(prev, "for", "key") {
			return false
		}
	case l.is(t, "insert"), l.is(t, "replace"), l.is(t, "truncate"):
		// MySQL's INSERT(str, …), TRUNCATE(x, d) and everyone's
		// REPLACE(str, …).
		if l.peekPunct('(') {
			return false
		}
	case l.is(t, "lock"):
		// MySQL's LOCK IN SHARE MODE.
		if l.peekWordIs("in") {
			return false
		}
	case l.is(t, "merge"):
		// SQL Server's join and union hints: INNER MERGE JOIN,
		// OPTION (MERGE UNION).
		if n := l.peek(); n.kind == tokWord && l.isAny(n, "join", "union") {
			return false
		}
	case l.is(t, "set"):
		// CHARACTER SET, and SEARCH … SET col of a recursive CTE.
		if prev.kind == tokWord && l.isAny(prev, "character", "char") {
			return false
		}
		if *pendingSet {
			*pendingSet = false
			return false
		}
	case l.isAny(t, "end", "move", "get"):
		// SQL Server: END/MOVE/GET CONVERSATION (Service Broker).
		return l.peekWordIs("conversation")
	case l.is(t, "send"):
		return l.peekWordIs("on") // SQL Server: SEND ON CONVERSATION
	case l.isAny(t, "enable", "disable"):
		return l.peekWordIs("trigger")
	case l.is(t, "save"):
		n := l.peek()
		return n.kind == tokWord && l.isAny(n, "tran", "transaction")
	}
	return c&kwWrite != 0
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
	"optimize", "repair", "check", "checksum", "flush", "purge",
	"xa", "get", "put", "remove", "list", "undrop",
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
