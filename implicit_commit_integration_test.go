package sqlretry_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	sr "github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/internal/dbtest"
	"github.com/sqlretry/sqlretry/mysql"
)

// A commitCase is a statement run inside a transaction, for MariaDB to judge
// whether it commits that transaction implicitly.
type commitCase struct {
	stmt    string
	args    []any    // the statement's arguments: it is prepared
	setup   []string // on the session, before the transaction begins
	cleanup []string // on another session, after
	// conservative says why the tracker takes the statement to commit
	// although MariaDB 10.11 does not: it does on MySQL, or the words that
	// would tell are not read. Empty: the tracker must agree with the
	// server.
	conservative string
}

// TestImplicitCommitMatchesServer is differential: for each statement, the
// server says whether it commits an open transaction (an INSERT before it
// survives the ROLLBACK), and the session tracker must say so too — through
// RunTx on sqlretry.Open("mysql", …), where a transaction it takes as
// partly committed ends in ErrAmbiguous, and by TaintsOnMySQL. A statement
// the server commits and the tracker does not is the bug of a missing entry
// (CHECK TABLE: RunTx replayed fn over the committed INSERT). A statement
// the tracker takes to commit and the server does not must say why
// (conservative), so that the exceptions stay as precise as the manuals.
//
// Statements about a database run in a fresh database on the shared server;
// statements that change the server (accounts, replication, plugins, FLUSH,
// RESET, SHUTDOWN) run on a throwaway one.
func TestImplicitCommitMatchesServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	local := []commitCase{
		// Table maintenance (the case first).
		{stmt: "CHECK TABLE t"},
		{stmt: "CHECK TABLE nosuch"}, // fails, and still commits
		{stmt: "CHECK VIEW v", setup: []string{"CREATE OR REPLACE VIEW v AS SELECT 1 AS a"}},
		{stmt: "ANALYZE TABLE t"},
		{stmt: "ANALYZE LOCAL TABLE t"},
		{stmt: "ANALYZE TABLE t PERSISTENT FOR ALL"},
		{stmt: "OPTIMIZE TABLE t"},
		{stmt: "REPAIR TABLE m"},
		{stmt: "CHECKSUM TABLE t"},
		{stmt: "CACHE INDEX m IN DEFAULT", conservative: "commits on MySQL (sql_parse.cc, both manuals)"},
		{stmt: "LOAD INDEX INTO CACHE m", conservative: "commits on MySQL (sql_parse.cc, both manuals)"},
		{stmt: "FLUSH TABLES t"},
		{stmt: "FLUSH LOCAL STATUS"},
		// MariaDB's ANALYZE of a statement runs it.
		{stmt: "ANALYZE SELECT * FROM t"},
		{stmt: "ANALYZE FORMAT=JSON SELECT * FROM t"},
		{stmt: "ANALYZE UPDATE s SET a = a + 1"},
		{stmt: "ANALYZE INSERT INTO s VALUES (2)"},
		{stmt: "ANALYZE DELETE FROM s WHERE a = 42"},
		// DDL: every form, and failing ones (the commit comes first).
		{stmt: "CREATE TABLE c1 (a INT)"},
		{stmt: "CREATE TABLE IF NOT EXISTS s (a INT)"},
		{stmt: "CREATE TABLE t (a INT)"}, // exists: fails, commits
		{stmt: "CREATE TABLE c2 LIKE t"},
		{stmt: "CREATE TABLE c3 SELECT 1 AS a"},
		{stmt: "CREATE OR REPLACE TABLE c4 (a INT)"},
		{stmt: "CREATE TABLE c5 (begin DATETIME, `commit` INT, transaction INT)"},
		{stmt: "ALTER TABLE s ADD COLUMN b INT", cleanup: []string{"ALTER TABLE s DROP COLUMN IF EXISTS b"}},
		{stmt: "ALTER TABLE nosuch ADD COLUMN b INT"},
		{stmt: "ALTER TABLE s ADD COLUMN autocommit INT", cleanup: []string{"ALTER TABLE s DROP COLUMN IF EXISTS autocommit"}},
		{stmt: "DROP TABLE IF EXISTS nosuch"},
		{stmt: "DROP TABLE nosuch"},
		{stmt: "RENAME TABLE r1 TO r2", setup: []string{"CREATE TABLE IF NOT EXISTS r1 (a INT)"}, cleanup: []string{"DROP TABLE IF EXISTS r1, r2"}},
		{stmt: "TRUNCATE TABLE s"},
		{stmt: "CREATE INDEX i1 ON s (a)", cleanup: []string{"DROP INDEX IF EXISTS i1 ON s"}},
		{stmt: "DROP INDEX i2 ON s", setup: []string{"CREATE INDEX IF NOT EXISTS i2 ON s (a)"}},
		{stmt: "CREATE VIEW v1 AS SELECT 1 AS a", cleanup: []string{"DROP VIEW IF EXISTS v1"}},
		{stmt: "CREATE OR REPLACE VIEW v2 AS SELECT 1 AS a"},
		{stmt: "ALTER VIEW v AS SELECT 2 AS a", setup: []string{"CREATE OR REPLACE VIEW v AS SELECT 1 AS a"}},
		{stmt: "DROP VIEW IF EXISTS nosuch"},
		{stmt: "CREATE PROCEDURE p1() BEGIN INSERT INTO s VALUES (1); END", cleanup: []string{"DROP PROCEDURE IF EXISTS p1"}},
		{stmt: "CREATE PROCEDURE p2() SELECT 1", cleanup: []string{"DROP PROCEDURE IF EXISTS p2"}},
		{stmt: "ALTER PROCEDURE p3 COMMENT 'x'", setup: []string{"CREATE PROCEDURE IF NOT EXISTS p3() SELECT 1"}},
		{stmt: "DROP PROCEDURE IF EXISTS nosuch"},
		{stmt: "CREATE FUNCTION f1() RETURNS INT RETURN 1", cleanup: []string{"DROP FUNCTION IF EXISTS f1"}},
		{stmt: "ALTER FUNCTION f2 COMMENT 'x'", setup: []string{"CREATE FUNCTION IF NOT EXISTS f2() RETURNS INT RETURN 1"}},
		{stmt: "DROP FUNCTION IF EXISTS nosuch"},
		{stmt: "CREATE TRIGGER tr1 BEFORE INSERT ON s FOR EACH ROW BEGIN SET NEW.a = NEW.a; END", cleanup: []string{"DROP TRIGGER IF EXISTS tr1"}},
		{stmt: "DROP TRIGGER IF EXISTS nosuch"},
		{stmt: "CREATE EVENT e1 ON SCHEDULE EVERY 1 DAY DISABLE DO SELECT 1", cleanup: []string{"DROP EVENT IF EXISTS e1"}},
		{stmt: "ALTER EVENT e2 COMMENT 'x'", setup: []string{"CREATE EVENT IF NOT EXISTS e2 ON SCHEDULE EVERY 1 DAY DISABLE DO SELECT 1"}},
		{stmt: "DROP EVENT IF EXISTS nosuch"},
		{stmt: "CREATE SEQUENCE q1", cleanup: []string{"DROP SEQUENCE IF EXISTS q1"}},
		{stmt: "ALTER SEQUENCE q2 RESTART 5", setup: []string{"CREATE SEQUENCE IF NOT EXISTS q2"}},
		{stmt: "DROP SEQUENCE IF EXISTS nosuch"},
		{stmt: "CREATE PACKAGE pk1 AS PROCEDURE pp; END", setup: []string{"SET SESSION sql_mode = 'ORACLE'"}, cleanup: []string{"SET SESSION sql_mode = 'ORACLE'", "DROP PACKAGE IF EXISTS pk1"}},
		{stmt: "ALTER DATABASE CHARACTER SET utf8mb4"},
		// Temporary tables: CREATE and DROP TEMPORARY TABLE do not commit;
		// everything else done to a temporary table does.
		{stmt: "CREATE TEMPORARY TABLE x1 (a INT)"},
		{stmt: "CREATE TEMPORARY TABLE IF NOT EXISTS x2 LIKE t"},
		{stmt: "CREATE TEMPORARY TABLE x3 AS SELECT * FROM t"},
		{stmt: "CREATE TEMPORARY TABLE x4 SELECT * FROM t", conservative: "the text analysis reads \"x4 SELECT\" as a T-SQL batch of two statements"},
		{stmt: "CREATE OR REPLACE TEMPORARY TABLE x5 (begin INT)"},
		{stmt: "/* scratch */ CREATE TEMPORARY TABLE x6 (a INT)", conservative: "a comment before the words: they are not read"},
		{stmt: "CREATE TEMPORARY SEQUENCE x7"},
		{stmt: "DROP TEMPORARY TABLE tmp", setup: []string{"CREATE TEMPORARY TABLE tmp (a INT)"}},
		{stmt: "DROP TEMPORARY TABLE IF EXISTS nosuch"},
		{stmt: "DROP TEMPORARY SEQUENCE IF EXISTS nosuch", conservative: "the text analysis reads \"SEQUENCE IF\" as a T-SQL batch of two statements"},
		{stmt: "DROP TEMPORARY SEQUENCE sq", setup: []string{"CREATE TEMPORARY SEQUENCE sq"}},
		{stmt: "DROP TABLE tmp", setup: []string{"CREATE TEMPORARY TABLE tmp (a INT)"}},
		{stmt: "ALTER TABLE tmp ADD COLUMN b INT", setup: []string{"CREATE TEMPORARY TABLE tmp (a INT)"}},
		{stmt: "CREATE INDEX ix ON tmp (a)", setup: []string{"CREATE TEMPORARY TABLE tmp (a INT)"}},
		{stmt: "TRUNCATE TABLE tmp", setup: []string{"CREATE TEMPORARY TABLE tmp (a INT)"}},
		{stmt: "RENAME TABLE tmp TO tmp2", setup: []string{"CREATE TEMPORARY TABLE tmp (a INT)"}},
		{stmt: "CHECK TABLE tmp", setup: []string{"CREATE TEMPORARY TABLE tmp (a INT)"}},
		// Locking.
		{stmt: "LOCK TABLES s WRITE"},
		{stmt: "LOCK TABLE s READ"},
		{stmt: "UNLOCK TABLES", conservative: "commits when LOCK TABLES locked tables (both manuals); inside a transaction only a LOCK TABLES, which commits, can have"},
		{stmt: "UNLOCK TABLES", setup: []string{"LOCK TABLES s WRITE"}, conservative: "the transaction's BEGIN released the locks"},
		// Transaction control.
		{stmt: "BEGIN"},
		{stmt: "START TRANSACTION"},
		{stmt: "COMMIT"},
		{stmt: "SET autocommit = 1", conservative: "commits when autocommit was 0 (both manuals): the session's state, not the text's"},
		{stmt: "SET autocommit = 1", setup: []string{"SET autocommit = 0"}},
		{stmt: "SET autocommit = 0", conservative: "Session.After takes a change of autocommit as the end of the transaction"},
		{stmt: "XA START 'x'", conservative: "Session.After takes XA as transaction control"},
		// SET.
		{stmt: "SET @x = 1"},
		{stmt: "SET @x = 'password'", conservative: "the words are searched for anywhere, strings too"},
		{stmt: "SET NAMES utf8mb4"},
		{stmt: "SET SESSION sql_mode = DEFAULT"},
		{stmt: "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED"},
		{stmt: "SET ROLE NONE", conservative: "read by the word role, for SET DEFAULT ROLE"},
		{stmt: "SET STATEMENT max_statement_time = 100 FOR CHECK TABLE t"},
		{stmt: "SET STATEMENT max_statement_time = 100 FOR SELECT 1", conservative: "the statement after FOR is not read"},
		// Reads and writes of rows, and statements about the session.
		{stmt: "SELECT * FROM t FOR UPDATE"},
		{stmt: "INSERT INTO s VALUES (1)"},
		{stmt: "SELECT 'CREATE TABLE x; CHECK TABLE t'"},
		{stmt: "SHOW TABLES"},
		{stmt: "EXPLAIN SELECT * FROM t"},
		{stmt: "DESCRIBE t"},
		{stmt: "HELP 'x'"},
		{stmt: "HANDLER s OPEN"},
		{stmt: "KILL QUERY 999999999"},
		{stmt: "DO 1", conservative: "DO is opaque to the text analysis (a PostgreSQL DO block may commit)"},
		{stmt: "PREPARE ps FROM 'CHECK TABLE t'"},
		{stmt: "EXECUTE ps", setup: []string{"PREPARE ps FROM 'CHECK TABLE t'"}},
		{stmt: "DROP PREPARE ps", setup: []string{"PREPARE ps FROM 'SELECT 1'"}},
		{stmt: "DEALLOCATE PREPARE ps", setup: []string{"PREPARE ps FROM 'SELECT 1'"}},
		{stmt: "CREATE TABLE c6 SELECT ? AS a", args: []any{1}}, // a prepared statement, through the Connector's
		{stmt: "INSERT INTO s VALUES (?)", args: []any{1}},
		{stmt: "SET sql_log_bin = 0"}, // refused inside a transaction
		{stmt: "LOAD DATA LOCAL INFILE '" + localFile(t) + "' INTO TABLE s", conservative: "commits for NDB tables (MySQL manual): the text does not name the engine"},
		{stmt: "BINLOG 'x'", conservative: "replays binary log events, which may hold DDL or a COMMIT"},
		// Comments before the verb.
		{stmt: "/* nightly */ CHECK TABLE t"},
		{stmt: "# nightly\nCHECK TABLE t"},
		{stmt: "-- nightly\nCHECK TABLE t"},
	}
	global := []commitCase{
		// Accounts: they modify the mysql database.
		{stmt: "CREATE USER ic_u1", cleanup: []string{"DROP USER IF EXISTS ic_u1"}},
		{stmt: "CREATE USER ic_u2", setup: []string{"CREATE USER IF NOT EXISTS ic_u2"}, cleanup: []string{"DROP USER IF EXISTS ic_u2"}}, // exists: fails
		{stmt: "ALTER USER ic_u ACCOUNT LOCK", setup: []string{"CREATE USER IF NOT EXISTS ic_u"}},
		{stmt: "GRANT SELECT ON test.* TO ic_u", setup: []string{"CREATE USER IF NOT EXISTS ic_u"}},
		{stmt: "REVOKE ALL PRIVILEGES, GRANT OPTION FROM ic_u", setup: []string{"CREATE USER IF NOT EXISTS ic_u"}},
		{stmt: "RENAME USER ic_u3 TO ic_u4", setup: []string{"CREATE USER IF NOT EXISTS ic_u3"}, cleanup: []string{"DROP USER IF EXISTS ic_u3, ic_u4"}},
		{stmt: "SET PASSWORD FOR ic_u = PASSWORD('x')", setup: []string{"CREATE USER IF NOT EXISTS ic_u"}},
		{stmt: "DROP USER ic_u5", setup: []string{"CREATE USER IF NOT EXISTS ic_u5"}},
		{stmt: "DROP USER IF EXISTS nosuch"},
		{stmt: "CREATE ROLE ic_r1", cleanup: []string{"DROP ROLE IF EXISTS ic_r1"}},
		{stmt: "GRANT ic_r TO ic_u", setup: []string{"CREATE USER IF NOT EXISTS ic_u", "CREATE ROLE IF NOT EXISTS ic_r"}},
		{stmt: "REVOKE ic_r FROM ic_u", setup: []string{"CREATE USER IF NOT EXISTS ic_u", "CREATE ROLE IF NOT EXISTS ic_r", "GRANT ic_r TO ic_u"}},
		{stmt: "SET DEFAULT ROLE ic_r FOR ic_u", setup: []string{"CREATE USER IF NOT EXISTS ic_u", "CREATE ROLE IF NOT EXISTS ic_r", "GRANT ic_r TO ic_u"}},
		{stmt: "DROP ROLE ic_r2", setup: []string{"CREATE ROLE IF NOT EXISTS ic_r2"}},
		// Server objects.
		{stmt: "CREATE DATABASE ic_db", cleanup: []string{"DROP DATABASE IF EXISTS ic_db"}},
		{stmt: "DROP DATABASE ic_db2", setup: []string{"CREATE DATABASE IF NOT EXISTS ic_db2"}},
		{stmt: "CREATE SERVER ic_s1 FOREIGN DATA WRAPPER mysql OPTIONS (HOST '127.0.0.1')", cleanup: []string{"DROP SERVER IF EXISTS ic_s1"}},
		{stmt: "ALTER SERVER ic_s2 OPTIONS (USER 'x')", setup: []string{"CREATE SERVER IF NOT EXISTS ic_s2 FOREIGN DATA WRAPPER mysql OPTIONS (HOST '127.0.0.1')"}},
		{stmt: "DROP SERVER IF EXISTS nosuch"},
		{stmt: "CREATE FUNCTION ic_udf RETURNS STRING SONAME 'ic_nosuch.so'"}, // a loadable function: fails, commits
		{stmt: "INSTALL SONAME 'ha_blackhole'", cleanup: []string{"UNINSTALL SONAME 'ha_blackhole'"}},
		{stmt: "UNINSTALL SONAME 'ha_blackhole'", setup: []string{"INSTALL SONAME 'ha_blackhole'"}},
		{stmt: "INSTALL PLUGIN ic_nosuch SONAME 'ic_nosuch.so'"},
		{stmt: "UNINSTALL PLUGIN ic_nosuch"},
		// FLUSH and RESET.
		{stmt: "FLUSH TABLES"},
		{stmt: "FLUSH PRIVILEGES"},
		{stmt: "FLUSH LOGS"},
		{stmt: "FLUSH STATUS"},
		{stmt: "FLUSH TABLES WITH READ LOCK", cleanup: []string{"UNLOCK TABLES"}},
		{stmt: "RESET QUERY CACHE"},
		{stmt: "RESET MASTER"},
		{stmt: "PURGE BINARY LOGS BEFORE NOW()"},
		// Replication, configured or not (a statement the server refuses
		// commits all the same).
		{stmt: "START SLAVE", conservative: replicationCommits},
		{stmt: "STOP SLAVE", conservative: replicationCommits},
		{stmt: "START REPLICA", conservative: replicationCommits},
		{stmt: "STOP REPLICA", conservative: replicationCommits},
		{stmt: "START ALL SLAVES", conservative: replicationCommits},
		{stmt: "STOP ALL SLAVES", conservative: replicationCommits},
		{stmt: "RESET SLAVE ALL"},
		{stmt: "CHANGE MASTER TO MASTER_HOST = '127.0.0.1', MASTER_PORT = 9, MASTER_CONNECT_RETRY = 3600", cleanup: []string{"RESET SLAVE ALL"}, conservative: replicationCommits},
		{stmt: "START SLAVE", setup: []string{"CHANGE MASTER TO MASTER_HOST = '127.0.0.1', MASTER_PORT = 9, MASTER_CONNECT_RETRY = 3600"}, cleanup: []string{"STOP SLAVE", "RESET SLAVE ALL"}, conservative: replicationCommits},
		{stmt: "STOP SLAVE", setup: []string{"CHANGE MASTER TO MASTER_HOST = '127.0.0.1', MASTER_PORT = 9, MASTER_CONNECT_RETRY = 3600", "START SLAVE"}, cleanup: []string{"STOP SLAVE", "RESET SLAVE ALL"}, conservative: replicationCommits},
		// Backup (in no manual's list).
		{stmt: "BACKUP STAGE START"},
		{stmt: "BACKUP LOCK t"},
		{stmt: "BACKUP UNLOCK"},
		// SET GLOBAL.
		{stmt: "SET GLOBAL max_connections = @@GLOBAL.max_connections"},
		{stmt: "SET GLOBAL gtid_slave_pos = ''"},
		{stmt: "SET GLOBAL read_only = 0"},
	}

	dsn := dbtest.FreshMySQL(t)
	prepareImplicitCommitDB(t, dsn)
	for _, c := range local {
		judgeImplicitCommit(t, ctx, dsn, c)
	}
	srv := dbtest.StartMariaDB(t)
	if srv == nil {
		return
	}
	prepareImplicitCommitDB(t, srv.DSN())
	for _, c := range global {
		judgeImplicitCommit(t, ctx, srv.DSN(), c)
	}

	// SHUTDOWN last, and only on the server: the tracker's verdict is
	// TaintsOnMySQL's, and the server's whether the INSERT before it is
	// there after a restart.
	// A row committed before it is the control: what is committed
	// survives the shutdown and restart.
	c := commitCase{stmt: "SHUTDOWN", conservative: "in MariaDB's KB; the session ends with it anyway"}
	admin := openImplicitCommitDB(t, srv.DSN())
	defer admin.Close()
	mustExec(t, admin, "INSERT INTO s VALUES (99)")
	committed, stmtErr := serverCommitsImplicitly(t, ctx, srv.DSN(), c, func() {
		waitStopped(t, srv)
		if err := srv.Start(); err != nil {
			t.Fatal(err)
		}
	})
	if n := count(t, admin, "SELECT COUNT(*) FROM s WHERE a = 99"); n != 1 {
		t.Fatalf("a row committed before SHUTDOWN: %d after the restart, want 1: the restart does not show what was committed", n)
	}
	compareImplicitCommit(t, c.stmt, c, committed, sr.TaintsOnMySQL(c.stmt), stmtErr)
}

