package mysql

import (
	sr "github.com/sqlretry/sqlretry"
)

// Sources cited by the table: the MySQL and MariaDB manuals and error
// references, and public code at the commit or version read.
const (
	srcMySqlConnector = "MySqlConnector MySqlException.IsTransient, mysql-net/MySqlConnector@61366757"
	srcInnoDB         = "MySQL manual, InnoDB Error Handling (https://dev.mysql.com/doc/refman/8.4/en/innodb-error-handling.html)"
	srcSuggested      = "MySQL server error reference (https://dev.mysql.com/doc/mysql-errors/8.4/en/server-error-reference.html); MariaDB error codes (https://mariadb.com/kb/en/mariadb-error-codes/); names as in MySqlConnector MySqlErrorCode.g.cs"
	srcConnLoss       = "connection-loss codes: MySQL server and client error references (https://dev.mysql.com/doc/mysql-errors/8.4/en/server-error-reference.html, https://dev.mysql.com/doc/mysql-errors/8.4/en/client-error-reference.html: 2006, 2013); 1927 in MariaDB error codes (https://mariadb.com/kb/en/mariadb-error-codes/)"
	srcReadOnly       = "go-sql-driver/mysql v1.10.1 packets.go rejectReadOnly and README"
	srcTimeouts       = "MySQL server error reference (1317 ER_QUERY_INTERRUPTED, 3024 ER_QUERY_TIMEOUT) and MariaDB error codes (1969 ER_STATEMENT_TIMEOUT): a statement stopped on purpose, not transient by default"
	srcPermanent      = "MySQL server error reference (https://dev.mysql.com/doc/mysql-errors/8.4/en/server-error-reference.html); MySqlConnector MySqlErrorCode.g.cs; Giorgi/EntityFramework.Exceptions"
	srcIdleTimeout    = "MySQL 8.0.24+ ER_CLIENT_INTERACTION_TIMEOUT: sql-common/net_serv.cc sets it when the wait for a command's first packet times out, and the server sends it in place of a reply and closes (mysql/mysql-server)"
	srcGalera1180     = "MariaDB sql/wsrep_thd.h wsrep_override_error: wsrep e_error_during_commit and e_append_fragment_error become ER_ERROR_DURING_COMMIT 1180 (https://github.com/MariaDB/server/blob/10.11/sql/wsrep_thd.h)"
	srcMariaDB4031    = "MariaDB 10.2+ sql/share/errmsg-utf8.txt ER_REFERENCED_TRG_DOES_NOT_EXIST = 4031, raised by sql_trigger.cc for CREATE TRIGGER ... FOLLOWS/PRECEDES a missing trigger (MariaDB/server; mysql-test lib/My constants \"end of 10.2 errors\")"
	srcInitConnect    = "MariaDB and MySQL sql/sql_connect.cc prepare_new_connection_state: when init_connect fails the server reads the client's first command, does not run it, answers ER_NEW_ABORTING_CONNECTION (\"init_connect command failed\") and ends the session"
)

