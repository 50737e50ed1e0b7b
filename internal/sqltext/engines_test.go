package sqltext

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"modernc.org/sqlite"

	"github.com/sqlretry/sqlretry/internal/dbtest"
)

// The differential check: whatever IsReadOnly calls read-only, each real
// engine must run as a read. Each engine judges a text in a fresh database
// holding a few scratch tables and a sequence, on a session of a user that
// can write nothing else:
//
//   - PostgreSQL runs it inside BEGIN READ ONLY … ROLLBACK: 25006
//     (read_only_sql_transaction) or 25001 proves a write. A read-only
//     transaction still lets nextval advance a temporary sequence, writes
//     to temporary tables, and takes advisory locks that outlive it, so a
//     checksum of the tables, both sequences, the catalog and the session's
//     advisory locks is compared before and after. SELECT … FOR UPDATE/SHARE
//     is refused in a read-only transaction although it changes nothing
//     once the statement ends: it is run again in a read-write transaction
//     and judged by the checksum taken inside it.
//   - MariaDB runs it inside START TRANSACTION READ ONLY … ROLLBACK (with
//     multiStatements): 1792 (ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION)
//     proves a write, and a checksum adds the temporary table, the
//     sequence's stored and session values, user variables, named locks and
//     the schema's tables and routines.
//   - SQLite (in memory) runs it under PRAGMA query_only = ON: a "readonly"
//     error proves a write, and a checksum of the tables and the schema
//     backs it up.
//
// A text that ends the transaction it runs in (a hidden COMMIT) is a write
// as well: what follows it runs outside.

// engine judges texts on one real database.
type engine interface {
	name() string
	// judge runs s and returns why it wrote, or "" if it did not.
	judge(ctx context.Context, s string) (wrote string, err error)
	// ask runs a query of CheckUserFuncs on the judge's session.
	ask(ctx context.Context, query string, args []any) (bool, error)
	engine() Engine
	close()
}

// claimsRead reports whether the analysis lets s be replayed as a read on
// e's engine: IsReadOnly, and, for a text that names functions a user's may
// answer to, CheckUserFuncs finds none of them in e's catalog. The judges'
// databases hold users' functions that write, qualified, overloading a
// built-in's name, reached by attribute notation, folded at plan time.
func claimsRead(ctx context.Context, e engine, s string) (bool, error) {
	in := Analyze(s)
	if !in.ReadOnly {
		return false, nil
	}
	if !in.Calls {
		return true, nil
	}
	names, ok := CalledNames(e.engine(), s)
	if !ok {
		return false, nil
	}
	switch err := CheckUserFuncs(ctx, e.engine(), names, e.ask); {
	case err == nil:
		return true, nil
	case errors.As(err, new(*UserFuncError)):
		return false, nil
	default:
		return false, err
	}
}

// engineTimeout bounds one text's run on one engine.
const engineTimeout = 5 * time.Second

// openEngines opens a judge on each engine: a fresh PostgreSQL and MariaDB
// database (skipping when the shared servers are absent, failing with
// SQLRETRY_REQUIRE_DB=1) and an in-memory SQLite database.
func openEngines(tb testing.TB) []engine {
	tb.Helper()
	pgDSN := dbtest.FreshPostgres(tb)
	myDSN := dbtest.FreshMySQL(tb)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	reapJudges(ctx, tb)
	var es []engine
	pg, err := openPostgres(ctx, tb, pgDSN)
	if err != nil {
		tb.Fatalf("PostgreSQL judge: %v", err)
	}
	es = append(es, pg)
	my, err := openMariaDB(ctx, tb, myDSN)
	if err != nil {
		tb.Fatalf("MariaDB judge: %v", err)
	}
	es = append(es, my)
	lite, err := openSQLite(ctx)
	if err != nil {
		tb.Fatalf("SQLite judge: %v", err)
	}
	es = append(es, lite)
	tb.Cleanup(func() {
		for _, e := range es {
			e.close()
		}
	})
	return es
}

// judgeDatabases are the LIKE patterns of the databases openEngines gets
// from dbtest (which names them after the test).
var judgeDatabases = [...]string{
	"sqlretry_fuzzreadonlyengines_%", "sqlretry_fuzzhiddenwrites_%",
	"sqlretry_testenginesseewrites_%", "sqlretry_testhiddenwritesweep_%",
}