// replicationCommits is why the replication statements taint though
// MariaDB 10.11 does not commit for them.
const replicationCommits = "commits on MySQL (manual, sql_parse.cc) and in MariaDB's KB; not on MariaDB 10.11"

// judgeImplicitCommit holds the tracker's verdict on c against the server's.
func judgeImplicitCommit(t *testing.T, ctx context.Context, dsn string, c commitCase) {
	t.Helper()
	name := c.stmt
	if len(c.setup) > 0 {
		name += " (after " + strings.Join(c.setup, "; ") + ")"
	}
	server, stmtErr := serverCommitsImplicitly(t, ctx, dsn, c, nil)
	tracked, server2 := trackerTaints(t, ctx, dsn, c)
	direct := sr.TaintsOnMySQL(c.stmt)
	if server != server2 {
		t.Errorf("%q: the server committed the transaction in one run and not in the other (%v, %v): the case does not judge one statement", name, server, server2)
	}
	if tracked != direct {
		t.Errorf("%q: RunTx took the transaction as partly committed: %v; TaintsOnMySQL: %v", name, tracked, direct)
	}
	compareImplicitCommit(t, name, c, server, tracked, stmtErr)
}

// compareImplicitCommit holds the tracker's verdict against the server's.
func compareImplicitCommit(t *testing.T, name string, c commitCase, server, tracked bool, stmtErr error) {
	t.Helper()
	t.Logf("%-70q server commits: %-5v tracker: %-5v (statement error: %v)", name, server, tracked, stmtErr)
	switch {
	case server && !tracked:
		t.Errorf("%q commits the open transaction on MariaDB (the INSERT before it survives ROLLBACK); the tracker says it does not, and RunTx would run fn again over the committed part", name)
	case !server && tracked && c.conservative == "":
		t.Errorf("%q does not commit on MariaDB; the tracker says it does (RunTx gives up with ErrAmbiguous instead of running the transaction again)", name)
	case server && c.conservative != "":
		t.Errorf("%q commits on MariaDB: it is not a conservative entry (%s)", name, c.conservative)
	case !tracked && c.conservative != "":
		t.Errorf("%q: the tracker says it does not commit, but the case says it should (%s)", name, c.conservative)
	}
}

