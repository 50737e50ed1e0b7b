package mssql

import (
	"time"

	sr "github.com/sqlretry/sqlretry"
)

// Sources cited by the table: public code at the commit or version read,
// and Microsoft's documentation.
const (
	srcEFCore         = "EF Core SqlServerTransientExceptionDetector.ShouldRetryOn, dotnet/efcore@ecd0ba4c"
	srcSqlClient      = "Microsoft.Data.SqlClient SqlConfigurableRetryFactory.BaselineTransientErrors, dotnet/SqlClient@c16adb7a (https://learn.microsoft.com/sql/connect/ado-net/configurable-retry-logic-sqlclient-introduction)"
	srcSqlClientLogin = "Microsoft.Data.SqlClient SqlConnectionInternal.s_transientErrors, login retry, dotnet/SqlClient@c16adb7a"
	srcJDBC           = "mssql-jdbc SQLServerError.TransientError, microsoft/mssql-jdbc@34285fd7: the JDBC driver's built-in connection list (https://learn.microsoft.com/sql/connect/jdbc/configurable-retry-logic)"
	srcClientTimeout  = "Microsoft.Data.SqlClient TdsEnums.TIMEOUT_EXPIRED (-2), the number of the SqlException a client command timeout raises, dotnet/SqlClient"
	srcPermanent      = "SQL Server Database Engine errors (https://learn.microsoft.com/sql/relational-databases/errors-events/database-engine-events-and-errors); Giorgi/EntityFramework.Exceptions; r2dbc/r2dbc-mssql ExceptionFactory"
	srcDriver         = "go-mssqldb v1.11.2 mssql.go checkServerAbortedTransaction"
	// srcSNI backs the class gate on the client-side network numbers.
	srcSNI = "Microsoft.Data.SqlClient TdsParser.ProcessSNIError: the SNI or Win32 native error becomes SqlError.Number at class 20 (TdsEnums.FATAL_ERROR_CLASS), dotnet/SqlClient; go-mssqldb reports only server ERROR tokens as mssql.Error (token.go parseError72)"
	// srcCatalogue0, srcCatalogue10000 and srcCatalogue11000 are the server
	// messages (sys.messages) with the same numbers.
	srcCatalogue0     = "MicrosoftDocs/sql-docs docs/relational-databases/errors-events/includes/database-engine-events-and-errors-0-999.md"
	srcCatalogue10000 = "MicrosoftDocs/sql-docs docs/relational-databases/errors-events/includes/database-engine-events-and-errors-10000-10999.md"
	srcCatalogue11000 = "MicrosoftDocs/sql-docs docs/relational-databases/errors-events/includes/database-engine-events-and-errors-11000-12999.md"
)

// fatalClass is the lowest class (severity) of an error that ends the
// session; SqlClient gives its own network errors this class.
const fatalClass = 20

// A netRow is a number Microsoft's SqlClient stamps on its own client-side
// network errors (an SNI or Win32 error code), at class 20. go-mssqldb
// never produces such an error: it reports transport failures as net
// errors, io.EOF, StreamError or RetryableError, and an mssql.Error only for
// an ERROR token the server sent. Several of these numbers are also server
// messages, permanent errors sent at class 15 or 16; so the network verdict
// applies only at class 20 and above, and below that the number is the
// server's.
type netRow struct {
	n       int32
	phase   sr.Phase // as a network error
	reason  string   // as a network error
	sources []string // the lists that hold it as a network error
	// server is the server's own message with the number, if the catalogue
	// has one: its severity and text.
	server *serverMsg
}

type serverMsg struct {
	severity uint8
	text     string
	source   string
}

