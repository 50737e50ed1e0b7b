package dbtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// mariadbDefaults are the throwaway MariaDB server's settings: small and
// fast. innodb_flush_log_at_trx_commit=2 writes the log to the kernel at each
// commit (without fsync), so a commit survives [Server.Kill].
var mariadbDefaults = map[string]string{
	"skip-log-bin":                        "",
	"skip-name-resolve":                   "",
	"innodb-buffer-pool-size":             "32M",
	"innodb-log-file-size":                "4M",
	"innodb-data-file-path":               "ibdata1:4M:autoextend",
	"innodb-autoextend-increment":         "1",
	"innodb-flush-log-at-trx-commit":      "2",
	"innodb-doublewrite":                  "0",
	"innodb-use-native-aio":               "0", // no fight over the machine's aio-max-nr
	"performance-schema":                  "OFF",
	"character-set-server":                "utf8mb4",
	"max-connections":                     "50",
	"innodb-temp-data-file-path":          "ibtmp1:1M:autoextend",
	"innodb-buffer-pool-dump-at-shutdown": "OFF",
	"innodb-buffer-pool-load-at-startup":  "OFF",
	"innodb-fast-shutdown":                "1",
}

// mariadbInstallKeys name the settings that must match mariadbDefaults where InnoDB checks its
// files against the configuration.
var mariadbInstallKeys = []string{
	"innodb-log-file-size", "innodb-data-file-path", "innodb-autoextend-increment",
	"innodb-buffer-pool-size", "innodb-use-native-aio",
}

// mariadbBinaries finds mariadbd (or mysqld) and mariadb-install-db (or
// mysql_install_db) on PATH or in /usr/sbin, /usr/bin.
func mariadbBinaries() (server, install string, err error) {
	find := func(names ...string) string {
		for _, n := range names {
			if p, err := exec.LookPath(n); err == nil {
				return p
			}
			for _, d := range []string{"/usr/sbin", "/usr/bin", "/usr/local/bin", "/usr/local/sbin"} {
				p := filepath.Join(d, n)
				if st, err := os.Stat(p); err == nil && !st.IsDir() {
					return p
				}
			}
		}
		return ""
	}
	server = find("mariadbd", "mysqld")
	install = find("mariadb-install-db", "mysql_install_db")
	if server == "" || install == "" {
		return "", "", fmt.Errorf("need mariadbd and mariadb-install-db on PATH or in /usr/sbin (found %q, %q)", server, install)
	}
	return server, install, nil
}

// StartMariaDB starts a throwaway MariaDB server for the test: a copy of a
// cached mariadb-install-db'd data directory (root without password,
// database test), listening on a free port on 127.0.0.1, binary log off,
// InnoDB small. It is killed and removed at cleanup. The test is skipped
// through [Skip] when the MariaDB binaries are missing.
func StartMariaDB(t TB) *Server {
	t.Helper()
	return StartMariaDBWith(t, Options{})
}

// StartMariaDBWith is [StartMariaDB] with settings, for example
// {"max_connections": "3"}.
func StartMariaDBWith(t TB, opts Options) *Server {
	t.Helper()
	m, ok := findMariaDB(t)
	if !ok {
		return nil // skipped
	}
	extra := make(map[string]string, len(opts.Settings))
	for k, v := range opts.Settings {
		extra[strings.ReplaceAll(k, "_", "-")] = v // max_connections and max-connections are one option
	}
	return launch(t, m.newServer(t, "sqlretry-my-", mergeSettings(mariadbDefaults, extra)))
}

// A mariadbInstall is what every throwaway MariaDB server here starts from:
// the server binary, the --user=root a server run as root needs, and the
// cached template data directory.
type mariadbInstall struct {
	server string
	asRoot []string
	tmpl   string
}

// findMariaDB finds the MariaDB binaries and the template data directory,
// initialising it on first use. StartMariaDB, the replica pair and the
// Galera nodes use one cache key and one builder, so they share one
// mariadb-install-db. ok is false when the test was skipped through [Skip].
func findMariaDB(t TB) (m mariadbInstall, ok bool) {
	t.Helper()
	server, install, err := mariadbBinaries()
	if err != nil {
		Skip(t, "dbtest: no MariaDB server binaries: %v", err)
		return m, false
	}
	version, err := output(server, "--version")
	if err != nil {
		Skip(t, "dbtest: %s --version: %v", server, err)
		return m, false
	}
	m.server = server
	if os.Geteuid() == 0 {
		m.asRoot = []string{"--user=root"}
	}
	m.tmpl, err = cachedTemplate("mariadb", version+"\x00"+server, func(dir string) error {
		return initMariaDB(filepath.Join(dir, "data"), server, install, m.asRoot)
	})
	if err != nil {
		t.Fatalf("dbtest: initialise MariaDB template: %v", err)
	}
	return m, true
}

// newServer builds (but does not start) a MariaDB server on a copy of the
// template in a new directory named after prefix.
func (m mariadbInstall) newServer(t TB, prefix string, settings [][2]string) *Server {
	t.Helper()
	dir, copyTime := serverDir(t, prefix, m.tmpl, nil)
	return &Server{
		kind:     "MariaDB",
		dir:      dir,
		logPath:  filepath.Join(dir, "server.log"),
		driver:   "mysql",
		stopSig:  syscall.SIGTERM, // normal shutdown
		argv:     mariadbArgv(m.server, dir, m.asRoot, settings),
		copyTime: copyTime,
		dsn:      mariadbDSN,
	}
}

// mariadbDSN is the DSN of a throwaway MariaDB server listening on port.
func mariadbDSN(port int) string {
	return fmt.Sprintf("root@tcp(127.0.0.1:%d)/test?parseTime=true", port)
}

// initMariaDB initialises a template data directory: root without a
// password and an empty database test.
func initMariaDB(data, server, install string, asRoot []string) error {
	var innodb []string // the settings InnoDB checks its files against
	for _, k := range mariadbInstallKeys {
		innodb = append(innodb, "--"+k+"="+mariadbDefaults[k])
	}
	args := []string{"--no-defaults", "--auth-root-authentication-method=normal", "--skip-test-db",
		"--datadir=" + data}
	args = append(args, asRoot...)
	if err := run(nil, "", install, append(args, innodb...)...); err != nil {
		return err
	}
	// Bootstrap mode creates the test database without a listener.
	boot := []string{"--no-defaults", "--bootstrap", "--datadir=" + data, "--skip-log-bin"}
	boot = append(boot, asRoot...)
	return run(nil, "CREATE DATABASE test;\n", server, append(boot, innodb...)...)
}

// mariadbArgv returns the command line of a server on dir/data with its
// socket, pid file and temporary files in dir.
func mariadbArgv(server, dir string, asRoot []string, settings [][2]string) func(port int) []string {
	return func(port int) []string {
		args := []string{server, "--no-defaults"}
		args = append(args, asRoot...)
		args = append(args,
			"--datadir="+filepath.Join(dir, "data"),
			"--tmpdir="+dir,
			"--socket="+filepath.Join(dir, "mysqld.sock"),
			"--pid-file="+filepath.Join(dir, "mysqld.pid"),
			"--port="+strconv.Itoa(port),
			"--bind-address=127.0.0.1")
		for _, kv := range settings {
			if kv[1] == "" {
				args = append(args, "--"+kv[0])
			} else {
				args = append(args, "--"+kv[0]+"="+kv[1])
			}
		}
		return args
	}
}
