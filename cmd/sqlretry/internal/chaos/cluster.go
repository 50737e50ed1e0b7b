package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/sqlretry/sqlretry/cmd/sqlretry/internal/engine"
	"github.com/sqlretry/sqlretry/internal/dbtest"
	"github.com/sqlretry/sqlretry/taskstore"
)

// ClusterGalera is the --cluster value of a run on a MariaDB Galera
// cluster: a throwaway three-node cluster the run starts when it has no
// DSN, or the user's, named by a DSN that lists every node.
const ClusterGalera = "galera"

// minClusterDuration is the shortest cluster run: a node loss, the
// cluster's detection of it (about 3 s) and a rejoin need that long.
const minClusterDuration = 5 * time.Second

// When, as a fraction of the run, the throwaway cluster's events happen:
// a Galera node is killed at 25 % and started again at 40 % (it is back
// once the survivors have dropped it and it has caught up by a state
// transfer: seconds more), a PostgreSQL
// primary is stopped at 40 % and its standby promoted at once. Each leaves
// time before it to measure the throughput the recovery is held against.
const (
	galeraKillAt   = 0.25
	galeraRejoinAt = 0.40
	failoverStopAt = 0.40
)

// Event kinds of a cluster run.
const (
	EventNodeLoss       = "node_loss"       // a Galera node was killed (SIGKILL), or stopped answering
	EventRestart        = "restart"         // the killed node was started again, once the others had dropped it
	EventRejoin         = "rejoin"          // the node is back, Synced, in a cluster of three
	EventPrimaryStopped = "primary_stopped" // the PostgreSQL primary was stopped (-m immediate)
	EventPromote        = "promote"         // the standby was promoted and accepts writes
)

var eventTitles = map[string]string{
	EventNodeLoss: "killed (SIGKILL)", EventRestart: "started again (joining: state transfer from a donor)", EventRejoin: "rejoined (Synced)",
	EventPrimaryStopped: "stopped (-m immediate)", EventPromote: "promoted",
}

// ClusterReport is what a cluster run did to the cluster and how the
// workload fared.
type ClusterReport struct {
	Kind string `json:"kind"` // "galera" or "postgres_failover"
	// Throwaway: the run started the cluster itself (no --dsn), in
	// StartMS, and tore it down afterwards.
	Throwaway bool     `json:"throwaway"`
	StartMS   int64    `json:"start_ms,omitempty"`
	Nodes     []string `json:"nodes"`
	// Routing says how clients reach a live node.
	Routing string `json:"routing"`
	// Verifier is the commit verifier of the run, and why.
	Verifier string `json:"verifier"`
	// BaselineOpsPerSec is the throughput (operations told OK) before the
	// first event, which the recoveries are held against.
	BaselineOpsPerSec float64        `json:"baseline_ops_per_second"`
	Events            []ClusterEvent `json:"events"`
	// Checks say where the invariants were checked: every live Galera
	// node (their tables must agree), or the promoted primary.
	Checks []NodeCheck `json:"checks"`
	Note   string      `json:"note,omitempty"`
}

// ClusterEvent is one event and the recovery after it.
type ClusterEvent struct {
	Kind string `json:"kind"` // one of the Event* constants
	Node string `json:"node"`
	AtMS int64  `json:"at_ms"` // on the run's clock
	// FirstOKMS is the time from the event to the end of the first
	// operation begun after it that succeeded; -1 if none did.
	FirstOKMS float64 `json:"first_ok_ms"`
	// Back80MS is the time from the event to the start of the first
	// 1-second window whose throughput is at least 80 % of the baseline;
	// -1 if none before the run ended.
	Back80MS float64 `json:"back_to_80pct_ms"`
	Err      string  `json:"error,omitempty"` // the action failed (the node did not rejoin, ...)
}

// NodeCheck is one node's account at the end of the run.
type NodeCheck struct {
	Node     string `json:"node"`
	Rows     int64  `json:"rows"`               // rows in the run's tables
	Checksum string `json:"checksum,omitempty"` // CHECKSUM TABLE of every table (Galera)
	Agrees   bool   `json:"agrees"`
	// Unchecked: the node did not answer the final check (Err says why).
	// On a throwaway cluster, whose every node should be back by then, it
	// fails the run; on yours it is reported.
	Unchecked bool   `json:"unchecked,omitempty"`
	Err       string `json:"error,omitempty"`
}

