package chaos

import (
	"context"
	"crypto/rand"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite" // registers "sqlite"

	"github.com/sqlretry/sqlretry/cmd/sqlretry/internal/engine"
	"github.com/sqlretry/sqlretry/faults/proxy"
	"github.com/sqlretry/sqlretry/sqlite"
	"github.com/sqlretry/sqlretry/taskstore"
)

// Redactor removes a DSN's password from text. Drivers echo DSNs in their
// error messages; nothing the command prints passes without it.
type Redactor struct{ secrets []string }

// NewRedactor returns a Redactor for the password in dsn, whatever the
// DSN's form: a URL (postgres://user:pw@host/db), key=value pairs
// (password=pw, password = 'a b') or go-sql-driver's user:pw@tcp(host)/db.
// The password is the one pgx and go-sql-driver/mysql parse from dsn; only
// a DSN neither parses a password from falls back to reading it by hand,
// generously.
func NewRedactor(dsn string) *Redactor {
	if dsn == "" {
		return &Redactor{}
	}
	var found []string
	parsed := false
	if cfg, err := pgx.ParseConfig(dsn); err == nil {
		parsed = true
		found = append(found, cfg.Password)
	}
	if cfg, err := gomysql.ParseDSN(dsn); err == nil {
		parsed = true
		found = append(found, cfg.Passwd)
	}
	if u, err := url.Parse(dsn); err == nil && u.User != nil {
		if pw, ok := u.User.Password(); ok {
			found = append(found, pw)
		}
	}
	// A DSN no driver parses, or one parsed in a form it was not written
	// in (no password found), falls back to reading the password by hand.
	if !parsed || !slices.ContainsFunc(found, func(s string) bool { return s != "" }) {
		found = append(found, guessPasswords(dsn)...)
	}
	r := &Redactor{}
	for _, s := range found {
		r.add(s)
	}
	// Longest first: a secret that contains another is replaced whole.
	slices.SortFunc(r.secrets, func(a, b string) int { return len(b) - len(a) })
	return r
}

// add adds s and the forms it takes when escaped in a URL or in JSON.
func (r *Redactor) add(s string) {
	if s == "" {
		return
	}
	forms := []string{s, url.QueryEscape(s), url.PathEscape(s), (&url.URL{User: url.UserPassword("u", s)}).User.String()[2:]}
	if b, err := json.Marshal(s); err == nil {
		forms = append(forms, string(b[1:len(b)-1]))
	}
	for _, f := range forms {
		if f != "" && !slices.Contains(r.secrets, f) {
			r.secrets = append(r.secrets, f)
		}
	}
}

// kvKey matches the start of the next key of a key=value DSN.
var kvKey = regexp.MustCompile(`\s+[A-Za-z_][A-Za-z0-9_]*\s*=`)

// passwordKey matches a password key and its "=" in a key=value DSN.
var passwordKey = regexp.MustCompile(`(?i)password\s*=\s*`)

// guessPasswords reads the passwords of a DSN no driver parses: after each
// "password =", everything up to the next key (a quoted value whole, with
// and without its quotes), and a URL's or go-sql-driver's user:pw@.
func guessPasswords(dsn string) []string {
	var found []string
	for _, m := range passwordKey.FindAllStringIndex(dsn, -1) {
		rest := dsn[m[1]:]
		var v string
		if q := rest; len(q) > 0 && (q[0] == '\'' || q[0] == '"') {
			end := strings.IndexByte(q[1:], q[0])
			if end < 0 {
				v = q[1:]
			} else {
				v = q[1 : end+1]
			}
		} else if loc := kvKey.FindStringIndex(rest); loc != nil {
			v = rest[:loc[0]]
		} else {
			v = rest
		}
		v = strings.TrimSpace(v)
		found = append(found, v)
		// Also each longer word alone, in case a message splits the value.
		for _, f := range strings.Fields(v) {
			if len(f) >= 4 {
				found = append(found, f)
			}
		}
	}
	if i := strings.LastIndex(dsn, "@"); i > 0 {
		user := dsn[:i]
		if j := strings.Index(user, "://"); j >= 0 {
			user = user[j+3:]
		}
		if _, pw, ok := strings.Cut(user, ":"); ok {
			found = append(found, pw)
			if u, err := url.PathUnescape(pw); err == nil {
				found = append(found, u)
			}
		}
	}
	return found
}

// String returns s with every secret replaced by "xxxxx".
func (r *Redactor) String(s string) string {
	if r == nil {
		return s
	}
	for _, sec := range r.secrets {
		s = strings.ReplaceAll(s, sec, "xxxxx")
	}
	return s
}

