package postgres_test

// Integration tests: each provokes a real PostgreSQL error with a real driver
// (pgx through database/sql, native pgx, lib/pq) and checks how the
// classifier reads it. They use the shared server (a fresh database per test)
// or a throwaway server from internal/dbtest, and skip when neither is there
// (fail with SQLRETRY_REQUIRE_DB=1).

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib"
	_ "github.com/lib/pq"

	sr "github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/internal/dbtest"
	"github.com/sqlretry/sqlretry/postgres"
)

// opTimeout bounds every single database call in these tests.
const opTimeout = 15 * time.Second

// session is one database connection, whatever the driver.
type session interface {
	exec(ctx context.Context, q string) error
	queryInt(ctx context.Context, q string) (int64, error)
	close()
}

// pgDriver is a driver and the classifier meant for it.
type pgDriver struct {
	name     string
	classify func(error) sr.Class
	connect  func(ctx context.Context, dsn string) (session, error)
	// pool opens a pool for load tests.
	pool func(dsn string) (pooled, error)
}

type pooled interface {
	exec(ctx context.Context, q string, args ...any) error
	close()
}

var pgDrivers = []pgDriver{
	{"pgx-stdlib", postgres.Classify, sqlConnect("pgx"), sqlPool("pgx")},
	{"pgx-native", postgres.Classify, pgxConnect, pgxPool},
	{"lib-pq", postgres.ClassifyLibPQ, sqlConnect("postgres"), sqlPool("postgres")},
}

// sqlSession is a connection pinned from a database/sql pool.
type sqlSession struct {
	db   *sql.DB
	conn *sql.Conn
}

func sqlConnect(driverName string) func(ctx context.Context, dsn string) (session, error) {
	return func(ctx context.Context, dsn string) (session, error) {
		db, err := sql.Open(driverName, dsn)
		if err != nil {
			return nil, err
		}
		conn, err := db.Conn(ctx)
		if err != nil {
			db.Close()
			return nil, err
		}
		return &sqlSession{db, conn}, nil
	}
}

func (s *sqlSession) exec(ctx context.Context, q string) error {
	_, err := s.conn.ExecContext(ctx, q)
	return err
}

func (s *sqlSession) queryInt(ctx context.Context, q string) (int64, error) {
	var n int64
	err := s.conn.QueryRowContext(ctx, q).Scan(&n)
	return n, err
}

func (s *sqlSession) close() { s.conn.Close(); s.db.Close() }

// pgxSession is a native pgx connection.
type pgxSession struct{ conn *pgx.Conn }

func pgxConnect(ctx context.Context, dsn string) (session, error) {
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, err
	}
	return &pgxSession{c}, nil
}

func (s *pgxSession) exec(ctx context.Context, q string) error {
	_, err := s.conn.Exec(ctx, q)
	return err
}

func (s *pgxSession) queryInt(ctx context.Context, q string) (int64, error) {
	var n int64
	err := s.conn.QueryRow(ctx, q).Scan(&n)
	return n, err
}

func (s *pgxSession) close() {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	s.conn.Close(ctx)
}

type sqlPooled struct{ db *sql.DB }

func sqlPool(driverName string) func(dsn string) (pooled, error) {
	return func(dsn string) (pooled, error) {
		db, err := sql.Open(driverName, dsn)
		if err != nil {
			return nil, err
		}
		db.SetMaxOpenConns(2)
		return sqlPooled{db}, nil
	}
}

func (p sqlPooled) exec(ctx context.Context, q string, args ...any) error {
	_, err := p.db.ExecContext(ctx, q, args...)
	return err
}

func (p sqlPooled) close() { p.db.Close() }

// pgxPooled is one native pgx connection, reconnected when it breaks: the
// shape of code that holds a *pgx.Conn.
type pgxPooled struct {
	dsn  string
	conn *pgx.Conn
}

func pgxPool(dsn string) (pooled, error) { return &pgxPooled{dsn: dsn}, nil }

func (p *pgxPooled) exec(ctx context.Context, q string, args ...any) error {
	if p.conn == nil || p.conn.IsClosed() {
		c, err := pgx.Connect(ctx, p.dsn)
		if err != nil {
			return err
		}
		p.conn = c
	}
	_, err := p.conn.Exec(ctx, q, args...)
	return err
}

func (p *pgxPooled) close() {
	if p.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		p.conn.Close(ctx)
	}
}

