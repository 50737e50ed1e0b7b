package dbtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// galeraNodes is the size of a throwaway cluster: the smallest that keeps a
// quorum (2 of 3) when one node dies.
const galeraNodes = 3

// galeraSyncTimeout bounds waiting for a cluster to form or a node to
// rejoin (after its server already answers pings).
const galeraSyncTimeout = 90 * time.Second

// galeraProviders are where Debian's galera-4 (and other distributions)
// put the wsrep provider.
var galeraProviders = []string{
	"/usr/lib/galera/libgalera_smm.so",
	"/usr/lib/galera-4/libgalera_smm.so",
	"/usr/lib64/galera-4/libgalera_smm.so",
	"/usr/lib64/galera/libgalera_smm.so",
}

// galeraProviderOptions shorten Galera's failure detection for tests: a
// SIGKILLed node is dropped from the view about 3 s after it dies (defaults:
// suspect 5 s, inactive 15 s), while a node that is merely slow on a loaded
// 2-core machine is still given 3 s to answer. gcache is small because the
// data is.
const galeraProviderOptions = "evs.keepalive_period=PT0.5S;evs.inactive_check_period=PT0.5S;" +
	"evs.suspect_timeout=PT3S;evs.inactive_timeout=PT5S;evs.install_timeout=PT5S;" +
	"gcache.size=32M;pc.wait_prim_timeout=PT10S"

// A Galera is a throwaway MariaDB Galera cluster of three nodes on loopback,
// owned by one test: each node a [Server] with its own directory, mysql
// port, group-communication port, IST port and SST port. Every node is
// killed by PID (its whole process group: SST scripts and their rsync
// daemons too) and its directory removed when the test ends, failed or not.
type Galera struct {
	t     TB
	Nodes []*Server
	// newCluster[i] adds --wsrep-new-cluster to node i's next start: only
	// the first node's first start bootstraps; every later start joins.
	newCluster []*atomic.Bool
}

// StartGalera starts a three-node Galera cluster: the first node bootstraps
// a new cluster, the other two join it (state transfer by rsync), and
// StartGalera returns once every node reports wsrep_cluster_size=3,
// wsrep_ready=ON and Synced. The test is skipped through [Skip] when MariaDB
// or galera-4 (the wsrep provider) is not installed; nothing is installed
// at test time.
func StartGalera(t TB) *Galera {
	t.Helper()
	provider, err := galeraProvider()
	if err != nil {
		Skip(t, "dbtest: no Galera: %v (apt-get install galera-4 rsync)", err)
		return nil
	}
	m, ok := findMariaDB(t)
	if !ok {
		return nil // skipped
	}
	g := &Galera{t: t}
	ports := galeraPorts(t)
	for i := 0; i < galeraNodes; i++ {
		g.newCluster = append(g.newCluster, new(atomic.Bool))
		g.newCluster[i].Store(i == 0)
		s := g.node(i, m, provider, ports)
		g.Nodes = append(g.Nodes, launch(t, s))
		// Registered after launch's cleanup, so it runs first (cleanups
		// run last-in first-out), while the node's pid still names its
		// process group.
		t.Cleanup(func() { galeraKill(s) })
		g.newCluster[i].Store(false)
		if err := g.WaitSynced(i, i+1); err != nil {
			t.Fatalf("dbtest: Galera node %d did not join: %v\n%s", i, err, s.logSince(0))
		}
	}
	return g
}

// galeraPorts returns, per node, its group-communication, IST and SST ports
// (the mysql port is launch's to choose).
func galeraPorts(t TB) [][3]int {
	out := make([][3]int, galeraNodes)
	seen := map[int]bool{}
	for i := range out {
		for j := range out[i] {
			for {
				p, err := galeraPort()
				if err != nil {
					t.Fatalf("dbtest: free port: %v", err)
				}
				if !seen[p] { // the kernel may hand a port out twice
					seen[p] = true
					out[i][j] = p
					break
				}
			}
		}
	}
	return out
}