// clustered reports whether c is a cluster run (--cluster or --failover).
func (c Config) clustered() bool { return c.Cluster != "" || c.Failover }

// clusterDefaults applies a cluster run's defaults, before the others: the
// engine the cluster runs, no outage and no proxy (the node loss is the
// outage; the proxy fronts one address), and on a failover the marker
// table as the commit verifier, since pg_xact_status cannot answer across
// a promote (the new primary did not run the old one's transactions).
func (c Config) clusterDefaults() Config {
	if !c.clustered() {
		return c
	}
	if c.Engine == 0 {
		c.Engine = engine.MySQL
		if c.Failover {
			c.Engine = engine.Postgres
		}
	}
	if c.Outages == nil {
		c.Outages = []Outage{}
	}
	c.NoProxy = true
	if c.Cluster != "" && c.GaleraRouting == "" {
		c.GaleraRouting = RoutingSequential
	}
	if c.Failover && (c.Verifier == "" || c.Verifier == VerifierAuto) {
		c.Verifier = VerifierMarker
	}
	return c
}

// validateCluster checks a cluster run's settings (defaults applied).
func (c Config) validateCluster() error {
	if c.GaleraRouting != "" && c.Cluster == "" {
		return inputErr("--galera-routing", errors.New("only a --cluster galera run has a Galera routing"))
	}
	if !c.clustered() {
		return nil
	}
	flag, title := "--failover", "PostgreSQL"
	want := engine.Postgres
	if c.Cluster != "" {
		flag, title, want = "--cluster", "MariaDB Galera", engine.MySQL
	}
	switch {
	case c.Cluster != "" && c.Cluster != ClusterGalera:
		return inputErr("--cluster", fmt.Errorf("unknown cluster %q (want %s)", c.Cluster, ClusterGalera))
	case c.Cluster != "" && c.Failover:
		return inputErr("--failover", errors.New("--cluster galera and --failover (PostgreSQL) are two runs: choose one"))
	case c.Engine != want:
		return inputErr(flag, fmt.Errorf("%s runs on %s (--engine %s), not %s", flag, title, want, c.Engine))
	case c.Scenario != ScenarioTasks:
		return inputErr(flag, fmt.Errorf("a cluster run drives the %s scenario, not %s", ScenarioTasks, c.Scenario))
	case c.Naive:
		return inputErr(flag, errors.New("a cluster run has no naive comparison"))
	case c.Duration < minClusterDuration:
		return inputErr("--duration", fmt.Errorf("%s is too short for a cluster run (a node loss, its detection and a recovery): want at least %s", c.Duration, minClusterDuration))
	case c.Cluster != "" && !slices.Contains(Routings, c.GaleraRouting):
		return inputErr("--galera-routing", fmt.Errorf("unknown routing %q (want %s)", c.GaleraRouting, strings.Join(Routings, " or ")))
	case c.Failover && c.Verifier == VerifierXact:
		return inputErr("--verifier", errors.New("xact (pg_xact_status) cannot answer across a promote: the new primary did not run the old one's transactions; use marker"))
	}
	if c.DSN == "" {
		return nil
	}
	if e, form, ok := DSNEngine(c.DSN); ok && e != want {
		return inputErr("--dsn", fmt.Errorf("%s needs a %s DSN; this one looks like %s's (%s)", flag, want, engineTitles[e], form))
	}
	if c.Failover {
		return validateFailoverDSN(c.DSN)
	}
	_, nodes, err := galeraNodes(c.DSN)
	if err != nil {
		return err
	}
	if len(nodes) < 2 {
		return inputErr("--dsn", errors.New("--cluster galera needs every node's address: user@tcp(host1:3306,host2:3306,host3:3306)/db"))
	}
	return nil
}

