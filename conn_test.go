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

// A transaction opened in SQL text pins the connection: a statement that
// fails inside it is not replayed on a new session (where it would commit
// alone), until COMMIT or ROLLBACK ends it.
func TestSQLTextTransactionIsNotReplayed(t *testing.T) {
	srv := newFakeServer(&fault{op: "exec", match: "ADD b", err: driver.ErrBadConn, kill: true})
	p := testPolicy(t, Config{})
	db := sql.OpenDB(Connector(&fakeConnector{s: srv}, p))
	defer db.Close()
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "ADD a 1"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "ADD b 1"); err == nil {
		t.Fatal("a statement inside a SQL-text transaction was replayed on a new session")
	}
	if n := srv.count("exec ADD b"); n != 1 {
		t.Fatalf("ADD b ran %d times, want 1", n)
	}
	// Outside a transaction, the same failure is retried on a new session.
	srv2 := newFakeServer(&fault{op: "exec", match: "ADD b", err: driver.ErrBadConn, kill: true})
	db2 := sql.OpenDB(Connector(&fakeConnector{s: srv2}, p))
	defer db2.Close()
	if _, err := db2.ExecContext(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	if _, err := db2.ExecContext(ctx, "ADD b 1"); err != nil {
		t.Fatalf("autocommit statement after COMMIT: %v, want a retry on a new session", err)
	}
}

// execOnlyConn is the optional interfaces an older driver's connection
// has: ExecerContext and Validator, without ConnPrepareContext.
type execOnlyConn interface {
	driver.Conn
	driver.ExecerContext
	driver.Validator
}

// noPrepareConn hides a fakeConn's other optional interfaces.
type noPrepareConn struct{ execOnlyConn }

// A connection whose reconnect underneath failed (conn.inner is nil) stays
// usable to a *sql.Conn holder, since its errors never match
// driver.ErrBadConn; once the session is pinned (a BEGIN in SQL text), a
// PrepareContext on an inner driver without ConnPrepareContext returns an
// error instead of panicking inside database/sql.
//
// History: found in the review of issue 12's changes (finding 11): it
// called c.inner.Prepare on nil.
func TestPrepareAfterFailedReconnectDoesNotPanic(t *testing.T) {
	srv := newFakeServer()
	p := testPolicy(t, Config{MaxRetries: 1})
	fc := &fakeConnector{s: srv, mk: func(c *fakeConn) driver.Conn { return noPrepareConn{c} }}
	db := sql.OpenDB(Connector(fc, p))
	t.Cleanup(func() { db.Close() })
	conn := heldConn(t, db)
	ctx := context.Background()
	srv.addFaults(&fault{op: "exec", match: "ADD n 1", err: driver.ErrBadConn, kill: true},
		&fault{op: "connect", err: errRefused, times: 10})
	if _, err := conn.ExecContext(ctx, "ADD n 1"); err == nil {
		t.Fatal("want the reconnect's failure")
	}
	_, _ = conn.ExecContext(ctx, "BEGIN")
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("PrepareContext panicked: %v", r)
		}
	}()
	st, err := conn.PrepareContext(ctx, "ADD n 1")
	if err == nil {
		st.Close()
	}
}
