package dbtest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Bounds on waiting for a throwaway server.
const (
	readyTimeout = 60 * time.Second       // from exec to a successful ping
	stopTimeout  = 30 * time.Second       // graceful shutdown before SIGKILL
	killTimeout  = 10 * time.Second       // SIGKILL to reaped
	pollInterval = 10 * time.Millisecond  // between readiness probes
	dialTimeout  = 200 * time.Millisecond // one TCP probe
	pingTimeout  = 2 * time.Second        // one driver ping
	startTries   = 3                      // fresh ports tried on a first start
)

// templateFormat changes when the way templates are built changes, so that
// a cached template of an older shape is not reused.
const templateFormat = "3"

// Options adjusts a throwaway server.
type Options struct {
	// Settings are server settings, name to value, passed on the command
	// line after the defaults (so they win): "-c name=value" for
	// PostgreSQL, "--name=value" for MariaDB. Settings given here cannot be
	// changed later with ALTER SYSTEM (PostgreSQL's command line wins).
	Settings map[string]string
}

// A Server is a throwaway database server owned by one test: its own data
// directory in a temporary directory, its own port on 127.0.0.1. It is
// stopped and its directory removed when the test ends.
//
// Its methods are safe for concurrent use; Stop, Start, Restart and Kill are
// serialised.
type Server struct {
	kind    string // "PostgreSQL" or "MariaDB"
	dir     string // the server's private directory: data/, server.log, socket
	logPath string
	port    int
	driver  string // database/sql driver used for readiness pings
	cred    *syscall.Credential
	argv    func(port int) []string
	dsn     func(port int) string
	stopSig syscall.Signal // graceful shutdown signal
	// prepare, if set, runs before each start with the port, and ready, if
	// set, replaces the driver ping of the readiness probe (pgbouncer:
	// its config file is written with the port, and its admin console
	// answers even while the server behind it is down).
	prepare func(port int) error
	ready   func(ctx context.Context) error

	copyTime time.Duration // copying the template data directory, for the log

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{} // closed when cmd has been reaped
	waitErr error         // cmd.Wait's result, valid once exited is closed
}

// DSN returns the server's DSN: URL form for PostgreSQL (database postgres,
// user postgres), go-sql-driver/mysql form for MariaDB (database test, user
// root).
func (s *Server) DSN() string { return s.dsn(s.port) }

// Addr returns the server's TCP address, "127.0.0.1:port".
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", fmt.Sprint(s.port)) }

// Dir returns the server's private directory (data directory, log, socket).
func (s *Server) Dir() string { return s.dir }

// Log returns what the server has written to its log so far.
func (s *Server) Log() string {
	b, err := os.ReadFile(s.logPath)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	return string(b)
}

// Running reports whether the server process is alive.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.runningLocked()
}

func (s *Server) runningLocked() bool {
	if s.cmd == nil {
		return false
	}
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

// Start starts the server on its data directory and port and waits until it
// accepts a real connection. After Stop or Kill it reuses both, so what was
// committed before is there again (after crash recovery, for Kill). Start on a
// running server is an error.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.startLocked()
}

// Stop shuts the server down gracefully (PostgreSQL: fast shutdown, which
// rolls back open transactions and closes connections; MariaDB: normal
// shutdown) and waits for it to exit. If it has not exited after 30 s it is
// killed and Stop returns an error. Stop on a stopped server does nothing.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopLocked()
}

// Kill sends SIGKILL to the server and all its processes, like a crash, and
// waits until they are gone. Kill on a stopped server does nothing.
func (s *Server) Kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.killLocked()
}

// Restart is Stop followed by Start.
func (s *Server) Restart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.stopLocked(); err != nil {
		return err
	}
	return s.startLocked()
}

func (s *Server) startLocked() error {
	if s.runningLocked() {
		return fmt.Errorf("dbtest: %s on %s is already running", s.kind, s.Addr())
	}
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	offset, _ := logf.Seek(0, 2)
	if s.prepare != nil {
		if err := s.prepare(s.port); err != nil {
			logf.Close()
			return fmt.Errorf("dbtest: prepare %s: %w", s.kind, err)
		}
	}
	args := s.argv(s.port)
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = s.dir
	cmd.Env = childEnv()
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid:    true,            // no terminal signals from the test's group
		Pdeathsig:  syscall.SIGKILL, // no server outlives a crashed test binary
		Credential: s.cred,
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("dbtest: start %s: %w", s.kind, err)
	}
	exited := make(chan struct{})
	s.cmd, s.exited, s.waitErr = cmd, exited, nil
	go func() {
		err := cmd.Wait()
		logf.Close()
		s.waitErr = err // published by close(exited)
		close(exited)
	}()
	if err := s.waitReady(exited); err != nil {
		s.killLocked()
		return fmt.Errorf("dbtest: %s on %s did not become ready: %w\n%s", s.kind, s.Addr(), err, s.logSince(offset))
	}
	return nil
}