// serverCommitsImplicitly runs c on one session of the plain driver: setup,
// START TRANSACTION, an INSERT, the statement, ROLLBACK. It reports whether
// the INSERT survived (read on another session, after between, if any, has
// run) and the statement's own error. A syntax error fails the test: the
// server would not have judged the statement.
func serverCommitsImplicitly(t *testing.T, ctx context.Context, dsn string, c commitCase, between func()) (bool, error) {
	t.Helper()
	db := openImplicitCommitDB(t, dsn)
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, q := range c.setup {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			t.Fatalf("%q: setup %q: %v", c.stmt, q, err)
		}
	}
	// START TRANSACTION rather than BEGIN, which sql_mode ORACLE reads as
	// a block.
	for _, q := range []string{"START TRANSACTION", "INSERT INTO t VALUES (1)"} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			t.Fatalf("%q: %s: %v", c.stmt, q, err)
		}
	}
	_, stmtErr := conn.ExecContext(ctx, c.stmt, c.args...)
	var me *gomysql.MySQLError
	if errors.As(stmtErr, &me) && (me.Number == 1064 || me.Number == 1149) {
		t.Fatalf("%q: %v: the server did not read the statement", c.stmt, stmtErr)
	}
	if between == nil {
		if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
			t.Fatalf("%q: ROLLBACK: %v", c.stmt, err)
		}
	}
	conn.Close()
	db.Close()
	if between != nil {
		between()
	}
	return implicitCommitAfter(t, ctx, dsn, c), stmtErr
}

