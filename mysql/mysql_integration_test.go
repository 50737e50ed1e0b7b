package mysql_test

// Integration tests: each provokes a real MariaDB error through
// github.com/go-sql-driver/mysql and checks how the classifier reads it. They
// use the shared server (a fresh database per test) or a throwaway server
// from internal/dbtest, and skip when neither is there (fail with
// SQLRETRY_REQUIRE_DB=1).

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

	gomysql "github.com/go-sql-driver/mysql"

	sr "github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/internal/dbtest"
	"github.com/sqlretry/sqlretry/mysql"
)

// opTimeout bounds every single database call in these tests.
const opTimeout = 15 * time.Second

type want struct {
	retryable bool
	phase     sr.Phase
	code      string
}

func (w want) String() string {
	return fmt.Sprintf("{Retryable:%v Phase:%v Code:%q}", w.retryable, w.phase, w.code)
}

// checkClass classifies err and compares it with the wanted verdicts (any
// one matches); it logs the real error text, so -v shows what was said.
func checkClass(t *testing.T, what string, err error, ws ...want) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: got no error, want %v", what, ws)
		return
	}
	c := mysql.Classify(err)
	t.Logf("%s: %T %q -> Retryable=%v Phase=%v Code=%q", what, err, err.Error(), c.Retryable, c.Phase, c.Code)
	for _, w := range ws {
		if c.Retryable == w.retryable && c.Phase == w.phase && c.Code == w.code {
			return
		}
	}
	t.Errorf("%s: error %q classified {Retryable:%v Phase:%v Code:%q}, want one of %v",
		what, err, c.Retryable, c.Phase, c.Code, ws)
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	t.Cleanup(cancel)
	return ctx
}

// session is one connection pinned from its own pool.
type session struct {
	db   *sql.DB
	conn *sql.Conn
	id   int64 // CONNECTION_ID()
}

func connect(t *testing.T, dsn string) *session {
	t.Helper()
	s, err := tryConnect(ctxT(t), dsn)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(s.close)
	return s
}

func tryConnect(ctx context.Context, dsn string) (*session, error) {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return nil, err
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		db.Close()
		return nil, err
	}
	s := &session{db: db, conn: conn}
	if err := conn.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&s.id); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

func (s *session) exec(ctx context.Context, q string) error {
	_, err := s.conn.ExecContext(ctx, q)
	return err
}

func (s *session) close() { s.conn.Close(); s.db.Close() }

