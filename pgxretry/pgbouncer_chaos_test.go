package pgxretry_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/url"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/internal/dbtest"
	"github.com/sqlretry/sqlretry/pgxretry"
	"github.com/sqlretry/sqlretry/postgres"
)

// TestPgBouncerChaos: pgxretry behind a pgbouncer, in session pooling (pgx's
// default exec mode) and in transaction pooling (exec mode), while the
// server's backends are terminated, pgbouncer restarts, RECONNECTs and
// KILLs, and a SHARE lock stalls the INSERTs past the Policy's
// CommandTimeout (the attempt gives up, its INSERT waits on). A third of the calls are autocommit INSERTs with a WithOp Verify, a
// third RunTx with the Op's Verify, a third RunTx settled by WithMarker;
// each inserts one row with its own key. Told nil, the row is there once;
// a plain error, it is not; ErrAmbiguous, at most once. Before the fence
// asked the server for its pid, a run of this shape applied writes twice
// and told nil, and told "retries exhausted" of rows that were there.
//
// 8 workers for 5 s per mode; SQLRETRY_LONG=1: 60 s.
func TestPgBouncerChaos(t *testing.T) {
	for _, r := range []route{routes[1], routes[2]} {
		t.Run(r.name, func(t *testing.T) { pgbouncerChaos(t, r) })
	}
}

func pgbouncerChaos(t *testing.T, r route) {
	dur := 5 * time.Second
	if os.Getenv("SQLRETRY_LONG") != "" {
		dur = 60 * time.Second
	}
	f := newFixture(t, nil)
	f.exec(t, "CREATE TABLE chaos (k int PRIMARY KEY)")
	f.exec(t, postgres.MarkerTableDDL)
	u, err := url.Parse(f.dsn)
	if err != nil {
		t.Fatal(err)
	}
	name := strings.TrimPrefix(u.Path, "/")
	b := dbtest.StartPgBouncer(t, u.Host, dbtest.PgBouncerOptions{Mode: r.mode, Settings: map[string]string{"default_pool_size": "10"}})
	pool := openPool(t, b.DSN(f.dsn), appName, func(c *pgxpool.Config) {
		c.MaxConns = 8
		c.ConnConfig.DefaultQueryExecMode = r.exec
	})
	p := policyWith(t, nil, func(c *sqlretry.Config) { c.CommandTimeout = 150 * time.Millisecond; c.MaxRetries = 20 })
	w := pgxretry.New(pool, p)
	wm := pgxretry.New(pool, p, pgxretry.WithMarker(&postgres.MarkerVerifier{}))
	t.Cleanup(wm.Close)
	if err := wm.RunTx(context.Background(), sqlretry.Write("warm", nil), pgx.TxOptions{}, func(context.Context, pgx.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), dur)
	defer cancel()
	type result struct {
		key int
		err error
	}
	var (
		mu      sync.Mutex
		results []result
		wg      sync.WaitGroup
	)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				key := g*1_000_000 + i
				exists := func(ctx context.Context) (bool, error) {
					var n int
					err := f.raw.QueryRow(ctx, "SELECT count(*) FROM chaos WHERE k = $1", key).Scan(&n)
					return n == 1, err
				}
				insert := func(ctx context.Context, tx pgx.Tx) error {
					_, err := tx.Exec(ctx, "INSERT INTO chaos VALUES ($1)", key)
					return err
				}
				cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
				var err error
				switch i % 3 {
				case 0:
					_, err = w.Exec(sqlretry.WithOp(cctx, sqlretry.Write("insert", exists)), "INSERT INTO chaos VALUES ($1)", key)
				case 1:
					err = w.RunTx(cctx, sqlretry.Write("insert", exists), pgx.TxOptions{}, insert)
				case 2:
					err = wm.RunTx(cctx, sqlretry.Write("insert", nil), pgx.TxOptions{}, insert)
				}
				ccancel()
				mu.Lock()
				results = append(results, result{key, err})
				mu.Unlock()
			}
		}()
	}
	rng := rand.New(rand.NewPCG(3, 4))
	actions := map[string]int{}
	for ctx.Err() == nil {
		actx, acancel := context.WithTimeout(context.Background(), 5*time.Second)
		var act string
		switch []int{0, 0, 0, 1, 2, 3, 4, 4, 4}[rng.IntN(9)] {
		case 0:
			act = "terminate"
			_, err = f.raw.Exec(actx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1", appName)
		case 1:
			act = "restart"
			err = b.Restart()
		case 2:
			act = "RECONNECT"
			err = b.Admin(actx, "RECONNECT "+name)
		case 4:
			// A lock stall longer than the CommandTimeout: attempts give
			// up while their INSERT still waits on the server.
			act = "lock"
			var tx pgx.Tx
			if tx, err = f.raw.Begin(actx); err == nil {
				if _, err = tx.Exec(actx, "LOCK TABLE chaos IN SHARE MODE"); err == nil {
					time.Sleep(time.Duration(200+rng.IntN(200)) * time.Millisecond)
				}
				_ = tx.Rollback(actx)
			}
		case 3:
			act = "KILL"
			if err = b.Admin(actx, "KILL "+name); err == nil {
				time.Sleep(20 * time.Millisecond)
				err = b.Admin(actx, "RESUME "+name)
			}
		}
		acancel()
		if err != nil {
			t.Logf("%s: %v", act, err)
		}
		actions[act]++
		time.Sleep(time.Duration(50+rng.IntN(150)) * time.Millisecond)
	}
	wg.Wait()

	present := map[int]int{}
	rows, err := f.raw.Query(context.Background(), "SELECT k FROM chaos")
	if err != nil {
		t.Fatal(err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		present[k]++
	}
	var ok, failed, ambiguous, wrong int
	reasons := map[string]int{}
	for _, res := range results {
		n := present[res.key]
		shape := []string{"exec", "runtx-verify", "runtx-marker"}[res.key%1_000_000%3]
		switch {
		case res.err == nil:
			ok++
			if n != 1 {
				wrong++
				t.Errorf("%s key %d: told nil, %d rows", shape, res.key, n)
			}
		case errors.Is(res.err, sqlretry.ErrAmbiguous):
			ambiguous++
			reasons[shape+" ambiguous: "+firstLine(res.err)]++
		default:
			failed++
			if n != 0 {
				wrong++
				t.Errorf("%s key %d: told %v, %d rows", shape, res.key, res.err, n)
			}
			reasons[shape+" failed: "+firstLine(res.err)]++
		}
	}
	t.Logf("%d calls: %d nil, %d failed, %d ambiguous; %d wrong; chaos %v", len(results), ok, failed, ambiguous, wrong, actions)
	rs := make([]string, 0, len(reasons))
	for k := range reasons {
		rs = append(rs, k)
	}
	sort.Strings(rs)
	for _, k := range rs {
		t.Logf("  %5d %s", reasons[k], k)
	}
}

// firstLine is err's message up to 200 bytes, its digits dropped, for
// counting errors by reason.
func firstLine(err error) string {
	s := strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' {
			return -1
		}
		return r
	}, err.Error())
	if len(s) > 200 {
		s = s[:200]
	}
	return s
}
