// Package txchaos is the chaos harness that gormretry, sqlxretry and
// entretry each run against their own library: groups of workers run the
// same deadlock-prone transaction — UPDATE one hot row, INSERT a unique
// value into a ledger, UPDATE the other hot row, in opposite orders —
// while a killer ends a random session of the test database every
// KillEvery. Afterwards every call's outcome is checked against the
// ledger. What differs between the modules is only how a call runs its
// transaction, so that is the one parameter: a Call.
//
// It is a package of its own, not a _test.go file, so the three modules
// can share it; it lives under internal/ because only tests should.
package txchaos

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
	_ "github.com/jackc/pgx/v5/stdlib" // Engines opens PostgreSQL as "pgx"

	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/internal/dbtest"
	"github.com/sqlretry/sqlretry/mysql"
	"github.com/sqlretry/sqlretry/postgres"
)

// KillEvery is how often the killer ends a session.
const KillEvery = 150 * time.Millisecond

// Duration is how long each engine's run lasts: short by default,
// 20 s with SQLRETRY_LONG=1 (the README's figures).
func Duration() time.Duration {
	if os.Getenv("SQLRETRY_LONG") != "" {
		return 20 * time.Second
	}
	return 3 * time.Second
}

// Engine is one database under test.
type Engine struct {
	Name, Driver, DSN string
	Classifier        sqlretry.Classifier
	Fencer            sqlretry.Fencer
	Victim            string                    // picks one session to kill
	Kill              func(id int64) string     // ends it
	Q                 func(query string) string // $n placeholders as the engine spells them
}

// Policy returns a fresh policy with e's classifier and fencer.
func (e *Engine) Policy(t *testing.T) *sqlretry.Policy {
	p, err := sqlretry.New(sqlretry.Config{Classifier: e.Classifier, Fencer: e.Fencer})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

var dollar = regexp.MustCompile(`\$[0-9]+`)

// Engines returns a fresh PostgreSQL database (deadlock_timeout 20 ms) and a
// fresh MariaDB one.
func Engines(t *testing.T) []*Engine {
	// go-sql-driver logs every connection the killer ends; the test
	// counts them instead.
	_ = gomysql.SetLogger(log.New(io.Discard, "", 0))
	myCfg, err := gomysql.ParseDSN(dbtest.FreshMySQL(t))
	if err != nil {
		t.Fatal(err)
	}
	return []*Engine{{
		Name: "PostgreSQL", Driver: "pgx", DSN: dbtest.FreshPostgres(t) + "&deadlock_timeout=20ms",
		Classifier: postgres.Classifier, Fencer: postgres.Fencer,
		Victim: "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend' ORDER BY random() LIMIT 1",
		Kill:   func(id int64) string { return fmt.Sprintf("SELECT pg_terminate_backend(%d)", id) },
		Q:      func(s string) string { return s },
	}, {
		Name: "MariaDB", Driver: "mysql", DSN: myCfg.FormatDSN(),
		Classifier: mysql.Classifier, Fencer: mysql.Fencer,
		Victim: "SELECT ID FROM information_schema.PROCESSLIST WHERE DB = DATABASE() AND ID <> CONNECTION_ID() AND COMMAND <> 'Killed' ORDER BY RAND() LIMIT 1",
		Kill:   func(id int64) string { return fmt.Sprintf("KILL %d", id) },
		Q:      func(s string) string { return dollar.ReplaceAllString(s, "?") },
	}}
}

// Schema creates the two hot rows and the ledger; ledger.v is not unique,
// so a transaction applied twice shows as two rows.
func Schema(t *testing.T, e *Engine) {
	db, err := sql.Open(e.Driver, e.DSN)
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
	BumpRow     = "UPDATE k SET n = n + 1 WHERE id = $1"
	InsertValue = "INSERT INTO ledger (v, grp) VALUES ($1, $2)"
	FindValue   = "SELECT 1 FROM ledger WHERE v = $1"
)

// A Call runs one transaction that bumps rows first, then second, and
// inserts v into the ledger; attempts counts each run of its body.
type Call func(ctx context.Context, v int64, first, second int, attempts *atomic.Int64) error

// Group is a set of workers running one way of calling.
type Group struct {
	Name string
	Run  Call
}

// Outcome is what one call was told.
type Outcome struct {
	V   int64
	Err error
}

// Result is a group's tally, checked against the ledger.
type Result struct {
	Calls, OK, Ambiguous, Failed  int
	Lost, Duplicated, Misreported int
	Attempts                      int64
	Sample                        error // one failure, for the log
}

func (r Result) String() string {
	return fmt.Sprintf("%d calls, %d ok, %d ambiguous, %d failed; %d lost, %d duplicated, %d misreported; %d attempts",
		r.Calls, r.OK, r.Ambiguous, r.Failed, r.Lost, r.Duplicated, r.Misreported, r.Attempts)
}

// Run runs the groups side by side for d under the killer and returns
// each group's result, and the number of sessions killed.
func Run(t *testing.T, e *Engine, d time.Duration, groups []Group) (map[string]*Result, int) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var next atomic.Int64
	var mu sync.Mutex
	told := map[string][]Outcome{}
	attempts := map[string]*atomic.Int64{}
	var wg sync.WaitGroup
	for _, g := range groups {
		n := new(atomic.Int64)
		attempts[g.Name] = n // before the workers start: they read only n
		for _, order := range [][2]int{{1, 2}, {2, 1}} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					v := next.Add(1)
					// Each call has its own deadline past the run's, so a call
					// is never cut short by the end of the run.
					cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
					err := g.Run(cctx, v, order[0], order[1], n)
					ccancel()
					mu.Lock()
					told[g.Name] = append(told[g.Name], Outcome{v, err})
					mu.Unlock()
				}
			}()
		}
	}
	kills := Killer(ctx, t, e)
	wg.Wait()
	n := <-kills // the killer has stopped: no kill reaches the check's session
	return check(t, e, told, attempts), n
}