// trackerTaints runs c through RunTx on sqlretry.Open("mysql", …): fn runs
// the INSERT and the statement and then fails. RunTx ends in ErrAmbiguous
// if the tracker took the transaction as partly committed, with fn's own
// error if it took the failure for a clean rollback. It also reports
// whether the INSERT survived.
func trackerTaints(t *testing.T, ctx context.Context, dsn string, c commitCase) (tainted, committed bool) {
	t.Helper()
	p := newPolicy(t, sr.Config{Classifier: mysql.Classifier, MaxRetries: 1})
	db, err := sr.Open("mysql", implicitCommitDSN(t, dsn), p)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	for _, q := range c.setup {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%q: setup %q: %v", c.stmt, q, err)
		}
	}
	errFn := errors.New("fn failed after the statement")
	attempts := 0
	err = sr.RunTx(ctx, db, p, sr.Write("implicit-commit", nil), nil, func(ctx context.Context, tx *sql.Tx) error {
		attempts++
		if _, err := tx.ExecContext(ctx, "INSERT INTO t VALUES (1)"); err != nil {
			return err
		}
		_, _ = tx.ExecContext(ctx, c.stmt, c.args...)
		return errFn
	})
	db.Close()
	switch {
	case errors.Is(err, sr.ErrAmbiguous):
		tainted = true
	case errors.Is(err, errFn) && attempts == 1:
	default:
		t.Fatalf("%q: RunTx = %v after %d attempts; want ErrAmbiguous or fn's error after 1", c.stmt, err, attempts)
	}
	return tainted, implicitCommitAfter(t, ctx, dsn, c)
}

