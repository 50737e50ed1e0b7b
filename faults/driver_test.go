package faults_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib"
	mssql "github.com/microsoft/go-mssqldb"
	_ "modernc.org/sqlite"

	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/faults"
	"github.com/sqlretry/sqlretry/internal/dbtest"
)

// engine is one real database the fault driver is proven against.
type engine struct {
	name   string
	engine faults.Engine
	// open returns a database whose connections obey plan, and a clean one
	// for verification.
	open func(t *testing.T, dsn string, plan *faults.Plan) (faulty, clean *sql.DB)
	// dsn returns the DSN of an empty database, dropped when t ends.
	dsn func(t *testing.T) string
	// ph returns the n-th (1-based) placeholder.
	ph func(n int) string
}

func question(int) string              { return "?" }
func dollar(n int) string              { return fmt.Sprintf("$%d", n) }
func closeDB(t *testing.T, db *sql.DB) { t.Cleanup(func() { db.Close() }) }

func sqliteEngine() engine {
	return engine{name: "sqlite", engine: faults.SQLite, ph: question,
		dsn: func(t *testing.T) string {
			return "file:" + filepath.Join(t.TempDir(), "faults.db") + "?_pragma=busy_timeout(5000)&_pragma=journal_mode(wal)"
		},
		open: func(t *testing.T, dsn string, plan *faults.Plan) (*sql.DB, *sql.DB) {
			clean, err := sql.Open("sqlite", dsn)
			if err != nil {
				t.Fatal(err)
			}
			closeDB(t, clean)
			// The Driver path: a wrapper registered under its own name.
			d := &faults.Driver{Inner: clean.Driver(), Plan: plan}
			c, err := d.OpenConnector(dsn)
			if err != nil {
				t.Fatal(err)
			}
			faulty := sql.OpenDB(c)
			closeDB(t, faulty)
			return faulty, clean
		}}
}

func postgresEngine() engine {
	return engine{name: "postgres", engine: faults.Postgres, ph: dollar,
		dsn: func(t *testing.T) string { return dbtest.FreshPostgres(t) },
		open: func(t *testing.T, dsn string, plan *faults.Plan) (*sql.DB, *sql.DB) {
			clean, err := sql.Open("pgx", dsn)
			if err != nil {
				t.Fatal(err)
			}
			closeDB(t, clean)
			// The Open path: a driver registered by name.
			faulty, err := faults.Open("pgx", dsn, plan)
			if err != nil {
				t.Fatal(err)
			}
			closeDB(t, faulty)
			return faulty, clean
		}}
}

func mysqlEngine() engine {
	return engine{name: "mariadb", engine: faults.MySQL, ph: question,
		dsn: func(t *testing.T) string { return dbtest.FreshMySQL(t) },
		open: func(t *testing.T, dsn string, plan *faults.Plan) (*sql.DB, *sql.DB) {
			cfg, err := mysql.ParseDSN(dsn)
			if err != nil {
				t.Fatal(err)
			}
			inner, err := mysql.NewConnector(cfg)
			if err != nil {
				t.Fatal(err)
			}
			// The Connector path.
			faulty := sql.OpenDB(faults.Connector(inner, plan))
			closeDB(t, faulty)
			clean := sql.OpenDB(inner)
			closeDB(t, clean)
			return faulty, clean
		}}
}

// fakeClock is a settable clock for outage windows.
type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) now() time.Time      { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) set(t time.Time)     { c.ns.Store(t.UnixNano()) }
func (c *fakeClock) add(d time.Duration) { c.ns.Add(int64(d)) }

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// scenario is one fault kind proven against one engine.
type scenario struct {
	name  string
	rules func(e engine) []faults.Rule
	run   func(t *testing.T, e engine, env *scenarioEnv)
}

type scenarioEnv struct {
	faulty, clean *sql.DB
	plan          *faults.Plan
	clock         *fakeClock
	slept         *[]time.Duration
	table         string
}

func (s *scenarioEnv) insert(e engine) string {
	return fmt.Sprintf("INSERT INTO %s (id, v) VALUES (%s, %s)", s.table, e.ph(1), e.ph(2))
}