// network is SqlClient's client-side network numbers. Phases: a transport
// error may follow the send (EF Core's own comments show 10053 "when
// receiving results" and 10054 "when sending the request", and SqlClient
// stamps whatever native error the failed socket or pipe operation gave),
// so only the errors that can only happen before a connection exists are
// not sent: 11001 (host not found) and 20 (the server does not support
// encryption, found in the pre-login exchange).
var network = []netRow{
	{20, sr.NotSent, "the instance of SQL Server does not support encryption (DBNETLIB, pre-login): nothing was sent", []string{srcEFCore}, nil},
	{64, sr.Unknown, "the specified network name is no longer available (ERROR_NETNAME_DELETED): the connection broke, possibly after the request was sent", []string{srcEFCore, srcJDBC}, nil},
	{121, sr.Unknown, "the semaphore timeout period has expired (ERROR_SEM_TIMEOUT, a transport error): the request may have reached the server", []string{srcEFCore},
		&serverMsg{15, "the select list for the INSERT statement contains more items than the insert list", srcCatalogue0}},
	{203, sr.Unknown, "a transport error during the pre-login handshake or after it (EF Core retries it only with a Win32 inner exception): the request may have reached the server", []string{srcEFCore},
		&serverMsg{16, "the name is not a valid identifier (EXEC @sql without parentheses)", srcCatalogue0}},
	{233, sr.Unknown, "no process is on the other end of the pipe (ERROR_PIPE_NOT_CONNECTED): the connection broke, possibly after the request was sent", []string{srcEFCore, srcSqlClient, srcJDBC},
		&serverMsg{16, "the column in the table cannot be null", srcCatalogue0}},
	{997, sr.Unknown, "overlapped I/O operation is in progress (ERROR_IO_PENDING, named pipes): the connection broke, possibly after the request was sent", []string{srcEFCore, srcSqlClient}, nil},
	{10053, sr.Unknown, "transport-level error: the connection was aborted (WSAECONNABORTED); the request may have reached the server", []string{srcEFCore, srcJDBC},
		&serverMsg{16, "could not convert the data value due to reasons other than sign mismatch or overflow (OLE DB provider)", srcCatalogue10000}},
	{10054, sr.Unknown, "transport-level error: the connection was forcibly closed (WSAECONNRESET); the request may have reached the server", []string{srcEFCore, srcJDBC},
		&serverMsg{16, "the data value for one or more columns overflowed the type used by the provider (OLE DB provider)", srcCatalogue10000}},
	{10060, sr.Unknown, "the connected party did not respond in time (WSAETIMEDOUT): the connection broke, possibly after the request was sent", []string{srcEFCore, srcSqlClient}, nil},
	{11001, sr.NotSent, "the host was not found (WSAHOST_NOT_FOUND): no connection was made, nothing was sent", []string{srcEFCore},
		&serverMsg{16, "Non-NULL value successfully returned (OLE DB status)", srcCatalogue11000}},
}

// A row is one error number and what a failure with it tells.
type row struct {
	n      int32
	phase  sr.Phase
	reason string
}

// A block is rows that share a verdict and the same sources.
type block struct {
	retryable bool
	sources   []string
	rows      []row
}

// minDelay holds the waits the server asks for.
var minDelay = map[int32]time.Duration{
	// 40501 "The service is currently busy. Retry the request after 10
	// seconds." (the server's message; the number is in EF Core's list).
	40501: 10 * time.Second,
}

