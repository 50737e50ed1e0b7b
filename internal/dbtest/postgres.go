package dbtest

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
)

// postgresDefaults are the throwaway PostgreSQL server's settings: fast and
// small. fsync is off, but synchronous_commit stays on, so a commit has
// reached the kernel before it is acknowledged and survives [Server.Kill].
var postgresDefaults = map[string]string{
	"fsync":                      "off",
	"full_page_writes":           "off",
	"shared_buffers":             "16MB",
	"max_wal_size":               "64MB",
	"logging_collector":          "off",
	"log_min_messages":           "warning",
	"log_line_prefix":            "%m [%p] ",
	"max_connections":            "50",
	"autovacuum":                 "off",
	"dynamic_shared_memory_type": "posix",
}

// postgresBinDir finds the directory holding initdb and postgres:
// SQLRETRY_PG_BINDIR, the newest /usr/lib/postgresql/*/bin, or PATH.
func postgresBinDir() (string, error) {
	if d := os.Getenv("SQLRETRY_PG_BINDIR"); d != "" {
		return d, nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return pgMajor(dirs[i]) > pgMajor(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", fmt.Errorf("no initdb in SQLRETRY_PG_BINDIR, /usr/lib/postgresql/*/bin or PATH")
}

func pgMajor(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

// postgresCredential returns the postgres user's credential when running as
// root (PostgreSQL refuses to run as root), nil otherwise.
func postgresCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root and no postgres user to run the server as: %w", err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, err
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, err
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, nil
}

// chownTo gives path to cred's user (a no-op when cred is nil).
func chownTo(path string, cred *syscall.Credential) error {
	if cred == nil {
		return nil
	}
	return os.Chown(path, int(cred.Uid), int(cred.Gid))
}

// StartPostgres starts a throwaway PostgreSQL server for the test: a copy of
// a cached initdb'd data directory (trust authentication, user postgres,
// database postgres), listening on a free port on 127.0.0.1 with its Unix socket
// in its own directory, fsync off. It is killed and removed at cleanup. The
// test is skipped through [Skip] when the PostgreSQL binaries are missing.
func StartPostgres(t TB) *Server {
	t.Helper()
	return StartPostgresWith(t, Options{})
}

// StartPostgresWith is [StartPostgres] with settings, for example
// {"max_connections": "5"}.
func StartPostgresWith(t TB, opts Options) *Server {
	t.Helper()
	bin, err := postgresBinDir()
	if err != nil {
		Skip(t, "dbtest: no PostgreSQL server binaries: %v", err)
		return nil
	}
	cred, err := postgresCredential()
	if err != nil {
		Skip(t, "dbtest: cannot run PostgreSQL: %v", err)
		return nil
	}
	postgres := filepath.Join(bin, "postgres")
	version, err := output(postgres, "--version")
	if err != nil {
		Skip(t, "dbtest: %s --version: %v", postgres, err)
		return nil
	}
	tmpl, err := cachedTemplate("postgres", version+"\x00"+bin, func(dir string) error {
		return initPostgres(dir, bin, cred)
	})
	if err != nil {
		t.Fatalf("dbtest: initialise PostgreSQL template: %v", err)
	}
	dir, copyTime := serverDir(t, "sqlretry-pg-", tmpl, cred)
	s := &Server{
		kind:     "PostgreSQL",
		dir:      dir,
		logPath:  filepath.Join(dir, "server.log"),
		driver:   "pgx",
		cred:     cred,
		stopSig:  syscall.SIGINT, // fast shutdown
		argv:     postgresArgv(postgres, dir, mergeSettings(postgresDefaults, opts.Settings)),
		copyTime: copyTime,
		dsn: func(port int) string {
			return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
		},
	}
	return launch(t, s)
}

// initPostgres initialises a template data directory, dir/data, owned by
// cred's user.
func initPostgres(dir, bin string, cred *syscall.Credential) error {
	if err := chownTo(dir, cred); err != nil {
		return err
	}
	data := filepath.Join(dir, "data")
	// No database besides initdb's three: every database is about
	// 7.5 MB more to copy for each server.
	return run(cred, "", filepath.Join(bin, "initdb"), "-D", data, "-A", "trust", "-U", "postgres",
		"-E", "UTF8", "--no-locale", "--no-sync", "--wal-segsize=1", "--no-instructions")
}

// postgresArgv returns the command line of a server on dir/data with its
// socket in dir.
func postgresArgv(postgres, dir string, settings [][2]string) func(port int) []string {
	return func(port int) []string {
		args := []string{postgres, "-D", filepath.Join(dir, "data"),
			"-c", "listen_addresses=127.0.0.1",
			"-c", "port=" + strconv.Itoa(port),
			"-c", "unix_socket_directories=" + dir}
		for _, kv := range settings {
			args = append(args, "-c", kv[0]+"="+kv[1])
		}
		return args
	}
}
