package sqltext

// Info is what the text of one command says about replaying it after a
// failure. The zero Info is the most conservative reading but one: callers
// treat a text that is not ReadOnly as a write.
type Info struct {
	// Verb is the first statement's verb, as [Verb] returns it.
	Verb string
	// ReadOnly reports that replaying the whole text cannot change what the
	// database holds, as [IsReadOnly] judges it.
	ReadOnly bool
	// Multi reports that the text holds more than one statement, or that the
	// lexer cannot prove it holds only one: a ";" followed by more text
	// under the lexical rules of any engine (a ";" that PostgreSQL sees
	// after a string MySQL reads on through a backslash counts), a text an
	// engine reads in two ways (MySQL's /*! … */), or a SQL Server batch
	// with a second statement and no ";" ("INSERT … INSERT …"). A failure
	// reported for a multi-part text describes the part that failed, not
	// the parts before it, which may already have committed. For an Opaque
	// text, whose OneStatement is false anyway, Multi counts only the ";"
	// that the shared lexer sees.
	Multi bool
	// Opaque reports that the text runs code whose body it does not show:
	// CALL, DO, EXEC/EXECUTE, a T-SQL block (BEGIN … END, IF, WHILE). Such
	// code may commit part of its work and then fail.
	Opaque bool
	// TxControl reports that the text may open or end a transaction or
	// change the session's autocommit mode, so [Session.After] must be
	// consulted for the session's state after it.
	TxControl bool
	// Calls reports that a ReadOnly text is read-only only if the functions
	// it names are the engine's built-ins: it calls a known pure function
	// by its bare name (count(*), lower(b)) or as pg_catalog.f(…), or names
	// t.f, which PostgreSQL may read as the call f(t). A user's function
	// may answer to such a name on PostgreSQL, MySQL and SQLite; before the
	// text is replayed as a read, [CalledNames] and [CheckUserFuncs] must
	// find none on its engine.
	Calls bool
}

// Analyze reads s once for everything the database/sql layer asks of it.
func Analyze(s string) Info {
	var sink callSink // found only: Analyze allocates nothing
	in := Info{Verb: Verb(s), ReadOnly: readOnlyText(s, &sink)}
	in.Calls = in.ReadOnly && sink.found
	in.Multi, in.Opaque, in.TxControl = textShape(s)
	return in
}

// OneStatement reports whether the text is provably a single statement whose
// effects the text shows: not Multi and not Opaque. Only such a statement's
// failure of phase NotApplied proves that nothing of it was applied.
func (in Info) OneStatement() bool { return !in.Multi && !in.Opaque }

// textShape reads the text's statements: more than one, opaque code, and any
// word of transaction control.
func textShape(text string) (multi, opaque, txControl bool) {
	if !divergent(text) {
		// Every dialect reads the text as PostgreSQL does, and so does
		// the shared lexer.
		multi, opaque, txControl = shapeIn(text, dlPostgres)
	} else {
		for d := dlPostgres; d < numDialects; d++ {
			m, o, _ := shapeIn(text, d)
			multi, opaque = multi || m, opaque || o
		}
		// Transaction control is what Session.After can act on, and it
		// reads the text with the shared lexer.
		m, o, c := shapeIn(text, anyDialect)
		// A word of transaction control only some engine's reading shows
		// (MySQL runs /*!START TRANSACTION*/) is transaction control too:
		// Session.After then takes the session as Unsure.
		txControl = c || hiddenTxControl(text) || execComment(text)
		opaque = opaque || o
		if opaque {
			multi = m
		}
	}
	if !opaque && batchMulti(text) {
		multi = true
	}
	return multi, opaque, txControl
}

// shapeIn reads the text's statements, split at every ";" that dialect d
// sees (inside parentheses too: an engine that runs statements one by one
// has run the earlier ones when it meets the bad one).
func shapeIn(text string, d dialect) (multi, opaque, txControl bool) {
	l := lexer{s: text, d: d}
	parts := 0
	for {
		t := l.first()
		if t.kind == tokEOF {
			break
		}
		parts++
		if t.kind == tokWord {
			if l.opaqueStart(t) {
				opaque = true
			}
			if l.isAny(t, txStarts[:]...) {
				txControl = true
			}
		}
		for n := t; !l.punct(n, ';'); n = l.next() {
			if n.kind == tokEOF || n.kind == tokInvalid {
				return parts > 1 || l.unsure && d != anyDialect, opaque, txControl
			}
			if (n.kind == tokWord || n.kind == tokQuoted) && !l.notACall(n) {
				for _, w := range txWords {
					if l.isNameAny(n, w) {
						txControl = true
						if w == "exec" || w == "execute" {
							opaque = true
						}
					}
				}
			}
		}
	}
	return parts > 1 || l.unsure && d != anyDialect, opaque, txControl
}

// opaqueStart reports whether the statement whose first token is t runs code
// the text does not show: CALL, DO, EXEC, IF, WHILE, DECLARE, or a BEGIN that
// opens a T-SQL block rather than a transaction.
func (l *lexer) opaqueStart(t token) bool {
	if l.isAny(t, opaqueStarts[:]...) {
		return true
	}
	if !l.is(t, "begin") {
		return false
	}
	if c := *l; c.peekWordIs("not") {
		c.next()
		if c.peekWordIs("atomic") {
			return true // MariaDB's compound statement
		}
	}
	n := l.peek()
	return !(n.kind == tokEOF || l.punct(n, ';') ||
		n.kind == tokWord && l.isAny(n, "transaction", "work", "tran", "deferred", "immediate", "exclusive",
			"isolation", "read", "deferrable", "not", "distributed"))
}

// hiddenTxControl reports whether some engine's reading of text shows a word
// of transaction control that the shared lexer, which [Session.After] reads
// with, does not see: a BEGIN after a string that MySQL ends elsewhere, say.
// Such a text leaves a session whose state the shared reading cannot tell.
func hiddenTxControl(text string) bool {
	if !divergent(text) {
		return false
	}
	if _, _, c := shapeIn(text, anyDialect); c {
		return false
	}
	for d := dlPostgres; d < numDialects; d++ {
		if _, _, c := shapeIn(text, d); c {
			return true
		}
	}
	return false
}
