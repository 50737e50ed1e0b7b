package mssql

import (
	"context"
	"database/sql/driver"
	"time"

	"github.com/sqlretry/sqlretry/internal/rawsql"
)

// Fencer is the SQL Server [sqlretry.Fencer]: it learns each session's id
// (@@SPID, once per connection the Connector opens), and fences a session
// by KILL, then waits until sys.dm_exec_sessions no longer lists it: a
// killed session stays listed while it rolls its transaction back. Without
// it the server may still be running a batch whose client gave up.
//
// KILL needs the ALTER ANY CONNECTION permission (Azure SQL Database: KILL
// DATABASE CONNECTION). The zero value is ready to use and safe for
// concurrent use.
type Fencer struct {
	// Poll is the wait between two looks at sys.dm_exec_sessions. If 0,
	// 10 ms.
	Poll time.Duration
}

// SessionID returns the session's id, @@SPID.
func (Fencer) SessionID(ctx context.Context, conn driver.Conn) (string, error) {
	return rawsql.SessionID(ctx, conn, "SELECT @@SPID")
}

// Fence kills session id and returns once it is gone, or ctx's error.
func (f Fencer) Fence(ctx context.Context, conn driver.Conn, id string) error {
	return rawsql.Kill{
		Engine: "mssql",
		Stmt:   func(id string) string { return "KILL " + id },
		Gone:   func(id string) string { return "SELECT COUNT(*) FROM sys.dm_exec_sessions WHERE session_id = " + id },
		Absent: func(err error) bool { return Classify(err).Code == "6106" }, // not an active process ID
		Poll:   f.Poll,
	}.Fence(ctx, conn, id)
}