// want is the expected verdict.
type want struct {
	retryable bool
	phase     sr.Phase
	code      string
}

func (w want) String() string {
	return fmt.Sprintf("{Retryable:%v Phase:%v Code:%q}", w.retryable, w.phase, w.code)
}

// checkClass classifies err and compares it with the wanted verdicts (any
// one of them matches); it logs the real error text in every case, so that
// -v shows what the server and driver said.
func checkClass(t *testing.T, d pgDriver, what string, err error, ws ...want) {
	t.Helper()
	if err == nil {
		t.Errorf("%s with %s: got no error, want %v", what, d.name, ws)
		return
	}
	c := d.classify(err)
	t.Logf("%s with %s: %T %q -> Retryable=%v Phase=%v Code=%q", what, d.name, err, err.Error(), c.Retryable, c.Phase, c.Code)
	for _, w := range ws {
		if c.Retryable == w.retryable && c.Phase == w.phase && c.Code == w.code {
			return
		}
	}
	t.Errorf("%s with %s: error %q classified {Retryable:%v Phase:%v Code:%q}, want one of %v",
		what, d.name, err, c.Retryable, c.Phase, c.Code, ws)
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	t.Cleanup(cancel)
	return ctx
}

func connect(t *testing.T, d pgDriver, dsn string) session {
	t.Helper()
	s, err := d.connect(ctxT(t), dsn)
	if err != nil {
		t.Fatalf("connect with %s: %v", d.name, err)
	}
	t.Cleanup(s.close)
	return s
}

