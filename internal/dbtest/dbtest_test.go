package dbtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

// recTB records Skip and Fatal instead of ending the goroutine.
type recTB struct {
	testing.TB
	skipped, fatal string
}

func (r *recTB) Helper()                        {}
func (r *recTB) Skip(a ...any)                  { r.skipped = fmt.Sprint(a...) }
func (r *recTB) Skipf(format string, a ...any)  { r.skipped = fmt.Sprintf(format, a...) }
func (r *recTB) Fatal(a ...any)                 { r.fatal = fmt.Sprint(a...) }
func (r *recTB) Fatalf(format string, a ...any) { r.fatal = fmt.Sprintf(format, a...) }

func TestSkip(t *testing.T) {
	for _, tc := range []struct {
		env         string
		wantSkipped bool
		wantFatal   bool
	}{
		{env: "", wantSkipped: true},
		{env: "0", wantSkipped: true},
		{env: "1", wantFatal: true},
	} {
		t.Run("SQLRETRY_REQUIRE_DB="+tc.env, func(t *testing.T) {
			t.Setenv(envRequire, tc.env)
			if got, want := RequireDB(), tc.env == "1"; got != want {
				t.Errorf("RequireDB() = %v, want %v", got, want)
			}
			r := &recTB{TB: t}
			Skip(r, "no server at %s", "here")
			if got := r.skipped != ""; got != tc.wantSkipped {
				t.Errorf("skipped = %q, want skipped %v", r.skipped, tc.wantSkipped)
			}
			if got := r.fatal != ""; got != tc.wantFatal {
				t.Errorf("fatal = %q, want fatal %v", r.fatal, tc.wantFatal)
			}
			for _, msg := range []string{r.skipped, r.fatal} {
				if msg != "" && !strings.Contains(msg, "no server at here") {
					t.Errorf("message %q does not contain the formatted reason", msg)
				}
			}
		})
	}
}

func TestSharedUnreachableSkips(t *testing.T) {
	t.Setenv(envRequire, "")
	t.Setenv(envPostgres, "postgres://postgres@127.0.0.1:1/test?sslmode=disable&connect_timeout=2")
	t.Setenv(envMySQL, "root@tcp(127.0.0.1:1)/test?timeout=2s")
	r := &recTB{TB: t}
	PostgresDSN(r)
	if !strings.Contains(r.skipped, "PostgreSQL unreachable") {
		t.Errorf("PostgresDSN on a closed port: skipped = %q, want a skip naming PostgreSQL", r.skipped)
	}
	r = &recTB{TB: t}
	MySQLDSN(r)
	if !strings.Contains(r.skipped, "MariaDB unreachable") {
		t.Errorf("MySQLDSN on a closed port: skipped = %q, want a skip naming MariaDB", r.skipped)
	}
}

