package chaos

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"

	"github.com/jackc/pgx/v5"
)

// validateFailoverDSN checks the DSN of a failover run on the user's
// servers: it must name more than one host (pgx tries them in order) and
// ask for the one that takes writes, or a new connection after the promote
// could land on a server that is read-only, or on the old primary.
func validateFailoverDSN(dsn string) error {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return inputErr("--dsn", err)
	}
	if len(failoverHosts(dsn)) < 2 {
		return inputErr("--dsn", errors.New("--failover needs a multi-host DSN naming the primary and its standbys: "+
			"postgres://user@host1:5432,host2:5432/db?target_session_attrs=read-write"))
	}
	// pgx turns target_session_attrs (read-write, primary, ...) into a
	// check of each new connection; "any", or none, checks nothing.
	if cfg.ValidateConnect == nil {
		return inputErr("--dsn", errors.New("--failover needs target_session_attrs=read-write (or primary) in the DSN: "+
			"without it a new connection may land on a standby, or on the old primary"))
	}
	return nil
}

// failoverHosts lists a multi-host DSN's hosts, in the order pgx tries
// them.
func failoverHosts(dsn string) []string {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil
	}
	out := []string{net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))}
	for _, f := range cfg.Fallbacks {
		// sslmode=prefer repeats each host without TLS.
		if hp := net.JoinHostPort(f.Host, strconv.Itoa(int(f.Port))); !slices.Contains(out, hp) {
			out = append(out, hp)
		}
	}
	return out
}

// checkPrimary says where the invariants were checked on a failover run:
// the server the pool reaches now, the one that accepts writes (after the
// promote, the old standby). The store's own check ran there.
func (h *harness) checkPrimary(ctx context.Context) ([]NodeCheck, error) {
	var addr string
	var port int
	var recovery bool
	err := h.db.QueryRowContext(ctx, "SELECT coalesce(host(inet_server_addr()), 'local'), coalesce(inet_server_port(), 0), pg_is_in_recovery()").
		Scan(&addr, &port, &recovery)
	if err != nil {
		return nil, fmt.Errorf("find the primary: %w", err)
	}
	var rows int64
	if err := h.db.QueryRowContext(ctx, "SELECT (SELECT count(*) FROM tasks)").Scan(&rows); err != nil {
		return nil, fmt.Errorf("count the tasks on the primary: %w", err)
	}
	nc := NodeCheck{Node: net.JoinHostPort(addr, strconv.Itoa(port)), Rows: rows, Agrees: !recovery}
	if recovery {
		nc.Err = "(the server the pool reached is in recovery: not a primary)"
	}
	return []NodeCheck{nc}, nil
}
