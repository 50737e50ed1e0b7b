// Package sqlite classifies SQLite errors, as modernc.org/sqlite and
// github.com/mattn/go-sqlite3 report them, for sqlretry.
//
//	p, err := sqlretry.New(sqlretry.Config{Classifier: sqlite.Classifier})
//
// It imports no driver: modernc.org/sqlite's errors are read through their
// Code() method (the extended result code), mattn/go-sqlite3's sqlite3.Error
// through its fields by reflection (importing it would need cgo). Anything
// else goes to [sqlretry.ClassifyNeutral]. The table, with a source on every
// block, is in codes.go; [Table] lists it and [Lookup] reads one code, by
// number or name.
//
// # What it decides
//
// SQLite runs in the process, so a result code is always a definite answer:
// every verdict's phase is not applied.
//
//   - SQLITE_BUSY (5) and its extended codes 261 and 773: retryable. In
//     autocommit mode the statement had no effect; inside an explicit
//     transaction SQLite may have rolled the transaction back, so it is
//     re-run whole (sqlretry.RunTx).
//   - SQLITE_BUSY_SNAPSHOT (517): retryable, but only a whole-transaction
//     retry can succeed: the read snapshot is stale, and retrying the
//     statement fails again. Start write transactions with BEGIN IMMEDIATE.
//   - SQLITE_LOCKED (6) and SQLITE_LOCKED_SHAREDCACHE (262): retryable.
//   - SQLITE_CONSTRAINT (19) and every extended constraint code: permanent,
//     as are SQLITE_ERROR, SQLITE_READONLY, SQLITE_CORRUPT, SQLITE_FULL,
//     SQLITE_IOERR and the rest of codes.go. SQLITE_INTERRUPT (9), how Go
//     drivers cancel a statement, is not retried.
//
// An extended code that is not listed is read as its primary code
// (code & 0xff); a primary code that is not listed is not retryable.
//
// # Several writers on one file
//
// Set a busy timeout in the DSN, so every connection the pool opens has it,
// and start write transactions with BEGIN IMMEDIATE (_txlock=immediate):
//
//	dsn := sqlite.DSNWithBusyTimeout("file:app.db?_pragma=journal_mode(WAL)&_txlock=immediate", sqlite.BusyTimeout)
//
// [BusyTimeout] says why, with the measurements behind it. The contention
// that surfaces anyway (SQLITE_BUSY, SQLITE_BUSY_SNAPSHOT, SQLITE_LOCKED) is
// retried under Config.ContentionRetries and draws nothing from the retry
// budget.
//
// # Settling an unknown COMMIT
//
// [MarkerVerifier] settles a COMMIT whose outcome is unknown (a commit hook
// that failed, a driver that lost the reply) for sqlretry.RunTx with a
// marker row written in the transaction.
//
// Classifiers are stateless and safe for concurrent use.
package sqlite