func TestWithPostgresDatabase(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "postgres://postgres@127.0.0.1:5432/db1?sslmode=disable"},
		{"postgresql://u:p@h/x", "postgresql://u:p@h/db1"},
		{"host=127.0.0.1 dbname=test", "host=127.0.0.1 dbname=test dbname=db1"},
	} {
		got, err := withPostgresDatabase(tc.in, "db1")
		if err != nil || got != tc.want {
			t.Errorf("withPostgresDatabase(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestUniqueName(t *testing.T) {
	a, b := uniqueName(t), uniqueName(t)
	if a == b {
		t.Errorf("uniqueName twice = %q both times, want distinct names", a)
	}
	if len(a) > 56 || strings.Trim(a, "abcdefghijklmnopqrstuvwxyz0123456789_") != "" {
		t.Errorf("uniqueName = %q (%d bytes), want at most 56 bytes of [a-z0-9_]", a, len(a))
	}
}

func TestFreshPostgres(t *testing.T) {
	var dsn string
	t.Run("inner", func(t *testing.T) {
		dsn = FreshPostgres(t)
		db := open(t, "pgx", dsn)
		mustExec(t, db, "CREATE TABLE t (id int)")
		var name string
		if err := db.QueryRow("SELECT current_database()").Scan(&name); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(name, "sqlretry_testfreshpostgres") {
			t.Errorf("current_database() = %q, want a sqlretry_testfreshpostgres... name", name)
		}
	})
	if dsn == "" {
		return
	}
	// The cleanup of the subtest dropped it.
	db := open(t, "pgx", PostgresDSN(t))
	name := dsn[strings.LastIndex(dsn, "/")+1 : strings.Index(dsn, "?")]
	var n int
	if err := db.QueryRow("SELECT count(*) FROM pg_database WHERE datname = $1", name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("database %s after cleanup: %d rows in pg_database, want 0", name, n)
	}
}

func TestFreshMySQL(t *testing.T) {
	var dsn string
	t.Run("inner", func(t *testing.T) {
		dsn = FreshMySQL(t)
		db := open(t, "mysql", dsn)
		mustExec(t, db, "CREATE TABLE t (id int)")
		// A transaction left open at cleanup must not block the drop.
		tx, err := db.Begin()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec("INSERT INTO t VALUES (1)"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tx.Rollback() })
	})
	if dsn == "" {
		return
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	db := open(t, "mysql", MySQLDSN(t))
	var n int
	if err := db.QueryRow("SELECT count(*) FROM information_schema.schemata WHERE schema_name = ?", cfg.DBName).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("database %s after cleanup: %d schemata, want 0", cfg.DBName, n)
	}
}

// TestServerLifecycle starts each kind of throwaway server and walks it
// through Stop, Start, Restart and Kill, checking that committed data
// survives each and that a stopped server refuses connections.
func TestServerLifecycle(t *testing.T) {
	for _, tc := range []struct {
		name   string
		driver string
		start  func(TB) *Server
	}{
		{"PostgreSQL", "pgx", StartPostgres},
		{"MariaDB", "mysql", StartMariaDB},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := tc.start(t)
			db := open(t, tc.driver, s.DSN())
			db.SetMaxIdleConns(0) // every query dials: a stopped server is seen at once
			mustExec(t, db, "CREATE TABLE life (step int)")

			steps := []struct {
				name string
				down func() error
				up   func() error
			}{
				{"Stop+Start", s.Stop, s.Start},
				{"Kill+Start", s.Kill, s.Start},
				{"Restart", func() error { return nil }, s.Restart},
			}
			for i, st := range steps {
				mustExec(t, db, fmt.Sprintf("INSERT INTO life VALUES (%d)", i+1))
				t0 := time.Now()
				if err := st.down(); err != nil {
					t.Fatalf("%s: down: %v", st.name, err)
				}
				if st.name != "Restart" {
					if s.Running() {
						t.Fatalf("%s: Running() = true after stopping, want false", st.name)
					}
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					err := db.PingContext(ctx)
					cancel()
					if !errors.Is(err, syscall.ECONNREFUSED) {
						t.Errorf("%s: ping a stopped server: got %v, want an error wrapping ECONNREFUSED", st.name, err)
					}
				}
				t1 := time.Now()
				if err := st.up(); err != nil {
					t.Fatalf("%s: up: %v", st.name, err)
				}
				t.Logf("%s: down %v, up %v", st.name, t1.Sub(t0).Round(time.Millisecond), time.Since(t1).Round(time.Millisecond))
				var n int
				if err := db.QueryRow("SELECT count(*) FROM life").Scan(&n); err != nil {
					t.Fatalf("%s: count after up: %v", st.name, err)
				}
				if n != i+1 {
					t.Errorf("%s: %d committed rows after up, want %d", st.name, n, i+1)
				}
			}
			if err := s.Start(); err == nil {
				t.Errorf("Start on a running server: got nil, want an error")
			}
			if !strings.Contains(s.Log(), "ready") {
				t.Errorf("server log does not mention readiness:\n%s", s.Log())
			}
		})
	}
}

func TestStartWithSettings(t *testing.T) {
	for _, tc := range []struct {
		name, driver, query string
		start               func(TB, Options) *Server
	}{
		{"PostgreSQL", "pgx", "SHOW max_connections", StartPostgresWith},
		{"MariaDB", "mysql", "SELECT @@max_connections", StartMariaDBWith},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := tc.start(t, Options{Settings: map[string]string{"max_connections": "12"}})
			db := open(t, tc.driver, s.DSN())
			var got string
			if err := db.QueryRow(tc.query).Scan(&got); err != nil {
				t.Fatal(err)
			}
			if got != "12" {
				t.Errorf("%s = %s, want 12", tc.query, got)
			}
		})
	}
}

func open(t testing.TB, driver, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func mustExec(t testing.TB, db *sql.DB, q string) {
	t.Helper()
	if _, err := db.Exec(q); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}
