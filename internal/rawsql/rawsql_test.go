package rawsql

import (
	"context"
	"database/sql/driver"
	"errors"
	"io"
	"strings"
	"testing"
)

// conn answers "COUNT" queries from counts, one per call, and fails "KILL"
// with killErr; it records every statement.
type conn struct {
	driver.Conn
	counts  []int64
	killErr error
	log     []string
}

func (c *conn) ExecContext(_ context.Context, q string, _ []driver.NamedValue) (driver.Result, error) {
	c.log = append(c.log, q)
	if strings.HasPrefix(q, "KILL") {
		return nil, c.killErr
	}
	return driver.RowsAffected(0), nil
}

func (c *conn) QueryContext(_ context.Context, q string, _ []driver.NamedValue) (driver.Rows, error) {
	c.log = append(c.log, q)
	n := c.counts[0]
	c.counts = c.counts[1:]
	return &rows{v: []byte(itoa(n))}, nil // as MySQL's text protocol: []byte
}

type rows struct {
	v    []byte
	done bool
}

func (r *rows) Columns() []string { return []string{"n"} }
func (r *rows) Close() error      { return nil }
func (r *rows) Next(dest []driver.Value) error {
	if r.done {
		return io.EOF
	}
	r.done, dest[0] = true, r.v
	return nil
}

func itoa(n int64) string { return string(rune('0' + n)) }

var errGone = errors.New("no such thread")

func kill() Fencer {
	return Fencer{
		Engine: "test",
		Stmt:   func(id string) string { return "KILL " + id },
		Gone:   func(id string) string { return "COUNT " + id },
		Absent: func(err error) bool { return err == errGone },
		Poll:   1,
	}
}

func TestKillWaitsUntilGone(t *testing.T) {
	c := &conn{counts: []int64{1, 1, 0}}
	if err := kill().Fence(context.Background(), c, "0042"); err != nil {
		t.Fatal(err)
	}
	want := "KILL 42|COUNT 42|COUNT 42|COUNT 42"
	if got := strings.Join(c.log, "|"); got != want {
		t.Errorf("statements %q, want %q", got, want)
	}
}

func TestKillAlreadyGone(t *testing.T) {
	c := &conn{counts: []int64{0}, killErr: errGone}
	if err := kill().Fence(context.Background(), c, "7"); err != nil {
		t.Fatalf("got %v, want nil: the session was already gone", err)
	}
	c = &conn{counts: []int64{0}, killErr: errors.New("permission denied")}
	if err := kill().Fence(context.Background(), c, "7"); err == nil {
		t.Fatal("got nil, want KILL's error")
	}
}

func TestKillRefusesANonID(t *testing.T) {
	for _, id := range []string{"", "0", "-1", "1; DROP TABLE t", "x"} {
		c := &conn{}
		if err := kill().Fence(context.Background(), c, id); err == nil || len(c.log) != 0 {
			t.Errorf("Fence(%q) = %v after %d statements, want an error and none", id, err, len(c.log))
		}
	}
}

func TestKillStopsWithTheContext(t *testing.T) {
	c := &conn{counts: []int64{1, 1, 1, 1, 1, 1, 1, 1}}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := kill().Fence(ctx, c, "3"); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
}
