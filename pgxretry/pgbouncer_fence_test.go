package pgxretry_test

import (
	"context"
	"errors"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/faults/proxy"
	"github.com/sqlretry/sqlretry/internal/dbtest"
	"github.com/sqlretry/sqlretry/pgxretry"
)

// route is how the pool under test reaches PostgreSQL: directly, or
// through a pgbouncer in one of its pool modes; always through a fault
// proxy, which cuts the client's connections.
type route struct {
	name string
	mode string // "" direct, else pgbouncer's pool_mode
	exec pgx.QueryExecMode
}

var routes = []route{
	{"direct", "", pgx.QueryExecModeCacheStatement},
	{"pgbouncer-session", dbtest.SessionPooling, pgx.QueryExecModeCacheStatement},
	{"pgbouncer-transaction", dbtest.TransactionPooling, pgx.QueryExecModeSimpleProtocol},
}

// routed is a fixture whose pool under test goes through r, behind a
// fault proxy.
func routed(t *testing.T, r route) (*fixture, *proxy.Proxy, *pgxretry.Pool) {
	t.Helper()
	f := newFixture(t, nil)
	u, err := url.Parse(f.dsn)
	if err != nil {
		t.Fatal(err)
	}
	target := u.Host
	if r.mode != "" {
		target = dbtest.StartPgBouncer(t, u.Host, dbtest.PgBouncerOptions{Mode: r.mode}).Addr()
	}
	px, err := proxy.New(proxy.Config{Target: target, Protocol: proxy.ProtocolPostgres})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	u.Host = px.Addr()
	pool := openPool(t, u.String(), appName, func(c *pgxpool.Config) {
		c.MaxConns = 4
		c.ConnConfig.DefaultQueryExecMode = r.exec
	})
	return f, px, pgxretry.New(pool, f.p)
}

// waitingInserts lists the backends whose INSERT INTO locked waits for a
// lock, read on the server itself.
func waitingInserts(t *testing.T, ctx context.Context, f *fixture) []int32 {
	t.Helper()
	var pids []int32
	rows, err := f.raw.Query(ctx, "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "+
		"AND wait_event_type = 'Lock' AND query LIKE 'INSERT INTO locked%' ORDER BY pid")
	if err != nil {
		t.Fatal(err)
	}
	pids, err = pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		t.Fatal(err)
	}
	return pids
}

// TestFencedVerifyBehindPooler is the lock stall with a cut connection:
// an autocommit INSERT whose Op's Verify checks for its row waits on a
// SHARE lock another session holds; the client's connection is cut while
// it waits, so the server goes on running it. The verify's "not there" is
// true only once the fence has ended that backend: if it is believed
// earlier, the INSERT is replayed and both land when the lock goes.
//
// Directly, pgx's backend pid is the server's, the fence ends it, and the
// replay is the only INSERT: nil, one row. Behind pgbouncer, pgx's pid is
// pgbouncer's cancel key (the server's pid is another): a fence by it ended
// nothing, the INSERT ran twice and the caller was told nil (before the
// fix, 2 rows every time). The fence must refuse, and the call end in
// ErrAmbiguous, the first INSERT landing when the lock goes: one row.
func TestFencedVerifyBehindPooler(t *testing.T) {
	for _, r := range routes {
		t.Run(r.name, func(t *testing.T) {
			f, px, w := routed(t, r)
			f.exec(t, "CREATE TABLE locked (v int NOT NULL)")
			for round := 1; round <= 3; round++ {
				lockStallCut(t, f, px, w, r, round)
			}
		})
	}
}

func lockStallCut(t *testing.T, f *fixture, px *proxy.Proxy, w *pgxretry.Pool, r route, v int) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	lock, err := f.raw.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback(ctx)
	if _, err := lock.Exec(ctx, "LOCK TABLE locked IN SHARE MODE"); err != nil {
		t.Fatal(err)
	}
	exists := func(ctx context.Context) (bool, error) {
		var ok bool
		err := f.raw.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM locked WHERE v = $1)", v).Scan(&ok)
		return ok, err
	}
	done := make(chan error, 1)
	go func() {
		octx := sqlretry.WithOp(ctx, sqlretry.Write("insert", exists))
		_, err := w.Exec(octx, "INSERT INTO locked VALUES ($1)", v)
		done <- err
	}()
	// The INSERT waits on the lock: cut the client's connections.
	var first []int32
	for first = waitingInserts(t, ctx, f); len(first) == 0; first = waitingInserts(t, ctx, f) {
		time.Sleep(2 * time.Millisecond)
	}
	cutAll(t, px)
	// The lock goes once the call has ended, or once an INSERT other than
	// the first waits (a replay).
	var callErr error
	ended := false