// reapJudges drops what the judges of killed processes left behind: the go
// command kills a fuzz worker one second after asking it to stop, often
// before its cleanup has dropped its databases, role and user. A database
// of ours older than an hour is a leftover (no run keeps one that long), and
// so is a judge role or user whose database is gone.
func reapJudges(ctx context.Context, tb testing.TB) {
	tb.Helper()
	if admin, err := pgx.Connect(ctx, dbtest.PostgresDSN(tb)); err == nil {
		defer admin.Close(ctx)
		for _, like := range judgeDatabases {
			rows, err := admin.Query(ctx, `SELECT datname FROM pg_database WHERE datname LIKE $1
				AND (pg_stat_file('base/' || oid || '/PG_VERSION')).modification < now() - interval '1 hour'`, like)
			if err != nil {
				break
			}
			names, _ := pgx.CollectRows(rows, pgx.RowTo[string])
			for _, name := range names {
				_, _ = admin.Exec(ctx, `DROP DATABASE IF EXISTS "`+name+`" WITH (FORCE)`)
			}
		}
		rows, err := admin.Query(ctx, `SELECT rolname FROM pg_roles WHERE rolname LIKE 'judge\_sqlretry\_%'
			AND substr(rolname, 7) NOT IN (SELECT datname FROM pg_database)`)
		if err == nil {
			roles, _ := pgx.CollectRows(rows, pgx.RowTo[string])
			for _, role := range roles {
				_, _ = admin.Exec(ctx, `DROP ROLE IF EXISTS "`+role+`"`)
			}
		}
	}
	admin, err := sql.Open("mysql", dbtest.MySQLDSN(tb))
	if err != nil {
		return
	}
	defer admin.Close()
	for _, like := range judgeDatabases {
		rows, err := admin.QueryContext(ctx, `SELECT TABLE_SCHEMA FROM information_schema.TABLES
			WHERE TABLE_SCHEMA LIKE ? AND TABLE_NAME = 't' AND CREATE_TIME < NOW() - INTERVAL 1 HOUR`, like)
		if err != nil {
			return
		}
		var names []string
		for rows.Next() {
			var name string
			if rows.Scan(&name) == nil {
				names = append(names, name)
			}
		}
		rows.Close()
		for _, name := range names {
			_, _ = admin.ExecContext(ctx, "DROP DATABASE IF EXISTS `"+name+"`")
		}
	}
	rows, err := admin.QueryContext(ctx, `SELECT User FROM mysql.user WHERE User LIKE 'judge\_sqlretry\_%'
		AND SUBSTR(User, 7) NOT IN (SELECT SCHEMA_NAME FROM information_schema.SCHEMATA)`)
	if err != nil {
		return
	}
	var users []string
	for rows.Next() {
		var user string
		if rows.Scan(&user) == nil {
			users = append(users, user)
		}
	}
	rows.Close()
	for _, user := range users {
		_, _ = admin.ExecContext(ctx, "DROP USER IF EXISTS '"+user+"'@'%'")
	}
}

// scratchRows are the rows of the scratch tables t, u and tt.
const scratchRows = "(1, 10, 'a'), (2, 20, 'b'), (3, 30, 'c')"

// --- PostgreSQL

type pgEngine struct {
	dsn  string // as the judge's role
	conn *pgx.Conn
	last string // the checksum after the last text, if it wrote nothing
}

func openPostgres(ctx context.Context, tb testing.TB, dsn string) (*pgEngine, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return nil, err
	}
	role := "judge_" + strings.TrimPrefix(u.Path, "/")
	admin, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, err
	}
	defer admin.Close(ctx)
	for _, q := range []string{
		`CREATE TABLE t (id int PRIMARY KEY, a int, b text)`,
		`CREATE TABLE u (id int PRIMARY KEY, a int, b text)`,
		`INSERT INTO t VALUES ` + scratchRows,
		`INSERT INTO u VALUES ` + scratchRows,
		`CREATE SEQUENCE s`,
	} {
		if _, err := admin.Exec(ctx, q); err != nil {
			return nil, fmt.Errorf("%s: %w", q, err)
		}
	}
	for _, q := range pgUserFuncs {
		if _, err := admin.Exec(ctx, q); err != nil {
			return nil, fmt.Errorf("%s: %w", q, err)
		}
	}
	for _, q := range []string{
		`CREATE ROLE "` + role + `" LOGIN`,
		`GRANT USAGE ON SCHEMA audit, app, jobs TO "` + role + `"`,
		`ALTER ROLE "` + role + `" SET statement_timeout = '2s'`,
		`ALTER ROLE "` + role + `" SET lock_timeout = '1s'`,
		`GRANT ALL ON ALL TABLES IN SCHEMA public TO "` + role + `"`,
		`GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO "` + role + `"`,
		`GRANT ALL ON SCHEMA public TO "` + role + `"`,
	} {
		if _, err := admin.Exec(ctx, q); err != nil {
			return nil, fmt.Errorf("%s: %w", q, err)
		}
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		admin, err := pgx.Connect(ctx, dsn)
		if err != nil {
			tb.Errorf("PostgreSQL judge cleanup: %v", err)
			return
		}
		defer admin.Close(ctx)
		for _, q := range []string{
			`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '` + role + `'`,
			`DROP OWNED BY "` + role + `"`,
			`DROP ROLE "` + role + `"`,
		} {
			if _, err := admin.Exec(ctx, q); err != nil {
				tb.Errorf("PostgreSQL judge cleanup: %s: %v", q, err)
			}
		}
	})
	u.User = url.User(role)
	e := &pgEngine{dsn: u.String()}
	return e, e.connect(ctx)
}

// pgUserFuncs are users' functions that write (each INSERTs into t, which
// a read-only transaction refuses), as a judge's database holds them: by a
// schema's name, overloading a built-in's name for other argument types,
// reached as t.audit, STABLE and IMMUTABLE ones that call the writer (an
// IMMUTABLE call with constants is folded while EXPLAIN plans it), and an
// unknown one a FROM gives an alias.
var pgUserFuncs = []string{
	`CREATE SCHEMA audit`, `CREATE SCHEMA app`, `CREATE SCHEMA jobs`,
	`CREATE FUNCTION public.w(m text) RETURNS int LANGUAGE plpgsql AS $$ BEGIN INSERT INTO t VALUES (100 + length(m), 0, m) ON CONFLICT DO NOTHING; RETURN 1; END $$`,
	`CREATE FUNCTION audit.log(m text) RETURNS int LANGUAGE sql AS $$ SELECT public.w(m) $$`,
	`CREATE FUNCTION app.insert(m text) RETURNS int LANGUAGE sql AS $$ SELECT public.w(m) $$`,
	`CREATE FUNCTION jobs.replace(n int) RETURNS int LANGUAGE sql AS $$ SELECT public.w(n::text) $$`,
	`CREATE FUNCTION public.log(m text) RETURNS int LANGUAGE sql AS $$ SELECT public.w(m) $$`,
	`CREATE FUNCTION public.lower(n int) RETURNS int LANGUAGE sql AS $$ SELECT public.w(n::text) $$`,
	`CREATE FUNCTION public.audit(r t) RETURNS int LANGUAGE sql AS $$ SELECT public.w(r.b) $$`,
	`CREATE FUNCTION public.upper(n int) RETURNS int STABLE LANGUAGE plpgsql AS $$ BEGIN RETURN public.w(n::text); END $$`,
	`CREATE FUNCTION public.format(n int) RETURNS int IMMUTABLE LANGUAGE plpgsql AS $$ BEGIN RETURN public.w(n::text); END $$`,
	`CREATE FUNCTION public.bump() RETURNS SETOF int LANGUAGE sql AS $$ SELECT public.w('bump') $$`,
}