// implicitCommitAfter counts the INSERT's rows, empties the table and runs
// c's cleanup, on a session of its own.
func implicitCommitAfter(t *testing.T, ctx context.Context, dsn string, c commitCase) bool {
	t.Helper()
	admin := openImplicitCommitDB(t, dsn)
	defer admin.Close()
	var n int
	if err := admin.QueryRowContext(ctx, "SELECT COUNT(*) FROM t").Scan(&n); err != nil {
		t.Fatalf("%q: count: %v", c.stmt, err)
	}
	for _, q := range append([]string{"DELETE FROM t"}, c.cleanup...) {
		if _, err := admin.ExecContext(ctx, q); err != nil {
			t.Fatalf("%q: cleanup %q: %v", c.stmt, q, err)
		}
	}
	return n > 0
}

// prepareImplicitCommitDB creates the tables the cases use: t, whose INSERT
// tells a commit, s (InnoDB) and m (MyISAM, for the key cache).
func prepareImplicitCommitDB(t *testing.T, dsn string) {
	t.Helper()
	db := openImplicitCommitDB(t, dsn)
	defer db.Close()
	for _, q := range []string{
		"CREATE TABLE t (a INT) ENGINE = InnoDB",
		"CREATE TABLE s (a INT) ENGINE = InnoDB",
		"CREATE TABLE m (a INT, KEY (a)) ENGINE = MyISAM",
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

func openImplicitCommitDB(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", implicitCommitDSN(t, dsn))
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	return db
}

// implicitCommitDSN is dsn with LOAD DATA LOCAL allowed and a lock wait
// bounded.
func implicitCommitDSN(t *testing.T, dsn string) string {
	t.Helper()
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.AllowAllFiles = true
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.Params["lock_wait_timeout"] = "10"
	cfg.Params["innodb_lock_wait_timeout"] = "10"
	return cfg.FormatDSN()
}

// localFile is a file of one row for LOAD DATA LOCAL INFILE.
func localFile(t *testing.T) string {
	path := filepath.Join(t.TempDir(), "rows.txt")
	if err := os.WriteFile(path, []byte("7\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// waitStopped waits until srv's process has exited (SHUTDOWN), for at most
// a minute.
func waitStopped(t *testing.T, srv *dbtest.Server) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for srv.Running() {
		if time.Now().After(deadline) {
			t.Fatal("the server is still running a minute after SHUTDOWN")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRunTxDeadlockAfterCheckTableIsAmbiguous is the case end to end:
// RunTx through sqlretry.Open("mysql", …) runs an INSERT, then CHECK TABLE,
// which commits it on MariaDB, then an UPDATE that a second session makes
// the victim of a real deadlock (1213: "the transaction was rolled back").
// The rollback reaches only the UPDATE; RunTx must not run fn again over the
// committed INSERT (2 rows and nil before the fix) but end in ErrAmbiguous,
// with the INSERT there once.
//
// After CHECK TABLE the session is in autocommit mode, so the UPDATE is a
// transaction of its own: it locks row 1 and waits for row 2, which the
// second session holds; when the test sees it waiting, the second session
// asks for row 1. InnoDB rolls back the lighter of the two, and the second
// session has inserted 500 rows first, so the victim is the UPDATE.
func TestRunTxDeadlockAfterCheckTableIsAmbiguous(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dsn := dbtest.FreshMySQL(t)
	admin := openImplicitCommitDB(t, dsn)
	defer admin.Close()
	for _, q := range []string{
		"CREATE TABLE t (v INT) ENGINE = InnoDB",
		"CREATE TABLE u (id INT PRIMARY KEY, v INT) ENGINE = InnoDB",
		"INSERT INTO u VALUES (1, 0), (2, 0)",
		"CREATE TABLE heavy (x INT) ENGINE = InnoDB",
	} {
		mustExec(t, admin, q)
	}
	other, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	blocker, err := other.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer blocker.Rollback()
	for _, q := range []string{
		"INSERT INTO heavy WITH RECURSIVE r (x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r WHERE x < 500) SELECT x FROM r",
		"UPDATE u SET v = v + 1 WHERE id = 2",
	} {
		if _, err := blocker.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}

	// The second session closes the cycle once fn's UPDATE waits for row 2.
	waiting := make(chan int64, 1)
	closed := make(chan error, 1)
	go func() {
		id := <-waiting
		if err := waitLockWait(ctx, admin, id); err != nil {
			closed <- err
			_ = blocker.Rollback()
			return
		}
		_, err := blocker.ExecContext(ctx, "UPDATE u SET v = v + 1 WHERE id = 1")
		_ = blocker.Rollback()
		if err != nil {
			err = fmt.Errorf("the second session's UPDATE: %w (it, not fn's UPDATE, was the deadlock's victim)", err)
		}
		closed <- err
	}()

	p := newPolicy(t, sr.Config{Classifier: mysql.Classifier, MaxRetries: 3})
	db, err := sr.Open("mysql", implicitCommitDSN(t, dsn), p)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	attempts := 0
	err = sr.RunTx(ctx, db, p, sr.Write("check-then-update", nil), nil, func(ctx context.Context, tx *sql.Tx) error {
		attempts++
		if _, err := tx.ExecContext(ctx, "INSERT INTO t VALUES (1)"); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, "CHECK TABLE t"); err != nil {
			return err
		}
		if attempts == 1 {
			var id int64
			if err := tx.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
				return err
			}
			waiting <- id
		}
		_, err := tx.ExecContext(ctx, "UPDATE u SET v = v + 1 WHERE id IN (1, 2)")
		return err
	})
	if attempts == 1 {
		if cerr := <-closed; cerr != nil {
			t.Fatal(cerr)
		}
	}
	var me *gomysql.MySQLError
	deadlock := errors.As(err, &me) && me.Number == 1213
	n := count(t, admin, "SELECT COUNT(*) FROM t")
	if n != 1 || !errors.Is(err, sr.ErrAmbiguous) || !deadlock {
		t.Errorf("RunTx = %v after %d attempts with %d rows in t (ambiguous: %v, deadlock 1213: %v); want ErrAmbiguous after the deadlock with 1 row: CHECK TABLE committed the INSERT",
			err, attempts, n, errors.Is(err, sr.ErrAmbiguous), deadlock)
	}
}

// waitLockWait waits until the session id is waiting for a row lock.
func waitLockWait(ctx context.Context, admin *sql.DB, id int64) error {
	for {
		var n int
		err := admin.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.INNODB_TRX WHERE trx_mysql_thread_id = ? AND trx_state = 'LOCK WAIT'", id).Scan(&n)
		switch {
		case err != nil:
			return err
		case n > 0:
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("session %d never waited for the row lock: %w", id, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// A statement with an implicit commit (DDL, here CREATE TABLE IF NOT EXISTS)
// inside RunTx's transaction commits the INSERT before it: a lock wait
// timeout after it (1205, NotApplied) must not make RunTx run the whole
// transaction again.
//
// History: found in the review of issue 12's changes (finding 6, on
// MariaDB).
func TestRunTxNotReplayedAfterImplicitCommitMariaDB(t *testing.T) {
	db, raw, _ := openMySQL(t, sr.Config{}, nil)
	mustExec(t, raw, "CREATE TABLE t (v INT)")
	mustExec(t, raw, "CREATE TABLE u (id INT PRIMARY KEY, v INT)")
	mustExec(t, raw, "INSERT INTO u VALUES (1, 0)")
	lock, err := raw.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback()
	if _, err := lock.Exec("SELECT * FROM u WHERE id = 1 FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	p := newPolicy(t, sr.Config{Classifier: mysql.Classifier, MaxRetries: 1})
	err = sr.RunTx(context.Background(), db, p, sr.Write("order", nil), nil, func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, "INSERT INTO t VALUES (1)"); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS side (a INT)"); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, "UPDATE u SET v = v + 1 WHERE id = 1")
		return err
	})
	if n := count(t, raw, "SELECT COUNT(*) FROM t"); n != 1 {
		t.Errorf("%d rows in t (err %v), want 1: the transaction was replayed after an implicit commit", n, err)
	}
}
