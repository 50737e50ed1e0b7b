package chaos

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/sqlretry/sqlretry/mysql"
)

// galeraNodes reads a Galera DSN: go-sql-driver's form with every node in
// the address, user@tcp(host1:3306,host2:3306)/db. It returns the DSN with
// the first node alone (which go-sql-driver parses; it would take the list
// for one host name) and the nodes.
func galeraNodes(dsn string) (string, []string, error) {
	open := strings.Index(dsn, "@tcp(")
	if open < 0 {
		return "", nil, inputErr("--dsn", errors.New("--cluster galera needs go-sql-driver's TCP form with every node: user@tcp(host1:3306,host2:3306,host3:3306)/db"))
	}
	start := open + len("@tcp(")
	end := strings.IndexByte(dsn[start:], ')')
	if end < 0 {
		return "", nil, inputErr("--dsn", errors.New("the node list tcp(...) is not closed"))
	}
	var nodes []string
	for _, n := range strings.Split(dsn[start:start+end], ",") {
		if n = strings.TrimSpace(n); n == "" {
			return "", nil, inputErr("--dsn", fmt.Errorf("an empty node address in tcp(%s)", dsn[start:start+end]))
		}
		nodes = append(nodes, n)
	}
	first := dsn[:start] + nodes[0] + dsn[start+end:]
	if _, err := gomysql.ParseDSN(first); err != nil {
		return "", nil, inputErr("--dsn", err)
	}
	return first, nodes, nil
}

// Galera routings: how a run's connections pick their node.
const (
	// RoutingSequential sends every connection to one node, the first
	// that answers, in the DSN's order, and stays there until that node
	// fails (then the next): one writer node at a time, as MariaDB
	// Connector/J's sequential mode and a single-writer proxy do.
	RoutingSequential = "sequential"
	// RoutingSpread starts each new connection at the next node in turn
	// (multi-primary writes), failing over in order from there.
	RoutingSpread = "spread"
)

// Routings are the --galera-routing choices, the default first.
var Routings = []string{RoutingSequential, RoutingSpread}

// galeraConnector opens connections to the nodes by its routing and, when
// a node refuses, tries the others in order, keeping the first that is
// wsrep_ready (a node that lost the primary component, or is still
// joining, accepts connections but refuses every statement with 1047 until
// it is ready). It is safe for concurrent use.
type galeraConnector struct {
	nodes  []driver.Connector
	spread bool
	// next is the node the next connection tries first: the writer node
	// (sequential), or a counter (spread).
	next atomic.Uint64
}

func newGaleraConnector(cfg *gomysql.Config, nodes []string, routing string) (*galeraConnector, error) {
	g := &galeraConnector{spread: routing == RoutingSpread}
	for _, n := range nodes {
		c := cfg.Clone()
		c.Addr = n
		// A dead node's port refuses at once; a hung one must not hold
		// the caller for the driver's default (none).
		if c.Timeout == 0 {
			c.Timeout = 2 * time.Second
		}
		// Statements go as text, not prepared: on a prepared statement a
		// transaction Galera brute-force aborts can be rolled back with no
		// error, and COMMIT then says OK (mysql.GaleraConnector).
		conn, err := mysql.GaleraConnector(c)
		if err != nil {
			return nil, inputErr("--dsn", err)
		}
		g.nodes = append(g.nodes, conn)
	}
	return g, nil
}