func (e *pgEngine) name() string { return "PostgreSQL" }

func (e *pgEngine) engine() Engine { return Postgres }

func (e *pgEngine) ask(ctx context.Context, q string, args []any) (bool, error) {
	if e.conn == nil || e.conn.IsClosed() {
		if err := e.connect(ctx); err != nil {
			return false, err
		}
	}
	rows, err := e.conn.Query(ctx, q, args...)
	if err != nil {
		return false, err
	}
	defer rows.Close()
	found := rows.Next()
	return found, rows.Err()
}

func (e *pgEngine) connect(ctx context.Context) error {
	e.last = ""
	if e.conn != nil {
		e.conn.Close(ctx)
		e.conn = nil
	}
	conn, err := pgx.Connect(ctx, e.dsn)
	if err != nil {
		return err
	}
	for _, q := range []string{
		`CREATE TEMP TABLE tt (id int PRIMARY KEY, a int, b text)`,
		`INSERT INTO tt VALUES ` + scratchRows,
		`CREATE TEMP SEQUENCE ts`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			conn.Close(ctx)
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	e.conn = conn
	return nil
}

func (e *pgEngine) close() {
	if e.conn != nil {
		e.conn.Close(context.Background())
	}
}

const pgChecksum = `SELECT concat_ws(' | ',
	(SELECT md5(coalesce(string_agg(x::text, ',' ORDER BY id), '')) FROM t x),
	(SELECT md5(coalesce(string_agg(x::text, ',' ORDER BY id), '')) FROM u x),
	(SELECT md5(coalesce(string_agg(x::text, ',' ORDER BY id), '')) FROM tt x),
	(SELECT last_value || '/' || is_called FROM s),
	(SELECT last_value || '/' || is_called FROM ts),
	(SELECT count(*) FROM pg_class), (SELECT count(*) FROM pg_proc), (SELECT count(*) FROM pg_namespace),
	'advisory ' || (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()))`

func (e *pgEngine) checksum(ctx context.Context) (string, error) {
	var sum string
	err := e.conn.QueryRow(ctx, pgChecksum).Scan(&sum)
	return sum, err
}

func (e *pgEngine) judge(ctx context.Context, s string) (string, error) {
	if e.conn == nil || e.conn.IsClosed() {
		if err := e.connect(ctx); err != nil {
			return "", err
		}
	}
	why, err := e.judge1(ctx, s)
	if why != "" || err != nil {
		e.last = ""
	}
	return why, err
}

func (e *pgEngine) judge1(ctx context.Context, s string) (string, error) {
	before, err := e.last, error(nil)
	if before == "" {
		before, err = e.checksum(ctx)
	}
	if err != nil {
		if err := e.connect(ctx); err != nil {
			return "", err
		}
		if before, err = e.checksum(ctx); err != nil {
			return "", fmt.Errorf("checksum: %w", err)
		}
	}
	if _, err := e.conn.Exec(ctx, "BEGIN READ ONLY"); err != nil {
		return "", err
	}
	wrote, locking := "", false
	_, runErr := e.conn.Exec(ctx, s)
	if runErr == nil {
		var ro string
		if err := e.conn.QueryRow(ctx, "SHOW transaction_read_only").Scan(&ro); err != nil || ro != "on" {
			wrote = fmt.Sprintf("the text ended the read-only transaction (transaction_read_only %q, %v)", ro, err)
		} else if inside, err := e.checksum(ctx); err != nil || inside != before {
			// A temporary table is writable in a read-only transaction,
			// and the ROLLBACK would hide the change.
			wrote = fmt.Sprintf("inside the transaction, checksum %s became %s (%v)", before, inside, err)
		}
	}
	_, _ = e.conn.Exec(ctx, "ROLLBACK")
	var pe *pgconn.PgError
	switch {
	case errors.As(runErr, &pe) && pe.Code == "25006" && strings.HasPrefix(pe.Message, "cannot execute SELECT FOR "):
		locking = true
	case errors.As(runErr, &pe) && (pe.Code == "25006" || pe.Code == "25001"):
		return fmt.Sprintf("%s %s", pe.Code, pe.Message), nil
	case runErr != nil && e.conn.IsClosed():
		return "the text ended the session: " + runErr.Error(), nil
	}
	after, err := e.checksum(ctx)
	if err != nil {
		return "the checksum fails after the text: " + err.Error(), nil
	}
	if after != before {
		_, _ = e.conn.Exec(ctx, "SELECT pg_advisory_unlock_all()")
		return fmt.Sprintf("checksum %s became %s", before, after), nil
	}
	if wrote != "" {
		return wrote, nil
	}
	e.last = after
	if locking {
		// A locking read: run it where it is allowed, and compare what
		// the transaction sees before rolling it back.
		if _, err := e.conn.Exec(ctx, "BEGIN"); err != nil {
			return "", err
		}
		_, _ = e.conn.Exec(ctx, s)
		inside, err := e.checksum(ctx)
		_, _ = e.conn.Exec(ctx, "ROLLBACK")
		if err == nil && inside != before {
			_, _ = e.conn.Exec(ctx, "SELECT pg_advisory_unlock_all()")
			return fmt.Sprintf("in a read-write transaction, checksum %s became %s", before, inside), nil
		}
	}
	return "", nil
}

// --- MariaDB

type myEngine struct {
	db   *sql.DB
	conn *sql.Conn
	last string // the checksum after the last text, if it wrote nothing
}

func openMariaDB(ctx context.Context, tb testing.TB, dsn string) (*myEngine, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, err
	}
	user := "judge_" + cfg.DBName
	admin, err := sql.Open("mysql", dsn)
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	for _, q := range []string{
		`CREATE TABLE t (id int PRIMARY KEY, a int, b text)`,
		`CREATE TABLE u (id int PRIMARY KEY, a int, b text)`,
		`INSERT INTO t VALUES ` + scratchRows,
		`INSERT INTO u VALUES ` + scratchRows,
		`CREATE SEQUENCE s NOCACHE`,
		"CREATE USER '" + user + "'@'%'",
		"GRANT ALL ON `" + cfg.DBName + "`.* TO '" + user + "'@'%'",
		"GRANT SELECT ON mysql.func TO '" + user + "'@'%'",
	} {
		if _, err := admin.ExecContext(ctx, q); err != nil {
			return nil, fmt.Errorf("%s: %w", q, err)
		}
	}
	for _, q := range myUserFuncs {
		if _, err := admin.ExecContext(ctx, q); err != nil {
			return nil, fmt.Errorf("%s: %w", q, err)
		}
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		admin, err := sql.Open("mysql", dsn)
		if err != nil {
			tb.Errorf("MariaDB judge cleanup: %v", err)
			return
		}
		defer admin.Close()
		if _, err := admin.ExecContext(ctx, "DROP USER IF EXISTS '"+user+"'@'%'"); err != nil {
			tb.Errorf("MariaDB judge cleanup: %v", err)
		}
	})
	cfg.User, cfg.Passwd = user, ""
	cfg.MultiStatements = true
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	e := &myEngine{db: db}
	return e, e.connect(ctx)
}

