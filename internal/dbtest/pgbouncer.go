package dbtest

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// pgbouncerPath is where Debian and Ubuntu install pgbouncer;
// SQLRETRY_PGBOUNCER overrides it.
const pgbouncerPath = "/usr/sbin/pgbouncer"

// Pool modes of a [PgBouncer] (pgbouncer's pool_mode).
const (
	SessionPooling     = "session"     // a server connection per client connection, for its life
	TransactionPooling = "transaction" // a server connection per transaction: autocommit statements may each get another
)

// PgBouncerOptions adjusts a throwaway pgbouncer.
type PgBouncerOptions struct {
	// Mode is pool_mode: SessionPooling (the default) or TransactionPooling.
	Mode string
	// Settings override the [pgbouncer] section's, name to value:
	// {"default_pool_size": "2", "query_wait_timeout": "1"}.
	Settings map[string]string
}

// pgbouncerDefaults are the throwaway pgbouncer's settings. Every database
// name is passed through to the server behind (the "*" database); users
// are trusted, postgres being the only one and the admin console's. Unix
// sockets are off, so that two pgbouncers never meet in /tmp.
// server_login_retry is 1 s rather than 15, so that a test that restarts
// the server behind does not wait 15 s for pgbouncer to try again.
var pgbouncerDefaults = map[string]string{
	"listen_addr":               "127.0.0.1",
	"unix_socket_dir":           "",
	"auth_type":                 "trust",
	"admin_users":               "postgres",
	"max_client_conn":           "500",
	"default_pool_size":         "20",
	"server_login_retry":        "1",
	"ignore_startup_parameters": "extra_float_digits,options",
	"log_connections":           "0",
	"log_disconnections":        "0",
	"log_pooler_errors":         "1",
}

// A PgBouncer is a throwaway pgbouncer owned by one test, in front of a
// PostgreSQL server: its own directory (config, auth file, log) and its own
// port on 127.0.0.1, its admin console open to user postgres. It is killed
// and its directory removed when the test ends. When the tests run as root
// it runs as the postgres user, since pgbouncer refuses to run as root.
//
// Its methods are safe for concurrent use; Stop, Start, Restart and Kill are
// serialised.
type PgBouncer struct {
	srv     *Server
	backend string // the server behind, host:port
	mode    string
}

// StartPgBouncer starts a pgbouncer in front of the PostgreSQL server at
// backend ("127.0.0.1:5432", or a throwaway [Server]'s Addr). The test is
// skipped through [Skip] when pgbouncer is not installed
// (/usr/sbin/pgbouncer, or SQLRETRY_PGBOUNCER), so that with
// SQLRETRY_REQUIRE_DB=1 a missing pgbouncer fails it.
func StartPgBouncer(t TB, backend string, opts PgBouncerOptions) *PgBouncer {
	t.Helper()
	bin := os.Getenv("SQLRETRY_PGBOUNCER")
	if bin == "" {
		bin = pgbouncerPath
	}
	if _, err := os.Stat(bin); err != nil {
		Skip(t, "dbtest: no pgbouncer at %s (install the pgbouncer package, or set SQLRETRY_PGBOUNCER): %v", bin, err)
		return nil
	}
	host, serverPort, err := net.SplitHostPort(backend)
	if err != nil {
		t.Fatalf("dbtest: pgbouncer backend %q: %v", backend, err)
	}
	mode := opts.Mode
	switch mode {
	case "":
		mode = SessionPooling
	case SessionPooling, TransactionPooling:
	default:
		t.Fatalf("dbtest: pgbouncer pool mode %q: want %q or %q", mode, SessionPooling, TransactionPooling)
	}
	cred, err := postgresCredential()
	if err != nil {
		Skip(t, "dbtest: cannot run pgbouncer: %v", err)
		return nil
	}
	dir, err := os.MkdirTemp("", "sqlretry-pgbouncer-")
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	if err := chownTo(dir, cred); err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	auth := filepath.Join(dir, "userlist.txt")
	if err := os.WriteFile(auth, []byte(`"postgres" ""`+"\n"), 0o644); err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	settings := mergeSettings(pgbouncerDefaults, opts.Settings)
	settings = append(settings, [2]string{"auth_file", auth}, [2]string{"pool_mode", mode})
	ini := filepath.Join(dir, "pgbouncer.ini")
	b := &PgBouncer{backend: backend, mode: mode}
	s := &Server{
		kind:    "pgbouncer",
		dir:     dir,
		logPath: filepath.Join(dir, "pgbouncer.log"),
		driver:  "pgx",
		cred:    cred,
		// SIGTERM is pgbouncer's immediate shutdown; its SIGINT waits for
		// every server connection to be released, which in session
		// pooling means for every client to leave.
		stopSig: syscall.SIGTERM,
		argv:    func(int) []string { return []string{bin, ini} },
		dsn:     func(port int) string { return adminDSN(port) },
		// The config names the port, which launch chooses (and may
		// choose again): written before each start.
		prepare: func(port int) error {
			return os.WriteFile(ini, pgbouncerConfig(host, serverPort, port, settings), 0o644)
		},
	}
	s.ready = func(ctx context.Context) error { return b.Admin(ctx, "SHOW VERSION") }
	b.srv = s
	launch(t, s)
	return b
}