func mustExec(t *testing.T, s session, qs ...string) {
	t.Helper()
	for _, q := range qs {
		if err := s.exec(ctxT(t), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// admin is a pgx database/sql pool used to watch the server (pg_locks,
// pg_stat_activity) and to terminate backends.
func admin(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// waitFor polls cond every 5 ms until it is true, failing the test after
// 10 s or 2000 polls.
func waitFor(t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; i < 2000; i++ {
		ok, err := cond()
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("gave up waiting for %s", what)
}

// waitBlocked waits until backend pid waits for a lock.
func waitBlocked(t *testing.T, adm *sql.DB, pid int64) {
	t.Helper()
	waitFor(t, fmt.Sprintf("backend %d to wait for a lock", pid), func() (bool, error) {
		var n int
		err := adm.QueryRowContext(ctxT(t), "SELECT count(*) FROM pg_locks WHERE pid = $1 AND NOT granted", pid).Scan(&n)
		return n > 0, err
	})
}

// waitErr receives from ch, failing the test after opTimeout.
func waitErr(t *testing.T, what string, ch <-chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(opTimeout + 5*time.Second):
		t.Fatalf("%s did not return", what)
		return nil
	}
}

func pid(t *testing.T, s session) int64 {
	t.Helper()
	n, err := s.queryInt(ctxT(t), "SELECT pg_backend_pid()")
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// forEachDriver runs f for each driver in a subtest, on the database dsn.
// Each run gets its own table, whose name f receives, holding (id int
// primary key, v int) rows 1 and 2.
func forEachDriver(t *testing.T, dsn string, f func(t *testing.T, d pgDriver, dsn, tbl string)) {
	scenario := strings.ReplaceAll(t.Name()[strings.LastIndex(t.Name(), "/")+1:], "-", "_")
	for _, d := range pgDrivers {
		t.Run(d.name, func(t *testing.T) {
			tbl := scenario + "_" + strings.ReplaceAll(d.name, "-", "_")
			s := connect(t, d, dsn)
			mustExec(t, s, "CREATE TABLE "+tbl+" (id int PRIMARY KEY, v int NOT NULL)", "INSERT INTO "+tbl+" VALUES (1, 0), (2, 0)")
			s.close()
			f(t, d, dsn, tbl)
		})
	}
}

// TestIntegration runs the scenarios that need only the shared server, all
// in one fresh database (creating and dropping a database costs about a
// second each on the shared server).
func TestIntegration(t *testing.T) {
	dsn := dbtest.FreshPostgres(t)
	for _, sc := range []struct {
		name string
		run  func(t *testing.T, dsn string)
	}{
		{"deadlock", testDeadlock},
		{"serialization-failure", testSerializationFailure},
		{"lock-not-available", testLockNotAvailable},
		{"statement-timeout", testStatementTimeout},
		{"terminate-backend", testTerminateBackend},
		{"permanent", testPermanent},
	} {
		t.Run(sc.name, func(t *testing.T) { sc.run(t, dsn) })
	}
}

// testDeadlock: A locks row 1, B locks row 2, A waits for row 2,
// B asks for row 1. B's deadlock_timeout is short and A's long, so B is
// the one the server picks as the victim: 40P01, not applied.
func testDeadlock(t *testing.T, dsn string) {
	forEachDriver(t, dsn, func(t *testing.T, d pgDriver, dsn, tbl string) {
		a, b, adm := connect(t, d, dsn), connect(t, d, dsn), admin(t, dsn)
		mustExec(t, a, "SET deadlock_timeout = '60s'", "BEGIN", "UPDATE "+tbl+" SET v = v + 1 WHERE id = 1")
		mustExec(t, b, "SET deadlock_timeout = '20ms'", "BEGIN", "UPDATE "+tbl+" SET v = v + 1 WHERE id = 2")
		aPid := pid(t, a)
		aDone := make(chan error, 1)
		go func() { aDone <- a.exec(ctxT(t), "UPDATE "+tbl+" SET v = v + 1 WHERE id = 2") }()
		waitBlocked(t, adm, aPid)
		err := b.exec(ctxT(t), "UPDATE "+tbl+" SET v = v + 1 WHERE id = 1")
		checkClass(t, d, "deadlock victim", err, want{true, sr.NotApplied, "40P01"})
		if err := waitErr(t, "A's update", aDone); err != nil {
			t.Errorf("the surviving transaction's update: got %v, want success once the victim rolled back", err)
		}
		mustExec(t, a, "COMMIT")
		mustExec(t, b, "ROLLBACK")
	})
}

// testSerializationFailure provokes 40001 twice under
// SERIALIZABLE: a concurrent update of a row the transaction then updates,
// and write skew found at COMMIT.
func testSerializationFailure(t *testing.T, dsn string) {
	forEachDriver(t, dsn, func(t *testing.T, d pgDriver, dsn, tbl string) {
		t.Run("concurrent-update", func(t *testing.T) {
			a, b := connect(t, d, dsn), connect(t, d, dsn)
			mustExec(t, a, "BEGIN ISOLATION LEVEL SERIALIZABLE", "SELECT v FROM "+tbl+" WHERE id = 1")
			mustExec(t, b, "UPDATE "+tbl+" SET v = v + 10 WHERE id = 1")
			err := a.exec(ctxT(t), "UPDATE "+tbl+" SET v = v + 1 WHERE id = 1")
			checkClass(t, d, "update after a concurrent update", err, want{true, sr.NotApplied, "40001"})
			mustExec(t, a, "ROLLBACK")
		})
		t.Run("write-skew-at-commit", func(t *testing.T) {
			a, b := connect(t, d, dsn), connect(t, d, dsn)
			mustExec(t, a, "BEGIN ISOLATION LEVEL SERIALIZABLE", "SELECT sum(v) FROM "+tbl)
			mustExec(t, b, "BEGIN ISOLATION LEVEL SERIALIZABLE", "SELECT sum(v) FROM "+tbl)
			mustExec(t, a, "UPDATE "+tbl+" SET v = v + 1 WHERE id = 1")
			mustExec(t, b, "UPDATE "+tbl+" SET v = v + 1 WHERE id = 2")
			mustExec(t, a, "COMMIT")
			err := b.exec(ctxT(t), "COMMIT")
			checkClass(t, d, "COMMIT of the second of two skewed transactions", err, want{true, sr.NotApplied, "40001"})
		})
	})
}

// testLockNotAvailable: lock_timeout and NOWAIT both give 55P03.
func testLockNotAvailable(t *testing.T, dsn string) {
	forEachDriver(t, dsn, func(t *testing.T, d pgDriver, dsn, tbl string) {
		holder, b := connect(t, d, dsn), connect(t, d, dsn)
		mustExec(t, holder, "BEGIN", "UPDATE "+tbl+" SET v = v + 1 WHERE id = 1")
		mustExec(t, b, "SET lock_timeout = '50ms'")
		err := b.exec(ctxT(t), "UPDATE "+tbl+" SET v = v + 1 WHERE id = 1")
		checkClass(t, d, "lock_timeout", err, want{true, sr.NotApplied, "55P03"})
		mustExec(t, b, "SET lock_timeout = 0")
		err = b.exec(ctxT(t), "SELECT v FROM "+tbl+" WHERE id = 1 FOR UPDATE NOWAIT")
		checkClass(t, d, "FOR UPDATE NOWAIT", err, want{true, sr.NotApplied, "55P03"})
		mustExec(t, holder, "ROLLBACK")
	})
}

// testStatementTimeout: statement_timeout gives 57014, which the
// classifier deliberately does not retry (doc.go, "query_canceled").
func testStatementTimeout(t *testing.T, dsn string) {
	forEachDriver(t, dsn, func(t *testing.T, d pgDriver, dsn, tbl string) {
		s := connect(t, d, dsn)
		mustExec(t, s, "SET statement_timeout = '50ms'")
		err := s.exec(ctxT(t), "SELECT pg_sleep(30)")
		checkClass(t, d, "statement_timeout", err, want{false, sr.NotApplied, "57014"})
	})
}

// testTerminateBackend ends a busy and an idle session with
// pg_terminate_backend and classifies what the session's own call and its
// next call report.
func testTerminateBackend(t *testing.T, dsn string) {
	// What each driver reports. A session killed while idle has sent the
	// client a FATAL 57P01 and closed its socket: the client's next write
	// draws a reset, so its read returns either the FATAL or ECONNRESET.
	// lib/pq turns the FATAL into driver.ErrBadConn, which LibPQClassifier
	// reads as unknown, and then database/sql closes the *sql.Conn, so the
	// call after that gets sql.ErrConnDone.
	type wants struct{ busy, busyNext, idle, idleNext []want }
	reset := want{true, sr.Unknown, "conn-reset"}
	connDone := want{false, sr.NotSent, "client-state"}
	byDriver := map[string]wants{
		"pgx-stdlib": {
			busy:     []want{{true, sr.NotApplied, "57P01"}},
			busyNext: []want{{true, sr.NotSent, "bad-conn"}},
			idle:     []want{{true, sr.NotApplied, "57P01"}, reset},
			idleNext: []want{{true, sr.NotSent, "bad-conn"}},
		},
		"pgx-native": {
			busy:     []want{{true, sr.NotApplied, "57P01"}},
			busyNext: []want{{true, sr.NotSent, "safe-to-retry"}},
			idle:     []want{{true, sr.NotApplied, "57P01"}, reset},
			idleNext: []want{{true, sr.NotSent, "safe-to-retry"}},
		},
		"lib-pq": {
			busy:     []want{{true, sr.Unknown, "bad-conn"}},
			busyNext: []want{connDone},
			idle:     []want{{true, sr.Unknown, "bad-conn"}, reset},
			idleNext: []want{{true, sr.Unknown, "bad-conn"}, connDone},
		},
	}
	forEachDriver(t, dsn, func(t *testing.T, d pgDriver, dsn, tbl string) {
		w := byDriver[d.name]
		adm := admin(t, dsn)
		terminate := func(pid int64) {
			t.Helper()
			var ok bool
			if err := adm.QueryRowContext(ctxT(t), "SELECT pg_terminate_backend($1)", pid).Scan(&ok); err != nil || !ok {
				t.Fatalf("pg_terminate_backend(%d) = %v, %v; want true", pid, ok, err)
			}
		}
		t.Run("busy", func(t *testing.T) {
			s := connect(t, d, dsn)
			p := pid(t, s)
			done := make(chan error, 1)
			go func() { done <- s.exec(ctxT(t), "SELECT pg_sleep(30)") }()
			waitFor(t, "pg_sleep to run", func() (bool, error) {
				var n int
				err := adm.QueryRowContext(ctxT(t), "SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND state = 'active' AND wait_event = 'PgSleep'", p).Scan(&n)
				return n == 1, err
			})
			terminate(p)
			checkClass(t, d, "busy session terminated", waitErr(t, "pg_sleep", done), w.busy...)
			_, err := s.queryInt(ctxT(t), "SELECT 1")
			checkClass(t, d, "next call on the terminated busy session", err, w.busyNext...)
		})
		t.Run("idle", func(t *testing.T) {
			s := connect(t, d, dsn)
			p := pid(t, s)
			terminate(p)
			waitFor(t, "the backend to exit", func() (bool, error) {
				var n int
				err := adm.QueryRowContext(ctxT(t), "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", p).Scan(&n)
				return n == 0, err
			})
			_, err := s.queryInt(ctxT(t), "SELECT 1")
			checkClass(t, d, "first call on the terminated idle session", err, w.idle...)
			_, err = s.queryInt(ctxT(t), "SELECT 1")
			checkClass(t, d, "second call on the terminated idle session", err, w.idleNext...)
		})
	})
}

// testPermanent: syntax, unique violation, missing table,
// permission denied, unknown database and unknown role are not retried.
func testPermanent(t *testing.T, dsn string) {
	forEachDriver(t, dsn, func(t *testing.T, d pgDriver, dsn, tbl string) {
		s := connect(t, d, dsn)
		role := "sqlretry_noperm_" + randHex(t)
		mustExec(t, s, "CREATE ROLE "+role+" NOLOGIN")
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
			defer cancel()
			if _, err := admin(t, dbtest.PostgresDSN(t)).ExecContext(ctx, "DROP ROLE IF EXISTS "+role); err != nil {
				t.Errorf("drop role %s: %v", role, err)
			}
		})
		for _, tc := range []struct {
			what, q string
			w       want
		}{
			{"syntax error", "SELEC 1", want{false, sr.NotApplied, "42601"}},
			{"unique violation", "INSERT INTO " + tbl + " VALUES (1, 0)", want{false, sr.NotApplied, "23505"}},
			{"missing table", "SELECT * FROM no_such_table", want{false, sr.NotApplied, "42P01"}},
			{"division by zero", "SELECT 1/0", want{false, sr.NotApplied, "22012"}},
		} {
			checkClass(t, d, tc.what, s.exec(ctxT(t), tc.q), tc.w)
		}
		mustExec(t, s, "SET ROLE "+role)
		checkClass(t, d, "permission denied", s.exec(ctxT(t), "SELECT * FROM "+tbl), want{false, sr.NotApplied, "42501"})
		mustExec(t, s, "RESET ROLE")

		// At connect pgx wraps the refusal in a *pgconn.ConnectError: not
		// sent. lib/pq's bare *pq.Error keeps the table's phase.
		unknownDB := want{false, sr.NotSent, "3D000"}
		if d.name == "lib-pq" {
			unknownDB.phase = sr.NotApplied
		}
		for _, tc := range []struct {
			what, dsn string
			w         want
		}{
			{"unknown database", replaceDB(t, dsn, "sqlretry_no_such_db"), unknownDB},
			{"unknown role", strings.Replace(replaceDB(t, dsn, "test"), "postgres@", "sqlretry_no_such_role@", 1), want{false, sr.NotSent, "28000"}},
		} {
			s, err := d.connect(ctxT(t), tc.dsn)
			if err == nil {
				// database/sql and lib/pq connect lazily: the first call fails.
				_, err = s.queryInt(ctxT(t), "SELECT 1")
				s.close()
			}
			checkClass(t, d, tc.what, err, tc.w)
		}
	})
}

func replaceDB(t *testing.T, dsn, db string) string {
	t.Helper()
	i, j := strings.LastIndex(dsn, "/"), strings.Index(dsn, "?")
	if i < 0 || j < i {
		t.Fatalf("DSN %q is not in URL form", dsn)
	}
	return dsn[:i+1] + db + dsn[j:]
}

func randHex(t *testing.T) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}

// TestIntegrationThrowawayServer runs the tests that need a server of their
// own: too many connections, and a stop or a kill, then a start, under load.
func TestIntegrationThrowawayServer(t *testing.T) {
	srv := dbtest.StartPostgresWith(t, dbtest.Options{Settings: map[string]string{
		"max_connections":                "8",
		"superuser_reserved_connections": "0",
	}})
	dsn := srv.DSN()

	t.Run("too-many-connections", func(t *testing.T) {
		// Fill every slot with native pgx connections, then ask for one
		// more with each driver.
		var open []*pgx.Conn
		defer func() {
			for _, c := range open {
				c.Close(context.Background())
			}
		}()
		for i := 0; i < 20; i++ {
			c, err := pgx.Connect(ctxT(t), dsn)
			if err != nil {
				t.Logf("connection %d refused: %v", i+1, err)
				break
			}
			open = append(open, c)
		}
		if len(open) != 8 {
			t.Fatalf("opened %d connections to a server with max_connections=8, want 8", len(open))
		}
		for _, d := range pgDrivers {
			s, err := d.connect(ctxT(t), dsn)
			if err == nil {
				// database/sql and lib/pq connect lazily: the first call fails.
				_, err = s.queryInt(ctxT(t), "SELECT 1")
				s.close()
			}
			checkClass(t, d, "connect beyond max_connections", err, want{true, sr.NotSent, "53300"})
		}
		for _, c := range open {
			c.Close(ctxT(t))
		}
		open = nil
		// A backend frees its slot when it has exited, a moment after the
		// client closed: wait for one before going on.
		waitFor(t, "a free connection slot", func() (bool, error) {
			c, err := pgx.Connect(ctxT(t), dsn)
			if err != nil {
				if postgres.Classify(err).Code == "53300" {
					return false, nil
				}
				return false, err
			}
			return true, c.Close(ctxT(t))
		})
	})

	setup := connect(t, pgDrivers[1], dsn)
	mustExec(t, setup, "CREATE TABLE load (driver text, n int)")
	setup.close()
	t.Run("stop-start-under-load", func(t *testing.T) { loadThroughRestart(t, srv, dsn, srv.Stop) })
	t.Run("kill-start-under-load", func(t *testing.T) { loadThroughRestart(t, srv, dsn, srv.Kill) })
}

// loadKey names one kind of outcome in one phase of the load test.
type loadKey struct {
	driver string
	phase  int32 // 0 before Stop, 1 while stopped, 2 after Start
	class  string
}

// loadThroughRestart runs a small bounded insert loop per driver while the
// server is stopped (by down: Stop or Kill) and started, and checks every
// error's class.
func loadThroughRestart(t *testing.T, srv *dbtest.Server, dsn string, down func() error) {
	var phase atomic.Int32
	type counter struct{ ok [3]atomic.Int64 }
	var mu sync.Mutex
	seen := map[loadKey]int{}
	example := map[loadKey]string{}
	counters := make([]*counter, len(pgDrivers))
	errsInPhase := make([][3]atomic.Int64, len(pgDrivers))
	refusedWhileDown := make([]atomic.Int64, len(pgDrivers))

	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for i, d := range pgDrivers {
		counters[i] = &counter{}
		p, err := d.pool(dsn)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer p.close()
			for n := 0; n < 20000 && ctx.Err() == nil; n++ {
				ph := phase.Load()
				opCtx, opCancel := context.WithTimeout(ctx, 2*time.Second)
				err := p.exec(opCtx, "INSERT INTO load VALUES ($1, $2)", d.name, n)
				opCancel()
				if err == nil {
					counters[i].ok[ph].Add(1)
					continue
				}
				if ctx.Err() != nil {
					return
				}
				errsInPhase[i][ph].Add(1)
				c := d.classify(err)
				if ph == 1 && c.Code == "dial" {
					refusedWhileDown[i].Add(1)
				}
				k := loadKey{d.name, ph, fmt.Sprintf("Retryable=%v Phase=%v Code=%s", c.Retryable, c.Phase, c.Code)}
				mu.Lock()
				seen[k]++
				if _, ok := example[k]; !ok {
					example[k] = fmt.Sprintf("%T %q", err, err.Error())
				}
				mu.Unlock()
				time.Sleep(2 * time.Millisecond) // a small load, not a spin
			}
		}()
	}
	waitAll := func(what string, cond func(i int) bool) {
		t.Helper()
		waitFor(t, what, func() (bool, error) {
			for i := range pgDrivers {
				if !cond(i) {
					return false, nil
				}
			}
			return true, nil
		})
	}
	waitAll("inserts before the stop", func(i int) bool { return counters[i].ok[0].Load() >= 5 })
	phase.Store(1)
	if err := down(); err != nil {
		t.Fatal(err)
	}
	// Once Stop has returned nothing listens: every driver must come to a
	// refused dial, whatever it met first.
	waitAll("a refused connection while stopped", func(i int) bool { return refusedWhileDown[i].Load() >= 1 })
	phase.Store(2)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	waitAll("inserts after the start", func(i int) bool { return counters[i].ok[2].Load() >= 5 })
	cancel()
	wg.Wait()

	for k, n := range seen {
		t.Logf("%s phase %d: %d x %s, e.g. %s", k.driver, k.phase, n, k.class, example[k])
		if !strings.HasPrefix(k.class, "Retryable=true") {
			t.Errorf("%s phase %d: %s: %s; want every error around a restart retryable", k.driver, k.phase, k.class, example[k])
		}
	}
}
