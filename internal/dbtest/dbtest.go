package dbtest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // registers "pgx", used to probe and administer PostgreSQL
)

// Defaults for the shared servers; the environment variables override them.
const (
	DefaultPostgresDSN = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	DefaultMySQLDSN    = "root@tcp(127.0.0.1:3306)/test?parseTime=true"

	envRequire  = "SQLRETRY_REQUIRE_DB"
	envPostgres = "SQLRETRY_PG_DSN"
	envMySQL    = "SQLRETRY_MYSQL_DSN"
)

// probeTimeout bounds one reachability check of a shared server.
const probeTimeout = 5 * time.Second

// adminTimeout bounds creating or dropping a fresh database.
const adminTimeout = 30 * time.Second

// RequireDB reports whether a missing database must fail a test rather than
// skip it: SQLRETRY_REQUIRE_DB=1.
func RequireDB() bool { return os.Getenv(envRequire) == "1" }

// Skip skips the test with the formatted message or, when [RequireDB] is
// true, fails it with the same message.
func Skip(t TB, format string, a ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, a...)
	if RequireDB() {
		t.Fatalf("%s (%s=1: a missing database fails the test)", msg, envRequire)
		return
	}
	t.Skip(msg)
}

// probes caches one reachability check per driver and DSN for the process.
var probes sync.Map // string -> *probe

type probe struct {
	once sync.Once
	err  error
}

// reachable pings dsn once per process and reports the result.
func reachable(driverName, dsn string) error {
	v, _ := probes.LoadOrStore(driverName+"\x00"+dsn, &probe{})
	p := v.(*probe)
	p.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
		defer cancel()
		p.err = ping(ctx, driverName, dsn)
	})
	return p.err
}

func ping(ctx context.Context, driverName, dsn string) error {
	db, err := sql.Open(driverName, dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	return db.PingContext(ctx)
}

// PostgresDSN returns the shared PostgreSQL server's DSN in URL form
// (SQLRETRY_PG_DSN, else [DefaultPostgresDSN]), skipping the test through
// [Skip] when the server does not answer.
func PostgresDSN(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv(envPostgres)
	if dsn == "" {
		dsn = DefaultPostgresDSN
	}
	if err := reachable("pgx", dsn); err != nil {
		Skip(t, "dbtest: shared PostgreSQL unreachable at %s (set %s to point elsewhere): %v", redactURL(dsn), envPostgres, err)
	}
	return dsn
}

// MySQLDSN returns the shared MariaDB server's DSN in go-sql-driver/mysql
// form (SQLRETRY_MYSQL_DSN, else [DefaultMySQLDSN]), skipping the test through
// [Skip] when the server does not answer.
func MySQLDSN(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv(envMySQL)
	if dsn == "" {
		dsn = DefaultMySQLDSN
	}
	if _, err := mysql.ParseDSN(dsn); err != nil {
		t.Fatalf("dbtest: %s: %v", envMySQL, err)
	}
	if err := reachable("mysql", dsn); err != nil {
		Skip(t, "dbtest: shared MariaDB unreachable at %s (set %s to point elsewhere): %v", redactMySQL(dsn), envMySQL, err)
	}
	return dsn
}

// FreshPostgres creates an empty database with a unique name on the shared
// PostgreSQL server, drops it (terminating its connections) when the test
// ends, and returns its DSN.
func FreshPostgres(t testing.TB) string {
	t.Helper()
	base := PostgresDSN(t)
	name := uniqueName(t)
	dsn, err := withPostgresDatabase(base, name)
	if err != nil {
		t.Fatalf("dbtest: %s: %v", envPostgres, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	if err := adminExec(ctx, "pgx", base, `CREATE DATABASE "`+name+`"`); err != nil {
		t.Fatalf("dbtest: create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
		defer cancel()
		if err := adminExec(ctx, "pgx", base, `DROP DATABASE IF EXISTS "`+name+`" WITH (FORCE)`); err != nil {
			t.Errorf("dbtest: drop database %s: %v", name, err)
		}
	})
	return dsn
}

// FreshMySQL creates an empty database with a unique name on the shared
// MariaDB server, drops it when the test ends, and returns its DSN.
func FreshMySQL(t testing.TB) string {
	t.Helper()
	base := MySQLDSN(t)
	name := uniqueName(t)
	cfg, err := mysql.ParseDSN(base)
	if err != nil {
		t.Fatalf("dbtest: %s: %v", envMySQL, err)
	}
	cfg.DBName = ""
	admin := cfg.FormatDSN()
	cfg.DBName = name
	dsn := cfg.FormatDSN()
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	if err := adminExec(ctx, "mysql", admin, "CREATE DATABASE `"+name+"`"); err != nil {
		t.Fatalf("dbtest: create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
		defer cancel()
		// A transaction a test left open would hold a metadata lock and make
		// DROP DATABASE wait lock_wait_timeout (a year by default).
		if err := adminExec(ctx, "mysql", admin, "SET SESSION lock_wait_timeout = 20", "DROP DATABASE IF EXISTS `"+name+"`"); err != nil {
			t.Errorf("dbtest: drop database %s: %v", name, err)
		}
	})
	return dsn
}

// adminExec runs stmts in order on one connection.
func adminExec(ctx context.Context, driverName, dsn string, stmts ...string) error {
	db, err := sql.Open(driverName, dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	for _, s := range stmts {
		if _, err := conn.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
	}
	return nil
}

// withPostgresDatabase returns dsn with its database replaced by name. It
// accepts the URL form and the keyword=value form.
func withPostgresDatabase(dsn, name string) (string, error) {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", err
		}
		u.Path = "/" + name
		u.RawPath = ""
		return u.String(), nil
	}
	// In the keyword form a later keyword overrides an earlier one.
	return strings.TrimSpace(dsn) + " dbname=" + name, nil
}

// uniqueName returns a database name made from the test's name and random
// bytes: lower case letters, digits and underscores, at most 56 bytes (under
// PostgreSQL's 63 and MariaDB's 64).
func uniqueName(t testing.TB) string {
	var b strings.Builder
	b.WriteString("sqlretry_")
	for _, r := range strings.ToLower(t.Name()) {
		if b.Len() >= 38 {
			break
		}
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	var rnd [8]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		t.Fatalf("dbtest: random name: %v", err)
	}
	b.WriteByte('_')
	b.WriteString(hex.EncodeToString(rnd[:]))
	return b.String()
}

// redactURL hides a password in a URL-form DSN for messages.
func redactURL(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil || u.User == nil {
		return dsn
	}
	return u.Redacted()
}

// redactMySQL hides a password in a go-sql-driver/mysql DSN for messages.
func redactMySQL(dsn string) string {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil || cfg.Passwd == "" {
		return dsn
	}
	cfg.Passwd = "xxxxx"
	return cfg.FormatDSN()
}
