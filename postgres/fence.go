package postgres

import (
	"context"
	"database/sql/driver"
	"time"

	"github.com/sqlretry/sqlretry/internal/rawsql"
)

// Fencer is the PostgreSQL [sqlretry.Fencer]: it learns each session's
// backend pid (pg_backend_pid(), once per connection the Connector opens),
// and fences a session by pg_terminate_backend, then waits until
// pg_stat_activity no longer lists the pid. A backend leaves
// pg_stat_activity after it has aborted or finished its transaction, so a
// verify that reads "not applied" afterwards reads a final answer. Without
// it PostgreSQL may still be running a statement whose client gave up: it
// does not notice a lost client while a statement runs (unless
// client_connection_check_interval is set).
//
// Terminating another role's backend needs superuser, the
// pg_signal_backend role, or the same role. The zero value is ready to use
// and safe for concurrent use.
type Fencer struct {
	// Poll is the wait between two looks at pg_stat_activity. If 0, 10 ms.
	Poll time.Duration
}

// SessionID returns the session's backend pid.
func (Fencer) SessionID(ctx context.Context, conn driver.Conn) (string, error) {
	return rawsql.SessionID(ctx, conn, "SELECT pg_backend_pid()")
}

// Fence terminates backend id and returns once it is gone, or ctx's error.
func (f Fencer) Fence(ctx context.Context, conn driver.Conn, id string) error {
	return rawsql.Kill{
		Engine: "postgres",
		// pg_terminate_backend answers false, with a warning, for a pid
		// that is already gone.
		Stmt: func(id string) string { return "SELECT pg_terminate_backend(" + id + ")" },
		Gone: func(id string) string { return "SELECT count(*) FROM pg_stat_activity WHERE pid = " + id },
		Poll: f.Poll,
	}.Fence(ctx, conn, id)
}
