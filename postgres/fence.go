package postgres

import (
	sr "github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/internal/rawsql"
)

// Fencer is the PostgreSQL [sr.Fencer]: pass it as sqlretry.Config.Fencer.
// It learns each session's backend pid (pg_backend_pid(), once per
// connection the Connector opens), and fences a session by
// pg_terminate_backend, then waits until pg_stat_activity no longer lists
// the pid. A backend leaves pg_stat_activity after it has aborted or
// finished its transaction, so a verify that reads "not applied" afterwards
// reads a final answer. Without it PostgreSQL may still be running a
// statement whose client gave up: it does not notice a lost client while a
// statement runs (unless client_connection_check_interval is set).
//
// Terminating another role's backend needs superuser, the
// pg_signal_backend role, or the same role. It is safe for concurrent use.
var Fencer sr.Fencer = rawsql.Fencer{
	Engine: "postgres",
	ID:     "SELECT pg_backend_pid()",
	// pg_terminate_backend answers false, with a warning, for a pid that
	// is already gone.
	Stmt: func(id string) string { return "SELECT pg_terminate_backend(" + id + ")" },
	Gone: func(id string) string { return "SELECT count(*) FROM pg_stat_activity WHERE pid = " + id },
}