// clusterRun is a cluster run's cluster: the throwaway servers (nil for
// the user's), and the events played on them.
type clusterRun struct {
	kind      string
	host      *dbtest.Host
	galera    *dbtest.Galera
	replica   *dbtest.PostgresReplica
	nodes     []string
	startTook time.Duration
	victim    int // the Galera node killed

	// The fields below are the harness's h.mu's.
	events      []*ClusterEvent
	firstOK     []bool // per event: FirstOKMS is set
	killed      bool
	rejoinBegun bool
	stopped     bool
	watching    bool
	checks      []NodeCheck
	wg          sync.WaitGroup // the event actions under way
}

// startCluster starts the throwaway cluster of a cluster run with no DSN,
// and sets cfg.DSN to it; for a run on the user's cluster it only reads
// the nodes from the DSN. notify is told what happens (the start is
// slow). nil for a run that is not a cluster run.
func startCluster(cfg *Config) (*clusterRun, error) {
	if !cfg.clustered() {
		return nil, nil
	}
	cl := &clusterRun{kind: ClusterGalera}
	if cfg.Failover {
		cl.kind = "postgres_failover"
	}
	if cfg.DSN != "" {
		if cfg.Failover {
			cl.nodes = failoverHosts(cfg.DSN)
		} else {
			_, cl.nodes, _ = galeraNodes(cfg.DSN)
		}
		return cl, nil
	}
	what := "a throwaway 3-node MariaDB Galera cluster"
	if cfg.Failover {
		what = "a throwaway PostgreSQL primary and synchronous streaming standby"
	}
	notify(cfg, "no --dsn: starting "+what+" on loopback (it is torn down afterwards)")
	cl.host = dbtest.NewHost("chaos-"+cl.kind, nil)
	begin := time.Now()
	err := cl.host.Do(func() {
		if cfg.Failover {
			// Synchronous: a COMMIT the primary acknowledged is on the
			// standby, so the promote loses no acknowledged write; with
			// asynchronous replication a lost write would be the
			// database's doing, not the caller's outcome being wrong.
			// The standby's startup process, once streaming fails,
			// sleeps wal_retrieve_retry_interval (default 5 s) before it
			// looks again, and a promote waits for it: a failover
			// manager's standby would be tuned the same way.
			cl.replica = dbtest.StartPostgresReplica(cl.host, dbtest.ReplicaOptions{Sync: true,
				Settings: map[string]string{"wal_retrieve_retry_interval": "200ms"}})
			cl.nodes = []string{cl.replica.Primary.Addr(), cl.replica.Standby.Addr()}
			cfg.DSN = cl.replica.MultiHostDSN()
			return
		}
		// The driver logs each connection a killed node breaks, dbtest's
		// status polls included; the report counts what matters.
		_ = gomysql.SetLogger(&gomysql.NopLogger{})
		cl.galera = dbtest.StartGalera(cl.host)
		var addrs []string
		for _, n := range cl.galera.Nodes {
			addrs = append(addrs, n.Addr())
		}
		cl.nodes = addrs
		cfg.DSN = "root@tcp(" + strings.Join(addrs, ",") + ")/test?parseTime=true"
	})
	cl.startTook = time.Since(begin)
	if err != nil {
		cl.host.Close()
		return nil, fmt.Errorf("start %s: %w", what, err)
	}
	// Sequential routing writes through the first node: killing it is
	// what makes the clients fail over. Spread routing writes everywhere:
	// the seed picks the node.
	if cfg.Cluster != "" && cfg.GaleraRouting == RoutingSpread {
		cl.victim = int(cfg.Seed % uint64(len(cl.nodes)))
	}
	notify(cfg, fmt.Sprintf("started in %.1f s: %s", cl.startTook.Seconds(), strings.Join(cl.nodes, ", ")))
	return cl, nil
}

func notify(cfg *Config, msg string) {
	if cfg.Notify != nil {
		cfg.Notify(msg)
	}
}

// close tears the throwaway cluster down.
func (cl *clusterRun) close() {
	if cl != nil && cl.host != nil {
		cl.wg.Wait()
		cl.host.Close()
	}
}

