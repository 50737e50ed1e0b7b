package sqlretry_test

// Failover tests against real replicated servers (issue 14 §2): concurrent
// callers run RunTx through a pool while the primary stops at once and a
// replica takes over, and every caller's outcome is then checked against
// the new primary. One run per case by default; SQLRETRY_FAILOVER_RUNS=10
// repeats each.

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	sr "github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/internal/dbtest"
	"github.com/sqlretry/sqlretry/mysql"
	"github.com/sqlretry/sqlretry/postgres"
)

// failoverCallers is how many goroutines call RunTx at once.
const failoverCallers = 8

// failoverRuns is how many times each failover case runs:
// SQLRETRY_FAILOVER_RUNS, else 1.
func failoverRuns(t *testing.T) int {
	s := os.Getenv("SQLRETRY_FAILOVER_RUNS")
	if s == "" {
		return 1
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		t.Fatalf("SQLRETRY_FAILOVER_RUNS=%q: want a positive number", s)
	}
	return n
}

// A failoverRig is one failover scenario on one engine, ready to run once.
type failoverRig struct {
	db     *sql.DB // the pool the callers use; it reaches the new primary after failover
	insert string  // one-row INSERT of one parameter, the value
	// failover stops the primary at once and makes the replica the primary
	// the pool reaches. It returns once new transactions commit there.
	failover func(ctx context.Context) error
	// rows counts each value's rows on the new primary.
	rows func(ctx context.Context) (map[int64]int, error)
	// ackedMayBeLost: the replication is asynchronous, so a COMMIT the old
	// primary acknowledged may be missing from the new one: the database's
	// own contract, not a verdict of ours. Counted, not failed.
	ackedMayBeLost bool
}

// failoverCounts are one run's outcomes.
type failoverCounts struct {
	Calls, Success, ByVerdict, Ambiguous, Failed int
	LostAcked                                    int // told success by the old primary's COMMIT, absent (async only)
	Wrong                                        int // a verdict or an outcome the new primary contradicts
	Answers                                      verifierAnswers
	FailedErrs                                   []string // the first few errors of failed calls, for the log
}

func (c *failoverCounts) add(o failoverCounts) {
	c.Calls += o.Calls
	c.Success += o.Success
	c.ByVerdict += o.ByVerdict
	c.Ambiguous += o.Ambiguous
	c.Failed += o.Failed
	c.LostAcked += o.LostAcked
	c.Wrong += o.Wrong
	c.Answers.Applied += o.Answers.Applied
	c.Answers.NotApplied += o.Answers.NotApplied
	c.Answers.Errors += o.Answers.Errors
	c.FailedErrs = append(c.FailedErrs, o.FailedErrs...)
}

func (c failoverCounts) String() string {
	return fmt.Sprintf("%d calls: %d success (%d by a verdict), %d ambiguous, %d failed; %d acknowledged then lost by async replication; %d wrong; verifier answered applied %d, not applied %d, error %d",
		c.Calls, c.Success, c.ByVerdict, c.Ambiguous, c.Failed, c.LostAcked, c.Wrong, c.Answers.Applied, c.Answers.NotApplied, c.Answers.Errors)
}

// verifierAnswers counts what a gatedVerifier's Committed returned.
type verifierAnswers struct{ Applied, NotApplied, Errors int }

// gatedVerifier holds every Committed call until open is closed, so that
// each is asked after the failover and after the new primary handed out
// again the ids of the transactions it lost: the worst moment for a
// verifier that trusts an id. It counts the answers.
type gatedVerifier struct {
	inner                         sr.CommitVerifier
	open                          chan struct{}
	applied, notApplied, failures atomic.Int64
}

func (g *gatedVerifier) Mark(ctx context.Context, tx *sql.Tx) (string, error) {
	return g.inner.Mark(ctx, tx)
}