// galeraPort returns a port free now and outside the kernel's default
// ephemeral range (32768-60999). A node's Galera ports are fixed once
// chosen (the others name them), and a port freePort hands out can be
// given to an outgoing connection's local end before the node binds it:
// seen as a start that failed with the IST port "Address already in use"
// while other tests connected. Ports below the range are never handed out
// that way.
func galeraPort() (int, error) {
	for try := 0; try < 200; try++ {
		p := 20000 + rand.IntN(12000)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err == nil {
			l.Close()
			return p, nil
		}
	}
	return freePort()
}

// node builds (but does not start) node i of the cluster.
func (g *Galera) node(i int, m mariadbInstall, provider string, ports [][3]int) *Server {
	dir, copyTime := serverDir(g.t, fmt.Sprintf("sqlretry-galera%d-", i), m.tmpl, nil)
	cred, err := galeraUser(dir)
	if err != nil {
		g.t.Fatalf("dbtest: Galera node %d: %v", i, err)
	}
	var members []string
	for _, p := range ports {
		members = append(members, "127.0.0.1:"+strconv.Itoa(p[0]))
	}
	gcomm, ist, sst := ports[i][0], ports[i][1], ports[i][2]
	settings := mergeSettings(mariadbDefaults, map[string]string{
		"wsrep-on":                  "ON",
		"wsrep-provider":            provider,
		"wsrep-cluster-name":        "sqlretry",
		"wsrep-cluster-address":     "gcomm://" + strings.Join(members, ","),
		"wsrep-node-name":           "node" + strconv.Itoa(i),
		"wsrep-node-address":        "127.0.0.1:" + strconv.Itoa(gcomm),
		"wsrep-sst-method":          "rsync",
		"wsrep-sst-receive-address": "127.0.0.1:" + strconv.Itoa(sst),
		"wsrep-provider-options": fmt.Sprintf("base_host=127.0.0.1;base_port=%d;gmcast.listen_addr=tcp://127.0.0.1:%d;ist.recv_addr=127.0.0.1:%d;%s",
			gcomm, gcomm, ist, galeraProviderOptions),
		"binlog-format":            "ROW",
		"innodb-autoinc-lock-mode": "2",
		"default-storage-engine":   "InnoDB",
	})
	argv := mariadbArgv(m.server, dir, nil, settings) // no --user: the fork sets the credential
	newCluster := g.newCluster[i]
	return &Server{
		kind:     "MariaDB Galera node " + strconv.Itoa(i),
		dir:      dir,
		logPath:  filepath.Join(dir, "server.log"),
		driver:   "mysql",
		cred:     cred,
		stopSig:  syscall.SIGTERM,
		copyTime: copyTime,
		argv: func(port int) []string {
			args := argv(port)
			// The client address the node advertises to the cluster
			// (wsrep_incoming_addresses); left out, it guesses port 3306,
			// the shared server's.
			args = append(args, "--wsrep-node-incoming-address=127.0.0.1:"+strconv.Itoa(port))
			if newCluster.Load() {
				args = append(args, "--wsrep-new-cluster")
			}
			return args
		},
		dsn: mariadbDSN,
	}
}

// galeraUser returns the credential a node whose directory is dir runs
// with. As root, the node runs as mysql and dir becomes mysql's: the
// joiner's SST script starts an rsync daemon, which as root would switch to
// nobody and then could not write the data directory. The switch is made by
// the fork (SysProcAttr.Credential), not by mariadbd's --user: a process
// that changes its own credentials loses its parent-death signal, and a node
// would then outlive a test binary that crashed. As anyone else the node
// runs as that user (nil).
func galeraUser(dir string) (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("mysql")
	if err != nil {
		return nil, fmt.Errorf("running as root needs a mysql user for the nodes: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	err = filepath.WalkDir(dir, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, uid, gid)
	})
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, err
}

// galeraProvider finds libgalera_smm.so, and checks that the tools of the
// rsync state transfer are installed: MariaDB's wsrep_sst_rsync script and
// rsync.
func galeraProvider() (string, error) {
	for _, tool := range []string{"wsrep_sst_rsync", "rsync"} {
		if _, err := exec.LookPath(tool); err != nil {
			return "", fmt.Errorf("state transfer needs %s: %w", tool, err)
		}
	}
	for _, p := range galeraProviders {
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p, nil
		}
	}
	return "", fmt.Errorf("libgalera_smm.so not found in %s", strings.Join(galeraProviders, ", "))
}

