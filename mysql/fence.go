package mysql

import (
	"context"
	"database/sql/driver"
	"time"

	"github.com/sqlretry/sqlretry/internal/rawsql"
)

// Fencer is the MySQL and MariaDB [sqlretry.Fencer]: it learns each
// session's connection id (CONNECTION_ID(), once per connection the
// Connector opens), and fences a session by KILL CONNECTION, then waits
// until information_schema.PROCESSLIST no longer lists it: a killed thread
// stays listed ("Killed") while it rolls its transaction back. Without it
// the server may still be running a statement whose client gave up:
// go-sql-driver/mysql only closes its socket when a context ends, and the
// server does not notice a lost client while a statement runs.
//
// Killing another user's thread needs the CONNECTION ADMIN (MySQL) or
// CONNECTION ADMIN / SUPER (MariaDB) privilege; a user may always kill its
// own. The zero value is ready to use and safe for concurrent use.
type Fencer struct {
	// Poll is the wait between two looks at the process list. If 0, 10 ms.
	Poll time.Duration
}

// SessionID returns the session's connection id.
func (Fencer) SessionID(ctx context.Context, conn driver.Conn) (string, error) {
	return rawsql.SessionID(ctx, conn, "SELECT CONNECTION_ID()")
}

// Fence kills connection id and returns once it is gone, or ctx's error.
func (f Fencer) Fence(ctx context.Context, conn driver.Conn, id string) error {
	return rawsql.Kill{
		Engine: "mysql",
		Stmt:   func(id string) string { return "KILL CONNECTION " + id },
		Gone:   func(id string) string { return "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = " + id },
		Absent: func(err error) bool { return Classify(err).Code == "1094" }, // ER_NO_SUCH_THREAD
		Poll:   f.Poll,
	}.Fence(ctx, conn, id)
}
