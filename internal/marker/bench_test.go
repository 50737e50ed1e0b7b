package marker_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	sr "github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/internal/dbtest"
	"github.com/sqlretry/sqlretry/mysql"
	"github.com/sqlretry/sqlretry/postgres"
	"github.com/sqlretry/sqlretry/sqlite"
)

type benchVariant struct {
	name string
	v    func() sr.CommitVerifier
}

type benchEngine struct {
	name, driver, insert string
	dsn                  func(testing.TB) string
	classifier           sr.Classifier
	variants             []benchVariant
}

func benchEngines() []benchEngine {
	none := benchVariant{"none", func() sr.CommitVerifier { return nil }}
	return []benchEngine{
		{"postgres", "pgx", "INSERT INTO orders VALUES ($1)", dbtest.FreshPostgres, postgres.Classifier, []benchVariant{
			none,
			{"pg_xact_status", func() sr.CommitVerifier { return postgres.CommitVerifier{} }},
			{"marker", func() sr.CommitVerifier { return &postgres.MarkerVerifier{CreateTable: true} }},
			{"both", func() sr.CommitVerifier {
				return sr.Verifiers(postgres.CommitVerifier{}, &postgres.MarkerVerifier{CreateTable: true})
			}},
		}},
		{"mariadb", "mysql", "INSERT INTO orders VALUES (?)", dbtest.FreshMySQL, mysql.Classifier, []benchVariant{
			none,
			{"marker", func() sr.CommitVerifier { return &mysql.MarkerVerifier{CreateTable: true} }},
		}},
		{"sqlite", "sqlite", "INSERT INTO orders VALUES (?)", func(tb testing.TB) string {
			return "file:" + filepath.Join(tb.TempDir(), "b.db") + "?_pragma=journal_mode(wal)&_pragma=synchronous(normal)"
		}, sqlite.Classifier, []benchVariant{
			none,
			{"marker", func() sr.CommitVerifier { return &sqlite.MarkerVerifier{CreateTable: true} }},
		}},
	}
}

// openBench opens e's database with an empty orders table.
func openBench(b *testing.B, e benchEngine) *sql.DB {
	db, err := sql.Open(e.driver, e.dsn(b))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	if _, err := db.Exec("CREATE TABLE orders (id int NOT NULL)"); err != nil {
		b.Fatal(err)
	}
	return db
}

// BenchmarkRunTxVerifiers measures RunTx of a one-row INSERT on the real
// engines with no verifier, with pg_xact_status (PostgreSQL), with the
// marker, and with both through sqlretry.Verifiers: time, bytes and
// allocations per transaction of each, one variant after another.
//
//	go test -run '^$' -bench RunTxVerifiers -benchmem ./internal/marker
func BenchmarkRunTxVerifiers(b *testing.B) {
	for _, e := range benchEngines() {
		b.Run(e.name, func(b *testing.B) {
			db := openBench(b, e)
			for _, vr := range e.variants {
				b.Run(vr.name, func(b *testing.B) {
					run := benchRunTx(b, db, e.classifier, vr.v(), e.insert)
					b.ReportAllocs()
					for b.Loop() {
						run()
					}
				})
			}
		})
	}
}

// BenchmarkRunTxVerifiersInterleaved runs the variants of an engine in
// turn, one transaction each per iteration, and reports each variant's
// mean time per transaction (ns/tx-<variant>): on a loaded machine the
// variants then share its ups and downs, and their differences stay
// meaningful where separate benchmarks' do not.
func BenchmarkRunTxVerifiersInterleaved(b *testing.B) {
	for _, e := range benchEngines() {
		b.Run(e.name, func(b *testing.B) {
			db := openBench(b, e)
			runs := make([]func(), len(e.variants))
			for i, vr := range e.variants {
				runs[i] = benchRunTx(b, db, e.classifier, vr.v(), e.insert)
			}
			spent := make([]time.Duration, len(runs))
			n := 0
			for b.Loop() {
				for i, run := range runs {
					start := time.Now()
					run()
					spent[i] += time.Since(start)
				}
				n++
			}
			for i, vr := range e.variants {
				b.ReportMetric(float64(spent[i].Nanoseconds())/float64(n), "ns/tx-"+vr.name)
			}
		})
	}
}

// benchRunTx returns a function running one transaction under a Policy
// with v, after a first one outside the timing (it creates the marker
// table).
func benchRunTx(b *testing.B, db *sql.DB, c sr.Classifier, v sr.CommitVerifier, insert string) func() {
	p, err := sr.New(sr.Config{Classifier: c, CommitVerifier: v})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	op := sr.Write("order", nil)
	fn := func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, insert, 1)
		return err
	}
	run := func() {
		if err := sr.RunTx(ctx, db, p, op, nil, fn); err != nil {
			b.Fatal(err)
		}
	}
	run()
	return run
}
