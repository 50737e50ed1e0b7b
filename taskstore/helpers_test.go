package taskstore

import (
	"context"
	"database/sql"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite"

	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/faults"
	"github.com/sqlretry/sqlretry/internal/dbtest"
)

// clock is a manual clock: each reading advances it by one microsecond, so
// every stamp is distinct and a re-stamp is visible.
type clock struct{ us atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.us.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro())
	return c
}

func (c *clock) Now() time.Time          { return time.UnixMicro(c.us.Add(1)).UTC() }
func (c *clock) Advance(d time.Duration) { c.us.Add(d.Microseconds()) }

// driverFor returns the database/sql driver name and a fresh DSN for d, or
// skips.
func driverFor(t testing.TB, d Dialect) (string, string) {
	t.Helper()
	switch d {
	case Postgres:
		// Commits need not wait for the disk here: what is tested is
		// whether they were applied, not whether they survive a crash.
		return "pgx", dbtest.FreshPostgres(t) + "&synchronous_commit=off"
	case MariaDB:
		return "mysql", dbtest.FreshMySQL(t)
	}
	return "sqlite", SQLiteDSN(filepath.Join(t.TempDir(), "tasks.db")) + "&_pragma=synchronous(NORMAL)"
}

// openFaulty opens a fresh database of dialect d whose connections obey plan.
func openFaulty(t testing.TB, d Dialect, plan *faults.Plan) *sql.DB {
	t.Helper()
	name, dsn := driverFor(t, d)
	db, err := faults.Open(name, dsn, plan)
	if err != nil {
		t.Fatalf("open %s: %v", d, err)
	}
	db.SetMaxOpenConns(8)
	t.Cleanup(func() { db.Close() })
	return db
}

// fastPolicy retries quickly, with no budget (the matrix wants every fault
// to be retried; the outage test checks the budget).
func fastPolicy(t testing.TB, d Dialect, timeout time.Duration) *sqlretry.Policy {
	t.Helper()
	p, err := sqlretry.New(sqlretry.Config{
		MaxRetries:     6,
		BaseDelay:      time.Millisecond,
		MaxDelay:       4 * time.Millisecond,
		CommandTimeout: timeout,
		Classifier:     Classifier(d),
		Budget:         sqlretry.NoBudget,
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// newStore opens a migrated store on a fresh database of dialect d.
func newStore(t testing.TB, d Dialect, plan *faults.Plan, o Options) (*Store, *clock) {
	t.Helper()
	db := openFaulty(t, d, plan)
	c := newClock()
	if o.Now == nil {
		o.Now = c.Now
	}
	if o.Policy == nil {
		o.Policy = fastPolicy(t, d, 2*time.Second)
	}
	s, err := New(db, d, o)
	if err != nil {
		t.Fatal(err)
	}
	if plan != nil {
		plan.Disable()
		defer plan.Enable()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("migrate %s: %v", d, err)
	}
	return s, c
}

// reset empties the store's tables.
func reset(t testing.TB, s *Store) {
	t.Helper()
	for _, tbl := range []string{"tasks", "status_audit", "task_runs"} {
		if _, err := s.db.Exec("DELETE FROM " + tbl); err != nil {
			t.Fatalf("reset %s: %v", tbl, err)
		}
	}
}

var dialects = []Dialect{SQLite, Postgres, MariaDB}

func runtimeGosched() { time.Sleep(time.Millisecond) }
