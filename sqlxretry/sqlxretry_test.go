package sqlxretry_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/jmoiron/sqlx"

	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/sqlxretry"
)

// open returns e's database as sqlx sees it over a sqlretry handle.
func open(t *testing.T, e *engine, p *sqlretry.Policy) *sqlx.DB {
	sdb, err := sqlretry.Open(e.driver, e.dsn, p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sdb.Close() })
	return sqlx.NewDb(sdb, e.driver)
}

type entry struct {
	V   int64  `db:"v"`
	Grp string `db:"grp"`
}

// The transaction function's *sqlx.Tx binds like the DB: NamedExec writes
// on PostgreSQL ($1) and MariaDB (?), and an unsafe DB gives an unsafe Tx.
// A *sqlx.Tx made by struct literal has no driver name and fails here on
// PostgreSQL (the report).
func TestRunTxBindsLikeTheDB(t *testing.T) {
	for _, e := range engines(t) {
		t.Run(e.name, func(t *testing.T) {
			schema(t, e)
			p := e.policy(t)
			db := open(t, e, p)
			err := sqlxretry.RunTx(context.Background(), db, p, sqlretry.Write("named", nil), nil, func(ctx context.Context, tx *sqlx.Tx) error {
				if tx.DriverName() != e.driver {
					t.Errorf("tx.DriverName() = %q, want %q", tx.DriverName(), e.driver)
				}
				_, err := tx.NamedExecContext(ctx, "INSERT INTO ledger (v, grp) VALUES (:v, :grp)", entry{V: 7, Grp: "named"})
				return err
			})
			if err != nil {
				t.Fatalf("NamedExec in RunTx: %v", err)
			}
			var got []entry
			if err := db.Select(&got, db.Rebind("SELECT v, grp FROM ledger WHERE grp = ?"), "named"); err != nil || len(got) != 1 || got[0].V != 7 {
				t.Fatalf("ledger holds %v (%v), want one row v=7", got, err)
			}
			checkUnsafe(t, db.Unsafe(), p)
		})
	}
}

// checkUnsafe: an unsafe DB's Tx scans a row with a column its struct
// lacks; a safe one would refuse ("missing destination name").
func checkUnsafe(t *testing.T, db *sqlx.DB, p *sqlretry.Policy) {
	err := sqlxretry.RunTx(context.Background(), db, p, sqlretry.Idempotent("unsafe"), nil, func(ctx context.Context, tx *sqlx.Tx) error {
		var v struct {
			V int64 `db:"v"`
		}
		return tx.GetContext(ctx, &v, "SELECT v, grp FROM ledger")
	})
	if err != nil {
		t.Fatalf("unsafe DB's Tx: %v", err)
	}
}

// The reproduction: a Tx built by struct literal binds '?' on
// PostgreSQL, so NamedExec fails. It shows why NewTx exists; if sqlx ever
// fixes it, this test says so.
func TestStructLiteralTxBindsWrongOnPostgres(t *testing.T) {
	e := engines(t)[0]
	schema(t, e)
	p := e.policy(t)
	db := open(t, e, p)
	err := sqlretry.RunTx(context.Background(), db.DB, p, sqlretry.Write("literal", nil), nil, func(ctx context.Context, tx *sql.Tx) error {
		xtx := &sqlx.Tx{Tx: tx, Mapper: db.Mapper}
		_, err := xtx.NamedExecContext(ctx, "INSERT INTO ledger (v, grp) VALUES (:v, :grp)", entry{V: 1, Grp: "x"})
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "syntax") {
		t.Fatalf("struct-literal Tx on PostgreSQL: got %v, want a syntax error from the '?' placeholders", err)
	}
}

// Under session kills and deadlocks: sqlxretry.RunTx against sqlx's own
// BeginTxx over the same sqlretry handle, and plain sqlretry.RunTx as the
// baseline, in the same run. The helper and the baseline lose, duplicate
// and misreport nothing; the figures are logged for the README.
func TestChaos(t *testing.T) {
	for _, e := range engines(t) {
		t.Run(e.name, func(t *testing.T) {
			schema(t, e)
			p := e.policy(t)
			db := open(t, e, p)
			groups := []group{
				{"sqlxretry.RunTx", helperCall(db, p)},
				{"sqlx BeginTxx", plainCall(db)},
				{"sqlretry.RunTx", baselineCall(e, db.DB, p)},
			}
			res, kills := runChaos(t, e, chaosDuration(), groups)
			for _, g := range groups {
				t.Logf("%s %-16s %v (first failure: %v)", e.name, g.name, res[g.name], res[g.name].sample)
			}
			t.Logf("%s: %d sessions killed; %+v", e.name, kills, p.Stats())
			if kills == 0 {
				t.Errorf("no session was killed")
			}
			assertSafe(t, e, "sqlxretry.RunTx", res["sqlxretry.RunTx"])
			assertSafe(t, e, "sqlretry.RunTx", res["sqlretry.RunTx"])
		})
	}
}

// body is the transaction in sqlx's idiom: Rebind, and NamedExec for the
// insert.
func body(ctx context.Context, tx *sqlx.Tx, v int64, first, second int, grp string) error {
	if _, err := tx.ExecContext(ctx, tx.Rebind("UPDATE k SET n = n + 1 WHERE id = ?"), first); err != nil {
		return err
	}
	if _, err := tx.NamedExecContext(ctx, "INSERT INTO ledger (v, grp) VALUES (:v, :grp)", entry{V: v, Grp: grp}); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, tx.Rebind("UPDATE k SET n = n + 1 WHERE id = ?"), second)
	return err
}

func helperCall(db *sqlx.DB, p *sqlretry.Policy) call {
	return func(ctx context.Context, v int64, first, second int, attempts *atomic.Int64) error {
		verify := sqlretry.Exists(db.DB, db.Rebind("SELECT 1 FROM ledger WHERE v = ?"), v)
		return sqlxretry.RunTx(ctx, db, p, sqlretry.Write("ledger", verify), nil, func(ctx context.Context, tx *sqlx.Tx) error {
			attempts.Add(1)
			return body(ctx, tx, v, first, second, "helper")
		})
	}
}

func plainCall(db *sqlx.DB) call {
	return func(ctx context.Context, v int64, first, second int, attempts *atomic.Int64) error {
		attempts.Add(1)
		tx, err := db.BeginTxx(ctx, nil)
		if err != nil {
			return err
		}
		if err := body(ctx, tx, v, first, second, "plain"); err != nil {
			return errors.Join(err, tx.Rollback())
		}
		return tx.Commit()
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
