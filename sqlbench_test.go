package sqlretry_test

// Benchmarks of the database/sql layer against the raw driver, in one run:
//
//	go test -run '^$' -bench 'SQLitePointRead|PostgresSelect1|PostgresRunTx' -benchmem -count 6 .
//
// On a loaded machine, compare the Interleaved benchmarks: they alternate
// raw and wrapped in small batches, so both see the same load, and report
// the median of the per-batch ratios as "overhead-%".
//
// The targets: wrapped at most 3% slower than raw on embedded SQLite point
// reads, at most 1% on PostgreSQL SELECT 1 over loopback, and at most one
// extra allocation per statement.

import (
	"context"
	"database/sql"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	sr "github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/internal/dbtest"
	"github.com/sqlretry/sqlretry/postgres"
)

func benchPolicy(b *testing.B, c sr.Classifier) *sr.Policy {
	p, err := sr.New(sr.Config{Classifier: c})
	if err != nil {
		b.Fatal(err)
	}
	return p
}

func BenchmarkSQLitePointRead(b *testing.B) {
	dsn := "file:" + filepath.Join(b.TempDir(), "b.db") + "?_pragma=journal_mode(wal)"
	raw, err := sql.Open("sqlite", dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer raw.Close()
	mustExec(b, raw, "CREATE TABLE t (id INTEGER PRIMARY KEY, v INTEGER NOT NULL)")
	mustExec(b, raw, "WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < 1000) INSERT INTO t SELECT n, n * 2 FROM s")
	wrapped, err := sr.Open("sqlite", dsn, benchPolicy(b, sqliteClassifier))
	if err != nil {
		b.Fatal(err)
	}
	defer wrapped.Close()
	for _, c := range []struct {
		name string
		db   *sql.DB
	}{{"raw", raw}, {"wrapped", wrapped}} {
		read := func(i int) error {
			var v int64
			return c.db.QueryRowContext(context.Background(), "SELECT v FROM t WHERE id = ?", i%1000+1).Scan(&v)
		}
		warmed := false
		b.Run(c.name, func(b *testing.B) {
			warm(b, &warmed, read) // see pointread_bench_test.go
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if err := read(i); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkPostgresSelect1(b *testing.B) {
	dsn := dbtest.PostgresDSN(b)
	raw, err := sql.Open("pgx", dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer raw.Close()
	wrapped, err := sr.Open("pgx", dsn, benchPolicy(b, postgres.Classifier))
	if err != nil {
		b.Fatal(err)
	}
	defer wrapped.Close()
	for _, c := range []struct {
		name string
		db   *sql.DB
	}{{"raw", raw}, {"wrapped", wrapped}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			ctx := context.Background()
			var v int
			for b.Loop() {
				if err := c.db.QueryRowContext(ctx, "SELECT 1").Scan(&v); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkPostgresRunTx measures RunTx with and without the
// pg_xact_status commit verifier, beside a hand-written transaction.
func BenchmarkPostgresRunTx(b *testing.B) {
	dsn := dbtest.FreshPostgres(b)
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	mustExec(b, db, "CREATE TABLE c (id int PRIMARY KEY, v bigint NOT NULL)")
	mustExec(b, db, "INSERT INTO c VALUES (1, 0)")
	p := benchPolicy(b, postgres.Classifier)
	ctx := context.Background()
	incr := func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "UPDATE c SET v = v + 1 WHERE id = 1")
		return err
	}
	b.Run("hand-written", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				b.Fatal(err)
			}
			if err := incr(ctx, tx); err != nil {
				b.Fatal(err)
			}
			if err := tx.Commit(); err != nil {
				b.Fatal(err)
			}
		}
	})
	pv, _ := sr.New(sr.Config{Classifier: postgres.Classifier, CommitVerifier: postgres.CommitVerifier{}})
	for _, c := range []struct {
		name string
		p    *sr.Policy
	}{{"RunTx", p}, {"RunTx+xact-verifier", pv}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := sr.RunTx(ctx, db, c.p, sr.Write("incr", nil), nil, incr); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// interleave runs raw and wrapped in alternating batches of n calls each
// and reports, per side, the median wall-clock ns per call and the median
// process CPU ns per call (getrusage: user+system, which a loaded machine
// inflates far less than wall-clock time), and the medians of the per-batch
// ratios as overhead-% (wall) and cpu-overhead-%.
func interleave(b *testing.B, n int, raw, wrapped func(i int) error) {
	var rawNs, wrapNs, ratios, rawCPU, wrapCPU, cpuRatios []float64
	// Warm both handles first: a PostgreSQL connect costs tens of ms here,
	// which would otherwise land in whichever batch runs first.
	for _, f := range []func(int) error{raw, wrapped} {
		for j := 0; j < 20; j++ {
			if err := f(j); err != nil {
				b.Fatal(err)
			}
		}
	}
	i := 0
	batch := func(f func(int) error) (wall, cpu float64) {
		c0 := cpuNow()
		start := time.Now()
		for range n {
			if err := f(i); err != nil {
				b.Fatal(err)
			}
			i++
		}
		wall = float64(time.Since(start).Nanoseconds()) / float64(n)
		return wall, float64(cpuNow()-c0) / float64(n)
	}
	for k := 0; b.Loop(); k++ {
		var r, w, rc, wc float64
		if k%2 == 0 {
			r, rc = batch(raw)
			w, wc = batch(wrapped)
		} else {
			w, wc = batch(wrapped)
			r, rc = batch(raw)
		}
		rawNs, wrapNs, ratios = append(rawNs, r), append(wrapNs, w), append(ratios, w/r)
		rawCPU, wrapCPU = append(rawCPU, rc), append(wrapCPU, wc)
		if rc > 0 {
			cpuRatios = append(cpuRatios, wc/rc)
		}
	}
	median := func(xs []float64) float64 {
		if len(xs) == 0 {
			return 0
		}
		slices.Sort(xs)
		return xs[len(xs)/2]
	}
	b.ReportMetric(median(rawNs), "raw-ns/call")
	b.ReportMetric(median(wrapNs), "wrapped-ns/call")
	b.ReportMetric((median(ratios)-1)*100, "overhead-%")
	b.ReportMetric(median(rawCPU), "raw-cpu-ns/call")
	b.ReportMetric(median(wrapCPU), "wrapped-cpu-ns/call")
	b.ReportMetric((median(cpuRatios)-1)*100, "cpu-overhead-%")
}

// cpuNow returns the process's user+system CPU time in ns.
func cpuNow() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

func BenchmarkSQLitePointReadInterleaved(b *testing.B) {
	for _, aa := range []bool{false, true} {
		name := "raw-vs-wrapped"
		if aa {
			name = "raw-vs-raw" // the noise floor: two raw handles
		}
		b.Run(name, func(b *testing.B) { sqlitePointReadInterleaved(b, aa) })
	}
}

func sqlitePointReadInterleaved(b *testing.B, aa bool) {
	dsn := "file:" + filepath.Join(b.TempDir(), "b.db") + "?_pragma=journal_mode(wal)"
	raw, err := sql.Open("sqlite", dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer raw.Close()
	mustExec(b, raw, "CREATE TABLE t (id INTEGER PRIMARY KEY, v INTEGER NOT NULL)")
	mustExec(b, raw, "WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < 1000) INSERT INTO t SELECT n, n * 2 FROM s")
	wrapped, err := sr.Open("sqlite", dsn, benchPolicy(b, sqliteClassifier))
	if aa {
		wrapped, err = sql.Open("sqlite", dsn)
	}
	if err != nil {
		b.Fatal(err)
	}
	defer wrapped.Close()
	ctx := context.Background()
	var v int64
	read := func(db *sql.DB) func(int) error {
		return func(i int) error { return db.QueryRowContext(ctx, "SELECT v FROM t WHERE id = ?", i%1000+1).Scan(&v) }
	}
	interleave(b, 500, read(raw), read(wrapped))
}

func BenchmarkPostgresSelect1Interleaved(b *testing.B) {
	for _, aa := range []bool{false, true} {
		name := "raw-vs-wrapped"
		if aa {
			name = "raw-vs-raw" // the noise floor: two raw handles
		}
		b.Run(name, func(b *testing.B) { postgresSelect1Interleaved(b, aa) })
	}
}

func postgresSelect1Interleaved(b *testing.B, aa bool) {
	dsn := dbtest.PostgresDSN(b)
	raw, err := sql.Open("pgx", dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer raw.Close()
	var wrapped *sql.DB
	if aa {
		wrapped, err = sql.Open("pgx", dsn)
	} else {
		wrapped, err = sr.Open("pgx", dsn, benchPolicy(b, postgres.Classifier))
	}
	if err != nil {
		b.Fatal(err)
	}
	defer wrapped.Close()
	ctx := context.Background()
	var v int
	sel := func(db *sql.DB) func(int) error {
		return func(int) error { return db.QueryRowContext(ctx, "SELECT 1").Scan(&v) }
	}
	interleave(b, 200, sel(raw), sel(wrapped))
}

// BenchmarkPostgresRunTxVerifierInterleaved: RunTx without ("raw") and with
// ("wrapped") the pg_xact_status commit verifier, in alternating batches.
func BenchmarkPostgresRunTxVerifierInterleaved(b *testing.B) {
	db, err := sql.Open("pgx", dbtest.FreshPostgres(b))
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	mustExec(b, db, "CREATE TABLE c (id int PRIMARY KEY, v bigint NOT NULL)")
	mustExec(b, db, "INSERT INTO c VALUES (1, 0)")
	p := benchPolicy(b, postgres.Classifier)
	ctx := context.Background()
	incr := func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "UPDATE c SET v = v + 1 WHERE id = 1")
		return err
	}
	run := func(p *sr.Policy) func(int) error {
		return func(int) error { return sr.RunTx(ctx, db, p, sr.Write("incr", nil), nil, incr) }
	}
	pv, _ := sr.New(sr.Config{Classifier: postgres.Classifier, CommitVerifier: postgres.CommitVerifier{}})
	interleave(b, 20, run(p), run(pv))
}