// pgbouncerConfig is pgbouncer.ini: every database passed to the same name
// on host:serverPort, pgbouncer itself on port, with settings.
func pgbouncerConfig(host, serverPort string, port int, settings [][2]string) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "[databases]\n* = host=%s port=%s\n\n[pgbouncer]\nlisten_port = %d\n", host, serverPort, port)
	for _, kv := range settings {
		fmt.Fprintf(&b, "%s = %s\n", kv[0], kv[1])
	}
	return []byte(b.String())
}

// adminDSN is the DSN of the admin console of a pgbouncer on port. The
// console speaks only the simple query protocol.
func adminDSN(port int) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/pgbouncer?sslmode=disable&default_query_exec_mode=simple_protocol", port)
}

// Addr returns pgbouncer's TCP address, "127.0.0.1:port".
func (b *PgBouncer) Addr() string { return b.srv.Addr() }

// Backend returns the address of the server behind pgbouncer.
func (b *PgBouncer) Backend() string { return b.backend }

// Mode returns the pool mode, SessionPooling or TransactionPooling.
func (b *PgBouncer) Mode() string { return b.mode }

// AdminDSN returns the DSN of pgbouncer's admin console (database
// pgbouncer, user postgres, the simple query protocol, which is all the
// console speaks).
func (b *PgBouncer) AdminDSN() string { return adminDSN(b.srv.port) }

// DSN returns dsn, a PostgreSQL DSN in URL form for the server behind
// pgbouncer, with its host and port replaced by pgbouncer's: the same
// database and user, through the pooler.
func (b *PgBouncer) DSN(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		panic("dbtest: PgBouncer.DSN takes a URL-form DSN, got " + strconv.Quote(dsn))
	}
	u.Host = b.Addr()
	return u.String()
}

// Admin runs command on pgbouncer's admin console, on a connection of its
// own: "RECONNECT", "KILL db", "PAUSE", "RESUME", "SHUTDOWN", "SHOW
// SERVERS"… (rows are read and dropped; see [PgBouncer.Show]). PAUSE
// returns once every server connection is released, which in session
// pooling means once every client has left: give it a ctx that ends, and
// RESUME after (the pause stays when its connection is gone). SHUTDOWN ends
// the process: Start starts it again.
func (b *PgBouncer) Admin(ctx context.Context, command string) error {
	_, err := b.Show(ctx, command)
	return err
}

// Show runs command (SHOW SERVERS, SHOW POOLS, …) on the admin console
// and returns its rows, each a map of column name to text value.
func (b *PgBouncer) Show(ctx context.Context, command string) ([]map[string]string, error) {
	db, err := sql.Open("pgx", b.AdminDSN())
	if err != nil {
		return nil, err
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, command)
	if err != nil {
		return nil, fmt.Errorf("pgbouncer admin %s: %w", command, err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	var out []map[string]string
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, err
		}
		m := make(map[string]string, len(cols))
		for i, c := range cols {
			m[c] = vals[i].String
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pgbouncer admin %s: %w", command, err)
	}
	return out, nil
}

// PID returns the pgbouncer process's id, or 0 when it is not running.
func (b *PgBouncer) PID() int {
	b.srv.mu.Lock()
	defer b.srv.mu.Unlock()
	if !b.srv.runningLocked() {
		return 0
	}
	return b.srv.cmd.Process.Pid
}

// Start starts pgbouncer again on its port, after Stop, Kill or an admin
// SHUTDOWN, and waits until its admin console answers. Start on a running
// pgbouncer is an error.
func (b *PgBouncer) Start() error { return b.srv.Start() }

// Stop ends pgbouncer at once (SIGTERM, its immediate shutdown: every
// client connection is cut) and waits for it to exit.
func (b *PgBouncer) Stop() error { return b.srv.Stop() }

// Kill sends SIGKILL to pgbouncer and waits until it is gone.
func (b *PgBouncer) Kill() error { return b.srv.Kill() }

// Restart is Stop followed by Start: every client connection is cut and
// pgbouncer listens again on the same port.
func (b *PgBouncer) Restart() error { return b.srv.Restart() }

// Running reports whether the pgbouncer process is alive: false after an
// admin SHUTDOWN too.
func (b *PgBouncer) Running() bool { return b.srv.Running() }

// Log returns what pgbouncer has written to its log so far.
func (b *PgBouncer) Log() string { return b.srv.Log() }

// Dir returns pgbouncer's private directory (pgbouncer.ini, userlist.txt,
// pgbouncer.log).
func (b *PgBouncer) Dir() string { return b.srv.Dir() }