// entries is the MySQL/MariaDB table, by error number.
var entries = []Entry{
	// MySqlConnector IsTransient: 1040, 1205, 1213, 1042, 1614.
	// InnoDB: "A transaction deadlock causes InnoDB to roll back the entire
	// transaction"; "A lock wait timeout causes InnoDB to roll back the
	// current statement".
	row(1213, true, sr.NotApplied, srcMySqlConnector+"; "+srcInnoDB, "ER_LOCK_DEADLOCK: InnoDB rolled back the whole transaction; re-run it whole"),
	row(1205, true, sr.NotApplied, srcMySqlConnector+"; "+srcInnoDB, "ER_LOCK_WAIT_TIMEOUT: InnoDB rolled back this statement only; the transaction survives unless innodb_rollback_on_timeout is on (RunTx still re-runs a transaction whole)"),
	row(1614, true, sr.NotApplied, srcMySqlConnector, "ER_XA_RBDEADLOCK: the XA branch was rolled back after a deadlock"),
	row(1040, true, sr.NotSent, srcMySqlConnector, "ER_CON_COUNT_ERROR: too many connections; refused at connect, nothing ran"),
	row(1042, true, sr.NotSent, srcMySqlConnector, "ER_BAD_HOST_ERROR: could not resolve or reach the client host at connect, nothing ran"),
	// Suggested extras (MySqlConnector's error names; MariaDB error codes).
	row(1203, true, sr.NotSent, srcSuggested, "ER_TOO_MANY_USER_CONNECTIONS: refused at connect, nothing ran"),
	row(1637, true, sr.NotApplied, srcSuggested, "ER_TOO_MANY_CONCURRENT_TRXS: the transaction could not start"),
	row(3058, true, sr.NotApplied, srcSuggested, "ER_USER_LOCK_DEADLOCK: a GET_LOCK deadlock; the statement was refused"),

	// Connection loss: the command may have run (unknown).
	row(2006, true, sr.Unknown, srcConnLoss, "CR_SERVER_GONE_ERROR: the server went away; the command may have run"),
	row(2013, true, sr.Unknown, srcConnLoss, "CR_SERVER_LOST: connection lost during the query; the command may have run"),
	row(1053, true, sr.Unknown, srcConnLoss, "ER_SERVER_SHUTDOWN: the server is shutting down; in-flight work may have been applied"),
	row(1077, true, sr.Unknown, srcConnLoss, "ER_NORMAL_SHUTDOWN: the server shut down; in-flight work may have been applied"),
	row(1079, true, sr.Unknown, srcConnLoss, "ER_SHUTDOWN_COMPLETE: the server shut down; in-flight work may have been applied"),
	row(1152, true, sr.Unknown, srcConnLoss, "ER_ABORTING_CONNECTION: the connection was aborted; the command may have run"),
	// The server sends 1184 to a client only when init_connect failed, in
	// place of running the session's first command.
	row(1184, true, sr.NotSent, srcConnLoss+"; "+srcInitConnect, "ER_NEW_ABORTING_CONNECTION: init_connect failed when the session started; the server read the first command without running it and closed the session"),
	row(1158, true, sr.Unknown, srcConnLoss, "ER_NET_READ_ERROR: network read error; the command may have run"),
	row(1159, true, sr.Unknown, srcConnLoss, "ER_NET_READ_INTERRUPTED: network read timed out; the command may have run"),
	row(1160, true, sr.Unknown, srcConnLoss, "ER_NET_ERROR_ON_WRITE: network write error; the command may have run"),
	row(1161, true, sr.Unknown, srcConnLoss, "ER_NET_WRITE_INTERRUPTED: network write timed out; the command may have run"),
	row(1927, true, sr.Unknown, srcConnLoss, "ER_CONNECTION_KILLED (MariaDB): the connection was killed; the command may have run"),
	// MySQL's 4031 is queued when an idle session times out (wait_timeout)
	// and read by the client's next command, which the server never ran.
	// MariaDB uses 4031 for a permanent DDL error: Classify tells the two
	// apart by the message (see mariaDB4031).
	row(4031, true, sr.NotSent, srcIdleTimeout+"; "+srcMariaDB4031, "ER_CLIENT_INTERACTION_TIMEOUT (MySQL 8.0.24+): the server had closed the idle session before the command arrived, so it never ran (MariaDB's 4031, ER_REFERENCED_TRG_DOES_NOT_EXIST, is permanent)"),

	// Not retried: a deliberate interruption or limit.
	row(1317, false, sr.NotApplied, srcTimeouts, "ER_QUERY_INTERRUPTED: KILL QUERY or a cancel interrupted the statement"),
	row(3024, false, sr.NotApplied, srcTimeouts, "ER_QUERY_TIMEOUT: max_execution_time was exceeded; the same query will likely hit it again"),
	row(1969, false, sr.NotApplied, srcTimeouts, "ER_STATEMENT_TIMEOUT (MariaDB max_statement_time): the same query will likely hit it again"),
	// Read-only after failover: opt in with go-sql-driver's rejectReadOnly=true,
	// which turns these into driver.ErrBadConn (1290 has other meanings).
	row(1290, false, sr.NotApplied, srcReadOnly, "ER_OPTION_PREVENTS_STATEMENT (read-only server?): set rejectReadOnly=true to retry after a failover"),
	row(1792, false, sr.NotApplied, srcReadOnly, "ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION: set rejectReadOnly=true to retry after a failover"),
	row(1836, false, sr.NotApplied, srcReadOnly, "ER_READ_ONLY_MODE: set rejectReadOnly=true to retry after a failover"),

	// Permanent: syntax (1064), missing table (1146), duplicate key (1062),
	// foreign key (1452) and the like.
	row(1043, false, sr.NotSent, srcPermanent, "ER_HANDSHAKE_ERROR: bad handshake at connect"),
	row(1064, false, sr.NotApplied, srcPermanent, "ER_PARSE_ERROR: syntax error"),
	row(1149, false, sr.NotApplied, srcPermanent, "ER_SYNTAX_ERROR: syntax error"),
	row(1054, false, sr.NotApplied, srcPermanent, "ER_BAD_FIELD_ERROR: unknown column"),
	row(1146, false, sr.NotApplied, srcPermanent, "ER_NO_SUCH_TABLE: unknown table"),
	row(1049, false, sr.NotApplied, srcPermanent, "ER_BAD_DB_ERROR: unknown database"),
	row(1109, false, sr.NotApplied, srcPermanent, "ER_UNKNOWN_TABLE: unknown table"),
	row(1136, false, sr.NotApplied, srcPermanent, "ER_WRONG_VALUE_COUNT_ON_ROW: column count does not match value count"),
	row(1044, false, sr.NotApplied, srcPermanent, "ER_DBACCESS_DENIED_ERROR: access denied to the database"),
	row(1045, false, sr.NotSent, srcPermanent, "ER_ACCESS_DENIED_ERROR: access denied for the user at connect"),
	row(1142, false, sr.NotApplied, srcPermanent, "ER_TABLEACCESS_DENIED_ERROR: command denied on the table"),
	row(1143, false, sr.NotApplied, srcPermanent, "ER_COLUMNACCESS_DENIED_ERROR: command denied on the column"),
	row(1227, false, sr.NotApplied, srcPermanent, "ER_SPECIFIC_ACCESS_DENIED_ERROR: a privilege is missing"),
	row(1370, false, sr.NotApplied, srcPermanent, "ER_PROCACCESS_DENIED_ERROR: command denied on the routine"),
	row(1062, false, sr.NotApplied, srcPermanent, "ER_DUP_ENTRY: duplicate key"),
	row(1586, false, sr.NotApplied, srcPermanent, "ER_DUP_ENTRY_WITH_KEY_NAME: duplicate key"),
	row(1557, false, sr.NotApplied, srcPermanent, "ER_FOREIGN_DUPLICATE_KEY: duplicate key"),
	row(1169, false, sr.NotApplied, srcPermanent, "ER_DUP_UNIQUE: unique constraint violated"),
	row(1216, false, sr.NotApplied, srcPermanent, "ER_NO_REFERENCED_ROW: foreign key violated"),
	row(1217, false, sr.NotApplied, srcPermanent, "ER_ROW_IS_REFERENCED: foreign key violated"),
	row(1451, false, sr.NotApplied, srcPermanent, "ER_ROW_IS_REFERENCED_2: a foreign key refers to the row"),
	row(1452, false, sr.NotApplied, srcPermanent, "ER_NO_REFERENCED_ROW_2: the referenced row does not exist"),
	row(1048, false, sr.NotApplied, srcPermanent, "ER_BAD_NULL_ERROR: column cannot be null"),
	row(1364, false, sr.NotApplied, srcPermanent, "ER_NO_DEFAULT_FOR_FIELD: the field has no default value"),
	row(3819, false, sr.NotApplied, srcPermanent, "ER_CHECK_CONSTRAINT_VIOLATED: check constraint violated"),
	row(1406, false, sr.NotApplied, srcPermanent, "ER_DATA_TOO_LONG: data too long for the column"),
	row(1264, false, sr.NotApplied, srcPermanent, "ER_WARN_DATA_OUT_OF_RANGE: value out of range for the column"),
	row(1690, false, sr.NotApplied, srcPermanent, "ER_DATA_OUT_OF_RANGE: value out of range"),
	row(1292, false, sr.NotApplied, srcPermanent, "ER_TRUNCATED_WRONG_VALUE: incorrect value"),
	row(1366, false, sr.NotApplied, srcPermanent, "ER_TRUNCATED_WRONG_VALUE_FOR_FIELD: incorrect value for the column"),
	row(1365, false, sr.NotApplied, srcPermanent, "ER_DIVISION_BY_ZERO: division by zero"),
	row(1047, false, sr.NotApplied, srcPermanent, "ER_UNKNOWN_COM_ERROR: unknown command (Galera's \"WSREP has not yet prepared node\" is read apart: retried)"),
	// A COMMIT that fails in the storage engine or in Galera's replication
	// ("Not connected to Primary Component"): the other nodes may have
	// ordered the write set, so it may have committed.
	row(1180, true, sr.Unknown, srcGalera1180, "ER_ERROR_DURING_COMMIT: the commit failed in the storage engine or in Galera replication: it may have committed"),
}

func row(n uint16, retryable bool, phase sr.Phase, src, reason string) Entry {
	code := itoa(n)
	if !retryable {
		reason += ": not retried"
	}
	return Entry{Code: code, Number: n, Source: src, Class: sr.Class{Retryable: retryable, Phase: phase, Code: code, Reason: reason}}
}
