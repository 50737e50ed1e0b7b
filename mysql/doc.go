// Package mysql classifies MySQL and MariaDB errors, as
// github.com/go-sql-driver/mysql reports them, for sqlretry.
//
//	p, err := sqlretry.New(sqlretry.Config{Classifier: mysql.Classifier})
//
// It imports go-sql-driver/mysql, a small module, because *mysql.MySQLError
// and mysql.ErrInvalidConn have no behaviour method to recognise them by.
// The table, with a source on every row, is in codes.go; [Table] lists it
// and [Lookup] reads one number.
//
// # What it decides
//
//   - 1213 deadlock: retryable, not applied. InnoDB rolled back the whole
//     transaction; re-run it whole (sqlretry.RunTx).
//   - 1205 lock wait timeout: retryable, not applied for the statement.
//     InnoDB rolls back only the statement, so the transaction survives
//     (unless the server runs with innodb_rollback_on_timeout). A statement
//     inside a transaction is still never replayed on its own: RunTx re-runs
//     the transaction whole.
//   - 1040, 1203, 1042: refused at connect, retryable, not sent.
//   - 4031 from MySQL 8.0.24+ (ER_CLIENT_INTERACTION_TIMEOUT: the server
//     closed the idle session and answers the next command with this error
//     instead of running it) and 1184 (init_connect failed: the server reads
//     the session's first command without running it): retryable, not sent.
//     MariaDB's 4031 is another error, ER_REFERENCED_TRG_DOES_NOT_EXIST, a
//     refused CREATE TRIGGER: a 4031 without MySQL's "disconnected by the
//     server because of inactivity" text is not retried.
//   - mysql.ErrInvalidConn: a read failed after the command was sent:
//     retryable, unknown. The connection-loss numbers (2006, 2013, 1053,
//     1077, 1079, 1152, 1158-1161, 1927) are unknown too.
//   - driver.ErrBadConn: go-sql-driver returns it only when not one byte was
//     written (go-sql-driver/mysql#302), so it is not sent.
//   - Permanent: 1064, 1054, 1146, 1044, 1045, 1142, 1062, 1451, 1452, 1048,
//     1406, 1264, 3819 and the rest of codes.go. 1317, 3024 and 1969 (an
//     interrupted or timed-out query) are not retried. The read-only numbers
//     1290, 1792 and 1836 are not retried: to retry them after a failover,
//     set rejectReadOnly=true in the DSN, which turns them into
//     driver.ErrBadConn.
//
// A well-formed number not in the table is not retryable.
//
// Classifiers are stateless and safe for concurrent use.
package mysql
