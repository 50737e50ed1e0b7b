package postgres

import (
	sr "github.com/sqlretry/sqlretry"
)

// Sources cited by the table: the PostgreSQL and CockroachDB manuals, and
// public code at the commit or version read.
const (
	srcPGManual  = "PostgreSQL manual, 13.5 Serialization Failure Handling (https://www.postgresql.org/docs/current/mvcc-serialization-failure-handling.html)"
	srcNpgsql    = "Npgsql PostgresException.IsTransient, npgsql/npgsql@3cb5804b"
	srcErrcodes  = "PostgreSQL Error Codes, manual Appendix A (https://www.postgresql.org/docs/current/errcodes-appendix.html)"
	srcPermanent = "PostgreSQL Error Codes, manual Appendix A (https://www.postgresql.org/docs/current/errcodes-appendix.html): a class of errors a retry cannot fix"
	srcCRDB      = "cockroach-go crdb v2.4.2 errIsRetryable; CockroachDB Transaction Retry Error Reference (https://www.cockroachlabs.com/docs/stable/transaction-retry-error-reference)"
	srcCRDBAmbig = "CockroachDB Common Errors, \"result is ambiguous\" (https://www.cockroachlabs.com/docs/stable/common-errors#result-is-ambiguous)"
	srcChoice    = "sqlretry policy choice, documented in the postgres package (https://pkg.go.dev/github.com/sqlretry/sqlretry/postgres)"
	srcIdleTx    = "PostgreSQL manual, 20.11 Client Connection Defaults, idle_in_transaction_session_timeout (https://www.postgresql.org/docs/current/runtime-config-client.html): terminate any session idle (waiting for a client query) within an open transaction longer than the limit"
	// srcConnect backs the rule in classify that any server code inside a
	// *pgconn.ConnectError is not sent.
	srcConnect = "pgx v5.13.0 pgconn.ConnectConfig: every failure before the connection is established, a server ErrorResponse to the startup message included, is returned inside *pgconn.ConnectError; connect-time refusals (08001, 08004, 53300, 57P03) ran nothing"
)

// evidence marks a class whose phase depends on the error's other evidence:
// SafeToRetry() true means not sent, anything else unknown.
const evidence = "by evidence"

