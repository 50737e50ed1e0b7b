package pgxretry_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/pgxretry"
	"github.com/sqlretry/sqlretry/postgres"
)

// countingConn counts the client's writes: each is one message batch sent,
// and a transaction's statements wait for their replies, so writes count
// round trips.
type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(b []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(b)
}

// TestMarkerRoundTrips: a transaction settled by the marker costs the
// round trips of one settled by nothing (BEGIN, the statement, COMMIT);
// pg_xact_status's mark costs one more.
func TestMarkerRoundTrips(t *testing.T) {
	var writes atomic.Int64
	f := newFixture(t, func(c *pgxpool.Config) {
		c.MaxConns = 1
		c.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			return countingConn{conn, &writes}, err
		}
	})
	f.exec(t, itemsTable)
	f.exec(t, postgres.MarkerTableDDL)
	f.exec(t, "INSERT INTO items (call_id) VALUES (1)")
	wm := pgxretry.New(f.pool, f.p, pgxretry.WithMarker(&postgres.MarkerVerifier{PruneEvery: -1}))
	t.Cleanup(wm.Close)
	ctx := context.Background()
	body := func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "UPDATE items SET note = 'w' WHERE call_id = 1")
		return err
	}
	verify := func(context.Context) (bool, error) { return false, nil }
	for _, tc := range []struct {
		name string
		w    *pgxretry.Pool
		op   sqlretry.Op
		want int64
	}{
		{"none", f.w, sqlretry.Write("t", verify), 3},
		{"pg_xact_status", f.w, sqlretry.Write("t", nil), 4},
		{"marker", wm, sqlretry.Write("t", nil), 3},
	} {
		must(t, tc.w.RunTx(ctx, tc.op, pgx.TxOptions{}, body)) // warm: connected, statements prepared
		before := writes.Load()
		must(t, tc.w.RunTx(ctx, tc.op, pgx.TxOptions{}, body))
		if got := writes.Load() - before; got != tc.want {
			t.Errorf("%s: %d round trips, want %d", tc.name, got, tc.want)
		}
	}
	if n := f.count(t, "SELECT count(*) FROM sqlretry_commit_marks"); n != 2 {
		t.Errorf("%d markers, want 2 (one per marked transaction)", n)
	}
}