// myUserFuncs are users' stored functions that write (an INSERT, which a
// read-only transaction refuses, whatever the function's declared SQL
// data access), as a judge's database holds them: names that MySQL does not
// build in (INITCAP, STRING_AGG), and names of built-ins the parser reads
// specially, which a stored function answers when a space or a comment
// comes before "(" (COUNT, SUM, RANK).
var myUserFuncs = []string{
	"CREATE FUNCTION initcap(m varchar(64)) RETURNS int MODIFIES SQL DATA BEGIN INSERT INTO t VALUES (100, 0, m); RETURN 1; END",
	"CREATE FUNCTION string_agg(m varchar(64), sep varchar(8)) RETURNS int NO SQL BEGIN INSERT INTO t VALUES (101, 0, m); RETURN 1; END",
	"CREATE FUNCTION `count`(n int) RETURNS int BEGIN INSERT INTO t VALUES (102, n, 'count'); RETURN 1; END",
	"CREATE FUNCTION `sum`(n int) RETURNS int BEGIN INSERT INTO t VALUES (103, n, 'sum'); RETURN 1; END",
	"CREATE FUNCTION `rank`() RETURNS int BEGIN INSERT INTO t VALUES (104, 0, 'rank'); RETURN 1; END",
}

func (e *myEngine) name() string { return "MariaDB" }

func (e *myEngine) engine() Engine { return MySQL }

func (e *myEngine) ask(ctx context.Context, q string, args []any) (bool, error) {
	rows, err := e.conn.QueryContext(ctx, q, args...)
	if err != nil {
		return false, err
	}
	defer rows.Close()
	found := rows.Next()
	return found, rows.Err()
}

func (e *myEngine) connect(ctx context.Context) error {
	e.last = ""
	if e.conn != nil {
		_ = e.conn.Raw(func(any) error { return driver.ErrBadConn }) // discards the driver connection
		e.conn.Close()
		e.conn = nil
	}
	conn, err := e.db.Conn(ctx)
	if err != nil {
		return err
	}
	for _, q := range []string{
		`SET SESSION max_statement_time = 2, SESSION lock_wait_timeout = 2, SESSION innodb_lock_wait_timeout = 1`,
		`CREATE TEMPORARY TABLE tt (id int PRIMARY KEY, a int, b text)`,
		`INSERT INTO tt VALUES ` + scratchRows,
	} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			conn.Close()
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	e.conn = conn
	return nil
}

func (e *myEngine) close() {
	if e.conn != nil {
		e.conn.Close()
	}
	e.db.Close()
}

const myChecksum = `SELECT CONCAT_WS(' | ',
	(SELECT CONCAT(COUNT(*), ':', COALESCE(SUM(CRC32(CONCAT_WS(',', id, a, b))), 0)) FROM t),
	(SELECT CONCAT(COUNT(*), ':', COALESCE(SUM(CRC32(CONCAT_WS(',', id, a, b))), 0)) FROM u),
	(SELECT CONCAT(COUNT(*), ':', COALESCE(SUM(CRC32(CONCAT_WS(',', id, a, b))), 0)) FROM tt),
	(SELECT next_not_cached_value FROM s),
	COALESCE(PREVIOUS VALUE FOR s, 'none'),
	(SELECT COUNT(*) FROM information_schema.USER_VARIABLES),
	(SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE()),
	(SELECT COUNT(*) FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = DATABASE()))`

func (e *myEngine) checksum(ctx context.Context) (string, error) {
	var sum string
	err := e.conn.QueryRowContext(ctx, myChecksum).Scan(&sum)
	return sum, err
}

func (e *myEngine) judge(ctx context.Context, s string) (string, error) {
	why, err := e.judge1(ctx, s)
	if why != "" || err != nil {
		e.last = ""
	}
	return why, err
}