// clusterStep plays the throwaway cluster's events as the run reaches
// them (called from drive, at every sample). The actions block for
// seconds, so each runs on a goroutine of its own; its event is recorded
// when it has happened.
func (h *harness) clusterStep(el time.Duration) {
	cl := h.cluster
	if cl == nil {
		return
	}
	d := h.cfg.Duration
	h.mu.Lock()
	defer h.mu.Unlock()
	if cl.host == nil {
		// The user's cluster: the run watches it, and does nothing to it.
		if !cl.watching {
			cl.watching = true
			h.watchCluster()
		}
		return
	}
	at := func(f float64) bool { return el >= time.Duration(float64(d)*f) }
	switch {
	case cl.galera != nil && !cl.killed && at(galeraKillAt):
		cl.killed = true
		cl.act(func() (string, error) { return EventNodeLoss, cl.galera.Kill(cl.victim) }, h)
	case cl.galera != nil && cl.killed && !cl.rejoinBegun && at(galeraRejoinAt):
		cl.rejoinBegun = true
		cl.act(func() (string, error) { return EventRejoin, cl.rejoin(h) }, h)
	case cl.replica != nil && !cl.stopped && at(failoverStopAt):
		cl.stopped = true
		cl.act(func() (string, error) {
			if err := cl.replica.Primary.StopImmediate(); err != nil {
				return EventPrimaryStopped, err
			}
			h.addEvent(EventPrimaryStopped, cl.nodes[0], nil)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			return EventPromote, cl.replica.Promote(ctx)
		}, h)
	}
}

// rejoin starts the killed node again once the others have dropped it
// from their view ([dbtest.Galera.Rejoin], with the restart recorded: the
// state transfer that follows can block the donor, and the plot shows
// why), and waits until it is back, Synced.
func (cl *clusterRun) rejoin(h *harness) error {
	for j := range cl.galera.Nodes {
		if j != cl.victim {
			if err := cl.galera.WaitSynced(j, len(cl.nodes)-1); err != nil {
				return fmt.Errorf("node %d never dropped the killed node: %w", j, err)
			}
		}
	}
	h.addEvent(EventRestart, cl.nodes[cl.victim], nil)
	return cl.galera.RejoinNow(cl.victim)
}

// act runs f on a goroutine and records its event when f returns.
func (cl *clusterRun) act(f func() (string, error), h *harness) {
	node := cl.nodes[cl.victim]
	if cl.replica != nil {
		node = cl.nodes[1]
	}
	cl.wg.Add(1)
	go func() {
		defer cl.wg.Done()
		kind, err := f()
		if kind == EventPrimaryStopped {
			node = cl.nodes[0]
		}
		h.addEvent(kind, node, err)
	}()
}

// addEvent records an event at the run's present instant.
func (h *harness) addEvent(kind, node string, err error) {
	el := h.elapsed()
	h.mu.Lock()
	defer h.mu.Unlock()
	e := &ClusterEvent{Kind: kind, Node: node, AtMS: el.Milliseconds(), FirstOKMS: -1, Back80MS: -1}
	if err != nil {
		e.Err = err.Error()
	}
	h.cluster.events = append(h.cluster.events, e)
	h.cluster.firstOK = append(h.cluster.firstOK, false)
}

// clusterDone records the first successful operation begun after each
// event; h.mu is held.
func (h *harness) clusterDone(began, ended time.Duration, err error) {
	cl := h.cluster
	if cl == nil || err != nil {
		return
	}
	for i, e := range cl.events {
		at := time.Duration(e.AtMS) * time.Millisecond
		if !cl.firstOK[i] && began >= at {
			cl.firstOK[i] = true
			e.FirstOKMS = ms(ended - at)
		}
	}
}

// spreadNote is what a run with multi-primary writes must be read with.
// Before the run's connections sent statements as text
// (mysql.GaleraConnector), MariaDB 10.11 with galera-4 26.4 told 4 to 17
// claims per 10 s OK that were nowhere (--fault-rate 0): a transaction a
// replicated write set brute-force aborts while go-sql-driver runs one of
// its prepared statements is rolled back with no error, and COMMIT commits
// nothing and says OK. The same run through GaleraConnector held.
const spreadNote = "multi-primary writes: statements are sent as text (interpolateParams), since on MariaDB Galera a transaction " +
	"a replicated write set aborts during a prepared statement can be rolled back with no error, and COMMIT then says OK and commits nothing. "

