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
	// lexer cannot prove it holds only one (a T-SQL batch needs no ";"
	// between statements). A failure reported for a multi-part text
	// describes the part that failed, not the parts before it, which may
	// already have committed.
	Multi bool
	// Opaque reports that the text runs code whose body it does not show:
	// CALL, DO, EXEC/EXECUTE, a T-SQL block (BEGIN … END, IF, WHILE). Such
	// code may commit part of its work and then fail.
	Opaque bool
	// TxControl reports that the text may open or end a transaction or
	// change the session's autocommit mode, so [Session.After] must be
	// consulted for the session's state after it.
	TxControl bool
}

// Analyze reads s once for everything the database/sql layer asks of it.
func Analyze(s string) Info {
	in := Info{Verb: Verb(s), ReadOnly: IsReadOnly(s)}
	in.Multi, in.Opaque, in.TxControl = shape(s)
	return in
}

// OneStatement reports whether the text is provably a single statement whose
// effects the text shows: not Multi and not Opaque. Only such a statement's
// failure of phase NotApplied proves that nothing of it was applied.
func (in Info) OneStatement() bool { return !in.Multi && !in.Opaque }