func (g *gatedVerifier) Committed(ctx context.Context, db *sql.DB, mark string) (bool, error) {
	select {
	case <-g.open:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	ok, err := g.inner.Committed(ctx, db, mark)
	switch {
	case err != nil:
		g.failures.Add(1)
	case ok:
		g.applied.Add(1)
	default:
		g.notApplied.Add(1)
	}
	return ok, err
}

// BeforeTx passes the inner verifier's set-up on (the marker verifiers
// create their table there).
func (g *gatedVerifier) BeforeTx(ctx context.Context, db *sql.DB) error {
	if s, ok := g.inner.(sr.TxSetup); ok {
		return s.BeforeTx(ctx, db)
	}
	return nil
}

func (g *gatedVerifier) answers() verifierAnswers {
	return verifierAnswers{int(g.applied.Load()), int(g.notApplied.Load()), int(g.failures.Load())}
}

// callResult is what one RunTx call was told.
type callResult struct {
	value int64
	err   error
}

// verdicts records, per Op name, the last verdict an Observer saw.
type verdicts struct {
	mu      sync.Mutex
	applied map[string]bool
}

func (v *verdicts) Observe(e sr.Event) {
	if e.Kind != sr.EventVerified {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.applied[e.Op] = e.Applied
}

func (v *verdicts) byVerdict(value int64) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.applied[opName(value)]
}

func opName(value int64) string { return "insert-" + strconv.FormatInt(value, 10) }

// failoverLoad is how long the callers run before the failover, and after
// it on the new primary.
const failoverLoad = 300 * time.Millisecond

// runFailover runs failoverCallers callers, each calling RunTx over and over
// with a one-row INSERT of a value of its own (an Op Write without Verify:
// an unknown COMMIT is settled by v, or ends in ErrAmbiguous when v is nil),
// fails over mid-load, and checks every outcome against the new primary.
func runFailover(t *testing.T, rig failoverRig, v sr.CommitVerifier, classifier sr.Classifier, report func(string, ...any)) failoverCounts {
	t.Helper()
	gate := &gatedVerifier{inner: v, open: make(chan struct{})}
	seen := &verdicts{applied: map[string]bool{}}
	c := sr.Config{Classifier: classifier, Budget: sr.NoBudget, Observer: seen,
		MaxRetries: 100, BaseDelay: 10 * time.Millisecond, MaxDelay: 100 * time.Millisecond, CommandTimeout: 10 * time.Second}
	if v != nil {
		c.CommitVerifier = gate
	}
	p := newPolicy(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var (
		next    atomic.Int64
		stop    = make(chan struct{})
		mu      sync.Mutex
		results []callResult
		wg      sync.WaitGroup
	)
	for range failoverCallers {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				value := next.Add(1)
				err := sr.RunTx(ctx, rig.db, p, sr.Write(opName(value), nil), nil, func(ctx context.Context, tx *sql.Tx) error {
					_, err := tx.ExecContext(ctx, rig.insert, value)
					return err
				})
				mu.Lock()
				results = append(results, callResult{value, err})
				mu.Unlock()
			}
		})
	}
	time.Sleep(failoverLoad) // load only: the outcomes are checked whatever the timing
	err := rig.failover(ctx)
	close(gate.open)
	if err == nil {
		time.Sleep(failoverLoad)
	}
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatalf("failover: %v", err)
	}
	rows, err := rig.rows(ctx)
	if err != nil {
		t.Fatalf("read the new primary: %v", err)
	}
	counts := tally(rig, results, rows, seen, report)
	counts.Answers = gate.answers()
	return counts
}

