// Package sqlretry makes SQL storage code survive transient failures —
// deadlocks, lock timeouts, failovers, throttling, dropped connections,
// command timeouts — without ever losing a write or applying one twice.
//
//	p, err := sqlretry.New(sqlretry.Config{Classifier: postgres.Classifier})
//	...
//	err = p.Do(ctx, sqlretry.Idempotent("load-task"), func(ctx context.Context) error {
//		return db.QueryRowContext(ctx, "SELECT payload FROM tasks WHERE id = $1", id).Scan(&payload)
//	})
//
// # Classify, then decide by operation
//
// Every failure is classified before anything is decided (a [Class]): is it
// transient, and what is known about whether the work reached the database —
// [NotSent], [NotApplied] or [Unknown]. Engine classifiers live in the
// packages mssql, postgres, mysql and sqlite; the root knows only
// engine-neutral facts ([ClassifyNeutral]).
//
// Then the operation decides (an [Op]). A read or an idempotent write
// ([Idempotent]) may be replayed after any transient failure. A write that
// must not be applied twice ([Write]) is replayed only when the failure proves
// nothing was applied; after an ambiguous failure its verify reads what the
// database holds, and without a verify the call fails with [ErrAmbiguous]
// rather than guess.
//
// # Bounded, and fair to a recovering database
//
// Retries are few (MaxRetries), spaced by capped exponential backoff with
// jitter, and drawn from a shared [Budget] so a fleet of clients cannot flood
// a database that is trying to recover; an optional [Breaker] fails calls fast
// while it is down. A caller's cancelled context is final: no retry, no
// further sleep, and the error wraps both ctx.Err() and the last database
// error. A per-attempt CommandTimeout that fires is a retryable failure of
// phase Unknown — never confused with the caller's own deadline.
//
// # database/sql
//
// [Connector] and [Open] give code that uses *sql.DB (directly, or through
// sqlc, sqlx, GORM or ent) transparent retry of statements outside
// transactions and of connects:
//
//	db := sql.OpenDB(sqlretry.Connector(inner, p))
//
// A statement is replayed after a failure that proves nothing was applied;
// after an ambiguous one only if it is read-only (judged past comments and
// CTEs by [IsReadOnly]) or the Policy's rule [Schedule] consents to its verb.
// A connection whose session was lost is replaced underneath database/sql,
// whose own two blind retries on driver.ErrBadConn are never multiplied with
// ours. Session state (SET variables, temporary tables) is lost with the
// session: Config.SessionInit re-applies it on every new
// connection. Inside an explicit transaction nothing is replayed statement by
// statement, and that holds for a transaction opened in SQL text: the
// Connector reads every text's effect on the session (BEGIN, SET
// autocommit=0, XA START, COMMIT AND CHAIN …) and replays nothing on a
// session it cannot prove to be outside a transaction. A text that is not
// provably one statement (several statements, CALL, DO, EXEC) is a write of
// unknown outcome after any failure that does not prove it unsent. [WithOp]
// attaches an Op — a verify, say by an idempotency key ([Exists], [NewKey])
// — to the next write made with a context.
//
// # Verdicts only with proof
//
// A verify's "applied" is trusted at once. Its "not applied" is trusted only
// about an attempt that has provably stopped ([Class.Ended]: SQLite, injected
// faults), or whose session a [Fencer] ended and the server confirmed gone:
// a server may run a statement on after its client gave up. Without that
// proof the call ends in [ErrAmbiguous]. A [CommitVerifier] must answer
// false only when the transaction can no longer commit.
//
// [RunTx] retries a whole transaction on failures that prove it did not
// commit, and settles an ambiguous COMMIT by the Op's Verify or the Policy's
// [CommitVerifier] (postgres.CommitVerifier asks pg_xact_status) instead of
// replaying it:
//
//	err := sqlretry.RunTx(ctx, db, p, sqlretry.Write("move-money", verify), nil,
//		func(ctx context.Context, tx *sql.Tx) error { ... })
//
// An ambiguous COMMIT of a Write Op without a Verify is settled by
// Config.CommitVerifier: postgres.CommitVerifier (pg_xact_status: no table
// and the cheapest, PostgreSQL only, no answer after a failover, a crash or
// a restart) or the MarkerVerifier of package postgres, mysql, sqlite or
// mssql (a row in a marker table: every engine, answers after a failover,
// one INSERT per transaction). [Verifiers] combines two: the first answers
// while it can. A verifier that keeps records in the database implements
// [TxSetup]; RunTx calls its BeforeTx before each attempt opens its
// transaction.
//
// # Vocabulary
//
// An attempt is one run of the operation; retries are attempts after the
// first. A storage retry replays plumbing and is invisible to a job queue's
// job attempts.
package sqlretry