// Pending returns the length of the longest end of s that is the start of
// a secret, shorter than the secret: text a stream must hold back until the
// next write shows whether the secret follows. Held back, the rest of s can
// be written at once, redacted (see [Redactor.String]).
func (r *Redactor) Pending(s string) int {
	if r == nil {
		return 0
	}
	n := 0
	for _, sec := range r.secrets {
		for k := min(len(sec)-1, len(s)); k > n; k-- {
			if strings.HasSuffix(s, sec[:k]) {
				n = k
				break
			}
		}
	}
	return n
}

// Error returns err with its message redacted, nil for nil. The result
// keeps err in its chain only when nothing had to be removed.
func (r *Redactor) Error(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	if red := r.String(msg); red != msg {
		var ie *InputError
		if errors.As(err, &ie) {
			return &InputError{What: ie.What, Err: errors.New(r.String(ie.Err.Error()))}
		}
		return errors.New(red)
	}
	return err
}

// target is one run's database: the connector the fault driver wraps
// (through the proxy, when there is one) and what to undo afterwards.
type target struct {
	inner   driver.Connector
	proxy   *proxy.Proxy
	cleanup []func()
	// settings are the engine settings the run applied, as lines for the
	// report: "busy_timeout 500ms".
	settings []string
	// name is the run's own database: the SQLite file, the PostgreSQL
	// schema or the MySQL database (a fleet's workers open it by name).
	name string
	// clusterDB is a Galera run's database, for the check of each node.
	clusterDB string
}

func (t *target) close() {
	for i := len(t.cleanup) - 1; i >= 0; i-- {
		t.cleanup[i]()
	}
}

func randomSuffix() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// openTarget prepares the database of one run: a fresh SQLite file, or a
// fresh schema (PostgreSQL) or database (MySQL) on the server, with a
// wire-level proxy in front of the server unless noProxy.
func openTarget(ctx context.Context, c Config, label string) (*target, error) {
	t := &target{}
	var err error
	switch c.Engine {
	case engine.Postgres:
		err = t.openPostgres(ctx, c, label)
	case engine.MySQL:
		if c.Cluster != "" {
			err = t.openGalera(ctx, c, label)
			break
		}
		err = t.openMySQL(ctx, c, label)
	default:
		err = t.openSQLite(c, label)
	}
	if err != nil {
		t.close()
		return nil, err
	}
	return t, nil
}

func (t *target) openSQLite(c Config, label string) error {
	var path string
	if c.DSN == "" {
		dir, err := os.MkdirTemp("", "sqlretry-chaos-")
		if err != nil {
			return err
		}
		t.cleanup = append(t.cleanup, func() { _ = os.RemoveAll(dir) })
		path = filepath.Join(dir, label+".db")
	} else {
		file, err := sqliteFile(c.DSN)
		if err != nil {
			return inputErr("--dsn", err)
		}
		path = sqliteRunPath(file, label)
		if exists(path) {
			return inputErr("--dsn", fmt.Errorf("SQLite file %s exists; the run needs a new file (it checks whole tables)", path))
		}
		t.cleanup = append(t.cleanup, func() {
			for _, s := range []string{"", "-wal", "-shm"} {
				_ = os.Remove(path + s)
			}
		})
	}
	t.name = path
	dsn := sqliteDSN(path)
	if c.Scenario == ScenarioContention {
		var setting string
		dsn, setting = contentionSQLiteDSN(path, c.Policy.CommandTimeout)
		t.settings = append(t.settings, setting)
	}
	return t.sqliteConnector(dsn)
}

// sqliteConnector sets t.inner to a connector of the SQLite driver for dsn.
func (t *target) sqliteConnector(dsn string) error {
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return inputErr("--dsn", err)
	}
	d := db.Driver()
	_ = db.Close()
	if dc, ok := d.(driver.DriverContext); ok {
		t.inner, err = dc.OpenConnector(dsn)
		return err
	}
	t.inner = dsnConnector{d: d, dsn: dsn}
	return nil
}

// contentionSQLiteDSN is the contention scenario's SQLite DSN: WAL, with
// database/sql's own BEGIN (DEFERRED), as most code opens SQLite, and
// package sqlite's recommended busy timeout, kept to half the command
// timeout (a command timeout that fires while SQLite waits for the lock is
// an attempt of unknown outcome; a busy error is contention). It returns
// the DSN and the setting, for the report.
func contentionSQLiteDSN(path string, commandTimeout time.Duration) (string, string) {
	busy := sqlite.BusyTimeout
	if commandTimeout > 0 {
		busy = min(busy, commandTimeout/2)
	}
	dsn := "file:" + path + "?_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)"
	return sqlite.DSNWithBusyTimeout(dsn, busy), "busy_timeout " + busy.String() + ", BEGIN DEFERRED, WAL"
}

