package sqltext

// batchMulti reports whether a ";"-separated part of text holds a second
// statement with no ";" before it, as a SQL Server batch may: "INSERT … INSERT
// …" and "SELECT 1 DELETE FROM t" are two statements there. It reads the text
// under SQL Server's lexical rules, and only parts that start with a
// statement SQL Server has (other engines need a ";" between statements).
// Parts of opaque code (BEGIN … END, IF, WHILE, EXEC, DECLARE) are left to
// Info.Opaque.
//
// A word that can start a statement starts one unless it stands where a
// statement cannot end (after an operator, a comma, or a keyword that needs
// more, as in SELECT open, close FROM t) or in one of the places where a
// statement holds such a word: INSERT … SELECT/EXEC/SET, UPDATE … SET,
// ON DUPLICATE KEY UPDATE, ON CONFLICT DO UPDATE SET, MERGE … THEN
// UPDATE/INSERT/DELETE, FOR UPDATE, UNION SELECT, AS SELECT, OFFSET … FETCH,
// ALTER TABLE … ALTER/DROP/ADD, a CREATE PROCEDURE/FUNCTION/TRIGGER/VIEW
// body. It errs towards two statements: a false one only costs a retry.
func batchMulti(text string) bool {
	l := lexer{s: text, d: dlSQLServer}
	for {
		t := l.first()
		if t.kind == tokEOF || t.kind == tokInvalid {
			return false
		}
		if l.partMulti(t) {
			return true
		}
	}
}

// batchState is what partMulti knows of the statement it reads.
type batchState struct {
	insert, update, set, alter bool // the first statement's verb
	source                     bool // INSERT: its VALUES, SELECT, EXEC or SET has begun
	setUsed                    bool // UPDATE: its SET has been read
}

// partMulti reads one part, whose first token is t, through its ";" (or the
// end of the text), and reports whether it holds a second statement.
func (l *lexer) partMulti(t token) bool {
	if t.kind == tokWord && l.is(t, "with") {
		t = l.skipCTEs()
		if t.kind == tokInvalid {
			// WITH XMLNAMESPACES (…), or a list that does not parse:
			// what follows cannot be read.
			return true
		}
	}
	if t.kind == tokWord && l.isAny(t, "explain", "describe", "desc") {
		t = l.explained()
		if t.kind == tokWord && l.is(t, "with") {
			t = l.skipCTEs()
		}
	}
	if t.kind != tokWord || l.class(t)&kwTSQL == 0 || l.opaqueStart(t) || l.hasBody(t) {
		return l.skipPart(t)
	}
	st := batchState{
		insert: l.is(t, "insert"),
		update: l.is(t, "update"),
		set:    l.is(t, "set"),
		alter:  l.is(t, "alter"),
	}
	depth := 0
	prev, prev2 := t, token{}
	for {
		n, ok := l.partToken(&depth)
		if !ok {
			return false
		}
		if n.kind == tokWord {
			if depth <= 0 && l.startsStatement(n, prev, prev2, &st) {
				return true
			}
			// SQL Server may read a non-ASCII space as white space.
			for r, ok := l.nextRun(n, n.start); ok; r, ok = l.nextRun(n, r.end) {
				if (r.start > n.start || l.s[n.start] >= 0x80) && l.class(r)&kwTSQL != 0 {
					return true
				}
			}
		}
		prev2, prev = prev, n
	}
}

// partToken reads the next token of the current part and moves *depth past
// it; ok is false at the part's end: a ";" at any depth, the end of the
// text, or a token that does not lex.
func (l *lexer) partToken(depth *int) (t token, ok bool) {
	t = l.next()
	*depth += l.nesting(t)
	return t, t.kind != tokEOF && t.kind != tokInvalid && !l.punct(t, ';')
}

// skipPart reads on past the ";" that ends the part t is in (t itself may
// be that ";" or the end of the text), and reports false.
func (l *lexer) skipPart(t token) bool {
	for !l.punct(t, ';') && t.kind != tokEOF && t.kind != tokInvalid {
		t = l.next()
	}
	return false
}

// explained returns the first token of the statement an EXPLAIN explains:
// the first statement verb outside parentheses, or whatever ends the part.
func (l *lexer) explained() token {
	depth := 0
	for {
		t, ok := l.partToken(&depth)
		if !ok || t.kind == tokWord && depth <= 0 && isStatementVerb(l, t) {
			return t
		}
	}
}

// hasBody reports whether t, CREATE or ALTER, begins the definition of code
// or of a view: the rest of the part is its body (SQL Server wants such a
// statement alone in its batch).
func (l *lexer) hasBody(t token) bool {
	if !l.isAny(t, "create", "alter") {
		return false
	}
	c := *l
	for i := 0; i < 10; i++ {
		n := c.next()
		if n.kind == tokEOF || n.kind == tokInvalid || c.punct(n, ';') || c.punct(n, '(') {
			return false
		}
		if n.kind == tokWord && c.isAny(n, "procedure", "proc", "function", "trigger", "view", "rule", "event",
			"schema", "package") {
			return true
		}
	}
	return false
}

// tsqlVerbs are the words that start a SQL Server statement.
var tsqlVerbs = [...]string{
	"select", "insert", "update", "delete", "merge", "create", "alter", "drop",
	"truncate", "exec", "execute", "declare", "set", "begin", "commit",
	"rollback", "save", "if", "while", "print", "raiserror", "throw",
	"return", "waitfor", "use", "grant", "revoke", "deny", "bulk", "backup",
	"restore", "dbcc", "kill", "open", "close", "fetch", "deallocate",
	"goto", "break", "continue", "checkpoint", "reconfigure", "shutdown",
	"readtext", "writetext", "updatetext", "enable", "disable", "receive",
	"send", "get", "move", "end", "setuser", "revert", "add",
}