// Killer ends a random session of e's database every KillEvery until ctx
// ends, and then sends how many it ended.
func Killer(ctx context.Context, t *testing.T, e *Engine) <-chan int {
	out := make(chan int, 1)
	admin, err := sql.Open(e.Driver, e.DSN)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer admin.Close()
		n := 0
		tick := time.NewTicker(KillEvery)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				out <- n
				return
			case <-tick.C:
			}
			var id int64
			if err := admin.QueryRow(e.Victim).Scan(&id); err != nil {
				continue // no session to kill just now
			}
			if _, err := admin.Exec(e.Kill(id)); err == nil {
				n++
			}
		}
	}()
	return out
}

// check counts each value in the ledger and sets every group's result; it
// also checks that each hot row was bumped once per ledger row (a
// transaction applied whole or not at all).
func check(t *testing.T, e *Engine, told map[string][]Outcome, attempts map[string]*atomic.Int64) map[string]*Result {
	db, err := sql.Open(e.Driver, e.DSN)
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
		t.Errorf("%s: hot rows bumped %d and %d times, ledger has %d rows: a transaction was applied in part", e.Name, n1, n2, total)
	}
	out := map[string]*Result{}
	for name, os := range told {
		r := &Result{Attempts: attempts[name].Load()}
		for _, o := range os {
			Tally(r, o, count[o.V])
		}
		out[name] = r
	}
	return out
}

// Tally adds one call, told o, whose value the ledger holds c times.
func Tally(r *Result, o Outcome, c int) {
	r.Calls++
	switch {
	case o.Err == nil:
		r.OK++
		if c == 0 {
			r.Lost++
		}
	case errors.Is(o.Err, sqlretry.ErrAmbiguous):
		r.Ambiguous++
	default:
		r.Failed++
		if r.Sample == nil {
			r.Sample = o.Err
		}
		if c > 0 {
			r.Misreported++ // told it failed, but it is in the table
		}
	}
	if c > 1 {
		r.Duplicated++
	}
}

// AssertSafe fails the test if a group lost, duplicated or misreported a
// call, or if it never retried (the run did not exercise it).
func AssertSafe(t *testing.T, e *Engine, name string, r *Result) {
	t.Helper()
	if r == nil || r.Calls == 0 {
		t.Fatalf("%s %s: no calls", e.Name, name)
	}
	if r.Lost+r.Duplicated+r.Misreported != 0 {
		t.Errorf("%s %s: %v; want 0 lost, 0 duplicated, 0 misreported", e.Name, name, r)
	}
	if r.Attempts <= int64(r.Calls) {
		t.Errorf("%s %s: %d attempts for %d calls: nothing was retried, the run did not exercise the retries", e.Name, name, r.Attempts, r.Calls)
	}
}