func (e *myEngine) judge1(ctx context.Context, s string) (string, error) {
	before, err := e.last, error(nil)
	if before == "" {
		before, err = e.checksum(ctx)
	}
	if err != nil {
		if err := e.connect(ctx); err != nil {
			return "", err
		}
		if before, err = e.checksum(ctx); err != nil {
			return "", fmt.Errorf("checksum: %w", err)
		}
	}
	if _, err := e.conn.ExecContext(ctx, "START TRANSACTION READ ONLY"); err != nil {
		return "", err
	}
	wrote, locking := "", false
	_, runErr := e.conn.ExecContext(ctx, s)
	if runErr == nil {
		var inTx int
		if err := e.conn.QueryRowContext(ctx, "SELECT @@in_transaction").Scan(&inTx); err != nil || inTx != 1 {
			wrote = fmt.Sprintf("the text ended the read-only transaction (in_transaction %d, %v)", inTx, err)
		} else if inside, err := e.checksum(ctx); err != nil || inside != before {
			// A temporary table is writable in a read-only transaction,
			// and the ROLLBACK would hide the change.
			wrote = fmt.Sprintf("inside the transaction, checksum %s became %s (%v)", before, inside, err)
		}
	}
	_, _ = e.conn.ExecContext(ctx, "ROLLBACK")
	var me *mysql.MySQLError
	if errors.As(runErr, &me) {
		switch me.Number {
		case 1792: // ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION
			// MariaDB refuses a locking read (SELECT … FOR UPDATE, LOCK
			// IN SHARE MODE) and the plan of a write (EXPLAIN DELETE …)
			// in a read-only transaction, although neither changes
			// anything: such texts are judged by a checksum taken inside
			// a read-write transaction instead.
			low := strings.ToLower(s)
			if !strings.Contains(low, "update") && !strings.Contains(low, "share") &&
				!strings.Contains(low, "explain") && !strings.Contains(low, "desc") {
				return fmt.Sprintf("%d %s", me.Number, me.Message), nil
			}
			locking = true
		case 1227: // ER_SPECIFIC_ACCESS_DENIED_ERROR: SUPER and the like
			return fmt.Sprintf("%d %s", me.Number, me.Message), nil
		case 1142: // ER_TABLEACCESS_DENIED_ERROR: "X command denied"
			if !strings.HasPrefix(me.Message, "SELECT command") {
				return fmt.Sprintf("%d %s", me.Number, me.Message), nil
			}
		}
	} else if runErr != nil && isBadConn(runErr) {
		_ = e.connect(ctx)
		return "", nil
	}
	after, err := e.checksum(ctx)
	if err != nil {
		return "the checksum fails after the text: " + err.Error(), nil
	}
	if after != before {
		return fmt.Sprintf("checksum %s became %s", before, after), nil
	}
	e.last = after
	var locks sql.NullInt64
	if err := e.conn.QueryRowContext(ctx, "SELECT RELEASE_ALL_LOCKS()").Scan(&locks); err == nil && locks.Int64 > 0 {
		return fmt.Sprintf("the text took %d named locks", locks.Int64), nil
	}
	if wrote != "" {
		return wrote, nil
	}
	if locking {
		if _, err := e.conn.ExecContext(ctx, "START TRANSACTION"); err != nil {
			return "", err
		}
		_, _ = e.conn.ExecContext(ctx, s)
		inside, err := e.checksum(ctx)
		_, _ = e.conn.ExecContext(ctx, "ROLLBACK")
		if err == nil && inside != before {
			return fmt.Sprintf("in a read-write transaction, checksum %s became %s", before, inside), nil
		}
	}
	return "", nil
}

func isBadConn(err error) bool {
	return errors.Is(err, mysql.ErrInvalidConn) || errors.Is(err, sql.ErrConnDone) ||
		strings.Contains(err.Error(), "bad connection")
}

// --- SQLite

type liteEngine struct {
	db   *sql.DB
	conn *sql.Conn
}

func openSQLite(ctx context.Context) (*liteEngine, error) {
	db, err := sql.Open("sqlite", ":memory:")
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	e := &liteEngine{db: db}
	return e, e.connect(ctx)
}

// liteCalls counts the calls of the judges' application-defined functions:
// log(x) and initcap(x), which replace or add to SQLite's built-ins on
// every connection the driver opens, and whose side effect (the count) is
// part of the SQLite judge's checksum.
var liteCalls atomic.Int64

func init() {
	for _, name := range []string{"log", "initcap"} {
		sqlite.MustRegisterScalarFunction(name, 1, func(*sqlite.FunctionContext, []driver.Value) (driver.Value, error) {
			return liteCalls.Add(1), nil
		})
	}
}

func (e *liteEngine) name() string { return "SQLite" }

func (e *liteEngine) engine() Engine { return SQLite }

func (e *liteEngine) ask(ctx context.Context, q string, args []any) (bool, error) {
	rows, err := e.conn.QueryContext(ctx, q, args...)
	if err != nil {
		return false, err
	}
	defer rows.Close()
	found := rows.Next()
	return found, rows.Err()
}

func (e *liteEngine) connect(ctx context.Context) error {
	if e.conn != nil {
		e.conn.Close()
	}
	conn, err := e.db.Conn(ctx)
	if err != nil {
		return err
	}
	for _, q := range []string{
		`CREATE TABLE IF NOT EXISTS t (id int PRIMARY KEY, a int, b text)`,
		`CREATE TABLE IF NOT EXISTS u (id int PRIMARY KEY, a int, b text)`,
		`INSERT OR IGNORE INTO t VALUES ` + scratchRows,
		`INSERT OR IGNORE INTO u VALUES ` + scratchRows,
		`PRAGMA query_only = ON`,
	} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			conn.Close()
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	e.conn = conn
	return nil
}

func (e *liteEngine) close() {
	if e.conn != nil {
		e.conn.Close()
	}
	e.db.Close()
}