// galeraKill SIGKILLs node s's whole process group (the server started it
// with Setpgid, so the group's id is its pid): an SST script and the rsync
// daemon it forked are grandchildren, which Server.Kill's children-only
// sweep would miss. Server.Kill then reaps the server.
func galeraKill(s *Server) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.runningLocked() {
		// Not yet reaped, so the pid (and the group id) is still ours.
		syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	}
	return s.killLocked()
}

// Kill SIGKILLs node i and its helpers (by process group), like a crash, and
// waits until the server process is reaped. The surviving two keep a
// quorum.
func (g *Galera) Kill(i int) error { return galeraKill(g.Nodes[i]) }

// Rejoin waits until the other nodes have dropped node i from their view
// (after a Kill, evs.suspect_timeout and the view change: about 4 s), then
// starts it again on its data directory and ports, without
// --wsrep-new-cluster, and waits until it is back in a cluster of three,
// Synced and ready (after IST or SST from a donor).
func (g *Galera) Rejoin(i int) error {
	for j, n := range g.Nodes {
		if j != i && n.Running() {
			if err := g.WaitSynced(j, g.running()); err != nil {
				return fmt.Errorf("node %d never dropped node %d: %w", j, i, err)
			}
		}
	}
	return g.RejoinNow(i)
}

// RejoinNow starts node i again at once, as a supervisor restarting a
// crashed server would, and waits until it is back in a cluster of three.
// Started while the others still count its old incarnation as a member, it
// can make them lose the primary component for a few seconds (seen on
// MariaDB 10.11 with galera-4 26.4: both survivors briefly non-primary,
// then "re-bootstrapping prim from partitioned components").
func (g *Galera) RejoinNow(i int) error {
	if err := g.Nodes[i].Start(); err != nil {
		return err
	}
	return g.WaitSynced(i, galeraNodes)
}

// running counts the nodes whose server process is alive.
func (g *Galera) running() int {
	n := 0
	for _, s := range g.Nodes {
		if s.Running() {
			n++
		}
	}
	return n
}

// WaitSynced waits until node i reports wsrep_ready=ON, the Synced state and
// a primary component of the given size.
func (g *Galera) WaitSynced(i, size int) error {
	ctx, cancel := context.WithTimeout(context.Background(), galeraSyncTimeout)
	defer cancel()
	want := map[string]string{
		"wsrep_ready":               "ON",
		"wsrep_connected":           "ON",
		"wsrep_local_state_comment": "Synced",
		"wsrep_cluster_status":      "Primary",
		"wsrep_cluster_size":        strconv.Itoa(size),
	}
	var last error
	for {
		st, err := g.Status(ctx, i)
		if err == nil {
			last = galeraMismatch(st, want)
			if last == nil {
				return nil
			}
		} else {
			last = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node %d not synced in a cluster of %d after %v: %v", i, size, galeraSyncTimeout, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// galeraMismatch names the first status variable whose value is not the wanted
// one.
func galeraMismatch(st, want map[string]string) error {
	for k, v := range want {
		got, ok := st[k]
		if !ok {
			return fmt.Errorf("%s missing", k)
		}
		if got != v {
			return fmt.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	return nil
}

// Status returns node i's wsrep status variables (SHOW GLOBAL STATUS LIKE
// 'wsrep%'), name to value.
func (g *Galera) Status(ctx context.Context, i int) (map[string]string, error) {
	db, err := sql.Open("mysql", g.Nodes[i].DSN())
	if err != nil {
		return nil, err
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, "SHOW GLOBAL STATUS LIKE 'wsrep%'")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	st := map[string]string{}
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return nil, err
		}
		st[strings.ToLower(k)] = v
	}
	if len(st) == 0 {
		return nil, errors.New("no wsrep status variables: is wsrep on?")
	}
	return st, rows.Err()
}