// tally checks each call's outcome against the rows the new primary holds.
// Each wrong outcome goes to report (t.Errorf), the first 10 of them.
func tally(rig failoverRig, results []callResult, rows map[int64]int, seen *verdicts, report func(string, ...any)) failoverCounts {
	var c failoverCounts
	wrong := func(r callResult, n int, what string) {
		c.Wrong++
		if c.Wrong <= 10 {
			report("value %d: %s (%d rows on the new primary; error %v)", r.value, what, n, r.err)
		}
	}
	for _, r := range results {
		c.Calls++
		n := rows[r.value]
		switch {
		case r.err == nil:
			c.Success++
			byVerdict := seen.byVerdict(r.value)
			if byVerdict {
				c.ByVerdict++
			}
			if n == 0 && !byVerdict && rig.ackedMayBeLost {
				c.LostAcked++
			} else if n == 0 {
				wrong(r, n, fmt.Sprintf("told success (by a verdict: %v), row absent", byVerdict))
			}
		case errors.Is(r.err, sr.ErrAmbiguous):
			c.Ambiguous++
		default:
			c.Failed++
			if len(c.FailedErrs) < 3 {
				c.FailedErrs = append(c.FailedErrs, r.err.Error())
			}
			if n > 0 {
				wrong(r, n, "told it failed, row present")
			}
		}
		if n > 1 {
			wrong(r, n, "applied more than once")
		}
	}
	return c
}

// failoverCase names a verifier for a failover test; make builds a fresh
// one for each run.
type failoverCase struct {
	name string
	make func() sr.CommitVerifier
	// control: a verifier known to be wrong, run to show the test sees it
	// (SQLRETRY_FAILOVER_CONTROL=1): its wrong outcomes are logged, not
	// failed.
	control bool
}

// runFailoverCase runs one case failoverRuns times, each on a new rig,
// logs the counts of each run and their sum, and fails on any wrong outcome
// (and, with synchronous replication, on any acknowledged COMMIT lost).
func runFailoverCase(t *testing.T, tc failoverCase, newRig func(t *testing.T) failoverRig, classifier sr.Classifier) {
	if tc.control && os.Getenv("SQLRETRY_FAILOVER_CONTROL") != "1" {
		t.Skip("a control case: SQLRETRY_FAILOVER_CONTROL=1 runs it")
	}
	report := t.Errorf
	if tc.control {
		report = t.Logf
	}
	var total failoverCounts
	runs := failoverRuns(t)
	for i := range runs {
		var c failoverCounts
		t.Run(fmt.Sprintf("run%d", i+1), func(t *testing.T) {
			rig := newRig(t)
			c = runFailover(t, rig, tc.make(), classifier, report)
			t.Logf("%s: %v", tc.name, c)
			for _, e := range c.FailedErrs {
				t.Logf("a failed call: %s", e)
			}
			if !rig.ackedMayBeLost && c.LostAcked > 0 {
				report("%d COMMITs acknowledged under synchronous replication are missing from the new primary", c.LostAcked)
			}
		})
		total.add(c)
	}
	t.Logf("%s, %d runs: %v", tc.name, runs, total)
}

// pgMode is how the standby follows the primary in a failover test.
type pgMode struct {
	sync bool // synchronous replication: a COMMIT returns once the standby has the WAL
	// lag stops the standby's WAL receiver mid-load: it falls behind, and
	// in synchronous mode every COMMIT then waits for it.
	lag bool
}

// pgFailoverRig starts a PostgreSQL primary and standby, and returns a rig
// whose pool is a multi-host DSN (target_session_attrs=read-write) over
// both. Its failover (after stopping the standby's WAL receiver, with
// mode.lag) stops the primary with -m immediate, promotes the standby, and
// commits new transactions there until they have taken every id the old
// primary had handed out: the ids of the transactions the standby never
// received are handed out again.
func pgFailoverRig(t *testing.T, mode pgMode) failoverRig {
	r := dbtest.StartPostgresReplica(t, dbtest.ReplicaOptions{Sync: mode.sync})
	primary := openDB(t, "pgx", r.Primary.DSN())
	mustExec(t, primary, "CREATE TABLE f (v bigint)") // no key: a second row of a value shows
	if err := r.WaitStreaming(context.Background()); err != nil {
		t.Fatal(err)
	}
	db := openDB(t, "pgx", r.MultiHostDSN())
	failover := func(ctx context.Context) error {
		if mode.lag {
			if err := r.StopReceiving(ctx); err != nil {
				return err
			}
			time.Sleep(failoverLoad / 3) // load against a standby that does not follow
		}
		var last int64
		if err := primary.QueryRowContext(ctx, "SELECT pg_current_xact_id()::text::bigint").Scan(&last); err != nil {
			return err
		}
		if err := r.Primary.StopImmediate(); err != nil {
			return err
		}
		if err := r.Promote(ctx); err != nil {
			return err
		}
		// The callers in flight took a few more ids after last.
		return takeXids(ctx, r.Standby.DSN(), last+4*failoverCallers)
	}
	rows := func(ctx context.Context) (map[int64]int, error) {
		return countValues(ctx, db, "SELECT v, count(*) FROM f GROUP BY v")
	}
	return failoverRig{db: db, insert: "INSERT INTO f (v) VALUES ($1)", failover: failover, rows: rows, ackedMayBeLost: !mode.sync}
}