const liteChecksum = `SELECT
	(SELECT count(*) || ':' || coalesce(group_concat(id || ',' || a || ',' || b, ';'), '') FROM (SELECT * FROM t ORDER BY id)) || ' | ' ||
	(SELECT count(*) || ':' || coalesce(group_concat(id || ',' || a || ',' || b, ';'), '') FROM (SELECT * FROM u ORDER BY id)) || ' | ' ||
	(SELECT count(*) FROM sqlite_master) || ' | ' || (SELECT count(*) FROM sqlite_temp_master)`

func (e *liteEngine) checksum(ctx context.Context) (string, error) {
	var sum, qo string
	if err := e.conn.QueryRowContext(ctx, liteChecksum).Scan(&sum); err != nil {
		return "", err
	}
	if err := e.conn.QueryRowContext(ctx, "PRAGMA query_only").Scan(&qo); err != nil {
		return "", err
	}
	return sum + " | query_only " + qo + " | application functions called " + strconv.FormatInt(liteCalls.Load(), 10), nil
}

func (e *liteEngine) judge(ctx context.Context, s string) (string, error) {
	before, err := e.checksum(ctx)
	if err != nil {
		if err := e.connect(ctx); err != nil {
			return "", err
		}
		if before, err = e.checksum(ctx); err != nil {
			return "", fmt.Errorf("checksum: %w", err)
		}
	}
	_, runErr := e.conn.ExecContext(ctx, s)
	if runErr != nil && strings.Contains(runErr.Error(), "readonly") {
		return runErr.Error(), nil
	}
	after, err := e.checksum(ctx)
	if err != nil {
		return "the checksum fails after the text: " + err.Error(), nil
	}
	if after != before {
		return fmt.Sprintf("checksum %s became %s", before, after), nil
	}
	return "", nil
}

// --- the checks

// judgeAll returns each engine's verdict on s: the engines that wrote, and
// why.
func judgeAll(t testing.TB, es []engine, s string) map[string]string {
	t.Helper()
	whys := make([]string, len(es))
	errs := make([]error, len(es))
	var wg sync.WaitGroup
	for i, e := range es {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), engineTimeout)
			defer cancel()
			whys[i], errs[i] = e.judge(ctx, s)
		}()
	}
	wg.Wait()
	wrote := map[string]string{}
	for i, e := range es {
		if errs[i] != nil {
			t.Fatalf("%s cannot judge %q: %v", e.name(), s, errs[i])
		}
		if whys[i] != "" {
			wrote[e.name()] = whys[i]
		}
	}
	return wrote
}

// maxEngineText bounds the texts the fuzz target sends to the engines.
const maxEngineText = 4096

// FuzzReadOnlyEngines checks IsReadOnly against the engines' own grammar:
// any text it calls read-only must run as a read on PostgreSQL, MariaDB and
// SQLite. The seed corpus, testdata/fuzz/FuzzReadOnlyEngines, holds writes
// hidden behind every construct the lexer must see through, and reads to
// mutate.
func FuzzReadOnlyEngines(f *testing.F) {
	es := openEngines(f)
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) > maxEngineText || !IsReadOnly(s) {
			return
		}
		checkClaims(t, es, s, judgeAll(t, es, s))
	})
}

// checkClaims fails t if an engine that wrote running s is one on which
// the analysis lets s be replayed as a read (claimsRead).
func checkClaims(t testing.TB, es []engine, s string, wrote map[string]string) {
	t.Helper()
	for _, e := range es {
		why, ok := wrote[e.name()]
		if !ok {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), engineTimeout)
		claimed, err := claimsRead(ctx, e, s)
		cancel()
		if err != nil {
			t.Fatalf("%s: CheckUserFuncs for %q: %v", e.name(), s, err)
		}
		if claimed {
			t.Fatalf("%q is a read on %s for the analysis, but it writes there: %s", s, e.name(), why)
		}
	}
}

