package sqlretry

import (
	"context"
	"database/sql/driver"
	"math/rand/v2"
	"testing"

	"github.com/sqlretry/sqlretry/internal/sqltext"
)

// The connection's small cache of texts answers what the lexer answers,
// whatever order texts come in, including texts that share a slot (same
// length, first and last byte) and differ only inside.
func TestConnTextCacheAnswersAsTheLexer(t *testing.T) {
	srv := newFakeServer()
	p := testPolicy(t, Config{})
	dc, err := Connector(&fakeConnector{s: srv}, p).Connect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	c := wrapped(t, dc)
	texts := []string{
		"SELECT 1", "UPDATE 1", "COMMIT", "BEGIN", "",
		"BEGIN; SELECT 1", "BXXXXX SELECT 1", // same length, first and last byte: one slot
		"SELECT 1;COMMIT", "SELECT 1, 2 ABT",
		"select 1 -- x", "sElEcT 1 -- x", "INSERT INTO t VALUES (1) RETURNING x",
		"SAVEPOINT s", "START TRANSACTION", "SET autocommit=0",
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 2000; i++ {
		q := texts[rng.IntN(len(texts))]
		if got, want := *c.analyze(q), sqltext.Analyze(q); got != want {
			t.Fatalf("step %d: analyze(%q) = %+v, want %+v", i, q, got, want)
		}
	}
}

// wrapped returns the *conn under a driver.Conn the Connector made.
func wrapped(t *testing.T, dc driver.Conn) *conn {
	switch w := dc.(type) {
	case *conn:
		return w
	case connNoPing:
		return w.conn
	case connNoReset:
		return w.conn
	case connBare:
		return w.conn
	case *connNoCheck:
		return &w.conn
	}
	t.Fatalf("%T is not a Connector's connection", dc)
	return nil
}

// A Connector's connection advertises Ping and ResetSession exactly when
// the inner connection has them: conn has both, and the types for an inner
// connection without one hide it. CheckNamedValue is hidden for an inner
// connection that has the other two and lacks it.
func TestConnMethodSetFollowsInner(t *testing.T) {
	for _, c := range []struct {
		dc                     driver.Conn
		ping, resetOK, checker bool
	}{
		{&conn{}, true, true, true},
		{connNoPing{conn: &conn{}}, false, true, true},
		{connNoReset{conn: &conn{}}, true, false, true},
		{connBare{conn: &conn{}}, false, false, true},
		{&connNoCheck{}, true, true, false},
	} {
		_, ping := c.dc.(driver.Pinger)
		_, reset := c.dc.(driver.SessionResetter)
		_, checker := c.dc.(driver.NamedValueChecker)
		if ping != c.ping || reset != c.resetOK || checker != c.checker {
			t.Errorf("%T: Pinger %v SessionResetter %v NamedValueChecker %v, want %v %v %v", c.dc, ping, reset, checker, c.ping, c.resetOK, c.checker)
		}
		for _, ok := range []bool{
			is[driver.QueryerContext](c.dc), is[driver.ExecerContext](c.dc), is[driver.ConnBeginTx](c.dc),
			is[driver.ConnPrepareContext](c.dc), is[driver.Validator](c.dc),
		} {
			if !ok {
				t.Errorf("%T lacks a method every Connector's connection has", c.dc)
			}
		}
	}
}

func is[T any](v any) bool { _, ok := v.(T); return ok }