// waitReady polls until a TCP connect and a driver ping succeed, the process
// exits, or readyTimeout passes.
func (s *Server) waitReady(exited <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	var last error
	for {
		select {
		case <-exited:
			return fmt.Errorf("server exited: %v", s.waitErr)
		case <-ctx.Done():
			return fmt.Errorf("gave up after %v; last probe: %v", readyTimeout, last)
		default:
		}
		last = s.probe(ctx)
		if last == nil {
			return nil
		}
		t := time.NewTimer(pollInterval)
		select {
		case <-t.C:
		case <-exited:
			t.Stop()
		case <-ctx.Done():
			t.Stop()
		}
	}
}

func (s *Server) probe(ctx context.Context) error {
	c, err := net.DialTimeout("tcp", s.Addr(), dialTimeout)
	if err != nil {
		return err
	}
	c.Close()
	pctx, cancel := context.WithTimeout(ctx, pingTimeout)
	defer cancel()
	if s.ready != nil {
		return s.ready(pctx)
	}
	return ping(pctx, s.driver, s.dsn(s.port))
}

func (s *Server) stopLocked() error {
	return s.signalStopLocked(s.stopSig, "stop", s.stopSig.String())
}

// signalStopLocked sends sig to a running server and waits for it to exit;
// if it has not after stopTimeout it is killed and an error names sigName.
// op names the stop in the error of a failed signal.
func (s *Server) signalStopLocked(sig syscall.Signal, op, sigName string) error {
	if !s.runningLocked() {
		return nil
	}
	if err := s.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("dbtest: %s %s: %w", op, s.kind, err)
	}
	t := time.NewTimer(stopTimeout)
	defer t.Stop()
	select {
	case <-s.exited:
		return nil
	case <-t.C:
		s.killLocked()
		return fmt.Errorf("dbtest: %s on %s ignored %s for %v; killed it", s.kind, s.Addr(), sigName, stopTimeout)
	}
}

func (s *Server) killLocked() error {
	if !s.runningLocked() {
		return nil
	}
	pid := s.cmd.Process.Pid
	// PostgreSQL's backends each call setsid, so the process group does not
	// hold them: find the server's children first. The server is not reaped
	// yet (exited is open), so its pid cannot have been reused.
	children := childrenOf(pid)
	s.cmd.Process.Kill()
	for _, c := range children {
		syscall.Kill(c, syscall.SIGKILL)
	}
	deadline := time.Now().Add(killTimeout)
	t := time.NewTimer(killTimeout)
	defer t.Stop()
	select {
	case <-s.exited:
	case <-t.C:
		return fmt.Errorf("dbtest: %s pid %d still alive %v after SIGKILL", s.kind, pid, killTimeout)
	}
	// A child forked between the listing and the kill dies of its own
	// accord when it sees the postmaster gone; wait for all of them, since
	// PostgreSQL will not start while one still holds the shared memory.
	for _, c := range append(children, childrenOf(pid)...) {
		for alive(c) {
			if time.Now().After(deadline) {
				return fmt.Errorf("dbtest: %s child pid %d still alive %v after SIGKILL", s.kind, c, killTimeout)
			}
			time.Sleep(time.Millisecond)
		}
	}
	return nil
}

// childrenOf lists the pids whose parent is ppid, from /proc.
func childrenOf(ppid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ok := procStat(pid); ok && st.ppid == ppid {
			out = append(out, pid)
		}
	}
	return out
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	st, ok := procStat(pid)
	return ok && st.state != 'Z' && st.state != 'X'
}

type stat struct {
	state byte
	ppid  int
}

// procStat reads the state and parent of pid from /proc/pid/stat.
func procStat(pid int) (stat, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return stat{}, false
	}
	// "pid (comm) state ppid ...": comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return stat{}, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 || len(f[0]) != 1 {
		return stat{}, false
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return stat{}, false
	}
	return stat{state: f[0][0], ppid: ppid}, true
}

// logSince returns the server log from offset, at most its last 4 KiB.
func (s *Server) logSince(offset int64) string {
	b, err := os.ReadFile(s.logPath)
	if err != nil {
		return ""
	}
	if offset > int64(len(b)) {
		offset = 0
	}
	b = b[offset:]
	if len(b) > 4096 {
		b = b[len(b)-4096:]
	}
	return string(b)
}