func (s *scenarioEnv) rows(t *testing.T) int {
	t.Helper()
	var n int
	if err := s.clean.QueryRow("SELECT COUNT(*) FROM " + s.table).Scan(&n); err != nil {
		t.Fatalf("count rows: %v", err)
	}
	return n
}

// wantPhase checks that err was injected by kind and classifies, engine
// neutrally, as phase.
func wantPhase(t *testing.T, err error, kind faults.Kind, phase sqlretry.Phase) {
	t.Helper()
	var fe *faults.Error
	if !errors.As(err, &fe) {
		t.Fatalf("got error %v, want an injected *faults.Error", err)
	}
	if fe.Kind != kind {
		t.Errorf("got fault kind %s, want %s", fe.Kind, kind)
	}
	c := sqlretry.ClassifyNeutral(err)
	if !c.Retryable || c.Phase != phase {
		t.Errorf("ClassifyNeutral(%v) = retryable %v phase %v, want retryable phase %v", err, c.Retryable, c.Phase, phase)
	}
}

func wantCount(t *testing.T, p *faults.Plan, kind faults.Kind, want int) {
	t.Helper()
	if got := p.Counts().Faults[kind]; got != want {
		t.Errorf("got %d %s faults counted, want %d", got, kind, want)
	}
}

func wantRows(t *testing.T, env *scenarioEnv, want int) {
	t.Helper()
	if got := env.rows(t); got != want {
		t.Errorf("got %d rows in %s, want %d", got, env.table, want)
	}
}

func insertTx(ctx context.Context, db *sql.DB, stmt string) (txErr, execErr, commitErr error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err, nil, nil
	}
	if _, err := tx.ExecContext(ctx, stmt, 1, "a"); err != nil {
		tx.Rollback()
		return nil, err, nil
	}
	return nil, nil, tx.Commit()
}

