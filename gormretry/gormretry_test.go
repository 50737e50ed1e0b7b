package gormretry_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	gmysql "gorm.io/driver/mysql"
	gpostgres "gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/gormretry"
)

// K is a hot row; Ledger holds one row per applied call.
type K struct {
	ID int
	N  int
}

func (K) TableName() string { return "k" }

type Ledger struct {
	V   int64
	Grp string
}

func (Ledger) TableName() string { return "ledger" }

// openGorm opens gorm over a sqlretry handle of e's database.
func openGorm(t *testing.T, e *engine, p *sqlretry.Policy, cfg gorm.Config) (*gorm.DB, *sql.DB) {
	sdb, err := sqlretry.Open(e.driver, e.dsn, p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sdb.Close() })
	var d gorm.Dialector = gpostgres.New(gpostgres.Config{Conn: sdb})
	if e.driver == "mysql" {
		d = gmysql.New(gmysql.Config{Conn: sdb, SkipInitializeWithVersion: true})
	}
	cfg.Logger = logger.Discard // gorm logs every failed statement; the tests count them
	gdb, err := gorm.Open(d, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	return gdb, sdb
}

// postgresOnly returns the PostgreSQL engine with the chaos schema and a
// function that fails with a serialization failure (40001, retryable) the
// first time it is called, then returns 1: a sequence is not rolled back.
// ledger_fail_once is the same, as a trigger function.
func postgresOnly(t *testing.T) *engine {
	e := engines(t)[0]
	schema(t, e)
	db, err := sql.Open(e.driver, e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, s := range []string{
		"CREATE SEQUENCE once",
		`CREATE FUNCTION fail_once() RETURNS int LANGUAGE plpgsql AS $$
		BEGIN IF nextval('once') = 1 THEN RAISE EXCEPTION 'injected' USING ERRCODE = '40001'; END IF; RETURN 1; END $$`,
		`CREATE FUNCTION ledger_fail_once() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN PERFORM fail_once(); RETURN NEW; END $$`,
	} {
		if _, err := db.Exec(s); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// An error GORM flattened into text still decides the retry: GORM's
// AddError keeps the first of two errors as text ("%v; %w"), and code
// that formats with %v does the same. Transaction puts the driver's first
// error back, so the serialization failure is retried; without that the
// Policy would see only text and return it as a permanent error.
func TestFlattenedErrorIsRetried(t *testing.T) {
	flatten := map[string]func(tx *gorm.DB) error{
		"gorm AddError": func(tx *gorm.DB) error {
			q := tx.Exec("SELECT fail_once()")
			if q.Error != nil {
				q.AddError(errors.New("audit: not written")) // as gorm's callbacks chain a second error
			}
			return q.Error
		},
		"fmt %v": func(tx *gorm.DB) error {
			if err := tx.Exec("SELECT fail_once()").Error; err != nil {
				return fmt.Errorf("step one: %v", err)
			}
			return nil
		},
	}
	for name, step := range flatten {
		t.Run(name, func(t *testing.T) {
			e := postgresOnly(t)
			p := e.policy(t)
			gdb, _ := openGorm(t, e, p, gorm.Config{})
			attempts := 0
			err := gormretry.Transaction(context.Background(), gdb, p, sqlretry.Write("flat", nil), func(tx *gorm.DB) error {
				attempts++
				if err := step(tx); err != nil {
					return err
				}
				return tx.Create(&Ledger{V: 1, Grp: "flat"}).Error
			})
			if err != nil || attempts != 2 {
				t.Fatalf("got %v after %d attempts, want success on the second", err, attempts)
			}
		})
	}
}

// With TranslateError, gorm's MySQL driver replaces a unique violation by
// gorm.ErrDuplicatedKey, dropping the driver's error (its PostgreSQL
// driver keeps both): the caller gets both back, the classifier sees the
// engine's code, and the violation is not retried.
func TestTranslatedErrorKeepsTheDriverError(t *testing.T) {
	for _, e := range engines(t) {
		t.Run(e.name, func(t *testing.T) {
			schema(t, e)
			p := e.policy(t)
			gdb, _ := openGorm(t, e, p, gorm.Config{TranslateError: true})
			if err := gdb.Exec("CREATE UNIQUE INDEX ledger_v_unique ON ledger (v)").Error; err != nil {
				t.Fatal(err)
			}
			attempts := 0
			err := gormretry.Transaction(context.Background(), gdb, p, sqlretry.Write("dup", nil), func(tx *gorm.DB) error {
				attempts++
				if err := tx.Create(&Ledger{V: 5, Grp: "a"}).Error; err != nil {
					return err
				}
				return tx.Create(&Ledger{V: 5, Grp: "b"}).Error
			})
			code := e.classifier.Classify(err).Code
			if !errors.Is(err, gorm.ErrDuplicatedKey) || (code != "23505" && code != "1062") || attempts != 1 {
				t.Fatalf("got %v (code %q) after %d attempts; want gorm.ErrDuplicatedKey and the engine's unique violation after 1", err, code, attempts)
			}
			var n int64
			if err := gdb.Model(&Ledger{}).Count(&n).Error; err != nil || n != 0 {
				t.Fatalf("ledger has %d rows (%v), want 0: the transaction was rolled back", n, err)
			}
		})
	}
}

// fn may not commit or roll back: Transaction does, and a transaction
// committed behind its back could be run again.
func TestCommitInsideIsRefused(t *testing.T) {
	e := postgresOnly(t)
	p := e.policy(t)
	gdb, _ := openGorm(t, e, p, gorm.Config{})
	err := gormretry.Transaction(context.Background(), gdb, p, sqlretry.Write("commit", nil), func(tx *gorm.DB) error {
		if err := tx.Create(&Ledger{V: 9, Grp: "c"}).Error; err != nil {
			return err
		}
		tx.Commit() // its error is ignored, as careless code does
		return nil
	})
	if !errors.Is(err, gormretry.ErrTxControl) {
		t.Fatalf("got %v, want ErrTxControl", err)
	}
	var n int64
	if err := gdb.Model(&Ledger{}).Count(&n).Error; err != nil || n != 0 {
		t.Fatalf("ledger has %d rows (%v), want 0", n, err)
	}
	// A nested Transaction on the session is refused; gorm's own nested
	// tx.Transaction uses a savepoint and works.
	err = gormretry.Transaction(context.Background(), gdb, p, sqlretry.Write("outer", nil), func(tx *gorm.DB) error {
		if err := gormretry.Transaction(context.Background(), tx, p, sqlretry.Write("inner", nil), func(*gorm.DB) error { return nil }); !errors.Is(err, sqlretry.ErrNestedTx) {
			t.Errorf("nested Transaction: got %v, want ErrNestedTx", err)
		}
		return tx.Transaction(func(tx *gorm.DB) error { return tx.Create(&Ledger{V: 10, Grp: "sp"}).Error })
	})
	if err != nil {
		t.Fatalf("savepoint inside Transaction: %v", err)
	}
}

// GORM's default write transaction wraps every Create, Update and Delete in
// a transaction of its own, and the Connector never replays a statement
// inside a transaction: a retryable failure of the INSERT is returned. With
// SkipDefaultTransaction the INSERT is an autocommit statement, which the
// Connector retries (and settles, with sqlretry.WithOp).
func TestDefaultTransactionHidesTheWrite(t *testing.T) {
	for _, skip := range []bool{false, true} {
		t.Run(fmt.Sprintf("SkipDefaultTransaction=%v", skip), func(t *testing.T) {
			e := postgresOnly(t)
			p := e.policy(t)
			// Not through the sqlretry handle: its Connector reads
			// EXECUTE FUNCTION as a procedure call that may leave a
			// transaction open, and replays nothing on that session after.
			plain, err := sql.Open(e.driver, e.dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer plain.Close()
			if _, err := plain.Exec("CREATE TRIGGER t BEFORE INSERT ON ledger FOR EACH ROW EXECUTE FUNCTION ledger_fail_once()"); err != nil {
				t.Fatal(err)
			}
			gdb, _ := openGorm(t, e, p, gorm.Config{SkipDefaultTransaction: skip})
			err = gdb.Create(&Ledger{V: 3, Grp: "d"}).Error
			var pgErr *pgconn.PgError
			switch {
			case skip && err != nil:
				t.Fatalf("with SkipDefaultTransaction: %v, want the INSERT retried", err)
			case !skip && (!errors.As(err, &pgErr) || pgErr.Code != "40001"):
				t.Fatalf("in gorm's default transaction: %v, want the 40001 returned unretried", err)
			}
		})
	}
}

// Under session kills and deadlocks: gormretry.Transaction against gorm's
// own db.Transaction over the same sqlretry handle, and plain
// sqlretry.RunTx as the baseline, in the same run.
func TestChaos(t *testing.T) {
	for _, e := range engines(t) {
		t.Run(e.name, func(t *testing.T) {
			schema(t, e)
			p := e.policy(t)
			gdb, sdb := openGorm(t, e, p, gorm.Config{SkipDefaultTransaction: true})
			groups := []group{
				{"gormretry.Transaction", helperCall(e, gdb, sdb, p)},
				{"gorm db.Transaction", plainCall(gdb)},
				{"sqlretry.RunTx", baselineCall(e, sdb, p)},
			}
			res, kills := runChaos(t, e, chaosDuration(), groups)
			for _, g := range groups {
				t.Logf("%s %-21s %v (first failure: %v)", e.name, g.name, res[g.name], res[g.name].sample)
			}
			t.Logf("%s: %d sessions killed; %+v", e.name, kills, p.Stats())
			if kills == 0 {
				t.Errorf("no session was killed")
			}
			assertSafe(t, e, "gormretry.Transaction", res["gormretry.Transaction"])
			assertSafe(t, e, "sqlretry.RunTx", res["sqlretry.RunTx"])
		})
	}
}

// body is the transaction in gorm's idiom.
func body(tx *gorm.DB, v int64, first, second int, grp string) error {
	if err := tx.Model(&K{}).Where("id = ?", first).UpdateColumn("n", gorm.Expr("n + ?", 1)).Error; err != nil {
		return err
	}
	if err := tx.Create(&Ledger{V: v, Grp: grp}).Error; err != nil {
		return err
	}
	return tx.Model(&K{}).Where("id = ?", second).UpdateColumn("n", gorm.Expr("n + ?", 1)).Error
}

func helperCall(e *engine, gdb *gorm.DB, sdb *sql.DB, p *sqlretry.Policy) call {
	return func(ctx context.Context, v int64, first, second int, attempts *atomic.Int64) error {
		verify := sqlretry.Exists(sdb, e.q(findValue), v)
		return gormretry.Transaction(ctx, gdb, p, sqlretry.Write("ledger", verify), func(tx *gorm.DB) error {
			attempts.Add(1)
			return body(tx, v, first, second, "helper")
		})
	}
}

func plainCall(gdb *gorm.DB) call {
	return func(ctx context.Context, v int64, first, second int, attempts *atomic.Int64) error {
		attempts.Add(1)
		return gdb.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			return body(tx, v, first, second, "plain")
		})
	}
}

func baselineCall(e *engine, db *sql.DB, p *sqlretry.Policy) call {
	return func(ctx context.Context, v int64, first, second int, attempts *atomic.Int64) error {
		verify := sqlretry.Exists(db, e.q(findValue), v)
		return sqlretry.RunTx(ctx, db, p, sqlretry.Write("ledger", verify), nil, func(ctx context.Context, tx *sql.Tx) error {
			attempts.Add(1)
			if _, err := tx.ExecContext(ctx, e.q(bumpRow), first); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, e.q(insertValue), v, "baseline"); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, e.q(bumpRow), second)
			return err
		})
	}
}

// With PrepareStmt, gorm's pool is a *gorm.PreparedStmtDB: Transaction
// still finds the *sql.DB, and runs the transaction's statements
// unprepared.
func TestPrepareStmt(t *testing.T) {
	e := postgresOnly(t)
	p := e.policy(t)
	gdb, _ := openGorm(t, e, p, gorm.Config{PrepareStmt: true})
	err := gormretry.Transaction(context.Background(), gdb, p, sqlretry.Write("prepared", nil), func(tx *gorm.DB) error {
		return body(tx, 1, 1, 2, "prepared")
	})
	var n int64
	if err != nil || gdb.Model(&Ledger{}).Count(&n).Error != nil || n != 1 {
		t.Fatalf("Transaction with PrepareStmt: %v, ledger has %d rows; want nil and 1", err, n)
	}
}
