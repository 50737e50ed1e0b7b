package mysql

import (
	sr "github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/internal/rawsql"
)

// Fencer is the MySQL and MariaDB [sr.Fencer]: pass it as
// sqlretry.Config.Fencer. It learns each session's connection id
// (CONNECTION_ID(), once per connection the Connector opens), and fences a
// session by KILL CONNECTION, then waits until
// information_schema.PROCESSLIST no longer lists it: a killed thread stays
// listed ("Killed") while it rolls its transaction back. Without it the
// server may still be running a statement whose client gave up:
// go-sql-driver/mysql only closes its socket when a context ends, and the
// server does not notice a lost client while a statement runs.
//
// Killing another user's thread needs the CONNECTION ADMIN (MySQL) or
// CONNECTION ADMIN / SUPER (MariaDB) privilege; a user may always kill its
// own. It is safe for concurrent use.
var Fencer sr.Fencer = rawsql.Fencer{
	Engine: "mysql",
	ID:     "SELECT CONNECTION_ID()",
	Stmt:   func(id string) string { return "KILL CONNECTION " + id },
	Gone:   func(id string) string { return "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = " + id },
	Absent: func(err error) bool { return Classify(err).Code == "1094" }, // ER_NO_SUCH_THREAD
}