func mustExec(t *testing.T, s *session, qs ...string) {
	t.Helper()
	for _, q := range qs {
		if err := s.exec(ctxT(t), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

func openDB(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// waitFor polls cond every 5 ms, failing the test after 10 s or 2000 polls.
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
		// InnoDB refreshes its information_schema.INNODB_TRX cache only
		// when it was last read more than 100 ms ago: polling faster keeps
		// it stale forever, and a lock wait is never seen.
		time.Sleep(150 * time.Millisecond)
	}
	t.Fatalf("gave up waiting for %s", what)
}

func count(t *testing.T, db *sql.DB, q string, args ...any) func() (bool, int, error) {
	return func() (bool, int, error) {
		var n int
		err := db.QueryRowContext(ctxT(t), q, args...).Scan(&n)
		return n > 0, n, err
	}
}

// waitLockWait waits until connection id waits for a row lock.
func waitLockWait(t *testing.T, adm *sql.DB, id int64) {
	t.Helper()
	waitFor(t, fmt.Sprintf("connection %d to wait for a lock", id), func() (bool, error) {
		ok, _, err := count(t, adm, "SELECT count(*) FROM information_schema.INNODB_TRX WHERE trx_mysql_thread_id = ? AND trx_state = 'LOCK WAIT'", id)()
		return ok, err
	})
}

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

// fresh returns a fresh database holding table t (id int primary key, v
// int) with rows 1 to 10.
func fresh(t *testing.T) string {
	t.Helper()
	dsn := dbtest.FreshMySQL(t)
	s := connect(t, dsn)
	mustExec(t, s, "CREATE TABLE t (id int PRIMARY KEY, v int NOT NULL) ENGINE=InnoDB",
		"INSERT INTO t VALUES (1,0),(2,0),(3,0),(4,0),(5,0),(6,0),(7,0),(8,0),(9,0),(10,0)")
	s.close()
	return dsn
}

// TestIntegrationDeadlock: A locks rows 1 and 3-10, B locks row 2, A waits
// for row 2 and B asks for row 1. InnoDB detects the cycle at once and rolls
// one transaction back whole (it picks the lighter, B, but the test accepts
// either): 1213, not applied; the other statement succeeds.
func TestIntegrationDeadlock(t *testing.T) {
	dsn := fresh(t)
	a, b, adm := connect(t, dsn), connect(t, dsn), openDB(t, dsn)
	mustExec(t, a, "BEGIN", "UPDATE t SET v = v + 1 WHERE id = 1", "UPDATE t SET v = v + 1 WHERE id >= 3")
	mustExec(t, b, "BEGIN", "UPDATE t SET v = v + 1 WHERE id = 2")
	aDone := make(chan error, 1)
	go func() { aDone <- a.exec(ctxT(t), "UPDATE t SET v = v + 1 WHERE id = 2") }()
	waitLockWait(t, adm, a.id)
	bErr := b.exec(ctxT(t), "UPDATE t SET v = v + 1 WHERE id = 1")
	aErr := waitErr(t, "A's update", aDone)
	victim, survivor := bErr, aErr
	if bErr == nil {
		victim, survivor = aErr, bErr
	}
	checkClass(t, "deadlock victim", victim, want{true, sr.NotApplied, "1213"})
	if survivor != nil {
		t.Errorf("the surviving transaction's statement: got %v, want success once the victim rolled back", survivor)
	}
	mustExec(t, a, "ROLLBACK")
	mustExec(t, b, "ROLLBACK")
}

// TestIntegrationLockWait: innodb_lock_wait_timeout and NOWAIT.
func TestIntegrationLockWait(t *testing.T) {
	dsn := fresh(t)
	holder, b := connect(t, dsn), connect(t, dsn)
	mustExec(t, holder, "BEGIN", "UPDATE t SET v = v + 1 WHERE id = 1")
	mustExec(t, b, "SET SESSION innodb_lock_wait_timeout = 1")
	checkClass(t, "innodb_lock_wait_timeout", b.exec(ctxT(t), "UPDATE t SET v = v + 1 WHERE id = 1"), want{true, sr.NotApplied, "1205"})
	checkClass(t, "FOR UPDATE NOWAIT", b.exec(ctxT(t), "SELECT v FROM t WHERE id = 1 FOR UPDATE NOWAIT"), want{true, sr.NotApplied, "1205"})
	mustExec(t, holder, "ROLLBACK")
}

// TestIntegrationStatementTimeout: MariaDB's max_statement_time gives 1969,
// which the classifier does not retry.
func TestIntegrationStatementTimeout(t *testing.T) {
	s := connect(t, fresh(t))
	mustExec(t, s, "SET SESSION max_statement_time = 0.05")
	checkClass(t, "max_statement_time", s.exec(ctxT(t), "SELECT SLEEP(30)"), want{false, sr.NotApplied, "1969"})
}

// TestIntegrationKill ends a busy and an idle connection with KILL (and a
// busy statement with KILL QUERY) and classifies what the connection's own
// call and its next call report.
func TestIntegrationKill(t *testing.T) {
	dsn := fresh(t)
	adm := openDB(t, dsn)
	kill := func(what string, id int64) {
		t.Helper()
		if _, err := adm.ExecContext(ctxT(t), fmt.Sprintf("KILL %s %d", what, id)); err != nil {
			t.Fatalf("KILL %s %d: %v", what, id, err)
		}
	}
	sleeping := func(s *session) chan error {
		done := make(chan error, 1)
		go func() { done <- s.exec(ctxT(t), "SELECT SLEEP(30)") }()
		waitFor(t, "SLEEP to run", func() (bool, error) {
			ok, _, err := count(t, adm, "SELECT count(*) FROM information_schema.PROCESSLIST WHERE ID = ? AND STATE = 'User sleep'", s.id)()
			return ok, err
		})
		return done
	}
	t.Run("busy", func(t *testing.T) {
		s := connect(t, dsn)
		done := sleeping(s)
		kill("CONNECTION", s.id)
		checkClass(t, "busy connection killed", waitErr(t, "SLEEP", done), want{true, sr.Unknown, "1927"}, want{true, sr.Unknown, "invalid-conn"})
		checkClass(t, "next call on the killed busy connection", s.exec(ctxT(t), "SELECT 1"), want{true, sr.NotSent, "bad-conn"})
	})
	t.Run("busy-query", func(t *testing.T) {
		s := connect(t, dsn)
		done := sleeping(s)
		kill("QUERY", s.id)
		err := waitErr(t, "SLEEP", done)
		// SLEEP() interrupted by KILL QUERY returns 1 rather than an error
		// in MySQL; MariaDB reports 1317.
		checkClass(t, "busy statement killed with KILL QUERY", err, want{false, sr.NotApplied, "1317"})
		if err := s.exec(ctxT(t), "SELECT 1"); err != nil {
			t.Errorf("next call after KILL QUERY: got %v, want success (the connection survives)", err)
		}
	})
	t.Run("idle", func(t *testing.T) {
		s := connect(t, dsn)
		kill("CONNECTION", s.id)
		waitFor(t, "the connection to go", func() (bool, error) {
			ok, _, err := count(t, adm, "SELECT count(*) FROM information_schema.PROCESSLIST WHERE ID = ?", s.id)()
			return !ok, err
		})
		err := s.exec(ctxT(t), "SELECT 1")
		checkClass(t, "first call on the killed idle connection", err,
			want{true, sr.Unknown, "1927"}, want{true, sr.Unknown, "invalid-conn"}, want{true, sr.NotSent, "bad-conn"})
		err = s.exec(ctxT(t), "SELECT 1")
		checkClass(t, "second call on the killed idle connection", err,
			want{true, sr.NotSent, "bad-conn"}, want{false, sr.NotSent, "client-state"})
	})
}

func randHex(t *testing.T) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}

// TestIntegrationPermanent: syntax, duplicate key, missing table, missing
// privileges, unknown database and a wrong password are not retried.
func TestIntegrationPermanent(t *testing.T) {
	dsn := fresh(t)
	s := connect(t, dsn)
	for _, tc := range []struct {
		what, q string
		w       want
	}{
		{"syntax error", "SELEC 1", want{false, sr.NotApplied, "1064"}},
		{"duplicate key", "INSERT INTO t VALUES (1, 0)", want{false, sr.NotApplied, "1062"}},
		{"missing table", "SELECT * FROM no_such_table", want{false, sr.NotApplied, "1146"}},
		{"unknown column", "SELECT nope FROM t", want{false, sr.NotApplied, "1054"}},
	} {
		checkClass(t, tc.what, s.exec(ctxT(t), tc.q), tc.w)
	}

	// A user with no privileges at all.
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	dbName := cfg.DBName
	user := "sqlretry_np_" + randHex(t)
	adm := openDB(t, dsn)
	if _, err := adm.ExecContext(ctxT(t), "CREATE USER '"+user+"'@'%' IDENTIFIED BY 'pw'"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		db, err := sql.Open("mysql", dbtest.MySQLDSN(t))
		if err == nil {
			_, err = db.ExecContext(ctx, "DROP USER IF EXISTS '"+user+"'@'%'")
			db.Close()
		}
		if err != nil {
			t.Errorf("drop user %s: %v", user, err)
		}
	})
	as := func(user, pass, db string) string {
		c := cfg.Clone()
		c.User, c.Passwd, c.DBName = user, pass, db
		return c.FormatDSN()
	}
	np := connect(t, as(user, "pw", ""))
	checkClass(t, "SELECT without the privilege", np.exec(ctxT(t), "SELECT * FROM `"+dbName+"`.t"), want{false, sr.NotApplied, "1142"})
	for _, tc := range []struct {
		what, dsn string
		w         want
	}{
		{"connect to a database without the privilege", as(user, "pw", dbName), want{false, sr.NotApplied, "1044"}},
		{"connect with a wrong password", as(user, "wrong", ""), want{false, sr.NotSent, "1045"}},
		{"connect to an unknown database", as(cfg.User, cfg.Passwd, "sqlretry_no_such_db"), want{false, sr.NotApplied, "1049"}},
	} {
		s, err := tryConnect(ctxT(t), tc.dsn)
		if err == nil {
			s.close()
		}
		checkClass(t, tc.what, err, tc.w)
	}
}

