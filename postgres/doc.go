// Package postgres classifies PostgreSQL and CockroachDB errors for
// sqlretry.
//
//	p, err := sqlretry.New(sqlretry.Config{
//		Classifier: postgres.Classifier, // or postgres.CockroachClassifier, postgres.LibPQClassifier
//	})
//
// It imports no driver. A server error is recognised through its
// SQLState() method, which pgx's *pgconn.PgError and lib/pq's *pq.Error both
// export; pgconn's proof that nothing was sent through SafeToRetry(). Anything
// else goes to [sqlretry.ClassifyNeutral]. The table, with a source on every
// row, is in codes.go; [Table] lists it and [Lookup] reads one code.
//
// # What it decides
//
//   - 40001 serialization_failure and 40P01 deadlock_detected: retryable, not
//     applied. The server rolled the transaction back; re-run it whole
//     (PostgreSQL manual §13.5), which is what sqlretry.RunTx does.
//   - 55P03, 55006, 55000: retryable, not applied.
//   - Class 53 and 58000/58030: retryable, not applied; 53300 and 57P03 are
//     sent only while a connection starts, so they are not sent.
//   - 57P01, 57P02, 57P05: the session was ended and its transaction rolled
//     back: retryable, not applied.
//   - Class 08: by evidence. With SafeToRetry() true in the chain, not sent;
//     otherwise unknown. 08007 transaction_resolution_unknown and 40003
//     statement_completion_unknown are always unknown.
//   - Any server code in answer to the connection's startup, which pgx
//     returns inside a *pgconn.ConnectError (08001, 08004, 53300, 57P03,
//     55000 "not currently accepting connections", 57P01, 28xxx, 3D000,
//     42501 "permission denied for database"...), is not sent: no statement
//     ran. The code still decides whether a retry can help, so 28xxx, 3D000
//     and 42501 stay permanent. lib/pq returns a bare *pq.Error at connect,
//     which cannot be told from the same code in answer to a statement: its
//     phase stays the table's.
//   - Permanent: classes 42, 23, 22, 28, 54, XX and 57P04, 25P02, 3D000 and
//     the rest of codes.go. A well-formed code not in the table is not
//     retryable.
//
// # CommitVerifier and transactions without an id
//
// [CommitVerifier] assigns the transaction an id at Mark
// (pg_current_xact_id()), since a NOTIFY-only transaction gets one only
// inside COMMIT, where an unknown COMMIT could not be looked up. See
// [CommitVerifier] for the cost and for the effects that need no id.
//
// # 57P01 in reply to COMMIT
//
// A session terminated while COMMIT was in flight (57P01 after
// pg_terminate_backend, 57P02, 57P05) may or may not have committed. An error
// value does not say which statement it answered, so the classifier reports
// these codes as not applied, which is right for every statement but COMMIT.
// sqlretry.RunTx knows when it sent COMMIT and treats a commit failure by its
// own rules: a not-applied failure whose session ended is read as unknown
// and settled by the Op's Verify or a CommitVerifier (see [CommitVerifier]),
// never blindly replayed.
//
// # query_canceled (57014)
//
// 57014 is not retryable (phase not applied). It comes from statement_timeout
// or a cancel request: a limit someone set on purpose, which the same
// statement is likely to hit again, or an operator's deliberate stop; the
// server rolls the statement back (and in a transaction block, the
// transaction; a COMMIT is cancelled only before its commit record). Npgsql,
// EF Core and cockroach-go make the same choice (the table cites them). When
// the Policy's own CommandTimeout fires, lib/pq answers with 57014 too, but
// the Policy recognises its timeout before it asks the classifier and
// retries it as unknown, so this choice does not weaken CommandTimeout. A
// lock wait meant to be retried belongs to lock_timeout (55P03, retried).
//
// # idle_in_transaction_session_timeout (25P03)
//
// 25P03 is retryable, not applied: the server ends a session that idled in
// an open transaction past the limit and rolls the transaction back, and
// reads nothing the client sends after; RunTx runs the transaction again.
// 25P04 (transaction_timeout, PostgreSQL 17) stays not retried.
//
// # pgbouncer
//
// pgbouncer answers for itself with FATAL 08P01 and a fixed message
// ("server conn crashed?", "server login has been failing…", "no more
// connections allowed (max_client_conn)", "query_wait_timeout", "database
// removed"…). Those messages, with that severity and code, are transient:
// not sent where pgbouncer never gave the client's query to a server,
// unknown where it lost or closed the server the client was using (the
// table of messages, bouncerRows, cites pgbouncer's source for each). Any
// other 08P01 stays a protocol violation, not retried.

// # lib/pq and driver.ErrBadConn
//
// database/sql's contract says a driver returns driver.ErrBadConn only when
// the server cannot have performed the work. lib/pq breaks it: it also
// returns driver.ErrBadConn for io.EOF, io.ErrUnexpectedEOF and FATAL errors
// after the command was sent, and from Tx.Commit after COMMIT was sent
// (lib/pq#939 "Retry logic can cause queries to be silently performed
// twice"). [LibPQClassifier] reads driver.ErrBadConn as retryable with an
// unknown outcome, so a write without Verify is not replayed. database/sql
// itself still retries ErrBadConn on its own, below sqlretry: prefer pgx.
//
// # pgx
//
// pgconn.SafeToRetry is trusted for not sent. pgconn.ErrConnClosed met while
// receiving a response is retryable with an unknown outcome (pgx v5.13.0 no
// longer marks it safe to retry); it is recognised by its text.
//
// # CockroachDB
//
// [CockroachClassifier]: 40001 and the legacy CR000 are retryable, not
// applied (cockroach-go's crdb retries exactly these); 40003 "result is
// ambiguous" is retryable with an unknown outcome; every other code as for
// PostgreSQL.
//
// Classifiers are stateless and safe for concurrent use.
package postgres
