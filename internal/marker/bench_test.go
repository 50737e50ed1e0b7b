package marker_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	sr "github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/internal/dbtest"
	"github.com/sqlretry/sqlretry/mysql"
	"github.com/sqlretry/sqlretry/postgres"
	"github.com/sqlretry/sqlretry/sqlite"
)

// BenchmarkRunTxVerifiers measures RunTx of a one-row INSERT on the real
// engines with no verifier, with pg_xact_status (PostgreSQL), with the
// marker, and with both through sqlretry.Verifiers: the per-transaction cost
// of each verifier on the success path. The variants of an engine run one
// after another in one process; run it several times (-count) to
// interleave them:
//
//	go test -run '^$' -bench RunTxVerifiers -benchmem -count 5 ./internal/marker
func BenchmarkRunTxVerifiers(b *testing.B) {
	type variant struct {
		name string
		v    func() sr.CommitVerifier
	}
	none := variant{"none", func() sr.CommitVerifier { return nil }}
	for _, e := range []struct {
		name, driver, insert string
		dsn                  func(testing.TB) string
		classifier           sr.Classifier
		variants             []variant
	}{
		{"postgres", "pgx", "INSERT INTO orders VALUES ($1)", dbtest.FreshPostgres, postgres.Classifier, []variant{
			none,
			{"pg_xact_status", func() sr.CommitVerifier { return postgres.CommitVerifier{} }},
			{"marker", func() sr.CommitVerifier { return &postgres.MarkerVerifier{CreateTable: true} }},
			{"both", func() sr.CommitVerifier {
				return sr.Verifiers(postgres.CommitVerifier{}, &postgres.MarkerVerifier{CreateTable: true})
			}},
		}},
		{"mariadb", "mysql", "INSERT INTO orders VALUES (?)", dbtest.FreshMySQL, mysql.Classifier, []variant{
			none,
			{"marker", func() sr.CommitVerifier { return &mysql.MarkerVerifier{CreateTable: true} }},
		}},
		{"sqlite", "sqlite", "INSERT INTO orders VALUES (?)", func(tb testing.TB) string {
			return "file:" + filepath.Join(tb.TempDir(), "b.db") + "?_pragma=journal_mode(wal)&_pragma=synchronous(normal)"
		}, sqlite.Classifier, []variant{
			none,
			{"marker", func() sr.CommitVerifier { return &sqlite.MarkerVerifier{CreateTable: true} }},
		}},
	} {
		b.Run(e.name, func(b *testing.B) {
			db, err := sql.Open(e.driver, e.dsn(b))
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			if _, err := db.Exec("CREATE TABLE orders (id int NOT NULL)"); err != nil {
				b.Fatal(err)
			}
			for _, vr := range e.variants {
				b.Run(vr.name, func(b *testing.B) { benchRunTx(b, db, e.classifier, vr.v(), e.insert) })
			}
		})
	}
}

func benchRunTx(b *testing.B, db *sql.DB, c sr.Classifier, v sr.CommitVerifier, insert string) {
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
	if err := sr.RunTx(ctx, db, p, op, nil, fn); err != nil { // the marker table, created outside the timing
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := sr.RunTx(ctx, db, p, op, nil, fn); err != nil {
			b.Fatal(err)
		}
	}
}
