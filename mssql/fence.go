package mssql

import (
	sr "github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/internal/rawsql"
)

// Fencer is the SQL Server [sr.Fencer]: pass it as sqlretry.Config.Fencer.
// It learns each session's id (@@SPID, once per connection the Connector
// opens), and fences a session by KILL, then waits until
// sys.dm_exec_sessions no longer lists it: a killed session stays listed
// while it rolls its transaction back. Without it the server may still be
// running a batch whose client gave up.
//
// KILL needs the ALTER ANY CONNECTION permission (Azure SQL Database: KILL
// DATABASE CONNECTION). It is safe for concurrent use.
var Fencer sr.Fencer = rawsql.Fencer{
	Engine: "mssql",
	ID:     "SELECT @@SPID",
	Stmt:   func(id string) string { return "KILL " + id },
	Gone:   func(id string) string { return "SELECT COUNT(*) FROM sys.dm_exec_sessions WHERE session_id = " + id },
	Absent: func(err error) bool { return Classify(err).Code == "6106" }, // not an active process ID
}
