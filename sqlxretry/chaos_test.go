package sqlxretry_test

// The chaos harness: groups of workers run the same deadlock-prone
// transaction — UPDATE one hot row, INSERT a unique value into a ledger,
// UPDATE the other hot row, in opposite orders — while a killer ends a
// random session of the test database every killEvery. Afterwards every
// call's outcome is checked against the ledger. The file is the same in
// gormretry, sqlxretry and entretry (each module tests its own library).

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/internal/dbtest"
	"github.com/sqlretry/sqlretry/mysql"
	"github.com/sqlretry/sqlretry/postgres"
)

// killEvery is how often the killer ends a session.
const killEvery = 150 * time.Millisecond

// chaosDuration is how long each engine's run lasts: short by default,
// 20 s with SQLRETRY_LONG=1 (the README's figures).
func chaosDuration() time.Duration {
	if os.Getenv("SQLRETRY_LONG") != "" {
		return 20 * time.Second
	}
	return 3 * time.Second
}

// engine is one database under test.
type engine struct {
	name, driver, dsn string
	classifier        sqlretry.Classifier
	fencer            sqlretry.Fencer
	victim            string                    // picks one session to kill
	kill              func(id int64) string     // ends it
	q                 func(query string) string // $n placeholders as the engine spells them
	policy            func(t *testing.T) *sqlretry.Policy
}

var dollar = regexp.MustCompile(`\$[0-9]+`)

// engines returns a fresh PostgreSQL database (deadlock_timeout 20 ms) and a
// fresh MariaDB one.
func engines(t *testing.T) []*engine {
	// go-sql-driver logs every connection the killer ends; the test
	// counts them instead.
	_ = gomysql.SetLogger(log.New(io.Discard, "", 0))
	myCfg, err := gomysql.ParseDSN(dbtest.FreshMySQL(t))
	if err != nil {
		t.Fatal(err)
	}
	es := []*engine{{
		name: "PostgreSQL", driver: "pgx", dsn: dbtest.FreshPostgres(t) + "&deadlock_timeout=20ms",
		classifier: postgres.Classifier, fencer: postgres.Fencer,
		victim: "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend' ORDER BY random() LIMIT 1",
		kill:   func(id int64) string { return fmt.Sprintf("SELECT pg_terminate_backend(%d)", id) },
		q:      func(s string) string { return s },
	}, {
		name: "MariaDB", driver: "mysql", dsn: myCfg.FormatDSN(),
		classifier: mysql.Classifier, fencer: mysql.Fencer,
		victim: "SELECT ID FROM information_schema.PROCESSLIST WHERE DB = DATABASE() AND ID <> CONNECTION_ID() AND COMMAND <> 'Killed' ORDER BY RAND() LIMIT 1",
		kill:   func(id int64) string { return fmt.Sprintf("KILL %d", id) },
		q:      func(s string) string { return dollar.ReplaceAllString(s, "?") },
	}}
	for _, e := range es {
		e.policy = func(t *testing.T) *sqlretry.Policy {
			p, err := sqlretry.New(sqlretry.Config{Classifier: e.classifier, Fencer: e.fencer})
			if err != nil {
				t.Fatal(err)
			}
			return p
		}
	}
	return es
}

// schema creates the two hot rows and the ledger; ledger.v is not unique,
// so a transaction applied twice shows as two rows.
func schema(t *testing.T, e *engine) {
	db, err := sql.Open(e.driver, e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, s := range []string{
		"CREATE TABLE k (id INT PRIMARY KEY, n INT NOT NULL)",
		"INSERT INTO k VALUES (1, 0), (2, 0)",
		"CREATE TABLE ledger (v BIGINT NOT NULL, grp VARCHAR(20) NOT NULL)",
		"CREATE INDEX ledger_v ON ledger (v)",
	} {
		if _, err := db.Exec(s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

// Statements of the transaction, in $n form.
const (
	bumpRow     = "UPDATE k SET n = n + 1 WHERE id = $1"
	insertValue = "INSERT INTO ledger (v, grp) VALUES ($1, $2)"
	findValue   = "SELECT 1 FROM ledger WHERE v = $1"
)

// A call runs one transaction that bumps rows first, then second, and
// inserts v into the ledger; attempts counts each run of its body.
type call func(ctx context.Context, v int64, first, second int, attempts *atomic.Int64) error

// group is a set of workers running one way of calling.
type group struct {
	name string
	run  call
}

// outcome is what one call was told.
type outcome struct {
	v   int64
	err error
}

// result is a group's tally, checked against the ledger.
type result struct {
	calls, ok, ambiguous, failed  int
	lost, duplicated, misreported int
	attempts                      int64
	sample                        error // one failure, for the log
}

func (r result) String() string {
	return fmt.Sprintf("%d calls, %d ok, %d ambiguous, %d failed; %d lost, %d duplicated, %d misreported; %d attempts",
		r.calls, r.ok, r.ambiguous, r.failed, r.lost, r.duplicated, r.misreported, r.attempts)
}

// runChaos runs the groups side by side for d under the killer and returns
// each group's result, and the number of sessions killed.
func runChaos(t *testing.T, e *engine, d time.Duration, groups []group) (map[string]*result, int) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var next atomic.Int64
	var mu sync.Mutex
	told := map[string][]outcome{}
	attempts := map[string]*atomic.Int64{}
	var wg sync.WaitGroup
	for _, g := range groups {
		n := new(atomic.Int64)
		attempts[g.name] = n // before the workers start: they read only n
		for _, order := range [][2]int{{1, 2}, {2, 1}} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					v := next.Add(1)
					// Each call has its own deadline past the run's, so a call
					// is never cut short by the end of the run.
					cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
					err := g.run(cctx, v, order[0], order[1], n)
					ccancel()
					mu.Lock()
					told[g.name] = append(told[g.name], outcome{v, err})
					mu.Unlock()
				}
			}()
		}
	}
	kills := killer(ctx, t, e)
	wg.Wait()
	return check(t, e, told, attempts), <-kills
}