// dsnConnector is database/sql's connector for a driver without
// DriverContext.
type dsnConnector struct {
	d   driver.Driver
	dsn string
}

func (c dsnConnector) Connect(context.Context) (driver.Conn, error) { return c.d.Open(c.dsn) }
func (c dsnConnector) Driver() driver.Driver                        { return c.d }

// pingTimeout bounds the check that a DSN's server answers.
const pingTimeout = 10 * time.Second

// scratch reaches the server through admin and creates the run's own schema
// or database (kind) named name, dropped (with dropSuffix) at cleanup, when
// admin is closed too. before, if not nil, runs once the server answers,
// before anything is created.
func (t *target) scratch(ctx context.Context, admin *sql.DB, server, kind, name, dropSuffix string, before func(context.Context) error) error {
	t.cleanup = append(t.cleanup, func() { _ = admin.Close() })
	pctx, cancel := context.WithTimeout(ctx, pingTimeout)
	defer cancel()
	if err := admin.PingContext(pctx); err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "3D000" { // invalid_catalog_name: https://www.postgresql.org/docs/current/errcodes-appendix.html
			return inputErr("--dsn", fmt.Errorf("%s: the database the DSN names does not exist on the server: name one that does (%s)", server, pe.Message))
		}
		return inputErr("--dsn", fmt.Errorf("cannot reach %s: %w", server, err))
	}
	if before != nil {
		if err := before(pctx); err != nil {
			return err
		}
	}
	if _, err := admin.ExecContext(pctx, "CREATE "+strings.ToUpper(kind)+" "+name); err != nil {
		return inputErr("--dsn", fmt.Errorf("cannot create %s %s: %w", kind, name, err))
	}
	t.cleanup = append(t.cleanup, func() {
		dctx, cancel := context.WithTimeout(context.Background(), pingTimeout)
		defer cancel()
		_, _ = admin.ExecContext(dctx, "DROP "+strings.ToUpper(kind)+" IF EXISTS "+name+dropSuffix)
	})
	return nil
}

func (t *target) openPostgres(ctx context.Context, c Config, label string) error {
	cfg, err := pgx.ParseConfig(c.DSN)
	if err != nil {
		return inputErr("--dsn", err)
	}
	if strings.HasPrefix(cfg.Host, "/") && !c.NoProxy {
		return inputErr("--dsn", fmt.Errorf("the fault proxy needs a TCP host, and the DSN reaches the server by its Unix socket %s: "+
			"name the host (host=127.0.0.1), or pass --no-proxy", cfg.Host))
	}
	schema := "sqlretry_chaos_" + label + "_" + randomSuffix()
	t.name = schema
	if err := t.scratch(ctx, stdlib.OpenDB(*cfg.Copy()), "PostgreSQL", "schema", schema, " CASCADE", nil); err != nil {
		return err
	}
	run := cfg.Copy()
	if run.RuntimeParams == nil {
		run.RuntimeParams = map[string]string{}
	}
	run.RuntimeParams["search_path"] = schema
	if c.Scenario == ScenarioContention {
		t.settings = append(t.settings, t.fastDeadlocks(ctx, cfg, run))
	}
	if !c.NoProxy {
		if err := t.proxyPostgres(run); err != nil {
			return err
		}
	}
	t.inner = stdlib.GetConnector(*run)
	return nil
}

// deadlockTimeout is the contention scenario's PostgreSQL deadlock_timeout:
// the server's default (1 s) makes every deadlock cost a second, as long
// as the command timeout, and the run would measure the timeout instead.
const deadlockTimeout = "20ms"

// fastDeadlocks sets run's deadlock_timeout to deadlockTimeout when the
// DSN's role may (it needs superuser, or a GRANT SET on it), and returns
// the setting for the report.
func (t *target) fastDeadlocks(ctx context.Context, cfg, run *pgx.ConnConfig) string {
	pctx, cancel := context.WithTimeout(ctx, pingTimeout)
	defer cancel()
	conn, err := pgx.ConnectConfig(pctx, cfg)
	if err == nil {
		_, err = conn.Exec(pctx, "SET deadlock_timeout = '"+deadlockTimeout+"'")
		_ = conn.Close(pctx)
	}
	if err != nil {
		return "deadlock_timeout: the server's (could not set " + deadlockTimeout + ": " + err.Error() + ")"
	}
	run.RuntimeParams["deadlock_timeout"] = deadlockTimeout
	return "deadlock_timeout " + deadlockTimeout
}

