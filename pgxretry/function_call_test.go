package pgxretry_test

// A read that calls a user's function is a write: the function may INSERT.
// When such a read's connection is lost after the server committed it, it
// must not be replayed: the caller hears ErrAmbiguous, and the function's
// row is there once. A read whose functions are PostgreSQL's own is still
// replayed. Each run is cut off by state, not by time: the statement waits
// on an advisory lock the test holds (or, for a plain read, a table lock);
// once pg_stat_activity shows it waiting, the proxy holds its connection's
// traffic and the lock is let go; once pg_stat_activity shows it ended
// (committed, its reply held by the proxy), the connection is reset.

import (
	"context"
	"errors"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/faults/proxy"
	"github.com/sqlretry/sqlretry/pgxretry"
)

// fnDB is a fresh database whose users' functions write a row to calls,
// then wait on the advisory lock 4242: audit.log(text), log(text) in
// public (SELECT log('msg') takes it: an unknown-typed literal prefers text
// to pg_catalog's numeric and double precision) and audit(t), which
// SELECT t.audit calls.
type fnDB struct {
	dsn string
	raw *pgxpool.Pool // for locks and checks, not through the proxy
}

func newFnDB(t *testing.T) *fnDB {
	t.Helper()
	d := &fnDB{dsn: newDSN(t)}
	d.raw = openPool(t, d.dsn, "pgxretry_checks", nil)
	const body = `LANGUAGE plpgsql AS $$ BEGIN INSERT INTO calls (note) VALUES ('x'); PERFORM pg_advisory_xact_lock(4242); RETURN 1; END $$`
	for _, q := range []string{
		`CREATE TABLE calls (id serial PRIMARY KEY, note text NOT NULL)`,
		`CREATE TABLE t (id int PRIMARY KEY, name text NOT NULL)`,
		`INSERT INTO t VALUES (1, 'Ann'), (2, 'Bo')`,
		`CREATE SCHEMA audit`,
		`CREATE FUNCTION audit.log(m text) RETURNS int ` + body,
		`CREATE FUNCTION public.log(m text) RETURNS int ` + body,
		`CREATE FUNCTION public.audit(r t) RETURNS int ` + body,
	} {
		if _, err := d.raw.Exec(context.Background(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	return d
}

// viaProxy returns a Pool of one connection, connected, through a fault
// proxy in front of d, and the proxy.
func (d *fnDB) viaProxy(t *testing.T) (*pgxretry.Pool, *sqlretry.Policy, *proxy.Proxy) {
	t.Helper()
	u, err := url.Parse(d.dsn)
	if err != nil {
		t.Fatal(err)
	}
	px, err := proxy.New(proxy.Config{Target: u.Host, Protocol: proxy.ProtocolPostgres})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	u.Host = px.Addr()
	q := u.Query()
	q.Set("sslmode", "disable")
	u.RawQuery = q.Encode()
	pool := openPool(t, u.String(), appName, func(c *pgxpool.Config) { c.MaxConns = 1 })
	p := policy(t)
	w := pgxretry.New(pool, p)
	if err := w.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	return w, p, px
}

// cutOff runs call, whose statement q waits on the advisory lock 4242 (or,
// with table, on an ACCESS EXCLUSIVE lock on it), and cuts its connection
// off once the server has ended the statement (see the comment above). It
// returns call's error.
func (d *fnDB) cutOff(t *testing.T, ctx context.Context, px *proxy.Proxy, q, table string, call func(context.Context) error) error {
	t.Helper()
	lock, err := d.raw.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release()
	hold, release := "SELECT pg_advisory_lock(4242)", "SELECT pg_advisory_unlock(4242)"
	if table != "" {
		if _, err := lock.Exec(ctx, "BEGIN"); err != nil {
			t.Fatal(err)
		}
		hold, release = "LOCK TABLE "+table+" IN ACCESS EXCLUSIVE MODE", "COMMIT"
	}
	if _, err := lock.Exec(ctx, hold); err != nil {
		t.Fatal(err)
	}
	conns := px.Conns()
	if len(conns) != 1 {
		t.Fatalf("%d connections through the proxy, want the call's one", len(conns))
	}
	errc := make(chan error, 1)
	go func() { errc <- call(ctx) }()
	var pid int32
	until(t, ctx, "the statement waits on the lock", func() bool {
		var p *int32
		err := d.raw.QueryRow(ctx, `SELECT max(pid) FROM pg_stat_activity
			WHERE datname = current_database() AND query = $1 AND wait_event_type = 'Lock'`, q).Scan(&p)
		if err != nil {
			t.Fatal(err)
		}
		if p != nil {
			pid = *p
		}
		return p != nil
	})
	if err := px.SetConnFault(conns[0].ID, proxy.Fault{Mode: proxy.Blackhole}); err != nil {
		t.Fatal(err)
	}
	if _, err := lock.Exec(ctx, release); err != nil {
		t.Fatal(err)
	}
	until(t, ctx, "the statement ended on the server", func() bool {
		var n int
		if err := d.raw.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND state = 'active'`, pid).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 0
	})
	if err := px.SetConnFault(conns[0].ID, proxy.Fault{Mode: proxy.Reset}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		t.Fatalf("the call did not return: %v", ctx.Err())
		return nil
	}
}

// until polls cond until it holds.
func until(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("%s: never (%v)", what, ctx.Err())
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// Before, each of these was read as a read and replayed: 2 rows and nil,
// every run.
func TestUserFunctionCallNotReplayed(t *testing.T) {
	d := newFnDB(t)
	for _, c := range []struct {
		q    string
		exec bool // through Exec, not QueryRow
	}{
		{`SELECT audit.log('user signed in')`, false}, // a schema's function named like a built-in
		{`SELECT audit.log('user signed in')`, true},  //
		{`SELECT * FROM audit.log('x')`, false},       // in FROM
		{`SELECT log('msg')`, false},                  // the user's log(text) in search_path
		{`SELECT log('msg')`, true},                   //
		{`SELECT t.audit FROM t WHERE id = 1`, false}, // audit(t), by attribute notation
	} {
		t.Run(c.q, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			d.exec(t, "TRUNCATE calls")
			w, _, px := d.viaProxy(t)
			err := d.cutOff(t, ctx, px, c.q, "", func(ctx context.Context) error {
				if c.exec {
					_, err := w.Exec(ctx, c.q)
					return err
				}
				var v int
				return w.QueryRow(ctx, c.q).Scan(&v)
			})
			n := d.count(t, "SELECT count(*) FROM calls")
			t.Logf("%s: %v, %d rows", c.q, err, n)
			if n != 1 || !errors.Is(err, sqlretry.ErrAmbiguous) {
				t.Errorf("%s: %v with %d rows; want ErrAmbiguous and 1 row (a function's write replayed after a failure of unknown outcome)", c.q, err, n)
			}
		})
	}
}

// A read of PostgreSQL's own functions, cut off the same way, is replayed:
// the catalog holds no function of a user's by its names.
func TestBuiltinFunctionReadReplayed(t *testing.T) {
	d := newFnDB(t)
	for _, c := range []struct{ q, want string }{
		{`SELECT count(*)::text FROM t`, "2"},
		{`SELECT lower(name) FROM t WHERE id = 1`, "ann"},
		{`SELECT t.name FROM t WHERE t.id = 2`, "Bo"},
	} {
		t.Run(c.q, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			w, p, px := d.viaProxy(t)
			var got string
			err := d.cutOff(t, ctx, px, c.q, "t", func(ctx context.Context) error {
				return w.QueryRow(ctx, c.q).Scan(&got)
			})
			if st := p.Stats(); err != nil || got != c.want || st.Retries < 1 {
				t.Errorf("%s: %q, %v, %+v; want %q, nil and a replay", c.q, got, err, st, c.want)
			}
		})
	}
}

func (d *fnDB) exec(t *testing.T, q string) {
	t.Helper()
	if _, err := d.raw.Exec(context.Background(), q); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

func (d *fnDB) count(t *testing.T, q string) int {
	t.Helper()
	var n int
	if err := d.raw.QueryRow(context.Background(), q).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}