var scenarios = []scenario{
	{
		name:  "commit_applied_reply_lost: row committed, caller saw an error",
		rules: func(engine) []faults.Rule { return []faults.Rule{{Kind: faults.CommitAppliedReplyLost}} },
		run: func(t *testing.T, e engine, env *scenarioEnv) {
			beginErr, execErr, commitErr := insertTx(context.Background(), env.faulty, env.insert(e))
			if beginErr != nil || execErr != nil {
				t.Fatalf("begin: %v, exec: %v; want both to succeed", beginErr, execErr)
			}
			wantPhase(t, commitErr, faults.CommitAppliedReplyLost, sqlretry.Unknown)
			wantCount(t, env.plan, faults.CommitAppliedReplyLost, 1)
			wantRows(t, env, 1)
		},
	},
	{
		name: "after_exec: statement ran in the transaction, then the connection died; nothing committed",
		rules: func(engine) []faults.Rule {
			return []faults.Rule{{Kind: faults.AfterExec, Verb: "insert"}}
		},
		run: func(t *testing.T, e engine, env *scenarioEnv) {
			_, execErr, _ := insertTx(context.Background(), env.faulty, env.insert(e))
			wantPhase(t, execErr, faults.AfterExec, sqlretry.Unknown)
			wantCount(t, env.plan, faults.AfterExec, 1)
			if got := env.plan.Counts().Passed[faults.OpExec]; got < 1 {
				t.Errorf("got %d execs passed to the inner driver, want the INSERT to have run", got)
			}
			wantRows(t, env, 0)
			// The pool threw the dead connection away: the next call works.
			if _, err := env.faulty.Exec(env.insert(e), 2, "b"); err != nil {
				t.Errorf("insert after the fault: %v", err)
			}
			wantRows(t, env, 1)
		},
	},
	{
		name:  "commit_not_applied: COMMIT never reached the database; nothing committed",
		rules: func(engine) []faults.Rule { return []faults.Rule{{Kind: faults.CommitNotApplied}} },
		run: func(t *testing.T, e engine, env *scenarioEnv) {
			_, _, commitErr := insertTx(context.Background(), env.faulty, env.insert(e))
			wantPhase(t, commitErr, faults.CommitNotApplied, sqlretry.NotSent)
			if !errors.Is(commitErr, driver.ErrBadConn) {
				t.Errorf("got %v, want it to wrap driver.ErrBadConn", commitErr)
			}
			wantCount(t, env.plan, faults.CommitNotApplied, 1)
			if got := env.plan.Counts().Passed[faults.OpCommit]; got != 0 {
				t.Errorf("got %d commits passed to the inner driver, want 0", got)
			}
			wantRows(t, env, 0)
		},
	},
	{
		// database/sql retries driver.ErrBadConn twice on fresh connections
		// outside a transaction, so three faults reach the caller.
		name: "before_send: the inner driver never saw the statement",
		rules: func(engine) []faults.Rule {
			return []faults.Rule{{Kind: faults.BeforeSend, Verb: "INSERT", Count: 3}}
		},
		run: func(t *testing.T, e engine, env *scenarioEnv) {
			before := env.plan.Counts().Passed[faults.OpExec]
			_, err := env.faulty.Exec(env.insert(e), 1, "a")
			wantPhase(t, err, faults.BeforeSend, sqlretry.NotSent)
			wantCount(t, env.plan, faults.BeforeSend, 3)
			c := env.plan.Counts()
			if got := c.Passed[faults.OpExec] - before; got != 0 {
				t.Errorf("got %d execs passed to the inner driver, want 0", got)
			}
			if got := c.Statements[env.insert(e)][faults.BeforeSend]; got != 3 {
				t.Errorf("got %d before_send faults counted for the INSERT, want 3", got)
			}
			wantRows(t, env, 0)
		},
	},
	{
		name: "applied_reply_lost: an autocommit INSERT applied, caller saw an error",
		rules: func(engine) []faults.Rule {
			return []faults.Rule{{Kind: faults.AppliedReplyLost, Op: faults.OpExec, Match: "insert into"}}
		},
		run: func(t *testing.T, e engine, env *scenarioEnv) {
			_, err := env.faulty.Exec(env.insert(e), 1, "a")
			wantPhase(t, err, faults.AppliedReplyLost, sqlretry.Unknown)
			wantCount(t, env.plan, faults.AppliedReplyLost, 1)
			wantRows(t, env, 1)
		},
	},
	{
		name: "server_error: the engine's own deadlock error; the transaction is rolled back",
		rules: func(e engine) []faults.Rule {
			return []faults.Rule{{Kind: faults.ServerError, Verb: "INSERT", Engine: e.engine}}
		},
		run: func(t *testing.T, e engine, env *scenarioEnv) {
			tx, err := env.faulty.Begin()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(fmt.Sprintf("UPDATE %s SET v = 'x' WHERE id = 0", env.table)); err != nil {
				t.Fatalf("update before the fault: %v", err)
			}
			_, err = tx.Exec(env.insert(e), 1, "a")
			wantEngineError(t, e.engine, err)
			if err := tx.Commit(); !errors.Is(err, faults.ErrTxAborted) {
				t.Errorf("commit after the server error: got %v, want ErrTxAborted", err)
			}
			wantCount(t, env.plan, faults.ServerError, 1)
			wantRows(t, env, 0)
			// The connection itself survived the server error.
			if _, err := env.faulty.Exec(env.insert(e), 2, "b"); err != nil {
				t.Errorf("insert after the fault: %v", err)
			}
			wantRows(t, env, 1)
		},
	},
	{
		name: "latency: the call waits, then runs",
		rules: func(engine) []faults.Rule {
			return []faults.Rule{{Kind: faults.Latency, Verb: "INSERT", Delay: 250 * time.Millisecond}}
		},
		run: func(t *testing.T, e engine, env *scenarioEnv) {
			if _, err := env.faulty.Exec(env.insert(e), 1, "a"); err != nil {
				t.Fatal(err)
			}
			if got, want := fmt.Sprint(*env.slept), "[250ms]"; got != want {
				t.Errorf("got sleeps %s, want %s", got, want)
			}
			wantCount(t, env.plan, faults.Latency, 1)
			wantRows(t, env, 1)
		},
	},
	{
		name:  "hang: the call blocks until its context is done",
		rules: func(engine) []faults.Rule { return []faults.Rule{{Kind: faults.Hang, Verb: "INSERT"}} },
		run: func(t *testing.T, e engine, env *scenarioEnv) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() {
				_, err := env.faulty.ExecContext(ctx, env.insert(e), 1, "a")
				done <- err
			}()
			// Cancel once the hang has started (bounded wait).
			for i := 0; i < 1000 && env.plan.Counts().Faults[faults.Hang] == 0; i++ {
				time.Sleep(5 * time.Millisecond)
			}
			cancel()
			select {
			case err := <-done:
				if !errors.Is(err, context.Canceled) {
					t.Errorf("got %v, want context.Canceled", err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("hang did not end with its context")
			}
			wantCount(t, env.plan, faults.Hang, 1)
			wantRows(t, env, 0)
		},
	},
	{
		name: "outage: every call fails inside the window, and only there",
		rules: func(engine) []faults.Rule {
			return []faults.Rule{{Kind: faults.Outage, From: t0.Add(time.Minute), Until: t0.Add(2 * time.Minute), Phase: sqlretry.NotSent, Count: faults.Unlimited}}
		},
		run: func(t *testing.T, e engine, env *scenarioEnv) {
			env.clock.set(t0)
			if _, err := env.faulty.Exec(env.insert(e), 1, "a"); err != nil {
				t.Fatalf("before the outage: %v", err)
			}
			env.clock.add(90 * time.Second)
			_, err := env.faulty.Exec(env.insert(e), 2, "b")
			wantPhase(t, err, faults.Outage, sqlretry.NotSent)
			if err := env.faulty.Ping(); err == nil {
				t.Error("ping inside the outage: got nil, want an error")
			}
			if _, err := env.faulty.Begin(); err == nil {
				t.Error("begin inside the outage: got nil, want an error")
			}
			c := env.plan.Counts()
			if c.Faults[faults.Outage] < 3 {
				t.Errorf("got %d outage faults, want at least 3", c.Faults[faults.Outage])
			}
			if c.Statements["connect"][faults.Outage] == 0 {
				t.Errorf("got no connect refused in the outage, want the pool's new connections refused (statements %v)", c.Statements)
			}
			env.clock.add(30 * time.Second)
			if _, err := env.faulty.Exec(env.insert(e), 3, "c"); err != nil {
				t.Errorf("after the outage: %v", err)
			}
			wantRows(t, env, 2)
		},
	},
	{
		name: "outage with phase unknown: reset after send, nothing applied",
		rules: func(engine) []faults.Rule {
			return []faults.Rule{{Kind: faults.Outage, From: t0, Until: t0.Add(time.Minute), Count: faults.Unlimited}}
		},
		run: func(t *testing.T, e engine, env *scenarioEnv) {
			env.clock.set(t0)
			_, err := env.faulty.Exec(env.insert(e), 1, "a")
			wantPhase(t, err, faults.Outage, sqlretry.Unknown)
			env.clock.add(time.Minute)
			wantRows(t, env, 0)
		},
	},
}

func wantEngineError(t *testing.T, e faults.Engine, err error) {
	t.Helper()
	switch e {
	case faults.Postgres:
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "40P01" {
			t.Errorf("got %v, want a *pgconn.PgError 40P01", err)
		}
	case faults.MySQL:
		var me *mysql.MySQLError
		if !errors.As(err, &me) || me.Number != 1213 {
			t.Errorf("got %v, want a *mysql.MySQLError 1213", err)
		}
	case faults.SQLServer:
		var me mssql.Error
		if !errors.As(err, &me) || me.Number != 1205 {
			t.Errorf("got %v, want an mssql.Error 1205", err)
		}
	case faults.SQLite:
		var ce interface{ Code() int }
		if !errors.As(err, &ce) || ce.Code() != 5 {
			t.Errorf("got %v, want an error with Code() 5", err)
		}
	}
}

func runScenarios(t *testing.T, e engine) {
	dsn := e.dsn(t)
	for i, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			clock := &fakeClock{}
			clock.set(t0.Add(-time.Hour))
			var slept []time.Duration
			plan := faults.MustPlan(faults.Config{
				Rules: sc.rules(e),
				Now:   clock.now,
				Sleep: func(ctx context.Context, d time.Duration) error { slept = append(slept, d); return nil },
			})
			plan.Disable() // set up the table cleanly
			faulty, clean := e.open(t, dsn, plan)
			env := &scenarioEnv{faulty: faulty, clean: clean, plan: plan, clock: clock, slept: &slept,
				table: fmt.Sprintf("faults_%s_%d", e.name, i)}
			if _, err := clean.Exec(fmt.Sprintf("CREATE TABLE %s (id INT PRIMARY KEY, v VARCHAR(10))", env.table)); err != nil {
				t.Fatal(err)
			}
			if err := faulty.Ping(); err != nil { // warm the pool with one clean connection
				t.Fatal(err)
			}
			plan.Enable()
			sc.run(t, e, env)
		})
	}
}

