package pgxretry_test

import (
	"context"
	"sort"
	"testing"
	"time"

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
func benchFixture(b testing.TB) (*pgxpool.Pool, *pgxretry.Pool) {
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

// interleave runs raw and wrapped calls in alternating blocks (the order
// flips every block) and reports each side's mean time per call and the
// wrapper's overhead: the median over block pairs of wrapped/raw - 1, in
// percent, which the load of a shared machine moves less than any mean.
func interleave(b *testing.B, raw, wrapped func() error) {
	const block = 16
	var rawNs, wrapNs time.Duration
	var ratios []float64
	run := func(f func() error) time.Duration {
		start := time.Now()
		for range block {
			if err := f(); err != nil {
				b.Fatal(err)
			}
		}
		return time.Since(start)
	}
	flip := false
	for b.Loop() {
		var r, w time.Duration
		if flip {
			w, r = run(wrapped), run(raw)
		} else {
			r, w = run(raw), run(wrapped)
		}
		flip = !flip
		rawNs, wrapNs = rawNs+r, wrapNs+w
		ratios = append(ratios, float64(w)/float64(r))
	}
	calls := float64(b.N * block)
	sort.Float64s(ratios)
	b.ReportMetric(float64(rawNs)/calls, "raw-ns/call")
	b.ReportMetric(float64(wrapNs)/calls, "wrapped-ns/call")
	b.ReportMetric(100*(ratios[len(ratios)/2]-1), "overhead-%")
}

// BenchmarkInterleaved compares the raw pool and the wrapper on SELECT 1
// and a point read, and pgx.BeginFunc and RunTx on a transaction of one
// point read, in alternating blocks under the same load.
func BenchmarkInterleaved(b *testing.B) {
	pool, w := benchFixture(b)
	ctx := context.Background()
	var n int
	var note string
	i := 0
	pointRead := func(q querier) func() error {
		return func() error {
			i = i%1000 + 1
			return q.QueryRow(ctx, "SELECT note FROM items WHERE seq = $1", i).Scan(&note)
		}
	}
	select1 := func(q querier) func() error {
		return func() error { return q.QueryRow(ctx, "SELECT 1").Scan(&n) }
	}
	read := func(ctx context.Context, tx pgx.Tx) error {
		return tx.QueryRow(ctx, "SELECT note FROM items WHERE seq = $1", 7).Scan(&note)
	}
	runTx := func(op sqlretry.Op) func() error {
		return func() error { return w.RunTx(ctx, op, pgx.TxOptions{}, read) }
	}
	beginFunc := func() error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return read(ctx, tx) })
	}
	verify := func(context.Context) (bool, error) { return false, nil }
	b.Run("SELECT1", func(b *testing.B) { interleave(b, select1(pool), select1(w)) })
	b.Run("PointRead", func(b *testing.B) { interleave(b, pointRead(pool), pointRead(w)) })
	b.Run("RunTx-idempotent", func(b *testing.B) { interleave(b, beginFunc, runTx(sqlretry.Idempotent("bench"))) })
	b.Run("RunTx-verify", func(b *testing.B) { interleave(b, beginFunc, runTx(sqlretry.Write("bench", verify))) })
	b.Run("RunTx-xact-mark", func(b *testing.B) { interleave(b, beginFunc, runTx(sqlretry.Write("bench", nil))) })
}

// TestAllocs holds the wrapper to at most one allocation per call more
// than the raw pool, and RunTx to at most one more than pgx.BeginFunc
// (RunTx with pg_xact_status marking runs a query more, and is not held).
func TestAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under -race")
	}
	pool, w := benchFixture(t)
	ctx := context.Background()
	var n int
	read := func(ctx context.Context, tx pgx.Tx) error {
		return tx.QueryRow(ctx, "SELECT 1").Scan(&n)
	}
	beginFunc := func() error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return read(ctx, tx) })
	}
	verify := func(context.Context) (bool, error) { return false, nil }
	query := func(q interface {
		Query(context.Context, string, ...any) (pgx.Rows, error)
	}) func() error {
		return func() error {
			rows, err := q.Query(ctx, "SELECT 1")
			if err == nil {
				rows.Close()
			}
			return err
		}
	}
	cases := []struct {
		name         string
		raw, wrapped func() error
	}{
		{"QueryRow", func() error { return pool.QueryRow(ctx, "SELECT 1").Scan(&n) }, func() error { return w.QueryRow(ctx, "SELECT 1").Scan(&n) }},
		{"Exec", func() error { _, err := pool.Exec(ctx, "SELECT 1"); return err }, func() error { _, err := w.Exec(ctx, "SELECT 1"); return err }},
		{"Query", query(pool), query(w)},
		{"RunTx-idempotent", beginFunc, func() error { return w.RunTx(ctx, sqlretry.Idempotent("a"), pgx.TxOptions{}, read) }},
		{"RunTx-verify", beginFunc, func() error { return w.RunTx(ctx, sqlretry.Write("a", verify), pgx.TxOptions{}, read) }},
	}
	mark := testing.AllocsPerRun(200, func() { must(t, w.RunTx(ctx, sqlretry.Write("a", nil), pgx.TxOptions{}, read)) })
	t.Logf("RunTx-xact-mark: %.1f allocations per call (not held: it runs a query more)", mark)
	for _, tc := range cases {
		raw := testing.AllocsPerRun(200, func() { must(t, tc.raw()) })
		wrapped := testing.AllocsPerRun(200, func() { must(t, tc.wrapped()) })
		t.Logf("%s: raw %.1f, wrapped %.1f allocations per call", tc.name, raw, wrapped)
		if wrapped > raw+1 {
			t.Errorf("%s: %.1f allocations per call, raw %.1f: more than one extra", tc.name, wrapped, raw)
		}
	}
}

func must(t testing.TB, err error) {
	if err != nil {
		t.Fatal(err)
	}
}
