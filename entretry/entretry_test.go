package entretry_test

import (
	"context"
	"database/sql"
	"errors"
	"sync/atomic"
	"testing"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/entretry"
	"github.com/sqlretry/sqlretry/entretry/internal/testent"
)

// openEnt returns an ent driver over a sqlretry handle of e's database.
func openEnt(t *testing.T, e *engine, p *sqlretry.Policy) (*entsql.Driver, *sql.DB) {
	sdb, err := sqlretry.Open(e.driver, e.dsn, p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sdb.Close() })
	name := dialect.Postgres
	if e.driver == "mysql" {
		name = dialect.MySQL
	}
	return entsql.OpenDB(name, sdb), sdb
}

// body is the transaction in ent's idiom, on a generated client.
func body(ctx context.Context, c *testent.Client, v int64, first, second int, grp string) error {
	if err := c.K.UpdateOneID(first).AddN(1).Exec(ctx); err != nil {
		return err
	}
	if err := c.Ledger.Create().SetID(v).SetGrp(grp).Exec(ctx); err != nil {
		return err
	}
	return c.K.UpdateOneID(second).AddN(1).Exec(ctx)
}

// A transaction that ent opens on the driver fn got — client.Tx, or
// sqlgraph's for a create that spans statements — is RunTx's: committing
// it does nothing, rolling it back rolls RunTx's back.
func TestInnerTransaction(t *testing.T) {
	for _, e := range engines(t) {
		t.Run(e.name, func(t *testing.T) {
			schema(t, e)
			p := e.policy(t)
			drv, sdb := openEnt(t, e, p)
			run := func(v int64, end func(*testent.Tx) error) error {
				return entretry.RunTx(context.Background(), drv, p, sqlretry.Write("inner", nil), nil, func(ctx context.Context, d dialect.Driver) error {
					tx, err := testent.NewClient(testent.Driver(d)).Tx(ctx)
					if err != nil {
						return err
					}
					if err := body(ctx, tx.Client(), v, 1, 2, "inner"); err != nil {
						return err
					}
					return end(tx)
				})
			}
			if err := run(1, (*testent.Tx).Commit); err != nil {
				t.Fatalf("inner commit: %v", err)
			}
			if err := run(2, (*testent.Tx).Rollback); !errors.Is(err, entretry.ErrRolledBack) {
				t.Fatalf("inner rollback: got %v, want ErrRolledBack", err)
			}
			var n int
			if err := sdb.QueryRow("SELECT COUNT(*) FROM ledger").Scan(&n); err != nil || n != 1 {
				t.Fatalf("ledger has %d rows (%v), want 1: the committed one", n, err)
			}
			if err := entretry.RunTx(context.Background(), entsql.NewDriver(drv.Dialect(), entsql.Conn{ExecQuerier: &sql.Tx{}}), p, sqlretry.Write("x", nil), nil,
				func(context.Context, dialect.Driver) error { return nil }); !errors.Is(err, entretry.ErrNotDB) {
				t.Fatalf("driver on a Tx: got %v, want ErrNotDB", err)
			}
		})
	}
}

// Under session kills and deadlocks: entretry.RunTx against ent's own
// client.Tx over the same sqlretry handle, and plain sqlretry.RunTx as the
// baseline, in the same run; both ent groups use the generated client.
func TestChaos(t *testing.T) {
	for _, e := range engines(t) {
		t.Run(e.name, func(t *testing.T) {
			schema(t, e)
			p := e.policy(t)
			drv, sdb := openEnt(t, e, p)
			groups := []group{
				{"entretry.RunTx", helperCall(e, drv, sdb, p)},
				{"ent client.Tx", plainCall(testent.NewClient(testent.Driver(drv)))},
				{"sqlretry.RunTx", baselineCall(e, sdb, p)},
			}
			res, kills := runChaos(t, e, chaosDuration(), groups)
			for _, g := range groups {
				t.Logf("%s %-16s %v (first failure: %v)", e.name, g.name, res[g.name], res[g.name].sample)
			}
			t.Logf("%s: %d sessions killed; %+v", e.name, kills, p.Stats())
			if kills == 0 {
				t.Errorf("no session was killed")
			}
			assertSafe(t, e, "entretry.RunTx", res["entretry.RunTx"])
			assertSafe(t, e, "sqlretry.RunTx", res["sqlretry.RunTx"])
		})
	}
}

func helperCall(e *engine, drv *entsql.Driver, sdb *sql.DB, p *sqlretry.Policy) call {
	return func(ctx context.Context, v int64, first, second int, attempts *atomic.Int64) error {
		verify := sqlretry.Exists(sdb, e.q(findValue), v)
		return entretry.RunTx(ctx, drv, p, sqlretry.Write("ledger", verify), nil, func(ctx context.Context, tx dialect.Driver) error {
			attempts.Add(1)
			return body(ctx, testent.NewClient(testent.Driver(tx)), v, first, second, "helper")
		})
	}
}

func plainCall(client *testent.Client) call {
	return func(ctx context.Context, v int64, first, second int, attempts *atomic.Int64) error {
		attempts.Add(1)
		tx, err := client.Tx(ctx)
		if err != nil {
			return err
		}
		if err := body(ctx, tx.Client(), v, first, second, "plain"); err != nil {
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
