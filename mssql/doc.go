// Package mssql classifies SQL Server errors, as go-mssqldb reports them,
// for sqlretry.
//
//	p, err := sqlretry.New(sqlretry.Config{Classifier: mssql.Classifier})
//
// It imports no driver: the error number is read through the
// SQLErrorNumber() method go-mssqldb's mssql.Error exports, the severity
// through SQLErrorClass(), and go-mssqldb's RetryableError through
// errors.Is(err, driver.ErrBadConn), which it matches. Anything else goes to
// [sqlretry.ClassifyNeutral]. The table, with its sources on every block, is
// in codes.go; [Table] lists it and [Lookup] reads one number.
//
// # The table
//
// Retryable: the union of EF Core's SqlServerTransientExceptionDetector (176
// numbers, 203 included although EF Core retries it only with a Win32 inner
// exception), SqlClient's BaselineTransientErrors and login list, the JDBC
// driver's built-in connection list (which adds 40020 and 40166), and -2,
// SqlClient's client command timeout: 179 numbers, each with a phase.
//
//   - Login-phase numbers (4060, 40613, 4221, 42108, 42109, 18401, ...) are
//     not sent: nothing ran.
//   - 1205 (deadlock victim) and other errors the server reports for a
//     request it refused or rolled back are not applied. 1222 (lock timeout)
//     aborts only the statement unless XACT_ABORT is ON; in a transaction,
//     re-run it whole.
//   - -2 (client timeout), the 40197 failover family (40197, 40143, 40540,
//     40020, 40166), the assertion numbers and the errors that say so (3429,
//     1421, 6292, 35256) are unknown: the request may have been applied.
//   - 40501 carries MinDelay 10 s, as the server asks.
//
// # SqlClient's network numbers
//
// Ten numbers of those lists are not server messages but the SNI or Win32
// error codes that Microsoft's SqlClient stamps on its own client-side
// network errors, always at class 20: 20, 64, 121, 203, 233, 997, 10053,
// 10054, 10060, 11001. go-mssqldb never reports such an error (its transport
// failures are net errors, io.EOF, StreamError or RetryableError). Six of
// them are also SQL Server's own messages, permanent errors it sends at
// severity 15 or 16: 121 (the select list of an INSERT ... SELECT has more
// items than the insert list), 203 (a name that is not a valid identifier,
// the EXEC @sql mistake), 233 (a column that cannot be null), 10053 and
// 10054 (OLE DB provider conversion and overflow) and 11001 (an OLE DB
// status). So these numbers count as network errors only when the error came
// with class 20 or above ([Entry].Network: retryable; not sent for 20 and
// 11001, which can only fail before a connection exists, unknown for the
// rest, which may follow a send); below class 20 they are the server's
// permanent errors, and the four with no server message (20, 64, 997,
// 10060) are judged by their severity like any unlisted number. [Lookup]
// reads a bare number as the server sends it.
//
// Never retried: 102, 156, 207, 208, 229, 230, 515, 547, 2601, 2627, 8152,
// 18456 and the rest of codes.go, and 50000 and above (RAISERROR/THROW).
// An unlisted number is judged by its severity: 13 is retryable and not
// applied, 20 and above (the server severed the connection) is not retried
// with an unknown outcome, the rest is not retried.
//
// # RetryableError and Commit
//
// go-mssqldb returns RetryableError (which matches driver.ErrBadConn) only
// when a request failed to be sent, so it is retryable and not sent. From
// Tx.Commit it means the COMMIT did not reach the server and the server
// rolls the transaction back when the session dies: not committed, re-run
// the whole transaction.
//
// Classifiers are stateless and safe for concurrent use.
package mssql
