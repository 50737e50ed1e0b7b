package sqlite

import (
	sr "github.com/sqlretry/sqlretry"
)

// Sources cited by the table: SQLite's result code documentation, and the
// values as modernc.org/sqlite defines them.
const (
	srcRescode    = "SQLite result codes (https://www.sqlite.org/rescode.html#busy, #busy_snapshot, #locked)"
	srcConstraint = "SQLite result codes (https://www.sqlite.org/rescode.html); values from modernc.org/sqlite/lib v1.62.0"
	srcPermanent  = "SQLite result codes (https://www.sqlite.org/rescode.html); values from modernc.org/sqlite/lib v1.62.0"
)

// entries is SQLite's table by result code, primary and extended. An
// extended code that is not listed is read as its primary code (code & 0xff).
var entries = []Entry{
	// Busy: another connection holds the lock; the failing step had no
	// effect (https://www.sqlite.org/rescode.html#busy).
	row(5, "SQLITE_BUSY", true, srcRescode, "the database file is locked by another connection; the statement had no effect (in a transaction, SQLite may have rolled it back: re-run it whole)"),
	row(261, "SQLITE_BUSY_RECOVERY", true, srcRescode, "another process is recovering the WAL; the statement had no effect"),
	row(773, "SQLITE_BUSY_TIMEOUT", true, srcRescode, "a blocking lock timed out; the statement had no effect"),
	// rescode.html #busy_snapshot: retrying the statement cannot succeed.
	row(517, "SQLITE_BUSY_SNAPSHOT", true, srcRescode, "another connection wrote since this read transaction began: only a whole-transaction retry can succeed, not the statement (start write transactions with BEGIN IMMEDIATE)"),
	// rescode.html #locked: a conflict within the same connection or its
	// shared cache.
	row(6, "SQLITE_LOCKED", true, srcRescode, "a table is locked by the same connection or its shared cache; the statement had no effect"),
	row(262, "SQLITE_LOCKED_SHAREDCACHE", true, srcRescode, "a table is locked by a connection sharing the cache; the statement had no effect"),

	// Constraint errors: permanent (a retry fails the same way).
	row(19, "SQLITE_CONSTRAINT", false, srcConstraint, "constraint violation"),
	row(275, "SQLITE_CONSTRAINT_CHECK", false, srcConstraint, "CHECK constraint failed"),
	row(531, "SQLITE_CONSTRAINT_COMMITHOOK", false, srcConstraint, "the commit hook rolled the transaction back"),
	row(787, "SQLITE_CONSTRAINT_FOREIGNKEY", false, srcConstraint, "FOREIGN KEY constraint failed"),
	row(1043, "SQLITE_CONSTRAINT_FUNCTION", false, srcConstraint, "constraint raised by a function"),
	row(1299, "SQLITE_CONSTRAINT_NOTNULL", false, srcConstraint, "NOT NULL constraint failed"),
	row(1555, "SQLITE_CONSTRAINT_PRIMARYKEY", false, srcConstraint, "PRIMARY KEY constraint failed"),
	row(1811, "SQLITE_CONSTRAINT_TRIGGER", false, srcConstraint, "RAISE in a trigger"),
	row(2067, "SQLITE_CONSTRAINT_UNIQUE", false, srcConstraint, "UNIQUE constraint failed"),
	row(2323, "SQLITE_CONSTRAINT_VTAB", false, srcConstraint, "constraint raised by a virtual table"),
	row(2579, "SQLITE_CONSTRAINT_ROWID", false, srcConstraint, "rowid not unique"),
	row(2835, "SQLITE_CONSTRAINT_PINNED", false, srcConstraint, "a row was pinned by a trigger"),
	row(3091, "SQLITE_CONSTRAINT_DATATYPE", false, srcConstraint, "STRICT table datatype constraint failed"),

	// Other permanent codes (https://www.sqlite.org/rescode.html).
	row(1, "SQLITE_ERROR", false, srcPermanent, "SQL error or missing table or column"),
	row(2, "SQLITE_INTERNAL", false, srcPermanent, "internal logic error in SQLite"),
	row(3, "SQLITE_PERM", false, srcPermanent, "access mode not supported"),
	row(4, "SQLITE_ABORT", false, srcPermanent, "the operation was aborted"),
	row(7, "SQLITE_NOMEM", false, srcPermanent, "out of memory"),
	row(8, "SQLITE_READONLY", false, srcPermanent, "attempt to write a read-only database"),
	row(264, "SQLITE_READONLY_RECOVERY", false, srcPermanent, "read-only while WAL recovery runs"),
	row(520, "SQLITE_READONLY_CANTLOCK", false, srcPermanent, "read-only: cannot lock the shared memory"),
	row(776, "SQLITE_READONLY_ROLLBACK", false, srcPermanent, "read-only: a hot journal needs rolling back"),
	row(1032, "SQLITE_READONLY_DBMOVED", false, srcPermanent, "read-only: the database file was moved"),
	row(1288, "SQLITE_READONLY_CANTINIT", false, srcPermanent, "read-only: cannot initialise the shared memory"),
	row(1544, "SQLITE_READONLY_DIRECTORY", false, srcPermanent, "read-only: the directory is read-only"),
	// sqlite3_interrupt is how Go drivers cancel: the caller's decision.
	row(9, "SQLITE_INTERRUPT", false, srcPermanent, "interrupted (a context was cancelled); in an explicit transaction SQLite rolled it back"),
	row(10, "SQLITE_IOERR", false, srcPermanent, "disk I/O error"),
	row(11, "SQLITE_CORRUPT", false, srcPermanent, "the database disk image is malformed"),
	row(13, "SQLITE_FULL", false, srcPermanent, "the database or disk is full"),
	row(14, "SQLITE_CANTOPEN", false, srcPermanent, "unable to open the database file"),
	row(18, "SQLITE_TOOBIG", false, srcPermanent, "string or BLOB too big"),
	row(20, "SQLITE_MISMATCH", false, srcPermanent, "datatype mismatch"),
	row(21, "SQLITE_MISUSE", false, srcPermanent, "library used incorrectly"),
	row(23, "SQLITE_AUTH", false, srcPermanent, "authorisation denied"),
	row(25, "SQLITE_RANGE", false, srcPermanent, "bind parameter index out of range"),
	row(26, "SQLITE_NOTADB", false, srcPermanent, "the file is not a database"),
}

// names holds the primary codes that have no row, so an error with one
// still gets a readable Class.Code.
var names = map[int]string{
	12: "SQLITE_NOTFOUND", 15: "SQLITE_PROTOCOL", 16: "SQLITE_EMPTY", 17: "SQLITE_SCHEMA",
	22: "SQLITE_NOLFS", 24: "SQLITE_FORMAT", 27: "SQLITE_NOTICE", 28: "SQLITE_WARNING",
}

// Every row says not applied: SQLite runs in the process, so an error code
// is a definite answer and there is no "sent but unanswered" state.
func row(n int, name string, retryable bool, src, reason string) Entry {
	if !retryable {
		reason += ": not retried"
	}
	return Entry{Code: itoa(n), Number: n, Source: src, Class: sr.Class{Retryable: retryable, Phase: sr.NotApplied, Code: name, Reason: reason}}
}