// TestIntegrationThrowawayServer runs the tests that need a server of their
// own: too many connections, and a stop or a kill, then a start, under load.
func TestIntegrationThrowawayServer(t *testing.T) {
	srv := dbtest.StartMariaDBWith(t, dbtest.Options{Settings: map[string]string{
		"max_connections":       "10", // MariaDB's minimum
		"extra_max_connections": "0",
	}})
	dsn := srv.DSN()

	t.Run("too-many-connections", func(t *testing.T) {
		// Fill every slot (root may take one more than max_connections),
		// then ask for one more.
		var open []*session
		defer func() {
			for _, s := range open {
				s.close()
			}
		}()
		var refused error
		for i := 0; i < 20; i++ {
			s, err := tryConnect(ctxT(t), dsn)
			if err != nil {
				refused = err
				t.Logf("connection %d refused", i+1)
				break
			}
			open = append(open, s)
		}
		if len(open) < 10 || len(open) > 11 {
			t.Errorf("opened %d connections to a server with max_connections=10, want 10 or 11", len(open))
		}
		checkClass(t, "connect beyond max_connections", refused, want{true, sr.NotSent, "1040"})
		for _, s := range open {
			s.close()
		}
		open = nil
		// The server frees a slot when its thread has ended, a moment after
		// the client closed: wait for one before going on.
		waitFor(t, "a free connection slot", func() (bool, error) {
			s, err := tryConnect(ctxT(t), dsn)
			if err != nil {
				if mysql.Classify(err).Code == "1040" {
					return false, nil
				}
				return false, err
			}
			s.close()
			return true, nil
		})
	})

	setup := connect(t, dsn)
	mustExec(t, setup, "CREATE TABLE load_t (n int)")
	setup.close()
	t.Run("stop-start-under-load", func(t *testing.T) { loadThroughRestart(t, srv, dsn, srv.Stop) })
	t.Run("kill-start-under-load", func(t *testing.T) { loadThroughRestart(t, srv, dsn, srv.Kill) })
}