// entries is PostgreSQL's table: exact SQLSTATEs first, then whole classes
// written "NNxxx". Lookup tries the exact code, then its class.
var entries = []Entry{
	// Class 40 Transaction Rollback: the server rolled the transaction back,
	// so the whole transaction can be re-run.
	// PostgreSQL manual §13.5; Npgsql IsTransient.
	na("40001", srcPGManual, "serialization_failure: the transaction was rolled back; re-run the whole transaction"),
	na("40P01", srcPGManual, "deadlock_detected: the transaction was rolled back; re-run the whole transaction"),
	// errcodes.txt; ambiguous by definition.
	unk("40003", srcErrcodes, "statement_completion_unknown: the statement may have completed; verify before replaying a write"),
	perm("40002", srcPermanent, "transaction_integrity_constraint_violation"),

	// Class 55 Object Not In Prerequisite State: lock and object conflicts.
	// Npgsql IsTransient.
	na("55P03", srcNpgsql, "lock_not_available: a lock could not be taken (NOWAIT or lock_timeout); in a transaction, re-run it whole"),
	na("55006", srcNpgsql, "object_in_use: the object is in use by another session"),
	na("55000", srcNpgsql, "object_not_in_prerequisite_state: often a concurrent state change; can also be a programming error, so retries are bounded"),

	// Class 53 Insufficient Resources: transient, with backoff. 53300 is sent
	// only while a connection starts, so nothing ran.
	// Npgsql IsTransient; errcodes.txt.
	{Code: "53xxx", Source: srcNpgsql, Class: sr.Class{Retryable: true, Phase: sr.NotApplied, Code: "53xxx", Reason: "insufficient_resources: the server rejected the statement for lack of resources; retry with backoff"}},
	ns("53300", srcNpgsql, "too_many_connections: refused at connect, nothing ran"),

	// Class 57 Operator Intervention.
	// Npgsql IsTransient. 57P01/57P02/57P05 end the session and roll back
	// its transaction; in reply to COMMIT the outcome is unknown, which only
	// the caller (RunTx) can tell: see doc.go.
	ns("57P03", srcNpgsql, "cannot_connect_now: the server is starting up or in recovery; refused at connect, nothing ran"),
	na("57P01", srcNpgsql, "admin_shutdown: the session was terminated and its transaction rolled back (in reply to COMMIT: unknown, settled by RunTx)"),
	na("57P02", srcNpgsql, "crash_shutdown: the session was terminated and its transaction rolled back (in reply to COMMIT: unknown, settled by RunTx)"),
	na("57P05", srcNpgsql, "idle_session_timeout: the session was terminated and its transaction rolled back (in reply to COMMIT: unknown, settled by RunTx)"),
	// 57014 query_canceled: statement_timeout fired, or a cancel request
	// came (pg_cancel_backend, a client's cancel). Not applied: the server
	// aborts the statement, and in a transaction block the transaction. A
	// COMMIT can be cancelled only by a cancel request (statement_timeout is
	// disabled before COMMIT runs its deferred triggers: finish_xact_command
	// in src/backend/tcop/postgres.c), and only before its commit record; a
	// cancel while COMMIT waits for a synchronous standby is a WARNING on a
	// COMMIT that succeeded ("canceling wait for synchronous replication"),
	// never this ERROR (TestQueryCanceled cancels a COMMIT: no row).
	// Not retried, with the peers: Npgsql's PostgresException.IsTransient
	// leaves it out, EF Core's NpgsqlTransientExceptionDetector retries a
	// client TimeoutException but not the server's 57014 (npgsql/efcore.pg
	// src/EFCore.PG/Storage/Internal/NpgsqlTransientExceptionDetector.cs),
	// cockroach-go retries 40001 and CR000 alone, and pgx and the JDBC
	// driver retry nothing (pgconn.SafeToRetry is false for a server
	// error). The statement ran into a limit someone set, or was stopped on
	// purpose: replaying it multiplies a slow statement's load on a slow
	// server by the retries, or undoes an operator's cancel. The Policy's
	// own CommandTimeout is told apart before the classifier is asked (a
	// retryable command-timeout), and a lock wait meant to be retried
	// belongs to lock_timeout (55P03, retried). See doc.go, "query_canceled".
	{Code: "57014", Source: srcChoice + "; " + srcNpgsql + "; " + srcCRDB, Class: sr.Class{Phase: sr.NotApplied, Code: "57014", Reason: "query_canceled: statement_timeout or a cancel request stopped the statement, and the server rolled it back; not retried (a limit someone set, as Npgsql, EF Core and cockroach-go decide)"}},
	perm("57P04", srcPermanent, "database_dropped"),

	// Class 58 System Error: Npgsql IsTransient.
	na("58000", srcNpgsql, "system_error: an error external to PostgreSQL; retry with backoff"),
	na("58030", srcNpgsql, "io_error: an I/O error on the server; retry with backoff"),

	// Class 08 Connection Exception: the phase comes from the evidence (in
	// answer to the connection's startup, inside a *pgconn.ConnectError, or
	// SafeToRetry → not sent; otherwise unknown: dblink and postgres_fdw
	// raise 08001 and 08004 in answer to a statement too). Npgsql
	// IsTransient lists 08000, 08001, 08003, 08004, 08006, 08007.
	{Code: "08xxx", Source: srcNpgsql + "; " + srcConnect, Class: sr.Class{Retryable: true, Phase: sr.Unknown, Code: "08xxx", Reason: "connection_exception: " + evidence + " (at connect, inside pgconn.ConnectError, or SafeToRetry: not sent; otherwise the command may have run)"}},
	unk("08007", srcNpgsql, "transaction_resolution_unknown: the transaction may have committed; verify before replaying a write"),
	// errcodes.txt; not in Npgsql's list: a protocol violation is a client bug.
	{Code: "08P01", Source: srcErrcodes, Class: sr.Class{Phase: sr.Unknown, Code: "08P01", Reason: "protocol_violation: a client or driver bug; not retried"}},

	// Class 25, selected (errcodes.txt).
	perm("25006", srcPermanent, "read_only_sql_transaction"),
	perm("25P02", srcPermanent, "in_failed_sql_transaction: an earlier error aborted the transaction"),
	// 25P03: the backend raises it only while it waits, idle inside an open
	// transaction block, for the client's next command, and then exits: the
	// transaction is rolled back, and whatever the client sends next (a
	// statement, COMMIT) is never read. Not applied, and run again whole:
	// the limit caught the client's pause (a GC, a slow request handler),
	// not the work, and a naive loop recovered about 87 % of such calls
	// (issue 27). It cannot answer an autocommit statement: the session was
	// in a transaction. (In reply to COMMIT on a session that ended, RunTx
	// still settles it, as it does 57P01.)
	na("25P03", srcIdleTx, "idle_in_transaction_session_timeout: the session idled in a transaction past the limit and was ended; its transaction was rolled back and nothing sent after was read: run the whole transaction again"),
	{Code: "25P04", Source: srcChoice, Class: sr.Class{Phase: sr.NotApplied, Code: "25P04", Reason: "transaction_timeout: the transaction was rolled back; not retried (an operator limit)"}},

	// Permanent: whole classes (PostgreSQL manual, Appendix A).
	{Code: "42xxx", Source: srcPermanent, Class: sr.Class{Phase: sr.NotApplied, Code: "42xxx", Reason: "syntax_error_or_access_rule_violation: permanent"}},
	{Code: "23xxx", Source: srcPermanent, Class: sr.Class{Phase: sr.NotApplied, Code: "23xxx", Reason: "integrity_constraint_violation: permanent"}},
	{Code: "22xxx", Source: srcPermanent, Class: sr.Class{Phase: sr.NotApplied, Code: "22xxx", Reason: "data_exception: permanent"}},
	{Code: "28xxx", Source: srcPermanent, Class: sr.Class{Phase: sr.NotSent, Code: "28xxx", Reason: "invalid_authorization_specification: refused at connect; permanent until the credentials change"}},
	{Code: "54xxx", Source: srcPermanent, Class: sr.Class{Phase: sr.NotApplied, Code: "54xxx", Reason: "program_limit_exceeded: permanent"}},
	{Code: "XXxxx", Source: srcPermanent, Class: sr.Class{Phase: sr.NotApplied, Code: "XXxxx", Reason: "internal_error: permanent, escalate"}},
	// Permanent: single codes (PostgreSQL manual, Appendix A).
	perm("0A000", srcPermanent, "feature_not_supported"),
	perm("2BP01", srcPermanent, "dependent_objects_still_exist"),
	perm("2B000", srcPermanent, "dependent_privilege_descriptors_still_exist"),
	perm("3D000", srcPermanent, "invalid_catalog_name: the database does not exist"),
	perm("3F000", srcPermanent, "invalid_schema_name"),
	perm("44000", srcPermanent, "with_check_option_violation"),
	perm("2D000", srcPermanent, "invalid_transaction_termination"),
	perm("24000", srcPermanent, "invalid_cursor_state"),
	perm("26000", srcPermanent, "invalid_sql_statement_name"),
	perm("34000", srcPermanent, "invalid_cursor_name"),
	perm("3B001", srcPermanent, "invalid_savepoint_specification"),
	perm("P0001", srcPermanent, "raise_exception: application-defined (PL/pgSQL RAISE)"),
}