// clusterSettle waits, after the workload, for the cluster's events under
// way (a Galera node still catching up): the checks compare every node, so
// they run once it is back. Tests feed a wrong outcome in here
// (clusterBeforeCheck).
func (h *harness) clusterSettle() {
	if h.cluster == nil {
		return
	}
	h.cluster.wg.Wait()
	if clusterBeforeCheck != nil {
		clusterBeforeCheck(h.ledger)
	}
}

// clusterBeforeCheck, set by a test, is called with a cluster run's ledger
// before its invariants are checked.
var clusterBeforeCheck func(*taskstore.Ledger)

// clusterFinish checks the surviving cluster and fills in r.Cluster. It adds a violation for every node whose
// tables disagree with the others'.
func (h *harness) clusterFinish(ctx context.Context, r *RunReport) error {
	cl := h.cluster
	if cl == nil {
		return nil
	}
	cr := &ClusterReport{Kind: cl.kind, Throwaway: cl.host != nil, Nodes: cl.nodes, Verifier: h.verifierNote()}
	if cl.host != nil {
		cr.StartMS = cl.startTook.Milliseconds()
	}
	var err error
	if h.cfg.Failover {
		cr.Routing = "pgx multi-host DSN with target_session_attrs=read-write: each new connection tries the hosts in order and keeps the one that accepts writes"
		cr.Checks, err = h.checkPrimary(ctx)
	} else {
		cr.Routing = "sequential: every connection goes to one writer node, the first wsrep_ready node in order, and to the next when it fails (it stays there when the old one is back)"
		if h.cfg.GaleraRouting == RoutingSpread {
			cr.Routing = "spread: each new connection starts at the next node in turn (multi-primary writes) and tries the others in order, skipping a node that is not wsrep_ready"
			cr.Note = spreadNote
		}
		cr.Routing += "; wsrep_sync_wait=1, so a read (a verify) sees every write the cluster committed before it"
		cr.Checks, err = h.checkGaleraNodes(ctx)
	}
	if err != nil {
		return err
	}
	if cl.host == nil {
		cr.Note += "your cluster: the run injected no node loss or promote; the events are what it saw (each node asked every " +
			watchEvery.String() + "): kill or fail over a node yourself while it runs"
	}
	h.mu.Lock()
	for _, e := range cl.events {
		cr.Events = append(cr.Events, *e)
	}
	samples := slices0(h.samples)
	h.mu.Unlock()
	cr.BaselineOpsPerSec = recoveries(samples, cr.Events)
	judgeChecks(cr, r)
	r.Cluster = cr
	return nil
}

// judgeChecks counts into r the nodes of the final check that disagree
// with the others, and, on a throwaway cluster, those that did not answer
// (every node should be back by the end: one that is not could hold
// anything).
func judgeChecks(cr *ClusterReport, r *RunReport) {
	for _, c := range cr.Checks {
		if c.Unchecked {
			r.Problems = append(r.Problems, fmt.Sprintf("node %s was not checked %s", c.Node, c.Err))
			if cr.Throwaway {
				r.Invariants.Diverged++
			}
			continue
		}
		if !c.Agrees {
			r.Invariants.Diverged++
			r.Problems = append(r.Problems, fmt.Sprintf("node %s: %d rows, checksum %s, does not agree with the other nodes %s", c.Node, c.Rows, c.Checksum, c.Err))
		}
	}
}

func slices0(s []Sample) []Sample { return append([]Sample(nil), s...) }

// verifierNote names the run's commit verifier and, on a failover, why.
func (h *harness) verifierNote() string {
	name := "none"
	if h.verdicts != nil {
		name = h.verdicts.name
	}
	if h.cfg.Failover && h.cfg.Verifier == VerifierMarker {
		return name + " (pg_xact_status cannot answer across a promote: the new primary did not run the old one's transactions)"
	}
	return name
}

// recoveryWindow is the window the recovery throughput is measured over.
const recoveryWindow = time.Second