// takeXids commits transactions on dsn until one takes an id of at least
// upto.
func takeXids(ctx context.Context, dsn string, upto int64) error {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	for {
		var got int64
		if err := db.QueryRowContext(ctx, "SELECT pg_current_xact_id()::text::bigint").Scan(&got); err != nil {
			return err
		}
		if got >= upto {
			return nil
		}
	}
}

// countValues runs q, which returns (value, count) rows.
func countValues(ctx context.Context, db *sql.DB, q string) (map[int64]int, error) {
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[int64]int{}
	for rows.Next() {
		var v int64
		var n int
		if err := rows.Scan(&v, &n); err != nil {
			return nil, err
		}
		out[v] = n
	}
	return out, rows.Err()
}

// openDB opens a pool closed at cleanup.
func openDB(t *testing.T, driverName, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open(driverName, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// pgFailoverCases are the PostgreSQL verifiers under test.
var pgFailoverCases = []failoverCase{
	{"pg_xact_status", func() sr.CommitVerifier { return postgres.CommitVerifier{} }, false},
	{"marker", func() sr.CommitVerifier { return &postgres.MarkerVerifier{CreateTable: true} }, false},
	{"pg_xact_status, then marker", func() sr.CommitVerifier {
		return sr.Verifiers(postgres.CommitVerifier{}, &postgres.MarkerVerifier{CreateTable: true})
	}, false},
	{"control: pg_xact_status trusting the id alone", func() sr.CommitVerifier { return idOnlyVerifier{} }, true},
}

// idOnlyVerifier is the verifier of issue 14's report: it trusts a
// transaction id wherever it is asked, so a promoted standby that handed
// the id out again answers for another transaction.
type idOnlyVerifier struct{}

func (idOnlyVerifier) Mark(ctx context.Context, tx *sql.Tx) (string, error) {
	var xid string
	err := tx.QueryRowContext(ctx, "SELECT pg_current_xact_id()::text").Scan(&xid)
	return xid, err
}

func (idOnlyVerifier) Committed(ctx context.Context, db *sql.DB, mark string) (bool, error) {
	var status sql.NullString
	if err := db.QueryRowContext(ctx, "SELECT pg_xact_status($1::text::xid8)", mark).Scan(&status); err != nil {
		return false, err
	}
	switch status.String {
	case "committed":
		return true, nil
	case "aborted":
		return false, nil
	}
	return false, fmt.Errorf("pg_xact_status: %q", status.String)
}

func testFailoverPostgres(t *testing.T, mode pgMode) {
	for _, tc := range pgFailoverCases {
		t.Run(tc.name, func(t *testing.T) {
			runFailoverCase(t, tc, func(t *testing.T) failoverRig { return pgFailoverRig(t, mode) }, postgres.Classifier)
		})
	}
}

// TestFailoverPostgresAsync: a standby streaming asynchronously, as fast as
// it can, promoted under load.
func TestFailoverPostgresAsync(t *testing.T) { testFailoverPostgres(t, pgMode{}) }

// TestFailoverPostgresAsyncLagging: an asynchronous standby that stopped
// receiving mid-load, so the transactions of the last moments are lost and
// their ids handed out again by the promoted standby.
func TestFailoverPostgresAsyncLagging(t *testing.T) { testFailoverPostgres(t, pgMode{lag: true}) }

// TestFailoverPostgresSync: a synchronous standby that stopped receiving:
// every COMMIT waits for it when the primary stops.
func TestFailoverPostgresSync(t *testing.T) { testFailoverPostgres(t, pgMode{sync: true, lag: true}) }

// TestFailoverPostgresSyncStreaming: a synchronous standby that follows: a
// COMMIT in flight when the primary stops may be on the standby already,
// its reply lost: the verdict "applied" is the one at stake.
func TestFailoverPostgresSyncStreaming(t *testing.T) { testFailoverPostgres(t, pgMode{sync: true}) }

// switchConnector dials whichever server it points at now: the test points
// it at the replica once that is promoted, as a proxy or a DNS name would
// move a pool.
type switchConnector struct {
	cur atomic.Value // driver.Connector
}

func (s *switchConnector) Connect(ctx context.Context) (driver.Conn, error) {
	return s.cur.Load().(driver.Connector).Connect(ctx)
}

func (s *switchConnector) Driver() driver.Driver { return s.cur.Load().(driver.Connector).Driver() }

func (s *switchConnector) point(t *testing.T, dsn string) {
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	c, err := gomysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.cur.Store(c)
}

// myMode is how the replica follows the primary in a failover test.
type myMode struct {
	semiSync bool // a COMMIT returns once the replica has it in its relay log
	lag      bool // the replica's I/O thread stops mid-load
}

// myFailoverRig starts a MariaDB primary and GTID replica, and returns a
// rig whose pool dials the primary until the failover kills it (SIGKILL:
// MariaDB has no immediate stop), promotes the replica once it applied what
// it received (STOP SLAVE, RESET SLAVE ALL) and points the pool at it.
func myFailoverRig(t *testing.T, mode myMode) failoverRig {
	r := dbtest.StartMariaDBReplica(t, dbtest.MariaDBReplicaOptions{SemiSync: mode.semiSync})
	sc := &switchConnector{}
	sc.point(t, r.Primary.DSN())
	db := sql.OpenDB(sc)
	t.Cleanup(func() { db.Close() })
	mustExec(t, db, "CREATE TABLE f (v bigint)") // no key: a second row of a value shows
	failover := func(ctx context.Context) error {
		if mode.lag {
			if err := r.StopReceiving(ctx); err != nil {
				return err
			}
			time.Sleep(failoverLoad / 3) // load against a replica that does not follow
		}
		if err := r.Primary.Kill(); err != nil {
			return err
		}
		if err := r.Promote(ctx); err != nil {
			return err
		}
		sc.point(t, r.Replica.DSN())
		return nil
	}
	rows := func(ctx context.Context) (map[int64]int, error) {
		return countValues(ctx, db, "SELECT v, count(*) FROM f GROUP BY v")
	}
	return failoverRig{db: db, insert: "INSERT INTO f (v) VALUES (?)", failover: failover, rows: rows, ackedMayBeLost: !mode.semiSync}
}

// myFailoverCases are the MariaDB verifiers under test: none (an unknown
// COMMIT ends in ErrAmbiguous) and the marker.
var myFailoverCases = []failoverCase{
	{"no verifier", func() sr.CommitVerifier { return nil }, false},
	{"marker", func() sr.CommitVerifier { return &mysql.MarkerVerifier{CreateTable: true} }, false},
}

func testFailoverMariaDB(t *testing.T, mode myMode) {
	for _, tc := range myFailoverCases {
		t.Run(tc.name, func(t *testing.T) {
			runFailoverCase(t, tc, func(t *testing.T) failoverRig { return myFailoverRig(t, mode) }, mysql.Classifier)
		})
	}
}

// TestFailoverMariaDBAsync: a replica following asynchronously, promoted
// under load.
func TestFailoverMariaDBAsync(t *testing.T) { testFailoverMariaDB(t, myMode{}) }

// TestFailoverMariaDBAsyncLagging: an asynchronous replica that stopped
// receiving mid-load.
func TestFailoverMariaDBAsyncLagging(t *testing.T) { testFailoverMariaDB(t, myMode{lag: true}) }

// TestFailoverMariaDBSemiSync: a semi-synchronous replica that stopped
// receiving: every COMMIT waits for it when the primary dies.
func TestFailoverMariaDBSemiSync(t *testing.T) {
	testFailoverMariaDB(t, myMode{semiSync: true, lag: true})
}

// TestFailoverMariaDBSemiSyncStreaming: a semi-synchronous replica that
// follows: a COMMIT in flight when the primary dies may be in its relay log
// already.
func TestFailoverMariaDBSemiSyncStreaming(t *testing.T) {
	testFailoverMariaDB(t, myMode{semiSync: true})
}

// pgCrashRig is a single throwaway PostgreSQL server whose "failover" is a
// crash and restart on the same timeline (issue 14 §4): stop -m immediate
// loses the WAL not yet written out, crash recovery hands out again the ids
// that only the lost WAL named, and new transactions take them before any
// verifier answers. No COMMIT that was acknowledged is lost
// (synchronous_commit is on, and an immediate stop keeps what was written).
func pgCrashRig(t *testing.T) failoverRig {
	srv := dbtest.StartPostgres(t)
	db := openDB(t, "pgx", srv.DSN())
	mustExec(t, db, "CREATE TABLE f (v bigint)")
	failover := func(ctx context.Context) error {
		var last int64
		if err := db.QueryRowContext(ctx, "SELECT pg_current_xact_id()::text::bigint").Scan(&last); err != nil {
			return err
		}
		if err := srv.StopImmediate(); err != nil {
			return err
		}
		if err := srv.Start(); err != nil {
			return err
		}
		return takeXids(ctx, srv.DSN(), last+4*failoverCallers)
	}
	rows := func(ctx context.Context) (map[int64]int, error) {
		return countValues(ctx, db, "SELECT v, count(*) FROM f GROUP BY v")
	}
	return failoverRig{db: db, insert: "INSERT INTO f (v) VALUES ($1)", failover: failover, rows: rows}
}

// TestCrashRestartPostgres: the callers run while the server crashes and
// restarts on the same timeline, with each PostgreSQL verifier (and, as
// controls, the verifiers: the id alone, the id and timeline).
func TestCrashRestartPostgres(t *testing.T) {
	cases := append(slices.Clone(pgFailoverCases),
		failoverCase{"control: pg_xact_status checking the timeline alone", func() sr.CommitVerifier { return timelineOnlyVerifier{} }, true})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			runFailoverCase(t, tc, pgCrashRig, postgres.Classifier)
		})
	}
}

// timelineOnlyVerifier is postgres.CommitVerifier before issue 14 §4: it
// checks that the server is on the timeline the id was taken on, which a
// crash and restart does not change.
type timelineOnlyVerifier struct{}

const timelineOnly = "substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8)"

func (timelineOnlyVerifier) Mark(ctx context.Context, tx *sql.Tx) (string, error) {
	var mark string
	err := tx.QueryRowContext(ctx, "SELECT pg_current_xact_id()::text || '@' || "+timelineOnly).Scan(&mark)
	return mark, err
}

func (timelineOnlyVerifier) Committed(ctx context.Context, db *sql.DB, mark string) (bool, error) {
	xid, timeline, _ := strings.Cut(mark, "@")
	var now string
	if err := db.QueryRowContext(ctx, "SELECT "+timelineOnly).Scan(&now); err != nil {
		return false, err
	}
	if now != timeline {
		return false, postgres.ErrHistoryChanged
	}
	return idOnlyVerifier{}.Committed(ctx, db, xid)
}
