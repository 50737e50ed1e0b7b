package sqlretry_test

import (
	"context"
	"database/sql"
	"errors"
	"math/rand/v2"
	"net/url"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	sr "github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/internal/dbtest"
	"github.com/sqlretry/sqlretry/postgres"
)

// chaosOutcome is one call's: its key and its error.
type chaosOutcome struct {
	key int
	err error
}

// TestPgBouncerChaosRunTx: RunTx through sqlretry.Open("pgx", …) behind a
// pgbouncer, in session and in transaction pooling, while the server's
// backends are terminated, pgbouncer restarts, and its admin console says
// RECONNECT, KILL (then RESUME) and PAUSE (then RESUME). Half the calls are
// settled by the marker verifier, half by the Op's own Verify (which
// postgres.Fencer cannot fence behind a pooler outside a transaction, and
// RunTx on a Connector asks it only at connect: their "not applied" ends in
// ErrAmbiguous). Every call inserts one row with its own key. Told nil, the
// row is there once; a plain error, it is not; ErrAmbiguous, at most once.
// The figures (calls, errors by reason) are logged.
//
// 8 workers for 5 s per mode; SQLRETRY_LONG=1: 60 s.
func TestPgBouncerChaosRunTx(t *testing.T) {
	for _, mode := range []string{dbtest.SessionPooling, dbtest.TransactionPooling} {
		t.Run(mode, func(t *testing.T) { chaosRunTx(t, mode) })
	}
}

func chaosRunTx(t *testing.T, mode string) {
	dur := 5 * time.Second
	if os.Getenv("SQLRETRY_LONG") != "" {
		dur = 60 * time.Second
	}
	dsn := dbtest.FreshPostgres(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	name := strings.TrimPrefix(u.Path, "/")
	b := dbtest.StartPgBouncer(t, u.Host, dbtest.PgBouncerOptions{Mode: mode, Settings: map[string]string{"default_pool_size": "10"}})
	raw, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	mustExec(t, raw, "CREATE TABLE items (k int PRIMARY KEY)")
	mustExec(t, raw, postgres.MarkerTableDDL)
	p := newPolicy(t, sr.Config{Classifier: postgres.Classifier, Fencer: postgres.Fencer, Budget: sr.NoBudget,
		MaxRetries: 10, BaseDelay: 2 * time.Millisecond, MaxDelay: 50 * time.Millisecond, CommandTimeout: 2 * time.Second,
		CommitVerifier: &postgres.MarkerVerifier{}})
	via := b.DSN(dsn)
	if mode == dbtest.TransactionPooling {
		via += "&default_query_exec_mode=exec"
	}
	db, err := sr.Open("pgx", via, p)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(8)
	// The marker verifier resolves its table once, before the chaos.
	if err := sr.RunTx(context.Background(), db, p, sr.Write("warm", nil), nil, func(context.Context, *sql.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), dur)
	defer cancel()
	var (
		mu       sync.Mutex
		outcomes []chaosOutcome
		wg       sync.WaitGroup
		actions  = map[string]int{}
	)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				key := w*1_000_000 + i
				op := sr.Write("insert", nil)
				if i%2 == 1 {
					op = sr.Write("insert", func(ctx context.Context) (bool, error) {
						var n int
						err := raw.QueryRowContext(ctx, "SELECT count(*) FROM items WHERE k = $1", key).Scan(&n)
						return n == 1, err
					})
				}
				cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
				err := sr.RunTx(cctx, db, p, op, nil, func(ctx context.Context, tx *sql.Tx) error {
					_, err := tx.ExecContext(ctx, "INSERT INTO items VALUES ($1)", key)
					return err
				})
				ccancel()
				mu.Lock()
				outcomes = append(outcomes, chaosOutcome{key, err})
				mu.Unlock()
			}
		}()
	}
	// The chaos, one action every 50-200 ms: mostly backend kills, now and
	// then a restart, RECONNECT, KILL or PAUSE (a storm of RECONNECTs keeps
	// pgbouncer 1.18 from ever finishing a server login).
	rng := rand.New(rand.NewPCG(1, 2))
	for ctx.Err() == nil {
		actx, acancel := context.WithTimeout(context.Background(), 5*time.Second)
		var act string
		switch []int{0, 0, 0, 0, 1, 2, 3, 4, 4}[rng.IntN(9)] {
		case 0:
			act = "terminate"
			_, err = raw.ExecContext(actx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'")
		case 1:
			act = "restart"
			err = b.Restart()
		case 2:
			act = "RECONNECT"
			err = b.Admin(actx, "RECONNECT "+name)
		case 3:
			act = "KILL"
			if err = b.Admin(actx, "KILL "+name); err == nil {
				time.Sleep(20 * time.Millisecond)
				err = b.Admin(actx, "RESUME "+name)
			}
		case 4:
			act = "PAUSE"
			pctx, pcancel := context.WithTimeout(actx, 100*time.Millisecond)
			_ = b.Admin(pctx, "PAUSE "+name) // waits for the sessions to end: cut short
			pcancel()
			if err = b.Admin(actx, "RESUME "+name); err != nil && strings.Contains(err.Error(), "not paused") {
				err = nil
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
	_ = b.Admin(context.Background(), "RESUME "+name)

	present := map[int]int{}
	rs, err := raw.Query("SELECT k FROM items")
	if err != nil {
		t.Fatal(err)
	}
	for rs.Next() {
		var k int
		if err := rs.Scan(&k); err != nil {
			t.Fatal(err)
		}
		present[k]++
	}
	rs.Close()
	var ok, failed, ambiguous, ambiguousAbsent int
	reasons := map[string]int{}
	for _, o := range outcomes {
		n := present[o.key]
		switch {
		case o.err == nil:
			ok++
			if n != 1 {
				t.Errorf("key %d: told nil, %d rows", o.key, n)
			}
		case errors.Is(o.err, sr.ErrAmbiguous):
			ambiguous++
			if n == 0 {
				ambiguousAbsent++
			}
			reasons["ambiguous: "+reasonOf(o.err)]++
		default:
			failed++
			if n != 0 {
				t.Errorf("key %d: told %v, %d rows", o.key, o.err, n)
			}
			reasons["failed: "+reasonOf(o.err)]++
		}
	}
	t.Logf("%d calls: %d nil, %d failed, %d ambiguous (%d with no row); chaos %v", len(outcomes), ok, failed, ambiguous, ambiguousAbsent, actions)
	keys := make([]string, 0, len(reasons))
	for r := range reasons {
		keys = append(keys, r)
	}
	sort.Strings(keys)
	for _, r := range keys {
		t.Logf("  %5d %s", reasons[r], r)
	}
	for r, n := range reasons {
		if strings.Contains(r, "may have committed part of it") {
			t.Errorf("%d calls of one INSERT told %q: a failure before COMMIT proves the rollback", n, r)
		}
	}
}

// reasonOf is err's message with its numbers written #, for counting, at
// most 300 bytes.
func reasonOf(err error) string {
	var b strings.Builder
	digits := false
	for _, r := range err.Error() {
		if r >= '0' && r <= '9' {
			if !digits {
				b.WriteByte('#')
			}
			digits = true
			continue
		}
		digits = false
		b.WriteRune(r)
	}
	out := b.String()
	if len(out) > 300 {
		out = out[:300]
	}
	return out
}