// killer ends a random session of e's database every killEvery until ctx
// ends, and then sends how many it ended.
func killer(ctx context.Context, t *testing.T, e *engine) <-chan int {
	out := make(chan int, 1)
	admin, err := sql.Open(e.driver, e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer admin.Close()
		n := 0
		tick := time.NewTicker(killEvery)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				out <- n
				return
			case <-tick.C:
			}
			var id int64
			if err := admin.QueryRow(e.victim).Scan(&id); err != nil {
				continue // no session to kill just now
			}
			if _, err := admin.Exec(e.kill(id)); err == nil {
				n++
			}
		}
	}()
	return out
}

// check counts each value in the ledger and sets every group's result; it
// also checks that each hot row was bumped once per ledger row (a
// transaction applied whole or not at all).
func check(t *testing.T, e *engine, told map[string][]outcome, attempts map[string]*atomic.Int64) map[string]*result {
	db, err := sql.Open(e.driver, e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	count := map[int64]int{}
	rows, err := db.Query("SELECT v, COUNT(*) FROM ledger GROUP BY v")
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for rows.Next() {
		var v int64
		var c int
		if err := rows.Scan(&v, &c); err != nil {
			t.Fatal(err)
		}
		count[v] = c
		total += c
	}
	if err := rows.Close(); err != nil {
		t.Fatal(err)
	}
	var n1, n2 int
	if err := db.QueryRow("SELECT (SELECT n FROM k WHERE id = 1), (SELECT n FROM k WHERE id = 2)").Scan(&n1, &n2); err != nil {
		t.Fatal(err)
	}
	if n1 != total || n2 != total {
		t.Errorf("%s: hot rows bumped %d and %d times, ledger has %d rows: a transaction was applied in part", e.name, n1, n2, total)
	}
	out := map[string]*result{}
	for name, os := range told {
		r := &result{attempts: attempts[name].Load()}
		for _, o := range os {
			tally(r, o, count[o.v])
		}
		out[name] = r
	}
	return out
}

// tally adds one call, told o, whose value the ledger holds c times.
func tally(r *result, o outcome, c int) {
	r.calls++
	switch {
	case o.err == nil:
		r.ok++
		if c == 0 {
			r.lost++
		}
	case errors.Is(o.err, sqlretry.ErrAmbiguous):
		r.ambiguous++
	default:
		r.failed++
		if r.sample == nil {
			r.sample = o.err
		}
		if c > 0 {
			r.misreported++ // told it failed, but it is in the table
		}
	}
	if c > 1 {
		r.duplicated++
	}
}

// assertSafe fails the test if a group lost, duplicated or misreported a
// call, or if it never retried (the run did not exercise it).
func assertSafe(t *testing.T, e *engine, name string, r *result) {
	t.Helper()
	if r == nil || r.calls == 0 {
		t.Fatalf("%s %s: no calls", e.name, name)
	}
	if r.lost+r.duplicated+r.misreported != 0 {
		t.Errorf("%s %s: %v; want 0 lost, 0 duplicated, 0 misreported", e.name, name, r)
	}
	if r.attempts <= int64(r.calls) {
		t.Errorf("%s %s: %d attempts for %d calls: nothing was retried, the run did not exercise the retries", e.name, name, r.attempts, r.calls)
	}
}
