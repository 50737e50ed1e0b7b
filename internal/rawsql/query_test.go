package rawsql

import (
	"context"
	"database/sql/driver"
	"errors"
	"slices"
	"testing"
)

// prepConn has no QueryerContext: queries go through a prepared
// statement, whose pre-context Query sees the arguments as plain values.
type prepConn struct {
	driver.Conn
	log []string
}

func (c *prepConn) Prepare(q string) (driver.Stmt, error) {
	c.log = append(c.log, "prepare "+q)
	return &prepStmt{c: c}, nil
}

type prepStmt struct {
	driver.Stmt
	c *prepConn
}

func (s *prepStmt) Close() error { s.c.log = append(s.c.log, "close stmt"); return nil }
func (s *prepStmt) Query(args []driver.Value) (driver.Rows, error) {
	s.c.log = append(s.c.log, "query")
	if len(args) == 1 && args[0] == int64(0) {
		return &loggedRows{c: s.c, rows: rows{done: true}}, nil
	}
	return &loggedRows{c: s.c, rows: rows{v: []byte("7")}}, nil
}

type loggedRows struct {
	c *prepConn
	rows
}

func (r *loggedRows) Close() error { r.c.log = append(r.c.log, "close rows"); return nil }

func TestQueryThroughAPreparedStatement(t *testing.T) {
	c := &prepConn{}
	v, err := Scalar(context.Background(), c, "SELECT 7")
	if err != nil || string(v.([]byte)) != "7" {
		t.Fatalf("Scalar = %v, %v, want 7", v, err)
	}
	want := []string{"prepare SELECT 7", "query", "close rows", "close stmt"}
	if !slices.Equal(c.log, want) {
		t.Errorf("got %q, want %q (rows closed before their statement)", c.log, want)
	}
	for arg, want := range map[int64]bool{0: false, 1: true} {
		got, err := Exists(context.Background(), &prepConn{}, "SELECT 1 WHERE ?", []any{arg})
		if err != nil || got != want {
			t.Errorf("Exists(%d) = %v, %v, want %v", arg, got, err, want)
		}
	}
}

func TestLegacy(t *testing.T) {
	errNamed := errors.New("named")
	echo := func(vals []driver.Value) ([]driver.Value, error) { return vals, nil }
	got, err := Legacy(context.Background(), []driver.NamedValue{{Ordinal: 1, Value: "a"}, {Ordinal: 2, Value: int64(2)}}, errNamed, echo)
	if err != nil || !slices.Equal(got, []driver.Value{"a", int64(2)}) {
		t.Errorf("Legacy = %v, %v, want [a 2]", got, err)
	}
	if _, err := Legacy(context.Background(), []driver.NamedValue{{Name: "x", Ordinal: 1}}, errNamed, echo); err != errNamed {
		t.Errorf("named argument: got %v, want %v", err, errNamed)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	called := false
	_, err = Legacy(ctx, nil, errNamed, func([]driver.Value) (int, error) { called = true; return 0, nil })
	if !errors.Is(err, context.Canceled) || called {
		t.Errorf("done context: got %v (called %v), want context.Canceled without a call", err, called)
	}
}