// cockroachEntries override the PostgreSQL table for CockroachDB.
var cockroachEntries = []Entry{
	// cockroach-go crdb errIsRetryable: "CR000" || "40001".
	na("40001", srcCRDB, "serialization_failure (restart transaction): re-run the whole transaction"),
	na("CR000", srcCRDB, "legacy CockroachDB retry error: re-run the whole transaction"),
	// cockroachdb/docs: 40003 "result is ambiguous".
	unk("40003", srcCRDBAmbig, "result is ambiguous: the statement or COMMIT may have been applied; verify before replaying a write"),
}

func na(code, src, reason string) Entry {
	return Entry{Code: code, Source: src, Class: sr.Class{Retryable: true, Phase: sr.NotApplied, Code: code, Reason: reason}}
}

func ns(code, src, reason string) Entry {
	return Entry{Code: code, Source: src, Class: sr.Class{Retryable: true, Phase: sr.NotSent, Code: code, Reason: reason}}
}

func unk(code, src, reason string) Entry {
	return Entry{Code: code, Source: src, Class: sr.Class{Retryable: true, Phase: sr.Unknown, Code: code, Reason: reason}}
}

func perm(code, src, reason string) Entry {
	return Entry{Code: code, Source: src, Class: sr.Class{Phase: sr.NotApplied, Code: code, Reason: reason + ": permanent"}}
}

// srcPgBouncer is where pgbouncer's own errors come from: each is sent by
// disconnect_client(client, true, reason) through send_pooler_error
// (src/proto.c), as an ErrorResponse of severity FATAL and SQLSTATE 08P01,
// just before pgbouncer closes the client's connection. Each row cites the
// line that sends its reason, at pgbouncer_1_18_0 unless it names another
// version (pgbouncer/pgbouncer on GitHub; the version Debian 12 ships).
const srcPgBouncer = "pgbouncer 1.18.0 (github.com/pgbouncer/pgbouncer, tag pgbouncer_1_18_0) src/proto.c send_pooler_error: FATAL, SQLSTATE 08P01, then the client's connection is closed"

