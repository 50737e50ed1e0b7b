package chaos

import (
	"context"
	"errors"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sqlretry/sqlretry/internal/dbtest"
	"github.com/sqlretry/sqlretry/taskstore"
)

// clusterRuns is how many seeds each cluster test runs:
// SQLRETRY_CLUSTER_RUNS, else 1 (a cluster's start costs seconds).
func clusterRuns(t *testing.T) int {
	s := os.Getenv("SQLRETRY_CLUSTER_RUNS")
	if s == "" {
		return 1
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		t.Fatalf("SQLRETRY_CLUSTER_RUNS=%q: want a positive number", s)
	}
	return n
}

// needCluster skips (or, with SQLRETRY_REQUIRE_DB=1, fails) a test whose
// throwaway servers cannot start here.
func needCluster(t *testing.T, missing error) {
	t.Helper()
	if testing.Short() {
		t.Skip("a cluster run takes seconds")
	}
	if missing != nil {
		dbtest.Skip(t, "chaos cluster run: %v", missing)
	}
}

// eventsOf returns the kinds of r's cluster events, in order, and fails
// the test on an event whose action failed.
func eventsOf(t *testing.T, r *RunReport) []string {
	t.Helper()
	var kinds []string
	for _, e := range r.Cluster.Events {
		if e.Err != "" {
			t.Errorf("event %s on %s failed: %s", e.Kind, e.Node, e.Err)
		}
		kinds = append(kinds, e.Kind)
	}
	return kinds
}

// TestClusterGaleraKillRejoin runs chaos on a throwaway three-node Galera
// cluster it starts itself: the writer node is SIGKILLed under load and
// rejoined; every invariant must hold, checked on every node, the nodes
// must agree, and the report must carry both events.
func TestClusterGaleraKillRejoin(t *testing.T) {
	needCluster(t, dbtest.GaleraAvailable())
	for seed := uint64(1); seed <= uint64(clusterRuns(t)); seed++ {
		var notes []string
		r, err := Run(context.Background(), Config{Cluster: ClusterGalera, Duration: 10 * time.Second, Seed: seed,
			Notify: func(s string) { notes = append(notes, s) }})
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		var text strings.Builder
		r.WriteText(&text)
		if !r.OK || r.Invariants.Total() != 0 {
			t.Fatalf("seed %d: invariants broken on the cluster:\n%s", seed, text.String())
		}
		kinds := eventsOf(t, r)
		if strings.Join(kinds, ",") != EventNodeLoss+","+EventRestart+","+EventRejoin {
			t.Errorf("seed %d: events %v, want a node loss, its restart, then a rejoin", seed, kinds)
		}
		if len(r.Cluster.Checks) != 3 {
			t.Fatalf("seed %d: %d nodes checked, want 3", seed, len(r.Cluster.Checks))
		}
		for _, c := range r.Cluster.Checks {
			if !c.Agrees || c.Checksum == "" {
				t.Errorf("seed %d: node %s: checksum %q, agrees %v %s", seed, c.Node, c.Checksum, c.Agrees, c.Err)
			}
		}
		if !r.Cluster.Throwaway || r.Cluster.StartMS <= 0 || len(notes) != 2 || !strings.Contains(notes[1], "started in") {
			t.Errorf("seed %d: the start of the throwaway cluster is not reported: %+v, notes %q", seed, r.Cluster, notes)
		}
		for _, want := range []string{"killed (SIGKILL)", "rejoined (Synced)", "the run started in"} {
			if !strings.Contains(text.String(), want) {
				t.Errorf("seed %d: the text report lacks %q:\n%s", seed, want, text.String())
			}
		}
		t.Logf("seed %d: %d ops (%.0f/s), events %+v", seed, r.Operations, r.OpsPerSec, r.Cluster.Events)
	}
}

// TestClusterFailoverPromote runs chaos on a throwaway PostgreSQL primary
// and synchronous standby: the primary is stopped -m immediate under load
// and the standby promoted; every invariant must hold, checked on the
// promoted standby, and the report must carry both events.
func TestClusterFailoverPromote(t *testing.T) {
	needCluster(t, dbtest.PostgresAvailable())
	for seed := uint64(1); seed <= uint64(clusterRuns(t)); seed++ {
		r, err := Run(context.Background(), Config{Failover: true, Duration: 6 * time.Second, Seed: seed})
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		var text strings.Builder
		r.WriteText(&text)
		if !r.OK || r.Invariants.Total() != 0 {
			t.Fatalf("seed %d: invariants broken after the promote:\n%s", seed, text.String())
		}
		kinds := eventsOf(t, r)
		if strings.Join(kinds, ",") != EventPrimaryStopped+","+EventPromote {
			t.Errorf("seed %d: events %v, want the primary stopped then the standby promoted", seed, kinds)
		}
		if len(r.Cluster.Checks) != 1 || r.Cluster.Checks[0].Node != r.Cluster.Nodes[1] || !r.Cluster.Checks[0].Agrees {
			t.Errorf("seed %d: checked on %+v, want the promoted standby %s", seed, r.Cluster.Checks, r.Cluster.Nodes[1])
		}
		if !strings.HasPrefix(r.Cluster.Verifier, "marker table") {
			t.Errorf("seed %d: verifier %q, want the marker table (pg_xact_status cannot answer across a promote)", seed, r.Cluster.Verifier)
		}
		for _, e := range r.Cluster.Events {
			if e.Kind == EventPromote && e.FirstOKMS < 0 {
				t.Errorf("seed %d: no call succeeded after the promote", seed)
			}
		}
		t.Logf("seed %d: %d ops (%.0f/s), events %+v", seed, r.Operations, r.OpsPerSec, r.Cluster.Events)
	}
}