// TestEnginesSeeWrites checks the judges themselves: each text below is a
// write on the named engine that the old lexer called read-only (or that
// IsReadOnly must refuse for another reason), and the engine must say so.
// It records the engines' verdicts for the closing note.
func TestEnginesSeeWrites(t *testing.T) {
	es := openEngines(t)
	for _, c := range []struct {
		sql     string
		engines string // the engines that must see a write
	}{
		{`EXPLAIN ("analyze") DELETE FROM t WHERE id = 1`, "PostgreSQL"},
		{"SELECT ('{1}'::int[])[length(']')], ''; DELETE FROM t; SELECT 1 -- '", "PostgreSQL"},
		{"SELECT $é$ '$é$; DELETE FROM t; --'", "PostgreSQL"},
		{`SELECT 'a\'; DELETE FROM t; --'`, "PostgreSQL SQLite"},
		{"SELECT 1 -- c\r; DELETE FROM t", "PostgreSQL"},
		{"SELECT 1 /*M!, NEXTVAL(s) */", "MariaDB"},
		{"SELECT 1 /*!50000 , NEXTVAL(s) */", "MariaDB"},
		{"SELECT NEXT VALUE FOR s", "MariaDB"},
		{"SELECT nextval('s')", "PostgreSQL"},  // MariaDB wants a name, not a string
		{"SELECT nextval('ts')", "PostgreSQL"}, // a temporary sequence: allowed in a read-only transaction
		{"SELECT 1 # '\n; DELETE FROM t; -- '", "MariaDB"},
		{"SELECT 1 --1; DELETE FROM t", "MariaDB"},
		{"SELECT 1 /* /* */ ; DELETE FROM t; /* */", "MariaDB SQLite"},
		{"SELECT `a` FROM t; DELETE FROM t; -- `", "MariaDB SQLite"},
		{"SELECT pg_advisory_lock(1)", "PostgreSQL"},
		{"SELECT GET_LOCK('x', 0)", "MariaDB"},
		{"SELECT @n := 1", "MariaDB"},
		{"SHOW TABLES WHERE NEXTVAL(s) > 0", "MariaDB"},
		{"SELECT * INTO x FROM t", "PostgreSQL"},
		{"WITH x AS (DELETE FROM t RETURNING *) SELECT * FROM x", "PostgreSQL"},
		{"SELECT 1; COMMIT; SELECT 2", "PostgreSQL MariaDB"},
		{"SELECT 1; UPDATE tt SET a = 0", "PostgreSQL MariaDB"}, // a temporary table
		{"SELECT * FROM t FOR UPDATE", ""},                      // a locking read, documented as a read
		{"SELECT * FROM t LOCK IN SHARE MODE", ""},
		{"EXPLAIN DELETE FROM t", ""},       // MariaDB refuses it in a read-only transaction, but only plans it
		{"EXPLAIN SELECT nextval('s')", ""}, // the plan only
		// Users' functions (pgUserFuncs, myUserFuncs, liteCalls).
		{"SELECT audit.log('user signed in')", "PostgreSQL"},
		{"SELECT app.insert('a')", "PostgreSQL"},
		{"SELECT jobs.replace(1)", "PostgreSQL"},
		{"SELECT * FROM audit.log('x')", "PostgreSQL"},
		{"SELECT log('msg')", "PostgreSQL SQLite"},  // PostgreSQL: public.log(text) takes the literal
		{"SELECT lower(1)", "PostgreSQL"},           // public.lower(int)
		{"SELECT lower(b) FROM t", ""},              // pg_catalog.lower(text): an exact match
		{"SELECT t.audit FROM t", "PostgreSQL"},     // audit(t), by attribute notation
		{"SELECT x.audit FROM t x", "PostgreSQL"},   //
		{"SELECT t.a FROM t", ""},                   // a column
		{"SELECT upper(1)", "PostgreSQL"},           // STABLE, and it calls a VOLATILE writer
		{"EXPLAIN SELECT format(1)", "PostgreSQL"},  // IMMUTABLE: folded while planning
		{"SELECT * FROM bump() AS b", "PostgreSQL"}, // an alias, not a CTE's columns
		{"SELECT initcap('x')", "MariaDB SQLite"},   // not a MySQL built-in
		{"SELECT string_agg('x', ',')", "MariaDB"},  // NO SQL, and it writes
		{"SELECT count (1)", "MariaDB"},             // a space: the stored function
		{"SELECT count/**/(1)", "MariaDB"},          // a comment: the same
		{"SELECT count(1)", ""},                     // the built-in
		{"SELECT rank ()", "MariaDB"},               // a window function's name, alone
	} {
		got := judgeAll(t, es, c.sql)
		t.Logf("%q: IsReadOnly %v, writes on %v", c.sql, IsReadOnly(c.sql), got)
		for _, name := range []string{"PostgreSQL", "MariaDB", "SQLite"} {
			want := strings.Contains(c.engines, name)
			if _, ok := got[name]; ok != want {
				t.Errorf("%q on %s: wrote %v (%s), want %v", c.sql, name, ok, got[name], want)
			}
		}
		for _, e := range es {
			if _, ok := got[e.name()]; !ok {
				continue
			}
			claimed, err := claimsRead(context.Background(), e, c.sql)
			if err != nil || claimed {
				t.Errorf("%q writes on %s, but the analysis lets it be replayed as a read there (%v)", c.sql, e.name(), err)
			}
		}
	}
}

// TestEngineCorpusFiles checks that the checked-in corpus of
// FuzzReadOnlyEngines, which "go test" replays through the fuzz target, is
// there and well formed.
func TestEngineCorpusFiles(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("testdata", "fuzz", "FuzzReadOnlyEngines", "*"))
	if len(files) == 0 {
		t.Fatal("no corpus in testdata/fuzz/FuzzReadOnlyEngines")
	}
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(string(b), "go test fuzz v1\n") {
			t.Errorf("%s: not a fuzz corpus file", name)
		}
	}
}

// Fragments of texts that hide a write behind a construct some engine reads
// differently: a read, an opener, a fuzzed filler, a separator, a write and
// a closer. FuzzHiddenWrites and TestHiddenWriteSweep build texts from them.
var (
	hideLeads = [...]string{
		"SELECT 1", "SELECT a FROM t", "SELECT * FROM t WHERE b = ", "EXPLAIN SELECT 1",
		"EXPLAIN (COSTS OFF) SELECT 1", "VALUES (1)", "SHOW TABLES", "TABLE t",
		"WITH x AS (SELECT 1 AS a) SELECT * FROM x", "SELECT ('{1}'::int[])[length(",
		"SELECT 1 AS ", "SELECT * FROM t FOR UPDATE", "(SELECT 1)", "DESCRIBE t",
	}
	hideOpeners = [...]string{
		"", "'", "\"", "`", "[", "$$", "$a$", "$é$", "E'", "U&'", "B'", "N'", "X'",
		"/*", "/*!", "/*M!", "/*!50000", "/* /*", "--", "-- ", "#", "--\r", "-- '\r",
		"'\\", "\"\\", "E'\\", "'a\\'", "'\\\\'", "\xbf\\", "']'", "[']", "$1", "@", ":",
	}
	hideSeps   = [...]string{"; ", "\n; ", " ", "\n", "\r", "\r\n", "\x00; ", "\u00a0", "\u3000", ";\r", "*/ ", "]; "}
	hideWrites = [...]string{
		"DELETE FROM t", "UPDATE t SET a = 0", "INSERT INTO t VALUES (9, 9, 'z')",
		"SELECT nextval('s')", "SELECT NEXTVAL(s)", "SELECT NEXT VALUE FOR s", "SELECT nextval('ts')",
		"SELECT pg_advisory_lock(7)", "SELECT GET_LOCK('k', 0)", "CREATE TABLE z (a int)",
		"COMMIT", "DROP TABLE u", "UPDATE tt SET a = 0", "SELECT * INTO z FROM t",
		", NEXTVAL(s)", ", nextval('s')", "INTO @v", "FOR UPDATE",
	}
	hideClosers = [...]string{
		"", "; --", " -- '", "'", "\"", "`", "]", "$$", "$a$", "$é$", "*/", "*/ */", "\n",
		"; SELECT '", " -- ]'", " /* */", "; SELECT 1 -- '",
	}
)