func TestDriverSQLite(t *testing.T)   { runScenarios(t, sqliteEngine()) }
func TestDriverPostgres(t *testing.T) { runScenarios(t, postgresEngine()) }
func TestDriverMariaDB(t *testing.T)  { runScenarios(t, mysqlEngine()) }

func TestDriverForwardsDriverFeatures(t *testing.T) {
	e := sqliteEngine()
	plan := faults.MustPlan(faults.Config{Rules: []faults.Rule{{Kind: faults.AppliedReplyLost, Verb: "INSERT", Nth: 2}}})
	db, clean := e.open(t, e.dsn(t), plan)
	if _, err := db.Exec("CREATE TABLE f (id INT PRIMARY KEY, v VARCHAR(10))"); err != nil {
		t.Fatal(err)
	}
	// A prepared statement is faulted like a direct Exec, on its 2nd use.
	st, err := db.Prepare("INSERT INTO f (id, v) VALUES (?, ?)")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Exec(1, "a"); err != nil {
		t.Fatalf("first prepared insert: %v", err)
	}
	_, err = st.Exec(2, "b")
	wantPhase(t, err, faults.AppliedReplyLost, sqlretry.Unknown)
	var n int
	if err := clean.QueryRow("SELECT COUNT(*) FROM f").Scan(&n); err != nil || n != 2 {
		t.Errorf("got %d rows, %v; want 2 (the reply-lost insert applied)", n, err)
	}
	// Named parameters reach the driver (NamedValueChecker, ExecerContext).
	if _, err := db.Exec("INSERT INTO f (id, v) VALUES (:id, :v)", sql.Named("id", 3), sql.Named("v", "c")); err != nil {
		t.Errorf("named parameters: %v", err)
	}
	// Rows are the driver's own: column type interfaces survive.
	rows, err := db.Query("SELECT id, v FROM f")
	if err != nil {
		t.Fatal(err)
	}
	cts, err := rows.ColumnTypes()
	rows.Close()
	if err != nil || len(cts) != 2 || cts[0].DatabaseTypeName() != "INT" || cts[1].DatabaseTypeName() != "VARCHAR(10)" {
		t.Errorf("got column types %v, %v; want INT and VARCHAR(10) from the driver", cts, err)
	}
	// sql.Conn.Raw reaches the driver's connection through Unwrap.
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	err = conn.Raw(func(dc any) error {
		u, ok := dc.(interface{ Unwrap() driver.Conn })
		if !ok {
			return fmt.Errorf("got %T, want a wrapper with Unwrap", dc)
		}
		if _, ok := u.Unwrap().(driver.ConnBeginTx); !ok {
			return fmt.Errorf("Unwrap() = %T, want the sqlite connection", u.Unwrap())
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
	if got := plan.Counts().Statements["INSERT INTO f (id, v) VALUES (?, ?)"][faults.AppliedReplyLost]; got != 1 {
		t.Errorf("got %d faults counted for the prepared INSERT, want 1", got)
	}
}

// TestDriverOpsSQLite covers the calls besides exec: connect, begin, commit,
// rollback, ping and query.
func TestDriverOpsSQLite(t *testing.T) {
	e := sqliteEngine()
	dsn := e.dsn(t)
	tests := []struct {
		name string
		rule faults.Rule
		run  func(t *testing.T, db *sql.DB) error
		// check inspects the error run returned.
		check func(t *testing.T, err error)
	}{
		{"connect refused", faults.Rule{Kind: faults.BeforeSend, Op: faults.OpConnect},
			func(t *testing.T, db *sql.DB) error { return db.Ping() },
			func(t *testing.T, err error) { wantPhase(t, err, faults.BeforeSend, sqlretry.NotSent) }},
		{"begin: database/sql retries driver.ErrBadConn by itself", faults.Rule{Kind: faults.BeforeSend, Op: faults.OpBegin},
			func(t *testing.T, db *sql.DB) error {
				tx, err := db.Begin()
				if err == nil {
					tx.Rollback()
				}
				return err
			},
			func(t *testing.T, err error) {
				if err != nil {
					t.Errorf("got %v, want database/sql to retry the begin on a fresh connection", err)
				}
			}},
		{"server error on begin", faults.Rule{Kind: faults.ServerError, Op: faults.OpBegin, Engine: faults.SQLite, Code: "5"},
			func(t *testing.T, db *sql.DB) error { _, err := db.Begin(); return err },
			func(t *testing.T, err error) { wantEngineError(t, faults.SQLite, err) }},
		{"server error on commit rolls back", faults.Rule{Kind: faults.ServerError, Op: faults.OpCommit, Engine: faults.Postgres, Code: "40001"},
			func(t *testing.T, db *sql.DB) error {
				tx, err := db.Begin()
				if err != nil {
					return err
				}
				return tx.Commit()
			},
			func(t *testing.T, err error) {
				var pe *pgconn.PgError
				if !errors.As(err, &pe) || pe.Code != "40001" {
					t.Errorf("got %v, want a 40001 PgError", err)
				}
			}},
		{"hang on commit ends with the transaction's context", faults.Rule{Kind: faults.Hang, Op: faults.OpCommit},
			func(t *testing.T, db *sql.DB) error {
				ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
				defer cancel()
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					return err
				}
				return tx.Commit()
			},
			func(t *testing.T, err error) {
				if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, sql.ErrTxDone) {
					t.Errorf("got %v, want the context's deadline (or sql.ErrTxDone if database/sql saw it first)", err)
				}
			}},
		{"rollback lost", faults.Rule{Kind: faults.BeforeSend, Op: faults.OpRollback},
			func(t *testing.T, db *sql.DB) error {
				tx, err := db.Begin()
				if err != nil {
					return err
				}
				return tx.Rollback()
			},
			func(t *testing.T, err error) { wantPhase(t, err, faults.BeforeSend, sqlretry.NotSent) }},
		{"query reply lost", faults.Rule{Kind: faults.AppliedReplyLost, Op: faults.OpQuery},
			func(t *testing.T, db *sql.DB) error {
				rows, err := db.Query("SELECT 1")
				if err == nil {
					rows.Close()
				}
				return err
			},
			func(t *testing.T, err error) { wantPhase(t, err, faults.AppliedReplyLost, sqlretry.Unknown) }},
		{"ping outage", faults.Rule{Kind: faults.Outage, Op: faults.OpPing, Count: faults.Unlimited},
			func(t *testing.T, db *sql.DB) error { return db.Ping() },
			func(t *testing.T, err error) { wantPhase(t, err, faults.Outage, sqlretry.Unknown) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plan := faults.MustPlan(faults.Config{Rules: []faults.Rule{tt.rule}})
			db, _ := e.open(t, dsn, plan)
			tt.check(t, tt.run(t, db))
			if got := plan.Counts().Faults[tt.rule.Kind]; got != 1 {
				t.Errorf("got %d %s faults, want 1", got, tt.rule.Kind)
			}
		})
	}
}