func (g *galeraConnector) Connect(ctx context.Context) (driver.Conn, error) {
	n := len(g.nodes)
	first := int(g.next.Load() % uint64(n))
	if g.spread {
		first = int((g.next.Add(1) - 1) % uint64(n))
	}
	var errs []error
	for i := range n {
		at := (first + i) % n
		c, err := g.nodes[at].Connect(ctx)
		if err == nil {
			if err = wsrepReady(ctx, c); err == nil {
				if !g.spread && i > 0 {
					// The writer node failed: the one that answered is
					// the writer now, also after the old one is back.
					g.next.CompareAndSwap(uint64(first), uint64(at))
				}
				return c, nil
			}
			_ = c.Close()
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("no Galera node would take a connection: %w", errors.Join(errs...))
}

func (g *galeraConnector) Driver() driver.Driver { return g.nodes[0].Driver() }

// errNotReady is a node that answers but is not wsrep_ready.
var errNotReady = errors.New("node not wsrep_ready")

// wsrepReady asks a fresh connection whether its node is wsrep_ready.
func wsrepReady(ctx context.Context, c driver.Conn) error {
	q, ok := c.(driver.QueryerContext)
	if !ok {
		return nil
	}
	rows, err := q.QueryContext(ctx, "SHOW GLOBAL STATUS LIKE 'wsrep_ready'", nil)
	if err != nil {
		return err
	}
	defer rows.Close()
	v := make([]driver.Value, 2)
	if err := rows.Next(v); err != nil {
		if err == io.EOF {
			return nil // not a Galera node: nothing to wait for
		}
		return err
	}
	if s := fmt.Sprint(asString(v[1])); s != "ON" {
		return fmt.Errorf("%w (wsrep_ready=%s)", errNotReady, s)
	}
	return nil
}

func asString(v driver.Value) string {
	if b, ok := v.([]byte); ok {
		return string(b)
	}
	return fmt.Sprint(v)
}

// openGalera prepares a Galera run's database: its own database, created
// through the cluster (it replicates to every node), reached by a
// galeraConnector with wsrep_sync_wait=1: a read waits until its node has
// applied every write the cluster committed before it, so a verify on
// another node than the one that ran the write still sees it.
func (t *target) openGalera(ctx context.Context, c Config, label string) error {
	first, nodes, err := galeraNodes(c.DSN)
	if err != nil {
		return err
	}
	cfg, err := gomysql.ParseDSN(first)
	if err != nil {
		return inputErr("--dsn", err)
	}
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.Params["wsrep_sync_wait"] = "1"
	cfg.Logger = &gomysql.NopLogger{}
	acfg := cfg.Clone()
	acfg.DBName = ""
	ac, err := newGaleraConnector(acfg, nodes, c.GaleraRouting)
	if err != nil {
		return err
	}
	admin := sql.OpenDB(ac)
	dbName := "sqlretry_chaos_" + label + "_" + randomSuffix()
	if err := t.scratch(ctx, admin, "the Galera cluster", "database", dbName, "", func(ctx context.Context) error {
		return mysqlDatabaseExists(ctx, cfg, func(dcfg *gomysql.Config) (driver.Connector, error) {
			return newGaleraConnector(dcfg, nodes, c.GaleraRouting)
		})
	}); err != nil {
		return err
	}
	var on string
	if err := admin.QueryRowContext(ctx, "SELECT @@wsrep_on").Scan(&on); err != nil || (on != "1" && !strings.EqualFold(on, "ON")) {
		return inputErr("--dsn", fmt.Errorf("--cluster galera: %s is not a Galera node (wsrep_on=%q, %v)", nodes[0], on, err))
	}
	run := cfg.Clone()
	run.DBName = dbName
	t.clusterDB = dbName
	t.inner, err = newGaleraConnector(run, nodes, c.GaleraRouting)
	return err
}

// checkGaleraNodes compares every live node's copy of the run's tables
// (CHECKSUM TABLE, after wsrep_sync_wait): a node whose copy differs from
// the first live node's disagrees. A node that does not answer is marked
// Unchecked (a throwaway cluster's fails the run); at least one must
// answer.
func (h *harness) checkGaleraNodes(ctx context.Context) ([]NodeCheck, error) {
	first, nodes, err := galeraNodes(h.cfg.DSN)
	if err != nil {
		return nil, err
	}
	cfg, err := gomysql.ParseDSN(first)
	if err != nil {
		return nil, err
	}
	var out []NodeCheck
	live := 0
	for _, n := range nodes {
		c := cfg.Clone()
		c.Addr, c.DBName, c.Timeout = n, h.tgt.clusterDB, 5*time.Second
		if c.Params == nil {
			c.Params = map[string]string{}
		}
		c.Params["wsrep_sync_wait"] = "15"
		c.Logger = &gomysql.NopLogger{}
		nc := NodeCheck{Node: n}
		nc.Rows, nc.Checksum, err = nodeChecksum(ctx, c)
		if err != nil {
			nc.Err, nc.Unchecked = "("+err.Error()+")", true
			out = append(out, nc)
			continue
		}
		live++
		out = append(out, nc)
	}
	if live == 0 {
		return nil, errors.New("no Galera node answered the final check")
	}
	markAgreement(out)
	return out, nil
}

// markAgreement sets Agrees on each node checked (with a checksum): the
// ones whose checksum is the first checked node's. Nodes not checked (no
// checksum: they did not answer) are left as they are: Unchecked.
func markAgreement(checks []NodeCheck) {
	ref := ""
	for i := range checks {
		if checks[i].Checksum == "" {
			continue
		}
		if ref == "" {
			ref = checks[i].Checksum
		}
		checks[i].Agrees = checks[i].Checksum == ref
		if !checks[i].Agrees {
			checks[i].Err = "(checksum differs from the first live node's, " + ref + ")"
		}
	}
}

// nodeChecksum returns the rows of every table of cfg's database on one
// node, and one checksum over them all.
func nodeChecksum(ctx context.Context, cfg *gomysql.Config) (int64, string, error) {
	conn, err := gomysql.NewConnector(cfg)
	if err != nil {
		return 0, "", err
	}
	db := sql.OpenDB(conn)
	defer db.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	rows, err := db.QueryContext(ctx, "SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE()")
	if err != nil {
		return 0, "", err
	}
	var tables []string
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			rows.Close()
			return 0, "", err
		}
		tables = append(tables, t)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, "", err
	}
	sort.Strings(tables)
	var total int64
	var sums []string
	for _, t := range tables {
		var n int64
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM `"+t+"`").Scan(&n); err != nil {
			return 0, "", err
		}
		var name string
		var sum sql.NullInt64
		if err := db.QueryRowContext(ctx, "CHECKSUM TABLE `"+t+"`").Scan(&name, &sum); err != nil {
			return 0, "", err
		}
		total += n
		sums = append(sums, fmt.Sprintf("%s:%d:%d", t, n, sum.Int64))
	}
	h := fnv.New32a()
	_, _ = io.WriteString(h, strings.Join(sums, ","))
	return total, fmt.Sprintf("%08x", h.Sum32()), nil
}
