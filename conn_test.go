package sqlretry

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"testing"
)

// BenchmarkConnectorOverhead measures the wrapper's own cost per statement
// over the in-memory fake driver, where a statement costs almost nothing:
// the difference between raw and wrapped is the Connector's price.
func BenchmarkConnectorOverhead(b *testing.B) {
	srv := newFakeServer()
	srv.nolog = true
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

// BenchmarkWrapperPath measures the wrapper's own code on a statement's
// success path, without database/sql around it: inner driver call versus the
// same call through the wrapper connection.
func BenchmarkWrapperPath(b *testing.B) {
	srv := newFakeServer()
	srv.nolog = true
	p, err := New(Config{Classifier: testClassifier})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	inner, _ := (&fakeConnector{s: srv}).Connect(ctx)
	wrapped, err := Connector(&fakeConnector{s: srv}, p).Connect(ctx)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		conn driver.Conn
	}{{"raw", inner}, {"wrapped", wrapped}} {
		q := c.conn.(driver.QueryerContext)
		e := c.conn.(driver.ExecerContext)
		b.Run("Query/"+c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				rows, err := q.QueryContext(ctx, "SELECT 1", nil)
				if err != nil {
					b.Fatal(err)
				}
				rows.Close()
			}
		})
		b.Run("Exec/"+c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := e.ExecContext(ctx, "SET n 1", nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
