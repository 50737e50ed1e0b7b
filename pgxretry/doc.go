// Package pgxretry gives code that uses pgx directly — *pgxpool.Pool,
// pgx.Tx, sqlc's pgx/v5 output — the retry rules of package sqlretry:
// survive deadlocks, serialization failures, dropped connections and
// failovers without losing a write, applying one twice, or telling the
// caller the wrong outcome.
//
//	p, err := sqlretry.New(sqlretry.Config{Classifier: postgres.Classifier})
//	db := pgxretry.New(pool, p) // pool is a *pgxpool.Pool
//	q := sqlc.New(db)           // the wrapper satisfies sqlc's DBTX
//
// It is its own module (github.com/sqlretry/sqlretry/pgxretry), so the
// library's users who do not use pgx never download it.
//
// # Statements outside a transaction
//
// [Pool] has the methods of *pgxpool.Pool that application code calls.
// Exec, Query, QueryRow, SendBatch and CopyFrom follow the database/sql
// layer's rules (sqlretry.Connector):
//
//   - a read — one statement that internal/sqltext proves read-only — is
//     replayed after any transient failure;
//   - a write is replayed only when the failure proves it was not applied:
//     nothing was sent (pgconn's SafeToRetry, a connection that could not
//     be acquired) or the server's error ended it on a session that
//     survived;
//   - a write of unknown outcome (the connection was lost after the send, a
//     command timeout, a session that ended in reply) ends in an error
//     matching sqlretry.ErrAmbiguous, unless an Op attached with [sqlretry.WithOp]
//     settles it by its Verify, or is Idempotent;
//   - a text of several statements, opaque code (CALL, DO) or transaction
//     control is a write whose failure is of unknown outcome unless nothing
//     was sent.
//
// The text is read only after a failure: a call that succeeds costs the
// Policy's success path and nothing more.
//
// Query reads the first row inside the attempt, so a failure before it is
// replayed; a failure after it is not (the caller may have read rows), and
// for a text that may write it is reported as ErrAmbiguous. QueryRow runs
// its query when Scan is called, so all of it is one call. A batch
// (SendBatch) is one implicit transaction; only a failure of its first
// result is replayed (see [Pool.SendBatch]). CopyFrom is replayed only
// before it read its source.
//
// A write on a connection whose backend was terminated while idle (a
// failover, pg_terminate_backend) meets the session's end as the reply to
// the write, which nothing tells apart from an end while the write ran: it
// ends in ErrAmbiguous without a verify. Give writes that matter a verify,
// or run them in [Pool.RunTx], whose failures before COMMIT are replayed.
//
// # Transactions
//
// [Pool.RunTx] runs a function in a transaction and runs the whole
// transaction again after a failure before COMMIT (deadlock 40P01,
// serialization failure 40001, a lost connection); it knows when COMMIT was
// sent, and settles a COMMIT of unknown outcome by the Op's Verify (after
// fencing the failed session) or by pg_xact_status (the transaction's id,
// marked with the server's timeline and start, is asked on another
// connection; a changed history is never answered), or, with [WithMarker],
// by a marker row sent in the same message as COMMIT, which costs no round
// trip and survives a failover. Errors keep pgx's
// *pgconn.PgError in their chain for errors.As. Begin and BeginTx return
// pgx's own transaction: BEGIN is retried, the statements in it are not.
//
// # Verdicts only with proof
//
// A Verify's "not applied" is believed only once the failed attempt's
// backend was terminated (pg_terminate_backend) and left pg_stat_activity:
// PostgreSQL does not notice a lost client while a statement runs. That
// needs the right to terminate the pool's own backends (the same role
// suffices).
package pgxretry
