// Package tdstest is a small TDS 7.4 responder for tests: a pretend SQL
// Server on 127.0.0.1 that the unmodified go-mssqldb driver connects to with
// encrypt=disable, and that answers every request by script.
//
//	srv := tdstest.Start(t, tdstest.Script{Rules: []tdstest.Rule{
//		// fail the first 2 UPDATEs as a deadlock victim, then succeed
//		{Match: "UPDATE", Times: 2, Reply: tdstest.Deadlock()},
//		{Match: "UPDATE", Reply: tdstest.Affected(1)},
//		{Kind: tdstest.Login, Times: 1, Reply: tdstest.Fail(4060, 11, "Cannot open database")},
//	}})
//	db, _ := sql.Open("sqlserver", srv.DSN())
//	...
//	srv.Count(tdstest.Statement, "UPDATE") // how many UPDATEs arrived
//	srv.Applied("UPDATE")                  // how many took effect
//	srv.Transactions()                     // each transaction and how it ended
//
// It speaks PRELOGIN (answering ENCRYPT_NOT_SUP, so no TLS), LOGIN7 (LOGINACK
// with ENVCHANGE database, collation and packet size, or a login error),
// SQL batches, RPCs (sp_executesql: the statement text and simple argument
// values are decoded), transaction manager requests (BEGIN, COMMIT and
// ROLLBACK, answered with the ENVCHANGE go-mssqldb tracks transactions by)
// and attention (cancel). Replies are result sets of int, bigint, bit,
// float and nvarchar columns, row counts, and ERROR tokens with any number,
// class, state and message. Faults drop or reset the connection during the
// login or after a request arrives, before or after it takes effect, hang
// until the client cancels, or reset idle connections ([Server.DropIdle]).
//
// It is not SQL Server: it runs no SQL, keeps no data beyond a log of the
// statements that took effect, and knows only what a script tells it. See
// README.md for what it proves and what it cannot.
package tdstest