// A bouncerRow is the verdict on one of pgbouncer's own errors, known by its
// exact message (or, with prefix, its beginning) under FATAL 08P01: a
// server never sends these texts, and a user's RAISE cannot send FATAL.
type bouncerRow struct {
	text    string
	prefix  bool
	class   sr.Class // the verdict, its Code "08P01"
	startup sr.Class // the verdict inside a *pgconn.ConnectError (atStartup)
	source  string
}

// The phases of pgbouncer's errors, read from where it sends them: did the
// client's query, if it sent one, reach a server?
//   - NotSent: pgbouncer refused the client at login, or the client had no
//     server linked (waiting for one, idle between transactions), so
//     nothing it sent was forwarded: a retry is safe for any statement.
//   - Unknown: the client was linked to a server (SV_ACTIVE) that pgbouncer
//     closed or lost, so a query or COMMIT may have reached it and run.
//
// Every one is transient: the pooler or the server behind it comes back,
// a limit frees up. pgbouncer's other errors (authentication, unknown
// database, bad startup parameter, protocol errors) keep 08P01's verdict.
var bouncerRows = []bouncerRow{
	// Login refused: the connection was never open for statements.
	bouncerNS("no more connections allowed (max_client_conn)", false, "src/client.c:576 (set_pool at login: max_client_conn reached)"),
	bouncerNS("client connections exceeded (max_db_client_connections)", false, "pgbouncer 1.24.0 src/client.c:450 (at login)"),
	bouncerNS("client connections exceeded (max_user_client_connections)", false, "pgbouncer 1.24.0 src/client.c:486 (at login)"),
	bouncerNS("client_login_timeout", false, "src/janitor.c:590 (a client not logged in after client_login_timeout)"),
	bouncerNS("client_login_timeout (server down)", false, "src/janitor.c:428 (a client waiting for the server's welcome at login)"),
	bouncerNS("pooler is shutting down", false, "pgbouncer 1.25.0 src/objects.c:2040 (a login during shutdown)"),
	// No server was linked to the client: what it sent went nowhere.
	// check_fast_fail (src/objects.c:607), called by find_server only for a
	// client without a server (src/objects.c:673): the text changed twice.
	bouncerNS("server login has been failing", true, "src/objects.c:626 \"server login has been failing, try again later (server_login_retry)\"; pgbouncer 1.24.0 src/objects.c:877 \"server login has been failing, cached error: … (server_login_retry)\""),
	bouncerNS("pgbouncer cannot connect to server", false, "pgbouncer 1.16.0 src/objects.c:601 (check_fast_fail's text before 1.17)"),
	bouncerNS("query_wait_timeout", false, "src/janitor.c:404 (a client in waiting_client_list, waiting for a server)"),
	bouncerNS("query_timeout", false, "src/janitor.c:402 (a client in waiting_client_list; a running query's is \"query timeout\")"),
	bouncerNS("client_idle_timeout", false, "src/janitor.c:385 (an idle client without a server: client->link is skipped)"),
	bouncerNS("server shutting down", false, "pgbouncer 1.23.0 src/janitor.c:408 (a waiting client during shutdown) and src/objects.c:790 pause_client (a client finding no server)"),
	// The client was linked to a server that pgbouncer lost or closed: the
	// query or COMMIT it had sent may have run.
	bouncerUnk("server conn crashed?", "src/server.c:549 (the linked server's socket failed) via disconnect_server, src/objects.c:897"),
	bouncerUnk("database removed", "src/janitor.c:684 kill_pool (admin KILL, or the database left the config): active clients are closed mid-query"),
	bouncerUnk("query timeout", "src/janitor.c:549 (the linked server's query ran past query_timeout: the server connection is closed)"),
	bouncerUnk("idle transaction timeout", "src/janitor.c:554 (the linked server idle in a transaction past idle_transaction_timeout: closed, the transaction rolled back unless its COMMIT was just forwarded)"),
	bouncerUnk("database configuration changed", "src/janitor.c:523 (server_fast_close after RECONNECT or RELOAD: the linked server is closed)"),
}

func bouncerNS(text string, prefix bool, where string) bouncerRow {
	c := sr.Class{Retryable: true, Phase: sr.NotSent, Code: "08P01", Reason: "pgbouncer: " + text + ": the pooler refused or dropped the client before its query reached a server; nothing ran"}
	return bouncerRow{text: text, prefix: prefix, class: c, startup: atStartup(c), source: srcPgBouncer + "; " + where}
}

func bouncerUnk(text, where string) bouncerRow {
	c := sr.Class{Retryable: true, Phase: sr.Unknown, Code: "08P01", Reason: "pgbouncer: " + text + ": the pooler closed the client's server connection, and the query or COMMIT it was running may have run"}
	return bouncerRow{text: text, class: c, startup: atStartup(c), source: srcPgBouncer + "; " + where}
}