func (t *target) openMySQL(ctx context.Context, c Config, label string) error {
	cfg, err := gomysql.ParseDSN(c.DSN)
	if err != nil {
		return inputErr("--dsn", err)
	}
	if cfg.Net != "tcp" && !c.NoProxy {
		return inputErr("--dsn", fmt.Errorf("the proxy needs a tcp address, got network %q (or pass --no-proxy)", cfg.Net))
	}
	acfg := cfg.Clone()
	acfg.DBName = ""
	acfg.Logger = &gomysql.NopLogger{}
	ac, err := gomysql.NewConnector(acfg)
	if err != nil {
		return inputErr("--dsn", err)
	}
	dbName := "sqlretry_chaos_" + label + "_" + randomSuffix()
	t.name = dbName
	if err := t.scratch(ctx, sql.OpenDB(ac), "MySQL", "database", dbName, "", func(ctx context.Context) error {
		return mysqlDatabaseExists(ctx, cfg, func(c *gomysql.Config) (driver.Connector, error) { return gomysql.NewConnector(c) })
	}); err != nil {
		return err
	}
	run := cfg.Clone()
	run.DBName = dbName
	// The driver logs every broken connection; the report counts them.
	run.Logger = &gomysql.NopLogger{}
	if !c.NoProxy {
		if err := t.proxyMySQL(run); err != nil {
			return err
		}
	}
	t.inner, err = gomysql.NewConnector(run)
	return err
}

// mysqlDatabaseExists refuses a DSN naming a database the server does not
// have. The run works in a database of its own beside it (its admin
// connection drops the DSN's), so without this check a mistyped name ran
// anyway. cfg is the DSN as given (a DSN naming no database passes);
// connector returns the connector its connection is opened with.
func mysqlDatabaseExists(ctx context.Context, cfg *gomysql.Config, connector func(*gomysql.Config) (driver.Connector, error)) error {
	if cfg.DBName == "" {
		return nil
	}
	dcfg := cfg.Clone()
	dcfg.Logger = &gomysql.NopLogger{}
	dc, err := connector(dcfg)
	if err != nil {
		return inputErr("--dsn", err)
	}
	db := sql.OpenDB(dc)
	defer db.Close()
	err = db.PingContext(ctx)
	var me *gomysql.MySQLError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &me) && me.Number == 1049: // ER_BAD_DB_ERROR: https://mariadb.com/kb/en/mariadb-error-codes/
		return inputErr("--dsn", fmt.Errorf("database %q does not exist on the server: name one that does (the run creates "+
			"a database of its own beside it and drops it afterwards)", cfg.DBName))
	}
	return inputErr("--dsn", fmt.Errorf("cannot open database %q: %w", cfg.DBName, err))
}

// proxyPostgres starts the wire proxy in front of cfg's server and points
// cfg at it (its fallback hosts dropped: every connection goes through it).
func (t *target) proxyPostgres(cfg *pgx.ConnConfig) error {
	if err := t.startProxy(net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))), proxy.ProtocolPostgres); err != nil {
		return err
	}
	host, port, _ := net.SplitHostPort(t.proxy.Addr())
	p, _ := strconv.Atoi(port)
	cfg.Host, cfg.Port, cfg.Fallbacks = host, uint16(p), nil
	return nil
}

// proxyMySQL starts the wire proxy in front of cfg's server and points cfg
// at it.
func (t *target) proxyMySQL(cfg *gomysql.Config) error {
	if err := t.startProxy(cfg.Addr, proxy.ProtocolMySQL); err != nil {
		return err
	}
	cfg.Addr = t.proxy.Addr()
	return nil
}

func (t *target) startProxy(addr string, proto proxy.Protocol) error {
	p, err := proxy.New(proxy.Config{Target: addr, Protocol: proto, CutWait: time.Second})
	if err != nil {
		return fmt.Errorf("start the fault proxy: %w", err)
	}
	t.proxy = p
	t.cleanup = append(t.cleanup, func() { _ = p.Close() })
	return nil
}

// sqliteDSN is the store's SQLite DSN with synchronous=NORMAL: in WAL mode
// a commit survives a crash of the process, and the run is not bound by
// one fsync per commit.
func sqliteDSN(path string) string {
	return taskstore.SQLiteDSN(path) + "&_pragma=synchronous(NORMAL)"
}
