package marker_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	sr "github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/internal/dbtest"
	"github.com/sqlretry/sqlretry/postgres"
)

// TestRunTxMarkerSchemaIsAKeyword: the resolved schema is written
// unquoted, so a schema or database whose name is a reserved word
// (PostgreSQL "order", "user", "default"...) makes the marker INSERT a
// syntax error: every RunTx of a write fails, where the unqualified name
// (before 44f0510) worked. (MariaDB accepts a keyword before the dot.)
func TestRunTxMarkerSchemaIsAKeyword(t *testing.T) {
	for _, e := range []struct {
		name, driver string
		classifier   sr.Classifier
		verifier     sr.CommitVerifier
		setup        func(t *testing.T) string // the DSN whose default schema is a keyword
	}{
		{"postgres", "pgx", postgres.Classifier, &postgres.MarkerVerifier{CreateTable: true}, func(t *testing.T) string {
			dsn := dbtest.FreshPostgres(t)
			plain := open(t, "pgx", dsn)
			var db string
			if err := plain.QueryRow("SELECT current_database()").Scan(&db); err != nil {
				t.Fatal(err)
			}
			mustExec(t, plain, `CREATE SCHEMA "order"`, `ALTER DATABASE "`+db+`" SET search_path TO "order", public`)
			return dsn
		}},
	} {
		t.Run(e.name, func(t *testing.T) {
			db := open(t, e.driver, e.setup(t))
			p, err := sr.New(sr.Config{Classifier: e.classifier, CommitVerifier: e.verifier, Budget: sr.NoBudget,
				BaseDelay: time.Millisecond, MaxDelay: time.Millisecond, Jitter: sr.NoJitter})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err = sr.RunTx(ctx, db, p, sr.Write("keyword-schema", nil), nil, func(ctx context.Context, tx *sql.Tx) error {
				return nil
			})
			if err != nil {
				t.Errorf("RunTx in a schema named order: %v", err)
			}
		})
	}
}
