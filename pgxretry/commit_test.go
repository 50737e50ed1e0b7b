package pgxretry_test

import (
	"context"
	"errors"
	"net/url"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/faults/proxy"
	"github.com/sqlretry/sqlretry/pgxretry"
)

// cutFixture is a fixture whose pool under test reaches the server through
// a fault proxy.
func cutFixture(t *testing.T) (*fixture, *proxy.Proxy) {
	t.Helper()
	return cutFixtureMode(t, pgx.QueryExecModeCacheStatement)
}

// cutFixtureMode is cutFixture with the pool under test in exec mode mode.
func cutFixtureMode(t *testing.T, mode pgx.QueryExecMode) (*fixture, *proxy.Proxy) {
	t.Helper()
	f := newFixture(t, nil)
	px, err := proxy.New(proxy.Config{Target: "127.0.0.1:5432", Protocol: proxy.ProtocolPostgres})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = px.Close() })
	u, err := url.Parse(f.dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = px.Addr()
	q := u.Query()
	q.Set("sslmode", "disable")
	u.RawQuery = q.Encode()
	f.pool = openPool(t, u.String(), appName, func(c *pgxpool.Config) {
		c.MaxConns = 4
		c.ConnConfig.DefaultQueryExecMode = mode
	})
	f.w = pgxretry.New(f.pool, f.p)
	f.exec(t, itemsTable)
	return f, px
}

// TestAmbiguousCommit cuts the connection after COMMIT reached the server
// and before its reply came back: the transaction committed, the client
// cannot know. RunTx must settle it — by pg_xact_status for a Write
// without a Verify, by the Verify (after fencing the session) for one with
// it — and return nil with exactly one row, never run it twice.
func TestAmbiguousCommit(t *testing.T) {
	noLeaks(t)
	f, px := cutFixture(t)
	cases := []struct {
		name string
		op   func(id int64) sqlretry.Op
	}{
		{"pg_xact_status", func(int64) sqlretry.Op { return sqlretry.Write("cut", nil) }},
		{"verify", func(id int64) sqlretry.Op { return sqlretry.Write("cut", f.exists(id)) }},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			id := int64(100 + i)
			cuts, verified := px.Counts().CutAfterCommit, f.p.Stats().VerifiedApplied
			attempts := 0
			err := f.w.RunTx(context.Background(), tc.op(id), pgx.TxOptions{}, func(ctx context.Context, tx pgx.Tx) error {
				attempts++
				if _, err := tx.Exec(ctx, insertItem, id, "cut"); err != nil {
					return err
				}
				return px.SetFault(proxy.Fault{Mode: proxy.CutAfterCommit})
			})
			_ = px.SetFault(proxy.Fault{Mode: proxy.Pass})
			if got := px.Counts().CutAfterCommit - cuts; got != 1 {
				t.Fatalf("%d cuts after COMMIT, want 1", got)
			}
			if err != nil || attempts != 1 {
				t.Fatalf("RunTx: %v after %d attempts; want nil after 1", err, attempts)
			}
			if n := f.count(t, "SELECT count(*) FROM items WHERE call_id = $1", id); n != 1 {
				t.Fatalf("%d rows, want 1", n)
			}
			if got := f.p.Stats().VerifiedApplied - verified; got != 1 {
				t.Fatalf("%d verifications found it applied, want 1", got)
			}
		})
	}
}

// TestAmbiguousExec cuts the reply to a text that commits itself (BEGIN;
// INSERT; COMMIT): without a verify the call ends in ErrAmbiguous, with one
// attached by WithOp it is settled as applied. Either way, one row.
func TestAmbiguousExec(t *testing.T) {
	noLeaks(t)
	f, px := cutFixture(t)
	for i, attach := range []bool{false, true} {
		id := int64(200 + i)
		ctx := context.Background()
		if attach {
			ctx = sqlretry.WithOp(ctx, sqlretry.Write("cut-exec", f.exists(id)))
		}
		if err := px.SetFault(proxy.Fault{Mode: proxy.CutAfterCommit}); err != nil {
			t.Fatal(err)
		}
		_, err := f.w.Exec(ctx, "BEGIN; INSERT INTO items (call_id) VALUES ("+strconv.FormatInt(id, 10)+"); COMMIT")
		_ = px.SetFault(proxy.Fault{Mode: proxy.Pass})
		switch {
		case attach && err != nil:
			t.Errorf("with a verify: %v, want nil", err)
		case !attach && !errors.Is(err, sqlretry.ErrAmbiguous):
			t.Errorf("without a verify: %v, want ErrAmbiguous", err)
		}
		if n := f.count(t, "SELECT count(*) FROM items WHERE call_id = $1", id); n != 1 {
			t.Errorf("verify %v: %d rows, want 1", attach, n)
		}
	}
}