// launch creates and starts a server, retrying with a fresh port when the
// first start fails (another process may have taken the port in between),
// and arranges its cleanup.
func launch(t TB, s *Server) *Server {
	t.Helper()
	t.Cleanup(func() {
		s.mu.Lock()
		err := s.killLocked()
		s.mu.Unlock()
		if err != nil {
			t.Errorf("%v", err)
		}
		if t.Failed() {
			t.Logf("dbtest: %s log (last 4 KiB):\n%s", s.kind, s.logSince(0))
		}
		if err := os.RemoveAll(s.dir); err != nil {
			t.Logf("dbtest: remove %s: %v", s.dir, err)
		}
	})
	var err error
	for try := 0; try < startTries; try++ {
		s.port, err = freePort()
		if err != nil {
			t.Fatalf("dbtest: free port: %v", err)
		}
		start := time.Now()
		if err = s.Start(); err == nil {
			if s.copyTime == 0 { // no data directory (pgbouncer)
				t.Logf("dbtest: %s started on %s in %v", s.kind, s.Addr(), time.Since(start).Round(time.Millisecond))
				return s
			}
			t.Logf("dbtest: %s started on %s in %v (after copying its data directory in %v)",
				s.kind, s.Addr(), time.Since(start).Round(time.Millisecond), s.copyTime.Round(time.Millisecond))
			return s
		}
	}
	t.Fatalf("%v", err)
	return nil
}

// freePort asks the kernel for a free TCP port on 127.0.0.1.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// childEnv is the environment for server processes: ours without the
// libpq and MySQL client variables that could redirect them.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "PG") || strings.HasPrefix(kv, "MYSQL") || strings.HasPrefix(kv, "LC_") || strings.HasPrefix(kv, "LANG=") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "LC_ALL=C")
}

// mergeSettings returns defaults overridden by extra, sorted by name.
func mergeSettings(defaults, extra map[string]string) [][2]string {
	m := make(map[string]string, len(defaults)+len(extra))
	for k, v := range defaults {
		m[k] = v
	}
	for k, v := range extra {
		m[k] = v
	}
	out := make([][2]string, 0, len(m))
	for k, v := range m {
		out = append(out, [2]string{k, v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i][0] < out[j][0] })
	return out
}

// templates serialises template builds within the process; concurrent
// processes are reconciled by the atomic rename in cachedTemplate.
var templates sync.Mutex

// cachedTemplate returns a directory holding an initialised data directory
// (dir/data) for the given key, building it with build on first use. The
// cache lives under os.TempDir()/sqlretry-dbtest and is shared by every test
// process on the machine.
func cachedTemplate(kind, key string, build func(dir string) error) (string, error) {
	templates.Lock()
	defer templates.Unlock()
	sum := sha256.Sum256([]byte(templateFormat + "\x00" + key + "\x00" + fmt.Sprint(os.Geteuid())))
	root := filepath.Join(os.TempDir(), "sqlretry-dbtest")
	final := filepath.Join(root, kind+"-"+hex.EncodeToString(sum[:8]))
	if _, err := os.Stat(filepath.Join(final, "ready")); err == nil {
		return final, nil
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(root, kind+"-build-")
	if err != nil {
		return "", err
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", err
	}
	if err := build(tmp); err != nil {
		os.RemoveAll(tmp)
		return "", err
	}
	if err := os.WriteFile(filepath.Join(tmp, "ready"), []byte(key+"\n"), 0o644); err != nil {
		os.RemoveAll(tmp)
		return "", err
	}
	if err := os.Rename(tmp, final); err != nil {
		os.RemoveAll(tmp)
		// Another process won the race; use its template.
		if _, serr := os.Stat(filepath.Join(final, "ready")); serr == nil {
			return final, nil
		}
		return "", err
	}
	return final, nil
}

// serverDir makes a throwaway server's private directory and copies the
// template's data directory into it. It returns the directory and how long
// the copy took.
func serverDir(t TB, prefix, tmpl string, cred *syscall.Credential) (string, time.Duration) {
	t.Helper()
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	// The server (running as cred's user) creates its socket and lock file here.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	if err := chownTo(dir, cred); err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	start := time.Now()
	if err := copyTree(filepath.Join(tmpl, "data"), filepath.Join(dir, "data")); err != nil {
		os.RemoveAll(dir)
		t.Fatalf("dbtest: %v", err)
	}
	return dir, time.Since(start)
}

// copyTree copies src to dst (which must not exist) preserving modes and
// owners.
func copyTree(src, dst string) error {
	out, err := exec.Command("cp", "-a", src, dst).CombinedOutput()
	if err != nil {
		return fmt.Errorf("cp -a %s %s: %v: %s", src, dst, err, out)
	}
	return nil
}

// run runs a command as cred, feeding it stdin, and returns an error with
// its output when it fails.
func run(cred *syscall.Credential, stdin string, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Env = childEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		if len(out) > 4096 {
			out = out[len(out)-4096:]
		}
		return fmt.Errorf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return nil
}

// output runs a command and returns its trimmed standard output.
func output(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).Output()
	return strings.TrimSpace(string(out)), err
}