wait:
	for {
		select {
		case callErr = <-done:
			ended = true
			break wait
		default:
		}
		for _, pid := range waitingInserts(t, ctx, f) {
			if pid != first[0] {
				break wait
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if !ended {
		callErr = <-done
	}
	// Every INSERT the server still runs ends now that the lock is gone.
	for n := 1; n > 0; {
		n = f.count(t, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'INSERT INTO locked%' AND state = 'active'")
	}
	rows := f.count(t, "SELECT count(*) FROM locked WHERE v = $1", v)
	ambiguous := errors.Is(callErr, sqlretry.ErrAmbiguous)
	switch {
	case callErr == nil && rows != 1:
		t.Errorf("round %d: told nil, %d rows: the verify's \"not applied\" was believed while the first INSERT still ran", v, rows)
	case callErr != nil && !ambiguous && rows != 0:
		t.Errorf("round %d: told %v (not ErrAmbiguous), %d rows", v, callErr, rows)
	case ambiguous && rows > 1:
		t.Errorf("round %d: ErrAmbiguous, %d rows: the INSERT was replayed", v, rows)
	case r.mode == "" && callErr != nil:
		t.Errorf("round %d, direct: %v; want nil (the fence ends the backend it names)", v, callErr)
	}
	t.Logf("round %d: %d rows, %v", v, rows, callErr)
}

// waitingCommits lists the backends whose COMMIT waits for a lock (a
// deferred unique check waiting on another transaction's key).
func waitingCommits(t *testing.T, ctx context.Context, f *fixture) []int32 {
	t.Helper()
	rows, err := f.raw.Query(ctx, "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "+
		"AND wait_event_type = 'Lock' AND query ILIKE 'commit%' ORDER BY pid")
	if err != nil {
		t.Fatal(err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		t.Fatal(err)
	}
	return pids
}

// TestFencedCommitBehindPooler is the same stall at COMMIT, in RunTx with
// the Op's own Verify: a deferred unique check makes the COMMIT wait for
// another transaction holding the same key, and the client's connection is
// cut while it waits. The verify's "not applied" is true only once the
// fence has ended the backend, which will otherwise commit when the other
// transaction rolls back. Behind pgbouncer, a fence by pgx's pid (the
// pooler's key) ended nothing, the transaction ran again, and its COMMIT
// failed on the first one's key (23505): a plain error with the row there
// (before the fix, every time through pgbouncer). RunTx asks the server
// session its pid inside the transaction, which a pooler holds for the
// transaction whole, and fences that: nil, one row, on every route.
func TestFencedCommitBehindPooler(t *testing.T) {
	for _, r := range routes {
		t.Run(r.name, func(t *testing.T) {
			f, px, w := routed(t, r)
			f.exec(t, "CREATE TABLE deferred (k int NOT NULL UNIQUE DEFERRABLE INITIALLY DEFERRED, v int NOT NULL)")
			for round := 1; round <= 3; round++ {
				commitStallCut(t, f, px, w, round)
			}
		})
	}
}

func commitStallCut(t *testing.T, f *fixture, px *proxy.Proxy, w *pgxretry.Pool, v int) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	blocker, err := f.raw.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer blocker.Rollback(ctx)
	if _, err := blocker.Exec(ctx, "INSERT INTO deferred VALUES ($1, 0)", v); err != nil {
		t.Fatal(err)
	}
	exists := func(ctx context.Context) (bool, error) {
		var ok bool
		err := f.raw.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM deferred WHERE k = $1 AND v = $1)", v).Scan(&ok)
		return ok, err
	}
	done := make(chan error, 1)
	go func() {
		done <- w.RunTx(ctx, sqlretry.Write("insert", exists), pgx.TxOptions{}, func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "INSERT INTO deferred VALUES ($1, $1)", v)
			return err
		})
	}()
	var first []int32
	for first = waitingCommits(t, ctx, f); len(first) == 0; first = waitingCommits(t, ctx, f) {
		time.Sleep(2 * time.Millisecond)
	}
	cutAll(t, px)
	var callErr error
	ended := false
wait:
	for {
		select {
		case callErr = <-done:
			ended = true
			break wait
		default:
		}
		for _, pid := range waitingCommits(t, ctx, f) {
			if pid != first[0] {
				break wait
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
	if err := blocker.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if !ended {
		callErr = <-done
	}
	rows := f.count(t, "SELECT count(*) FROM deferred WHERE k = $1 AND v = $1", v)
	switch {
	case callErr == nil && rows != 1:
		t.Errorf("round %d: told nil, %d rows", v, rows)
	case callErr != nil && rows != 0 && !errors.Is(callErr, sqlretry.ErrAmbiguous):
		t.Errorf("round %d: told %v (not ErrAmbiguous), and the row is there: the fence ended nothing, the COMMIT it should have ended landed", v, callErr)
	case callErr != nil:
		t.Errorf("round %d: %v; want nil (the fence ends the transaction's own server session)", v, callErr)
	}
	t.Logf("round %d: %d rows, %v", v, rows, callErr)
}

// cutAll resets every connection open through px at once, as a network
// that drops them; connections opened afterwards pass.
func cutAll(t *testing.T, px *proxy.Proxy) {
	t.Helper()
	for _, c := range px.Conns() {
		_ = px.SetConnFault(c.ID, proxy.Fault{Mode: proxy.Reset}) // an error: it closed meanwhile
	}
}
