// Package crl implements the JDBC driver's configurable retry logic (CRL)
// rule language — retryExec for statements, retryConn for connects, and the
// mssql-jdbc.properties rules file — as [sqlretry.Schedule]s that a Policy
// consults before its own rules.
//
//	c := crl.Config{
//		Exec: "{1205,1222:3,2*2:select,update};{2714:2,1+1}",
//		Conn: "+4060",
//	}
//	pc := sqlretry.Config{Classifier: mssql.Classifier}
//	if err := c.Apply(&pc); err != nil { // *crl.Error: R_invalidParameterNumber, rule 2, token "x"…
//		return err
//	}
//	p, err := sqlretry.New(pc)
//
// or, with rules an operator can edit without a deploy:
//
//	f, err := crl.NewFile("/etc/app/mssql-jdbc.properties", crl.Config{}, nil)
//	f.Apply(&pc)
//
// # Statement rules (retryExec)
//
//	errors:retryCount[,initialRetryTime[op retryChange]][:queryFilter]
//
// Rules are separated by ";"; each may be wrapped in {…}, and so may the whole
// list (the JDBC URL needs braces because it uses ";" itself). errors is one
// error number or several separated by ",": the rule expands to one entry per
// error, all sharing timings and filter. A later rule for the same error
// replaces an earlier one.
//
// retryCount is the number of retries after the first failure (0 disables the
// rule; negative is invalid). The wait before retry i+1 is computed when the
// rule is parsed: initialRetryTime + retryChange·i for op "+", and
// initialRetryTime·retryChange^i for op "*". initialRetryTime defaults to 0, op
// to "+", retryChange to 2, and with "*" and no retryChange, retryChange is
// initialRetryTime. So "3" waits 0, 2, 4 s; "3,5" waits 5, 7, 9 s (not a
// constant 5: write "3,5+0" for that); "3,5+5" 5, 10, 15 s; "3,2*2" 2, 4, 8 s;
// "4,1*" 1, 1, 1, 1 s.
//
// queryFilter is a ","-separated list of keywords, lower-cased at parse time.
// The rule fires only for a statement whose first token (the default,
// [FilterJDBC]) or verb ([FilterVerb]) is in the list; without a filter it
// fires for every statement. A rule with only error numbers is a connection
// rule: a statement rule needs at least retryCount.
//
// # Connection rules (retryConn)
//
//	[+]errors
//
// With "+" the errors are added to the built-in list of transient connection
// errors ([Builtin]: the driver's 20 numbers); without it they replace the
// list. The mode is global to the whole value: one rule without "+" switches
// every rule to replace, so "{+4060};{40143}" retries only 4060 and 40143.
// The connect loop keeps its pace and bounds from connectRetryCount (default
// 1, 0 to 255, the driver's 0 disabling; [NoConnectRetries] here),
// connectRetryInterval (default 10 s, 1 to 60; the first retry is immediate)
// and loginTimeout, the bound on the whole connect: a retry whose wait would
// reach it is not started. Rules name what is retried, never how often.
//
// Authentication failures ([NeverRetried]: SQL Server 18456, 18452, 18486,
// 18487, 18488; PostgreSQL class 28) are never retried, even when a rule names
// them: a wrong password does not heal within a connect, and each retry counts
// toward the server's or the directory's account lockout threshold, so a retry
// can turn a configuration error into a locked-out service account. Failures
// the rule language cannot name (a dial error, a reset connection: codes such
// as "dial" or "conn-reset") are retried when the classifier says they are
// transient, under the same count, interval and loginTimeout.
//
// # How rules compose with the Policy
//
// A statement schedule ([ExecSchedule], or a [File]) answers for the failures
// whose Class.Code has a rule: Retry with the rule's wait, or Stop when the
// rule's retries are used up or its filter does not match (the driver
// rethrows). For a code with no rule it answers Defer, and the Policy's
// classifier, MaxRetries and backoff decide as if there were no rules. Whatever
// a rule says, the Policy still draws each retry from its budget, obeys its
// breaker and the caller's context (a wait that would outlive the caller's
// deadline is not started), and applies the Op's consent: after a failure of
// phase Unknown, a write is verified or not replayed at all. The filters are
// the operator's consent for the database/sql layer: a statement whose first
// token or verb a rule's filter names explicitly may be replayed after an
// ambiguous failure with the rule's own error code
// ([ExecSchedule.ConsentsToReplay]); a rule without a filter names no
// statement, and a rule for another code is about another failure, so neither
// is such consent. A rule with a filter defers to the Policy when there is no
// statement to match (RunTx, Policy.Do), so it never stops a whole-transaction
// retry.
//
// The JDBC driver's filter "contains" the first token: we compare whole items
// (ASCII case-insensitive), so a filter "update" does not match "upd".
//
// A statement rule never replays a statement inside an explicit transaction:
// the database/sql layer does not consult the schedule there. In PostgreSQL
// any error aborts the transaction, and in SQL Server a deadlock rolls it back,
// so a statement replayed alone would run outside the transaction the
// application believes it is in. Transactions are retried whole, by
// sqlretry.RunTx.
//
// # The rules file
//
// [ParseProperties] and [File] read mssql-jdbc.properties as the driver does:
// a line that starts with "retryExec" or "retryConn" (a literal prefix test;
// "#…" lines and other keys are ignored, "retryExec2=…" counts) gives the
// value after its "="; several lines for a property are joined. Values set in
// code win, property by property. The File looks at the file's modification
// time at most every 30 s ([ReloadInterval], measured with an injected clock)
// and re-reads it only if that changed. A file that no longer parses keeps the
// last good rules and [File.Status] says why; a removed file means no file
// rules, as in the driver.
//
// # Errors
//
// Parse errors are [*Error]s with the driver's message keys:
// R_invalidParameterNumber (a token that is not a number where an error
// number or a timing was expected, or more than one comma in the timings),
// R_InvalidRuleFormat (more than three sections, and the shapes listed under
// [KeyInvalidRuleFormat]) and R_InvalidRetryInterval (a wait above the query
// timeout, or above [MaxWait]). Each names the rule (1-based) and the
// offending token with its byte offset.
//
// # Differences from the JDBC driver
//
//   - Rules belong to the value that holds them — an Exec, a Conn, a File, the
//     Policy they are applied to — not to the process. The driver keeps one
//     rule set per JVM, so a second connection with other rules silently
//     replaces the first one's.
//   - R_InvalidRetryInterval is caught when the rules are validated against
//     the query timeout ([Config.QueryTimeout], [Exec.CheckQueryTimeout]),
//     not when a rule fires in production and the driver throws the
//     configuration error instead of the database error. Config.QueryTimeout
//     0 means unset; the driver's queryTimeout=0, which rejects every positive
//     wait, is Exec.CheckQueryTimeout(0) (and the command's --query-timeout 0).
//   - A second filter mode, [FilterVerb], matches the statement's real verb
//     ([sqlretry.Verb]) past comments, parentheses and a WITH … AS (…) prefix,
//     which defeat the driver's first-token match. [FilterJDBC] stays the
//     default, and matches the whole first token (the driver tests whether the
//     joined filter string contains the token, so "sel", or the empty token of
//     a statement that starts with a space, matches "select").
//   - A filter that does not match stops the retries (the error is returned).
//     The driver's loop neither retries nor rethrows in that case.
//   - Error "numbers" may be SQLSTATE codes ("40001,40P01:3,1*2") with the
//     [SQLState] syntax, for PostgreSQL and CockroachDB classifiers; the
//     [Numbers] syntax (the zero value) serves SQL Server and MySQL.
//   - A statement rule never replays a statement inside an explicit
//     transaction; the driver does, outside the transaction it was in.
//   - Rules compose with the engine: the budget, the breaker and the caller's
//     context bound every retry, and an ambiguous failure of a statement that
//     is not read-only is not replayed blindly — filters are the operator's
//     consent.
//   - Authentication failures are never retried on connect.
//   - Stricter parsing where the driver guesses: a statement rule needs
//     timings (the driver retries "1205" once with no wait), a connection rule
//     takes none, "3," and "3,5+5+5" are errors (the driver ignores the extra
//     parts), braces only wrap a rule or the list, filter items are keywords,
//     retryCount is at most [MaxRetries] and a wait at most [MaxWait] (the
//     driver overflows). Whitespace around tokens is ignored.
//
// Everything in this package is safe for concurrent use.
package crl
