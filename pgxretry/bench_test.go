package pgxretry_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/pgxretry"
	"github.com/sqlretry/sqlretry/postgres"
)

// The benchmarks run the raw pool and the wrapper side by side in one
// function, so that -count=N interleaves them against the same server
// load: go test -run '^$' -bench . -benchmem -count 6 ./pgxretry

// benchFixture is a pool of one connection on a fresh database (one
// connection: both sides use the same session, prepared statements
// cached), the wrapper over it with the default Policy, and a table of
// 1,000 rows.
func benchFixture(b *testing.B) (*pgxpool.Pool, *pgxretry.Pool) {
	b.Helper()
	dsn := newDSN(b)
	pool := openPool(b, dsn, "pgxretry_bench", func(c *pgxpool.Config) { c.MaxConns = 1 })
	p, err := sqlretry.New(sqlretry.Config{Classifier: postgres.Classifier})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for _, q := range []string{itemsTable, "INSERT INTO items (call_id, note) SELECT g, 'n' || g FROM generate_series(1, 1000) g"} {
		if _, err := pool.Exec(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
	return pool, pgxretry.New(pool, p)
}

// querier is what both sides have.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func BenchmarkSelect1(b *testing.B) {
	pool, w := benchFixture(b)
	for _, side := range []struct {
		name string
		q    querier
	}{{"raw", pool}, {"wrapped", w}} {
		b.Run(side.name, func(b *testing.B) {
			ctx := context.Background()
			var n int
			b.ReportAllocs()
			for b.Loop() {
				if err := side.q.QueryRow(ctx, "SELECT 1").Scan(&n); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkPointRead(b *testing.B) {
	pool, w := benchFixture(b)
	for _, side := range []struct {
		name string
		q    querier
	}{{"raw", pool}, {"wrapped", w}} {
		b.Run(side.name, func(b *testing.B) {
			ctx := context.Background()
			var note string
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				i = i%1000 + 1
				if err := side.q.QueryRow(ctx, "SELECT note FROM items WHERE seq = $1", i).Scan(&note); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkTx compares pgx.BeginFunc with RunTx on a transaction of one
// point read: RunTx with an Idempotent Op and with a Write Op that has a
// Verify (neither marks the transaction), and with a Write Op without one,
// which pays a round trip to mark it for pg_xact_status.
func BenchmarkTx(b *testing.B) {
	pool, w := benchFixture(b)
	ctx := context.Background()
	read := func(ctx context.Context, tx pgx.Tx) error {
		var note string
		return tx.QueryRow(ctx, "SELECT note FROM items WHERE seq = $1", 7).Scan(&note)
	}
	verify := func(context.Context) (bool, error) { return false, nil }
	b.Run("BeginFunc", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return read(ctx, tx) }); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, side := range []struct {
		name string
		op   sqlretry.Op
	}{
		{"RunTx-idempotent", sqlretry.Idempotent("bench")},
		{"RunTx-verify", sqlretry.Write("bench", verify)},
		{"RunTx-xact-mark", sqlretry.Write("bench", nil)},
	} {
		b.Run(side.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := w.RunTx(ctx, side.op, pgx.TxOptions{}, read); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