// loadThroughRestart runs a small bounded insert loop while the server is
// stopped (by down: Stop or Kill) and started, and checks every error's
// class.
func loadThroughRestart(t *testing.T, srv *dbtest.Server, dsn string, down func() error) {
	var phase atomic.Int32 // 0 before Stop, 1 from Stop, 2 from Start
	var ok [3]atomic.Int64
	var refusedWhileDown atomic.Int64
	var mu sync.Mutex
	seen := map[string]int{}
	example := map[string]string{}

	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(2)
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for n := 0; n < 20000 && ctx.Err() == nil; n++ {
			ph := phase.Load()
			opCtx, opCancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := db.ExecContext(opCtx, "INSERT INTO load_t VALUES (?)", n)
			opCancel()
			if err == nil {
				ok[ph].Add(1)
				continue
			}
			if ctx.Err() != nil {
				return
			}
			c := mysql.Classify(err)
			if ph == 1 && c.Code == "dial" {
				refusedWhileDown.Add(1)
			}
			k := fmt.Sprintf("phase %d: Retryable=%v Phase=%v Code=%s", ph, c.Retryable, c.Phase, c.Code)
			mu.Lock()
			seen[k]++
			if _, ok := example[k]; !ok {
				example[k] = fmt.Sprintf("%T %q", err, err.Error())
			}
			mu.Unlock()
			time.Sleep(2 * time.Millisecond) // a small load, not a spin
		}
	}()
	waitFor(t, "inserts before the stop", func() (bool, error) { return ok[0].Load() >= 5, nil })
	phase.Store(1)
	if err := down(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a refused connection while stopped", func() (bool, error) { return refusedWhileDown.Load() >= 1, nil })
	phase.Store(2)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "inserts after the start", func() (bool, error) { return ok[2].Load() >= 5, nil })
	cancel()
	<-done

	for k, n := range seen {
		t.Logf("%s: %d x, e.g. %s", k, n, example[k])
		if !strings.Contains(k, "Retryable=true") {
			t.Errorf("%s: %s; want every error around a restart retryable", k, example[k])
		}
	}
}

// TestIntegrationTrigger4031: MariaDB's 4031 is ER_REFERENCED_TRG_DOES_NOT_EXIST,
// a CREATE TRIGGER the server refused: permanent, not MySQL's idle
// disconnect of the same number.
func TestIntegrationTrigger4031(t *testing.T) {
	s := connect(t, fresh(t))
	err := s.exec(ctxT(t), "CREATE TRIGGER t_bi BEFORE INSERT ON t FOR EACH ROW FOLLOWS no_such_trigger SET NEW.v = NEW.v")
	checkClass(t, "CREATE TRIGGER ... FOLLOWS a missing trigger", err, want{false, sr.NotApplied, "4031"})
}

// TestIntegrationInitConnectFailed: when init_connect fails, MariaDB reads
// the session's first command, does not run it, answers 1184 and closes the
// session. The command was never run: retryable, not sent.
func TestIntegrationInitConnectFailed(t *testing.T) {
	srv := dbtest.StartMariaDB(t)
	root := connect(t, srv.DSN())
	user := "sqlretry_ic_" + randHex(t)
	mustExec(t, root,
		"CREATE TABLE test.ic (n int)",
		"CREATE USER '"+user+"'@'%' IDENTIFIED BY 'pw'",
		"GRANT INSERT, SELECT ON test.* TO '"+user+"'@'%'",
		// init_connect does not run for root (SUPER): only the user's
		// sessions meet the failing one.
		"SET GLOBAL init_connect = 'INSERT INTO test.no_such_table VALUES (1)'",
	)
	cfg, err := gomysql.ParseDSN(srv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	cfg.User, cfg.Passwd, cfg.DBName = user, "pw", "test"
	db := openDB(t, cfg.FormatDSN())
	conn, err := db.Conn(ctxT(t))
	if err != nil {
		t.Fatalf("connect as %s: %v", user, err)
	}
	defer conn.Close()
	_, err = conn.ExecContext(ctxT(t), "INSERT INTO test.ic VALUES (1)")
	checkClass(t, "first command of a session whose init_connect failed", err, want{true, sr.NotSent, "1184"})
	var n int
	if err := root.conn.QueryRowContext(ctxT(t), "SELECT count(*) FROM test.ic").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("the command answered with 1184 ran: %d rows, want 0", n)
	}
}