// continues are the words after which a statement cannot end: the next word
// belongs to the same statement. They are reserved in SQL Server, so none of
// them can end a statement as a bare name; MINUS (MariaDB's EXCEPT) is the
// one exception, and canEnd knows a few more places (DO UPDATE, DEFAULT
// VALUES, SET … ON).
var continues = [...]string{
	// statement verbs that need more (DELETE does not: MERGE … THEN DELETE)
	"select", "insert", "update", "merge", "create", "alter", "drop",
	"truncate", "exec", "execute", "declare", "set", "save", "if", "while",
	"print", "raiserror", "waitfor", "use", "grant", "revoke", "deny", "bulk",
	"backup", "restore", "dbcc", "kill", "open", "close", "fetch",
	"deallocate", "goto", "readtext", "writetext", "updatetext", "add",
	// clauses and operators
	"from", "where", "and", "or", "not", "by", "as", "on", "join", "in", "is",
	"like", "between", "case", "when", "then", "else", "into", "union",
	"intersect", "except", "minus", "all", "distinct", "top", "having",
	"values", "with", "over", "order", "group", "for", "of", "to", "exists",
	"any", "some", "cross", "inner", "outer", "left", "right", "full",
	"escape", "collate", "key", "table", "view", "index", "column",
	"constraint", "schema", "database", "procedure", "proc", "function",
	"trigger", "references", "pivot", "unpivot",
}

// startsStatement reports whether word n, after prev and prev2 at the top
// level of a statement, starts a new statement.
func (l *lexer) startsStatement(n, prev, prev2 token, st *batchState) bool {
	if st.insert && l.isAny(n, "values", "default") {
		st.source = true
		return false
	}
	if l.class(n)&kwTSQL == 0 {
		return false
	}
	switch {
	case st.insert && !st.source && l.isAny(n, "select", "exec", "execute", "set"):
		st.source = true // INSERT … SELECT, INSERT … EXEC, MySQL's INSERT … SET
		return false
	case st.update && !st.setUsed && l.is(n, "set"):
		st.setUsed = true
		return false
	case st.alter && l.isAny(n, "alter", "drop", "add", "set", "enable", "disable"):
		return false // ALTER TABLE t ALTER COLUMN …, DROP COLUMN …
	}
	if !l.canEnd(prev, prev2, n, st) {
		return false
	}
	switch {
	case l.isAny(n, "end", "move", "get"):
		return l.peekWordIs("conversation") // END CONVERSATION; CASE … END is no statement
	case l.is(n, "send"):
		return l.peekWordIs("on")
	case l.is(n, "add"):
		x := l.peek()
		return x.kind == tokWord && l.isAny(x, "signature", "counter")
	case l.isAny(n, "enable", "disable"):
		return l.peekWordIs("trigger")
	case l.is(n, "save"):
		x := l.peek()
		return x.kind == tokWord && l.isAny(x, "tran", "transaction")
	case l.is(n, "use"):
		x := l.peek()
		return !(x.kind == tokWord && l.isAny(x, "index", "key")) // MySQL's USE INDEX hint
	case l.is(n, "fetch"):
		return !(prev.kind == tokWord && l.isAny(prev, "rows", "row")) && !l.fetchClause()
	}
	return true
}

// canEnd reports whether a statement can end with prev (after prev2) and
// the next begin with word next.
func (l *lexer) canEnd(prev, prev2, next token, st *batchState) bool {
	switch prev.kind {
	case tokPunct:
		// ")" ends an expression, "?" is a parameter, "}" ends an ODBC
		// escape, "lbl:" is a label.
		switch l.s[prev.start] {
		case ')', '?', '}', ':':
			return true
		}
		return false
	case tokWord:
	default:
		return true // a string, a number, a quoted identifier
	}
	switch {
	case l.is(prev, "on"):
		return st.set // SET NOCOUNT ON
	case l.is(prev, "values"):
		return prev2.kind == tokWord && l.is(prev2, "default") // INSERT … DEFAULT VALUES
	case l.isAny(prev, "commit", "rollback"):
		// ON COMMIT DROP, INSERT OR ROLLBACK, ON CONFLICT ROLLBACK
		return !(prev2.kind == tokWord && l.isAny(prev2, "on", "or", "conflict"))
	case l.is(prev, "delete"):
		// ON DELETE SET NULL; but MERGE … THEN DELETE ends a clause.
		return !(prev2.kind == tokWord && l.is(prev2, "on"))
	case l.is(prev, "do"):
		// ON CONFLICT DO UPDATE; DO is no reserved word in SQL Server.
		return !l.is(next, "update")
	}
	return l.class(prev)&kwContinue == 0
}

// fetchClause reports whether the words after FETCH are the clause FETCH
// FIRST|NEXT n ROWS ONLY rather than a cursor's FETCH NEXT FROM c.
func (l *lexer) fetchClause() bool {
	c := *l
	n := c.next()
	if n.kind != tokWord || !c.isAny(n, "first", "next") {
		return false
	}
	n = c.next()
	return n.kind == tokNumber || c.punct(n, '(') || c.punct(n, '?') ||
		n.kind == tokWord && (c.isAny(n, "row", "rows") || c.s[n.start] == '@')
}
