package chaos

import (
	"context"
	"database/sql"
	"net"
	"strconv"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// EventPrimaryLost is a primary that stopped answering, on a failover run
// on the user's servers (the run did not stop it, so it cannot say how).
const EventPrimaryLost = "primary_lost"

func init() { eventTitles[EventPrimaryLost] = "stopped answering (primary)" }

// watchEvery is how often a run on the user's cluster asks each node how
// it is: the events it reports are this late, at most (plus probeTimeout).
const watchEvery = 250 * time.Millisecond

// probeTimeout bounds one question to one node.
const probeTimeout = time.Second

// nodeState is what one probe found: the node answered (and, on Galera,
// is wsrep_ready), and on PostgreSQL whether it is a primary.
type nodeState struct {
	up, primary bool
}

// watchCluster, on a run on the user's cluster, asks every node how it is
// every watchEvery until the workload ends, and records as events what
// changed: a Galera node lost or back (rejoin); a PostgreSQL primary lost,
// a standby promoted. The run caused none of them, so they are what the
// user (or the cluster) did while it ran.
func (h *harness) watchCluster() {
	cl := h.cluster
	probe, closeAll, err := h.nodeProbe()
	if err != nil {
		return
	}
	cl.wg.Add(1)
	go func() {
		defer cl.wg.Done()
		defer closeAll()
		last := make([]nodeState, len(cl.nodes))
		for i := range cl.nodes {
			last[i] = probe(i)
		}
		for !h.stop.Load() {
			time.Sleep(watchEvery)
			for i, n := range cl.nodes {
				now := probe(i)
				h.nodeChanged(n, last[i], now)
				last[i] = now
			}
		}
	}()
}

// nodeChanged records the event a node's change of state is.
func (h *harness) nodeChanged(node string, was, now nodeState) {
	switch {
	case h.cfg.Failover && was.up && was.primary && !now.up:
		h.addEvent(EventPrimaryLost, node, nil)
	case h.cfg.Failover && now.up && now.primary && (!was.primary || !was.up):
		h.addEvent(EventPromote, node, nil)
	case !h.cfg.Failover && was.up && !now.up:
		h.addEvent(EventNodeLoss, node, nil)
	case !h.cfg.Failover && !was.up && now.up:
		h.addEvent(EventRejoin, node, nil)
	}
}

// nodeProbe returns a function asking node i how it is, over a pool of
// one connection per node, and a function closing the pools.
func (h *harness) nodeProbe() (func(i int) nodeState, func(), error) {
	var dbs []*sql.DB
	closeAll := func() {
		for _, db := range dbs {
			_ = db.Close()
		}
	}
	cl := h.cluster
	if h.cfg.Failover {
		base, err := pgx.ParseConfig(h.cfg.DSN)
		if err != nil {
			return nil, nil, err
		}
		hosts := []*pgx.ConnConfig{base.Copy()}
		for _, f := range base.Fallbacks {
			c := base.Copy()
			c.Host, c.Port, c.TLSConfig = f.Host, f.Port, f.TLSConfig
			hosts = append(hosts, c)
		}
		for i := range cl.nodes {
			c := hosts[0]
			for _, hc := range hosts {
				if net.JoinHostPort(hc.Host, strconv.Itoa(int(hc.Port))) == cl.nodes[i] {
					c = hc
					break
				}
			}
			c.Fallbacks, c.ValidateConnect = nil, nil
			c.ConnectTimeout = probeTimeout
			db := stdlib.OpenDB(*c)
			db.SetMaxOpenConns(1)
			dbs = append(dbs, db)
		}
		return func(i int) nodeState {
			ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
			defer cancel()
			var rec bool
			if err := dbs[i].QueryRowContext(ctx, "SELECT pg_is_in_recovery()").Scan(&rec); err != nil {
				return nodeState{}
			}
			return nodeState{up: true, primary: !rec}
		}, closeAll, nil
	}
	first, _, err := galeraNodes(h.cfg.DSN)
	if err != nil {
		return nil, nil, err
	}
	cfg, err := gomysql.ParseDSN(first)
	if err != nil {
		return nil, nil, err
	}
	for _, n := range cl.nodes {
		c := cfg.Clone()
		c.Addr, c.Timeout, c.Logger = n, probeTimeout, &gomysql.NopLogger{}
		conn, err := gomysql.NewConnector(c)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		db := sql.OpenDB(conn)
		db.SetMaxOpenConns(1)
		dbs = append(dbs, db)
	}
	return func(i int) nodeState {
		ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
		defer cancel()
		var name, ready string
		if err := dbs[i].QueryRowContext(ctx, "SHOW GLOBAL STATUS LIKE 'wsrep_ready'").Scan(&name, &ready); err != nil || ready != "ON" {
			return nodeState{}
		}
		return nodeState{up: true}
	}, closeAll, nil
}