// Phases: server-reported transient errors are not applied (the server
// refused or rolled the request back); login-phase numbers are not sent
// (nothing ran); client timeouts, failover reports and errors that say the
// outcome is unknown are unknown.
var blocks = []block{
	// In EF Core's list only (the message texts are its source comments,
	// first sentence). SqlClient's client-side network numbers (20, 64,
	// 121, 203, 233, 997, 10053, 10054, 10060, 11001) are in network, not
	// here.
	{true, []string{srcEFCore}, []row{
		{49983, sr.NotApplied, "The '%ls' operation failed to complete"},
		{49977, sr.NotApplied, "The elastic pool '%ls' is busy with another operation"},
		{49802, sr.NotSent, "Database is unavailable at the moment, please retry connection at later time"},
		{49510, sr.NotApplied, "Managed instance is busy with another operation"},
		{47139, sr.NotApplied, "Join contained availability group '%.*ls' failed to create group master '%.*ls' Database ID. Please retry t..."},
		{47137, sr.NotApplied, "Cannot create contained system databases in contained availability group '%.*ls' It might be caused by temp..."},
		{47132, sr.NotApplied, "Joining availability group '%.*ls' with rebuilding contained system DB has failed because rebuilding contai..."},
		{45547, sr.NotApplied, "The create operation has timed out in one of the backend workflows"},
		{45319, sr.NotApplied, "The service objective assignment for database '%.*ls' on server '%.*ls' could not be completed as the datab..."},
		{45182, sr.NotApplied, "Database '%ls' is busy with another operation"},
		{45179, sr.NotApplied, "The operation timed out and automatically rolled back"},
		{45161, sr.NotApplied, "Managed instance '%.*ls' is busy with another operation"},
		{45157, sr.NotApplied, "Server '%.*ls' is busy with another operation"},
		{45156, sr.NotApplied, "Subscription '%.*ls' is busy with another operation"},
		{45153, sr.NotApplied, "Management Service is not currently available"},
		{42029, sr.NotApplied, "An internal error happened while generating a new DBTS for database %.*ls"},
		{41840, sr.NotApplied, "Could not perform the operation because the elastic pool or managed instance has reached its quota for in-m..."},
		{41839, sr.NotApplied, "Transaction exceeded the maximum number of commit dependencies"},
		{41823, sr.NotApplied, "Could not perform the operation because the database has reached its quota for in-memory tables"},
		{41701, sr.NotApplied, "The Activation Context is unavailable at this time"},
		{41700, sr.NotApplied, "System views related to Windows Fabric partitions and replicas are not available at this time, because repl..."},
		{41640, sr.NotApplied, "Database '%ls' encountered a transient error (error code: 0x%08X) while performing task '%ls'"},
		{41619, sr.NotApplied, "Windows Fabric '%ls' (partition ID '%ls')encountered transient error %d while waiting for build replica ope..."},
		{41614, sr.NotApplied, "Fabric Service '%ls' encountered a transient error while performing Windows Fabric operation on '%ls' datab..."},
		{41383, sr.NotApplied, "An internal error occurred while running the DMV query"},
		{41339, sr.NotApplied, "The table '%.*ls' has been created or altered after the start of the current transaction"},
		{41325, sr.NotApplied, "The current transaction failed to commit due to a serializable validation failure"},
		{41305, sr.NotApplied, "The current transaction failed to commit due to a repeatable read validation failure"},
		{41302, sr.NotApplied, "The current transaction attempted to update a record that has been updated since the transaction started"},
		{41301, sr.NotApplied, "Dependency failure: a dependency was taken on another transaction that later failed to commit"},
		{40938, sr.NotApplied, "The Server DNS Alias '%.*ls' is busy with another operation and cannot perform the '%.*ls' operation"},
		{40918, sr.NotApplied, "The Failover Group '%.*ls' is busy with another operation and cannot perform the '%.*ls' operation"},
		{40903, sr.NotApplied, "The server '%.*ls' is currently busy"},
		{40890, sr.NotApplied, "The elastic pool is busy with another operation"},
		{40675, sr.NotApplied, "The service is currently too busy"},
		{40671, sr.NotApplied, "Unable to '%.*ls' '%.*ls' on server '%.*ls'"},
		{40648, sr.NotApplied, "Too many requests have been performed"},
		{40642, sr.NotApplied, "The server is currently too busy"},
		{40623, sr.NotApplied, "Reauthentication failed for login %.*ls"},
		{40189, sr.NotApplied, "The resource quota for the current database has been exceeded and this request has been aborted"},
		{40106, sr.NotApplied, "The schema scope set in the session is not the current schema scope for the current partition"},
		{39152, sr.NotApplied, "Transient error communicating with the streaming runtime due to unfinished stop streaming job operation"},
		{39151, sr.NotApplied, "Transient error communicating with the streaming runtime"},
		{39110, sr.NotApplied, "Maximum number of concurrent external script queries for this user has been reached"},
		{39108, sr.NotApplied, "Maximum number of concurrent external script users has been reached"},
		{39025, sr.NotApplied, "External script execution failed as extensibility environment is not ready yet"},
		{37327, sr.NotApplied, "Maximum number of concurrent DBCC commands running in the enclave has been reached"},
		{37202, sr.NotApplied, "An instance pool with name '%.*ls' is busy with another ongoing operation"},
		{35293, sr.NotApplied, "Error in retrieving extended recovery forks from the primary replica"},
		{35256, sr.Unknown, "session timeout waiting for the other availability replica: the outcome of the request is unknown"},
		{35218, sr.NotApplied, "An error occurred while trying to set the initial Backup LSN of database '%.*ls'"},
		{35216, sr.NotApplied, "An error occurred while adding or removing a log truncation holdup to build secondary replica from primary..."},
		{33123, sr.NotApplied, "Cannot drop or alter the database encryption key since it is currently in use on a mirror or secondary avai..."},
		{30085, sr.NotApplied, "A stoplist cache cannot be generated while processing a full-text query or performing full-text indexing"},
		{30080, sr.NotApplied, "The full-text population on table '%ls' cannot be started because the full-text catalog is importing data f..."},
		{25740, sr.NotApplied, "Unable to start event session '%.*ls' because system is busy"},
		{25738, sr.NotApplied, "Event session '%.*ls' could not be started because system is currently busy"},
		{25003, sr.NotApplied, "Upgrade of the distribution database MSmerge_subscriptions table failed"},
		{22984, sr.NotApplied, "An error occurred while waiting on the log reader history cache event"},
		{22760, sr.NotApplied, "Aborting Synapse Link Publish task for partition %ld timed out"},
		{22759, sr.NotApplied, "Aborting Synapse Link Snapshot task for table %ld timed out"},
		{22758, sr.NotApplied, "Aborting Synapse Link Commit task for table group '%s' timed out"},
		{22754, sr.NotApplied, "Aborting Synapse Link Capture task for this database timed out"},
		{22498, sr.NotApplied, "There is not enough resources to perform the operation"},
		{22493, sr.NotApplied, "The database '%.*ls' failed to sync"},
		{22491, sr.NotApplied, "The DDL statement failed due to an internal error"},
		{22430, sr.NotApplied, "Operation failed as the Database '%.*ls' is shutting down"},
		{22427, sr.NotApplied, "Operation failed due to an error in a background task"},
		{22358, sr.NotApplied, "The Database Controller required for this operation was not found"},
		{22355, sr.NotApplied, "Lock manager does not exist"},
		{22353, sr.NotApplied, "The SQL instances has not been correctly setup to allow this operation"},
		{22335, sr.NotApplied, "Cannot obtain a LOCK resource at this time due to internal error"},
		{22226, sr.NotApplied, "An internal error (%d, %d) occurred"},
		{22225, sr.NotApplied, "An internal error (%d, %d) occurred"},
		{21503, sr.NotApplied, "Cleanup of merge meta data cannot be performed while merge processes are running"},
		{20041, sr.NotApplied, "Transaction rolled back"},
		{19494, sr.NotApplied, "Automatic seeding of availability database '%ls' in availability group '%.*ls' failed with a transient error"},
		{19416, sr.NotApplied, "One or more databases in availability group '%.*ls' are not synchronized"},
		{19413, sr.NotApplied, "An attempt to switch Always On Availability Groups to the local Windows Server Failover Clustering (WSFC) c..."},
		{18858, sr.NotApplied, "Could not read data from replication table '%s'"},
		{18401, sr.NotSent, "Login failed for user '%s'"},
		{17889, sr.NotSent, "A new connection was rejected because the maximum number of connections on session ID %d has been reached"},
		{17197, sr.NotSent, "Login failed due to timeout; the connection has been closed"},
		{17067, sr.Unknown, "SQL Server assertion, possibly timing-related: the batch was aborted mid-run"},
		{17066, sr.Unknown, "SQL Server assertion, possibly timing-related: the batch was aborted mid-run"},
		{17065, sr.Unknown, "SQL Server assertion, possibly timing-related: the batch was aborted mid-run"},
		{16555, sr.NotApplied, "Operation failed due to an error while processing rejected rows"},
		{16554, sr.NotApplied, "Operation failed due to an error in a background task"},
		{16528, sr.NotApplied, "Operation '%ls %ls' failed"},
		{14906, sr.NotApplied, "The database '%s' is not accessible"},
		{14868, sr.NotApplied, "Inbound migration is in progress or paused"},
		{14817, sr.NotApplied, "The server '%s' is not accessible"},
		{14355, sr.NotApplied, "The MSSQLServerADHelper service is busy"},
		{11539, sr.NotApplied, "One of the types specified in WITH RESULT SETS clause has been modified after the EXECUTE statement started..."},
		{10936, sr.NotApplied, "Resource ID : %d"},
		{10930, sr.NotApplied, "The service is currently too busy"},
		{10922, sr.NotApplied, "%ls failed"},
		{9985, sr.NotApplied, "There is not enough memory to generate a search property list cache"},
		{9515, sr.NotApplied, "An XML schema has been altered or dropped, and the query plan is no longer valid"},
		{9020, sr.NotApplied, "The log for database '%ls' failed to grow while shrink in progress"},
		{8651, sr.NotApplied, "Could not perform the operation because the requested memory grant was not available in resource pool '%ls'..."},
		{8645, sr.NotApplied, "A timeout occurred while waiting for memory resources to execute the query in resource pool '%ls' (%ld)"},
		{8628, sr.NotApplied, "A time out occurred while waiting to optimize the query"},
		{7951, sr.NotApplied, "Warning: Could not complete filestream consistency checks due to an operating system error"},
		{6292, sr.Unknown, "the transaction associated with this operation has been committed or rolled back"},
		{5529, sr.NotApplied, "Failed to remove a FILESTREAM file"},
		{5280, sr.NotApplied, "An unexpected protocol element was recevied during the execution of a consistency check command"},
		{3980, sr.NotApplied, "The request failed to run because the batch is aborted, this can be caused by abort signal sent from client..."},
		{4184, sr.NotApplied, "Cannot retrieve table data for the query operation because the table \"%.*ls\" schema is being altered too..."},
		{4117, sr.NotApplied, "Cannot retrieve table data for the query operation because the table \"%.*ls\" schema is being altered too..."},
		{3966, sr.NotApplied, "Transaction is rolled back when accessing version store"},
		{3960, sr.NotApplied, "Snapshot isolation transaction aborted due to update conflict"},
		{3957, sr.NotApplied, "Snapshot isolation transaction failed in database '%.*ls' because the database did not allow snapshot isola..."},
		{3953, sr.NotApplied, "Snapshot isolation transaction failed in database '%.*ls' because the database was not recovered when the c..."},
		{3950, sr.NotApplied, "Version store scan timed out when attempting to read the next row"},
		{3948, sr.NotApplied, "The transaction was terminated because of the availability replica config/state change or because ghost rec..."},
		{3947, sr.NotApplied, "The transaction was aborted because the secondary compute failed to catch up redo"},
		{3941, sr.NotApplied, "The transaction cannot modify an object that is published for replication or has Change Data Capture enable..."},
		{3935, sr.NotApplied, "A FILESTREAM transaction context could not be initialized"},
		{3635, sr.NotApplied, "An error occurred while processing '%ls' metadata for database id %d, file id %d, and transaction='%.*ls'"},
		{3429, sr.Unknown, "recovery could not determine the outcome of a cross-database transaction"},
		{2816, sr.NotApplied, "The metadata for object with id %d has changed"},
		{2021, sr.NotApplied, "The referenced entity '%.*ls' was modified during DDL execution"},
		{1807, sr.NotApplied, "Could not obtain exclusive lock on database 'model'"},
		{1535, sr.NotApplied, "Cannot share extent %S_PGID. Shared extent directory is full"},
		{1534, sr.NotApplied, "Extent %S_PGID not found in shared extent directory"},
		{1533, sr.NotApplied, "Cannot share extent %S_PGID. The correct extents could not be identified"},
		{1532, sr.NotApplied, "New sort run starting on page %S_PGID found an extent not marked as shared"},
		{1438, sr.NotApplied, "The server instance %ls rejected configure request; read its error log file for more information"},
		{1421, sr.Unknown, "communications to the remote server instance timed out; the ALTER DATABASE command may not have completed"},
		{1413, sr.NotApplied, "Communications to the remote server instance '%.*ls' failed before database mirroring was fully started"},
		{1404, sr.NotApplied, "The command failed because the database mirror is busy"},
		{1232, sr.NotApplied, "Failed to acquire lock with lock manager service, it could be due to many reasons including transient servi..."},
		{1221, sr.NotApplied, "The Database Engine is attempting to release a group of locks that are not currently held by the transaction"},
		{1216, sr.NotApplied, "The DDL statement with ABORT_AFTER_WAIT = BLOCKERS option cannot be completed due to a conflicting system task"},
		{1215, sr.NotApplied, "A conflicting ABORT_AFTER_WAIT = BLOCKERS request is waiting for existing transactions to rollback"},
		{1203, sr.NotApplied, "Process ID %d attempted to unlock a resource it does not own: %.*ls"},
		{988, sr.NotApplied, "Unable to access database '%.*ls' because it lacks a quorum of nodes for high availability"},
		{982, sr.NotApplied, "Unable to access the '%.*ls' database because no online secondary replicas are enabled for read-only access"},
		{952, sr.NotApplied, "Database '%.*ls' is in transition"},
		{941, sr.NotApplied, "Database '%.*ls' cannot be opened because it is not started"},
		{927, sr.NotApplied, "Database '%.*ls' cannot be opened"},
		{926, sr.NotApplied, "Database '%.*ls' cannot be opened"},
		{921, sr.NotApplied, "Database '%.*ls' has not been recovered yet"},
		{669, sr.NotApplied, "The row object is inconsistent"},
		{617, sr.NotApplied, "Descriptor for object ID %ld in database ID %d not found in the hash table during attempt to un-hash it"},
		{615, sr.NotApplied, "Could not find database ID %d, name '%.*ls'"},
		{601, sr.NotApplied, "Could not continue scan with NOLOCK due to data movement"},
		{539, sr.NotApplied, "Schema changed after the target table was created"},
	}},
	// In EF Core's, SqlClient's baseline and the JDBC driver's lists.
	{true, []string{srcEFCore, srcSqlClient, srcJDBC}, []row{
		{49920, sr.NotApplied, "cannot process request: too many operations in progress for the subscription"},
		{49919, sr.NotApplied, "cannot process create or update request: too many operations in progress for the subscription"},
		{49918, sr.NotApplied, "cannot process request: not enough resources (control plane busy)"},
		{4221, sr.NotSent, "Login to read-secondary failed due to long wait on 'HADR_DATABASE_WAIT_FOR_TRANSITION_TO_VERSIONING'"},
	}},
	// In EF Core's, SqlClient's baseline and login, and the JDBC driver's lists.
	{true, []string{srcEFCore, srcSqlClient, srcSqlClientLogin, srcJDBC}, []row{
		{42109, sr.NotSent, "The SQL pool is warming up"},
		{42108, sr.NotSent, "Can not connect to the SQL pool since it is paused"},
		{40540, sr.Unknown, "the service has encountered an error processing your request (failover): a request in flight may have been applied"},
		{40143, sr.Unknown, "the service has encountered an error processing your request (failover): a request in flight may have been applied"},
		{10929, sr.NotApplied, "minimum guarantee exceeded and the server is too busy: the request was refused"},
		{10928, sr.NotApplied, "resource ID limit for the database reached (sessions, workers): the request was refused"},
	}},
	// In every list.
	{true, []string{srcEFCore, srcSqlClient, srcSqlClientLogin, srcJDBC}, []row{
		{40613, sr.NotSent, "database not currently available (failover or scaling): refused at connect, nothing ran"},
		{40501, sr.NotApplied, "the service is currently busy: retry the request after 10 seconds"},
		{40197, sr.Unknown, "the service has encountered an error processing your request (failover or upgrade): a request in flight may have been applied"},
		{4060, sr.NotSent, "cannot open database requested by the login (failover, restore, auto-pause; or a wrong name): refused at login, nothing ran"},
	}},
	// In EF Core's and SqlClient's baseline lists.
	{true, []string{srcEFCore, srcSqlClient}, []row{
		{1222, sr.NotApplied, "lock request time out period exceeded: the statement was aborted (the transaction survives unless XACT_ABORT is ON); re-run the whole transaction"},
		{1204, sr.NotApplied, "cannot obtain a LOCK resource at this time: the statement failed; rerun when there are fewer active users"},
	}},
	// In EF Core's and SqlClient's baseline lists.
	{true, []string{srcEFCore, srcSqlClient}, []row{
		{1205, sr.NotApplied, "deadlock victim: the server rolled the whole transaction back; re-run it whole"},
	}},
	// SqlClient's client command timeout. EF Core leaves it out because the
	// operation may have completed; retryable here, as unknown.
	{true, []string{srcClientTimeout}, []row{
		{-2, sr.Unknown, "client command timeout (SqlClient -2): the statement may have completed, as EF Core warns; verify before replaying a write"},
	}},
	// 40197's embedded failover codes: SqlClient (.NET Framework) login list
	// and the JDBC driver's list; not in EF Core's.
	{true, []string{srcSqlClientLogin, srcJDBC}, []row{
		{40020, sr.Unknown, "failover code reported in 40197's error-code slot, sometimes as the number itself: treated as 40197"},
		{40166, sr.Unknown, "failover code reported in 40197's error-code slot, sometimes as the number itself: treated as 40197"},
	}},

	// Never retryable (the Database Engine errors catalogue and r2dbc-mssql's
	// BadGrammar and DataIntegrityViolation lists): syntax, schema,
	// permission, constraint and data errors such as 102, 207, 208, 229, 515,
	// 547, 2627, 2601 and 8152.
	{false, []string{srcPermanent}, []row{
		{102, sr.NotApplied, "incorrect syntax"},
		{156, sr.NotApplied, "incorrect syntax near a keyword"},
		{137, sr.NotApplied, "must declare the scalar variable"},
		{201, sr.NotApplied, "procedure or function expects a parameter that was not supplied"},
		{206, sr.NotApplied, "operand type clash"},
		{207, sr.NotApplied, "invalid column name"},
		{208, sr.NotApplied, "invalid object name"},
		{209, sr.NotApplied, "ambiguous column name"},
		{213, sr.NotApplied, "column name or number of supplied values does not match table definition"},
		{2812, sr.NotApplied, "could not find stored procedure"},
		{106, sr.NotApplied, "too many table names in the query"},
		{130, sr.NotApplied, "cannot perform an aggregate function on an expression containing an aggregate or a subquery"},
		{267, sr.NotApplied, "object not found"},
		{565, sr.NotApplied, "stack overflow while compiling the query"},
		{4408, sr.NotApplied, "too many tables in the query"},
		{229, sr.NotApplied, "permission denied on the object"},
		{230, sr.NotApplied, "permission denied on the column"},
		{262, sr.NotApplied, "permission denied in database"},
		{18456, sr.NotSent, "login failed for user"},
		{515, sr.NotApplied, "cannot insert the value NULL into column"},
		{547, sr.NotApplied, "statement conflicted with a FOREIGN KEY or CHECK constraint"},
		{2601, sr.NotApplied, "cannot insert duplicate key row with unique index"},
		{2627, sr.NotApplied, "violation of PRIMARY KEY or UNIQUE constraint"},
		{544, sr.NotApplied, "cannot insert explicit value for identity column"},
		{8152, sr.NotApplied, "string or binary data would be truncated"},
		{2628, sr.NotApplied, "string or binary data would be truncated in column"},
		{8114, sr.NotApplied, "error converting data type"},
		{8115, sr.NotApplied, "arithmetic overflow error converting to data type"},
		{220, sr.NotApplied, "arithmetic overflow error for data type"},
		{232, sr.NotApplied, "arithmetic overflow error for type"},
		{241, sr.NotApplied, "conversion failed when converting date and/or time"},
		{242, sr.NotApplied, "conversion of a date/time value resulted in an out-of-range value"},
		{245, sr.NotApplied, "conversion failed when converting a value to a data type"},
		{8134, sr.NotApplied, "divide by zero error encountered"},
		{3902, sr.NotApplied, "COMMIT TRANSACTION request has no corresponding BEGIN TRANSACTION"},
		{3903, sr.NotApplied, "ROLLBACK TRANSACTION request has no corresponding BEGIN TRANSACTION"},
		{50000, sr.NotApplied, "user-defined error (RAISERROR/THROW); 50000 and above are application-defined"},
	}},

	// go-mssqldb's own number 0: "server does not have an active transaction:
	// ... any changes have been rolled back" (XACT_ABORT). Not applied; the
	// earlier error that aborted the transaction decides, so not retried.
	{false, []string{srcDriver}, []row{
		{0, sr.NotApplied, "the server had already rolled the transaction back (XACT_ABORT): the earlier error decides"},
	}},
}
