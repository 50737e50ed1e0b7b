package sqlretry

import (
	"context"
	"database/sql"
	"testing"
)

// BenchmarkConnectorOverhead measures the wrapper's own cost per statement
// over the in-memory fake driver, where a statement costs almost nothing:
// the difference between raw and wrapped is the Connector's price.
func BenchmarkConnectorOverhead(b *testing.B) {
	srv := newFakeServer()
	p, err := New(Config{Classifier: testClassifier})
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		db   *sql.DB
	}{
		{"raw", sql.OpenDB(&fakeConnector{s: srv})},
		{"wrapped", sql.OpenDB(Connector(&fakeConnector{s: srv}, p))},
	} {
		ctx := context.Background()
		b.Run("QueryRow/"+c.name, func(b *testing.B) {
			b.ReportAllocs()
			var v int64
			for b.Loop() {
				if err := c.db.QueryRowContext(ctx, "SELECT n").Scan(&v); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("Exec/"+c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.db.ExecContext(ctx, "SET n 1"); err != nil {
					b.Fatal(err)
				}
			}
		})
		c.db.Close()
	}
}