// hiddenWrite builds a text from the fragments the indexes choose.
func hiddenWrite(lead, open, sep, write, closer int, filler string) string {
	return hideLeads[lead%len(hideLeads)] + hideOpeners[open%len(hideOpeners)] + filler +
		hideSeps[sep%len(hideSeps)] + hideWrites[write%len(hideWrites)] + hideClosers[closer%len(hideClosers)]
}

// FuzzHiddenWrites is FuzzReadOnlyEngines on texts built to hide a write:
// mutation of raw bytes seldom yields SQL that an engine runs, while these
// texts always hold a write that some reading may expose.
func FuzzHiddenWrites(f *testing.F) {
	f.Add(uint8(0), uint8(1), "a", uint8(0), uint8(0), uint8(2))
	f.Add(uint8(9), uint8(18), "", uint8(0), uint8(0), uint8(16))
	f.Add(uint8(0), uint8(15), "", uint8(2), uint8(14), uint8(10))
	f.Add(uint8(2), uint8(20), " x", uint8(1), uint8(0), uint8(2))
	es := openEngines(f)
	f.Fuzz(func(t *testing.T, lead, open uint8, filler string, sep, write, closer uint8) {
		if len(filler) > 64 {
			return
		}
		s := hiddenWrite(int(lead), int(open), int(sep), int(write), int(closer), filler)
		if !IsReadOnly(s) {
			return
		}
		if wrote := judgeAll(t, es, s); len(wrote) > 0 {
			t.Fatalf("IsReadOnly(%q) = true, but it writes: %v", s, wrote)
		}
	})
}

// TestHiddenWriteSweep runs every combination of the fragments with an
// empty filler (1.7 million texts) through IsReadOnly, and those it calls
// read-only (about 270,000) through the engines. That takes the better part
// of an hour, so it runs only with SQLTEXT_SWEEP=n, and then judges every
// n-th of them.
func TestHiddenWriteSweep(t *testing.T) {
	stride, _ := strconv.Atoi(os.Getenv("SQLTEXT_SWEEP"))
	if stride < 1 {
		t.Skip("set SQLTEXT_SWEEP=n to judge every n-th read-only combination of the hidden-write fragments")
	}
	es := openEngines(t)
	total, readOnly, judged := 0, 0, 0
	start := time.Now()
	seen := map[string]bool{}
	for lead := range hideLeads {
		for open := range hideOpeners {
			for sep := range hideSeps {
				for write := range hideWrites {
					for closer := range hideClosers {
						s := hiddenWrite(lead, open, sep, write, closer, "")
						total++
						if seen[s] || !IsReadOnly(s) {
							continue
						}
						seen[s] = true
						readOnly++
						if readOnly%stride != 0 {
							continue
						}
						judged++
						if wrote := judgeAll(t, es, s); len(wrote) > 0 {
							t.Errorf("IsReadOnly(%q) = true, but it writes: %v", s, wrote)
						}
						if judged%10000 == 0 {
							t.Logf("%d judged in %v", judged, time.Since(start).Round(time.Second))
						}
					}
				}
			}
		}
	}
	t.Logf("%d texts, %d read-only, %d of them judged by the engines in %v", total, readOnly, judged, time.Since(start).Round(time.Second))
}

// TestMySQLBuiltinsBeatStoredFunctions checks mysqlBuiltins and
// mysqlReserved against MariaDB: with a stored function of a name in
// either, one that writes, the name called unqualified with "(" right after
// it is the built-in or syntax (an error is fine), never the stored
// function. CalledNames asks the catalog about every other name, and about
// any name written with a space before "(".
func TestMySQLBuiltinsBeatStoredFunctions(t *testing.T) {
	dsn := dbtest.FreshMySQL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, "CREATE TABLE called (name varchar(64))"); err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(mysqlBuiltins)+len(mysqlReserved))
	for n := range mysqlBuiltins {
		names = append(names, n)
	}
	for n := range mysqlReserved {
		names = append(names, n)
	}
	for _, n := range names {
		create := "CREATE FUNCTION `" + n + "`(x INT) RETURNS INT BEGIN INSERT INTO called VALUES ('" + n + "'); RETURN 4242; END"
		if _, err := db.ExecContext(ctx, create); err != nil {
			t.Fatalf("%s: %v", create, err)
		}
		_, _ = db.ExecContext(ctx, "SELECT "+n+"(1)")
		if mysqlReserved[n] {
			continue
		}
		if got, ok := CalledNames(MySQL, "SELECT "+n+" (1)"); !ok || len(got) != 1 {
			t.Errorf("CalledNames(MySQL, %q) = %q, %v: want it asked", "SELECT "+n+" (1)", got, ok)
		}
		if got, ok := CalledNames(MySQL, "SELECT "+n+"(1)"); !ok || len(got) != 0 {
			t.Errorf("CalledNames(MySQL, %q) = %q, %v: want no name to ask", "SELECT "+n+"(1)", got, ok)
		}
	}
	rows, err := db.QueryContext(ctx, "SELECT name FROM called")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		t.Errorf("SELECT %s(1) called the stored function %s: MariaDB does not build it in", n, n)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
}