// TestClusterCheckCatchesWrongOutcome feeds a failover run's check an
// outcome the promoted primary contradicts (a write told OK that is not
// there) and expects the run to fail: the check over the surviving
// cluster can fail.
func TestClusterCheckCatchesWrongOutcome(t *testing.T) {
	needCluster(t, dbtest.PostgresAvailable())
	clusterBeforeCheck = func(l *taskstore.Ledger) {
		l.Record(taskstore.Entry{Kind: taskstore.OpPersist, ID: "never-written", TaskID: "never-written", Fingerprint: "x"}, nil)
	}
	defer func() { clusterBeforeCheck = nil }()
	r, err := Run(context.Background(), Config{Failover: true, Duration: 5 * time.Second, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	if r.OK || r.Invariants.Lost != 1 {
		t.Fatalf("a write told OK and absent from the promoted primary: ok %v, lost %d, want not ok and 1 lost", r.OK, r.Invariants.Lost)
	}
}

// TestMarkAgreement checks that a node whose tables differ from the
// others' is caught, and that a node that did not answer is not counted
// against the cluster.
func TestMarkAgreement(t *testing.T) {
	checks := []NodeCheck{
		{Node: "a", Checksum: "1111"},
		{Node: "b", Agrees: true, Err: "(not checked: refused)"},
		{Node: "c", Checksum: "1111"},
		{Node: "d", Checksum: "2222"},
	}
	markAgreement(checks)
	got := []bool{checks[0].Agrees, checks[1].Agrees, checks[2].Agrees, checks[3].Agrees}
	if want := []bool{true, true, true, false}; !slices.Equal(got, want) {
		t.Fatalf("agrees: got %v, want %v", got, want)
	}
	if !strings.Contains(checks[3].Err, "differs") {
		t.Errorf("the disagreeing node's note: %q", checks[3].Err)
	}
}

// TestRecoveries checks the recovery figures on a made-up run: 100 ok/s
// until an event at 2 s, nothing for 1.5 s, then 100 ok/s again.
func TestRecoveries(t *testing.T) {
	var samples []Sample
	ok := int64(0)
	for ms := 0; ms <= 6000; ms += 100 {
		el := time.Duration(ms) * time.Millisecond
		if el <= 2*time.Second || el > 3500*time.Millisecond {
			ok += 10
		}
		samples = append(samples, Sample{Elapsed: el, OK: ok})
	}
	events := []ClusterEvent{{Kind: EventNodeLoss, AtMS: 2000}, {Kind: EventRejoin, AtMS: 5500}}
	base := recoveries(samples, events)
	if base != 100 {
		t.Errorf("baseline: got %v ok/s, want 100", base)
	}
	// The first 1 s window at >= 80 ok/s starts at 3.3 s (8 samples of
	// 10 over 3.3-4.3 s): 1.3 s after the event.
	if events[0].Back80MS != 1300 {
		t.Errorf("back to 80%% after the node loss: got %v ms, want 1300", events[0].Back80MS)
	}
	// 5.5 s leaves less than a window before the run's end at 6 s.
	if events[1].Back80MS != -1 {
		t.Errorf("back to 80%% after the rejoin: got %v ms, want -1 (not measurable)", events[1].Back80MS)
	}
}

// TestGaleraNodes checks the reading of a DSN that lists every node.
func TestGaleraNodes(t *testing.T) {
	first, nodes, err := galeraNodes("u:pw@tcp(10.0.0.1:3306, 10.0.0.2:3306,10.0.0.3:3307)/db?parseTime=true")
	if err != nil {
		t.Fatal(err)
	}
	if first != "u:pw@tcp(10.0.0.1:3306)/db?parseTime=true" || !slices.Equal(nodes, []string{"10.0.0.1:3306", "10.0.0.2:3306", "10.0.0.3:3307"}) {
		t.Errorf("got %q %q", first, nodes)
	}
	for _, bad := range []string{"u@unix(/tmp/s)/db", "u@tcp(a:1,,b:2)/db", "u@tcp(a:1/db"} {
		if _, _, err := galeraNodes(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// TestClusterValidate checks that bad combinations name their flag.
func TestClusterValidate(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		flag string
		msg  string
	}{
		{Config{Cluster: ClusterGalera, Engine: 0, DSN: "/tmp/x.db"}, "--dsn", "looks like SQLite"},
		{Config{Cluster: "mongo"}, "--cluster", "unknown cluster"},
		{Config{Cluster: ClusterGalera, Failover: true}, "--failover", "choose one"},
		{Config{Failover: true, DSN: "root@tcp(127.0.0.1:3306)/test"}, "--dsn", "needs a postgres DSN"},
		{Config{Failover: true, DSN: "postgres://u@h1:5432/db?target_session_attrs=read-write"}, "--dsn", "multi-host"},
		{Config{Failover: true, DSN: "postgres://u@h1:5432,h2:5432/db"}, "--dsn", "target_session_attrs"},
		{Config{Failover: true, Verifier: VerifierXact}, "--verifier", "across a promote"},
		{Config{Failover: true, Duration: time.Second}, "--duration", "too short"},
		{Config{Cluster: ClusterGalera, Scenario: ScenarioContention}, "--cluster", "tasks scenario"},
		{Config{Cluster: ClusterGalera, DSN: "root@tcp(127.0.0.1:3306)/test"}, "--dsn", "every node"},
		{Config{GaleraRouting: RoutingSpread}, "--galera-routing", "only a --cluster galera"},
		{Config{Cluster: ClusterGalera, GaleraRouting: "random"}, "--galera-routing", "unknown routing"},
	} {
		err := c.cfg.Validate()
		var ie *InputError
		if !errors.As(err, &ie) || ie.What != c.flag || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%+v: got %v, want an InputError for %s saying %q", c.cfg, err, c.flag, c.msg)
		}
	}
	for _, ok := range []Config{
		{Cluster: ClusterGalera},
		{Failover: true},
		{Cluster: ClusterGalera, DSN: "root@tcp(h1:3306,h2:3306,h3:3306)/test", GaleraRouting: RoutingSpread},
		{Failover: true, DSN: "postgres://u@h1:5432,h2:5432/db?target_session_attrs=read-write"},
	} {
		if err := ok.Validate(); err != nil {
			t.Errorf("%+v: %v", ok, err)
		}
	}
}

// TestClusterWatchUserFailover runs chaos on a primary and standby it did
// not start (the user's), while the test stops the primary and promotes
// the standby: the run must see both, and hold every invariant.
func TestClusterWatchUserFailover(t *testing.T) {
	needCluster(t, dbtest.PostgresAvailable())
	rep := dbtest.StartPostgresReplica(t, dbtest.ReplicaOptions{Sync: true,
		Settings: map[string]string{"wal_retrieve_retry_interval": "200ms"}})
	done := make(chan error, 1)
	go func() {
		time.Sleep(2 * time.Second)
		if err := rep.Primary.StopImmediate(); err != nil {
			done <- err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		done <- rep.Promote(ctx)
	}()
	r, err := Run(context.Background(), Config{Failover: true, DSN: rep.MultiHostDSN(), Duration: 6 * time.Second, Seed: 2})
	if ferr := <-done; ferr != nil {
		t.Fatalf("failover: %v", ferr)
	}
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	r.WriteText(&text)
	if !r.OK || r.Cluster == nil || r.Cluster.Throwaway {
		t.Fatalf("the run on the user's servers:\n%s", text.String())
	}
	if kinds := eventsOf(t, r); strings.Join(kinds, ",") != EventPrimaryLost+","+EventPromote {
		t.Errorf("events seen %v, want the primary lost then the standby promoted:\n%s", kinds, text.String())
	}
}

// TestClusterWatchUserGalera runs chaos on a Galera cluster it did not
// start, while the test kills a node: the run must see the node loss,
// hold every invariant and find the two live nodes in agreement.
func TestClusterWatchUserGalera(t *testing.T) {
	needCluster(t, dbtest.GaleraAvailable())
	g := dbtest.StartGalera(t)
	var addrs []string
	for _, n := range g.Nodes {
		addrs = append(addrs, n.Addr())
	}
	done := make(chan error, 1)
	go func() {
		time.Sleep(2 * time.Second)
		done <- g.Kill(0)
	}()
	dsn := "root@tcp(" + strings.Join(addrs, ",") + ")/test?parseTime=true"
	r, err := Run(context.Background(), Config{Cluster: ClusterGalera, DSN: dsn, Duration: 8 * time.Second, Seed: 2})
	if kerr := <-done; kerr != nil {
		t.Fatalf("kill: %v", kerr)
	}
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	r.WriteText(&text)
	if !r.OK || r.Cluster.Throwaway {
		t.Fatalf("the run on the user's cluster:\n%s", text.String())
	}
	if kinds := eventsOf(t, r); len(kinds) != 1 || kinds[0] != EventNodeLoss || r.Cluster.Events[0].Node != addrs[0] {
		t.Errorf("events seen %+v, want node %s lost:\n%s", r.Cluster.Events, addrs[0], text.String())
	}
	agree := 0
	for _, c := range r.Cluster.Checks {
		if c.Checksum != "" && c.Agrees {
			agree++
		}
	}
	if agree != 2 {
		t.Errorf("%d live nodes agree, want 2: %+v", agree, r.Cluster.Checks)
	}
}
