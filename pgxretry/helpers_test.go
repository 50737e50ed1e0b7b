package pgxretry_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/internal/dbtest"
	"github.com/sqlretry/sqlretry/pgxretry"
	"github.com/sqlretry/sqlretry/postgres"
)

// appName marks the connections of the pools under test, so that a storm
// terminates theirs and no one else's.
const appName = "pgxretry_under_test"

// fixture is one test's database: a fresh one on the shared server.
type fixture struct {
	dsn  string
	pool *pgxpool.Pool    // under test: application_name appName
	w    *pgxretry.Pool   // pool, under p
	p    *sqlretry.Policy // fast backoff, a deep budget
	raw  *pgxpool.Pool    // for checks and storms, another application_name
}

// newFixture opens pools on a fresh database; cfg, if not nil, edits the
// pool under test's configuration.
func newFixture(t testing.TB, cfg func(*pgxpool.Config)) *fixture {
	t.Helper()
	dsn := newDSN(t)
	f := &fixture{dsn: dsn, p: policy(t)}
	f.pool = openPool(t, dsn, appName, cfg)
	f.raw = openPool(t, dsn, "pgxretry_checks", nil)
	f.w = pgxretry.New(f.pool, f.p)
	return f
}

func openPool(t testing.TB, dsn, app string, edit func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	cfg.MaxConns = 8
	if edit != nil {
		edit(cfg)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// policy is the tests' Policy: short waits, many retries, no budget (the
// storms are outages by design), PostgreSQL's classifier.
func policy(t testing.TB) *sqlretry.Policy { return policyWith(t, nil) }

// policyWith is policy with an Observer, and edits of its Config.
func policyWith(t testing.TB, obs sqlretry.Observer, edits ...func(*sqlretry.Config)) *sqlretry.Policy {
	t.Helper()
	c := sqlretry.Config{
		Observer:          obs,
		Classifier:        postgres.Classifier,
		MaxRetries:        20,
		ContentionRetries: 50,
		BaseDelay:         time.Millisecond,
		MaxDelay:          20 * time.Millisecond,
		Budget:            sqlretry.NoBudget,
		CountCalls:        true,
	}
	for _, edit := range edits {
		edit(&c)
	}
	p, err := sqlretry.New(c)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func (f *fixture) exec(t testing.TB, sql string, args ...any) {
	t.Helper()
	if _, err := f.raw.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func (f *fixture) count(t testing.TB, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := f.raw.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// terminate ends every backend of the pool under test, and returns how
// many it ended.
func (f *fixture) terminate(ctx context.Context) (int, error) {
	var n int
	err := f.raw.QueryRow(ctx, "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "+
		"WHERE datname = current_database() AND application_name = $1", appName).Scan(&n)
	return n, err
}

// noLeaks fails t if goroutines started during the test outlive it (after
// the pools close), with a grace period for their exits.
func noLeaks(t testing.TB) {
	t.Helper()
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if n := runtime.NumGoroutine(); n > before {
			buf := make([]byte, 1<<20)
			t.Errorf("goroutines: %d before, %d after\n%s", before, n, buf[:runtime.Stack(buf, true)])
		}
	})
}

// newDSN returns the DSN of a fresh database on the shared server.
func newDSN(t testing.TB) string {
	t.Helper()
	return dbtest.FreshPostgres(t)
}