// recoveries computes each event's Back80MS from the samples, and returns
// the baseline: the throughput (operations told OK per second) before the
// first event, leaving out the first second (connections being opened).
func recoveries(samples []Sample, events []ClusterEvent) float64 {
	if len(events) == 0 || len(samples) < 2 {
		return 0
	}
	first := time.Duration(events[0].AtMS) * time.Millisecond
	from := min(time.Second, first/2)
	base := rate(samples, from, first)
	for i := range events {
		events[i].Back80MS = -1
		at := time.Duration(events[i].AtMS) * time.Millisecond
		for _, s := range samples {
			if s.Elapsed < at {
				continue
			}
			if s.Elapsed+recoveryWindow > samples[len(samples)-1].Elapsed {
				break
			}
			if rate(samples, s.Elapsed, s.Elapsed+recoveryWindow) >= 0.8*base {
				events[i].Back80MS = ms(s.Elapsed - at)
				break
			}
		}
	}
	return math.Round(base*10) / 10
}

// rate is the operations told OK per second between the samples at from
// and until (the last sample at or before each).
func rate(samples []Sample, from, until time.Duration) float64 {
	at := func(t time.Duration) (Sample, bool) {
		var last Sample
		ok := false
		for _, s := range samples {
			if s.Elapsed > t {
				break
			}
			last, ok = s, true
		}
		return last, ok
	}
	a, ok1 := at(from)
	b, ok2 := at(until)
	if !ok1 || !ok2 || b.Elapsed <= a.Elapsed {
		return 0
	}
	return float64(b.OK-a.OK) / (b.Elapsed - a.Elapsed).Seconds()
}

// writeCluster writes the cluster part of the text report.
func (r *RunReport) writeCluster(w io.Writer) {
	c := r.Cluster
	if c == nil {
		return
	}
	title := "MariaDB Galera cluster"
	if c.Kind != ClusterGalera {
		title = "PostgreSQL primary and standby"
	}
	if c.Throwaway {
		fmt.Fprintf(w, "cluster: a throwaway %s the run started in %.1f s: %s\n", title, float64(c.StartMS)/1000, strings.Join(c.Nodes, ", "))
	} else {
		fmt.Fprintf(w, "cluster: your %s: %s\n", title, strings.Join(c.Nodes, ", "))
	}
	fmt.Fprintf(w, "routing: %s\n", c.Routing)
	fmt.Fprintf(w, "commit verifier: %s\n", c.Verifier)
	if c.Note != "" {
		fmt.Fprintln(w, c.Note)
	}
	fmt.Fprintf(w, "throughput before the first event: %.0f ok/s\n", c.BaselineOpsPerSec)
	for _, e := range c.Events {
		fmt.Fprintf(w, "  %6.1f s  %s %s", float64(e.AtMS)/1000, e.Node, eventTitles[e.Kind])
		if e.Err != "" {
			fmt.Fprintf(w, ": FAILED: %s\n", e.Err)
			continue
		}
		fmt.Fprintf(w, "; first call begun after it told OK %s later; ok/s back to >= 80%% %s later\n", msText(e.FirstOKMS), msText(e.Back80MS))
	}
	for _, k := range c.Checks {
		verdict := "agrees"
		if !k.Agrees {
			verdict = "DISAGREES " + k.Err
		}
		switch {
		case k.Unchecked:
			fmt.Fprintf(w, "  node %s: NOT CHECKED %s\n", k.Node, k.Err)
		case k.Checksum != "":
			fmt.Fprintf(w, "  node %s: %d rows, checksum %s: %s\n", k.Node, k.Rows, k.Checksum, verdict)
		default:
			fmt.Fprintf(w, "  checked on %s: %d rows\n", k.Node, k.Rows)
		}
	}
	fmt.Fprintln(w)
}

// msText writes a recovery time, or "never" for -1.
func msText(v float64) string {
	if v < 0 {
		return "never (in the run)"
	}
	if v >= 1000 {
		return fmt.Sprintf("%.1f s", v/1000)
	}
	return fmt.Sprintf("%.0f ms", v)
}
