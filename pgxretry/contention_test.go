package pgxretry_test

import (
	"context"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/pgxretry"
)

// retryCodes counts the retries of a Policy by SQLSTATE.
type retryCodes struct {
	mu sync.Mutex
	n  map[string]int
}

func (r *retryCodes) Observe(e sqlretry.Event) {
	if e.Kind != sqlretry.EventRetry {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == nil {
		r.n = map[string]int{}
	}
	r.n[e.Class.Code]++
}

func (r *retryCodes) get(code string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[code]
}

// barrier lets two transactions' first attempts meet after their first
// statement, so that their second statements collide. It gives up after a
// while rather than hang a test whose rival failed first.
type barrier struct {
	wg   sync.WaitGroup
	done chan struct{}
}

func newBarrier(n int) *barrier {
	b := &barrier{done: make(chan struct{})}
	b.wg.Add(n)
	go func() { b.wg.Wait(); close(b.done) }()
	return b
}

func (b *barrier) wait() {
	b.wg.Done()
	select {
	case <-b.done:
	case <-time.After(10 * time.Second):
	}
}

func rounds(short, long int) int {
	if os.Getenv("SQLRETRY_LONG") == "1" {
		return long
	}
	return short
}

// contended runs rounds of two transactions at once, each built by tx for
// its side (0 or 1); each transaction's first attempt waits at the barrier
// after its first statement. It returns the ledger of the calls.
func contended(t *testing.T, w *pgxretry.Pool, n int, opts pgx.TxOptions, tx func(side int, id int64, meet func()) func(context.Context, pgx.Tx) error) []entry {
	var ledger []entry
	for r := range n {
		b := newBarrier(2)
		var wg sync.WaitGroup
		got := make([]entry, 2)
		for side := range 2 {
			id := int64(2*r + side + 1)
			wg.Go(func() {
				var attempts atomic.Int32
				meet := func() {
					if attempts.Add(1) == 1 {
						b.wait()
					}
				}
				err := w.RunTx(context.Background(), sqlretry.Write("contended", nil), opts, tx(side, id, meet))
				got[side] = entry{id: id, rows: 1, out: judge(err), err: err}
			})
		}
		wg.Wait()
		ledger = append(ledger, got...)
	}
	return ledger
}

// TestDeadlocks runs pairs of transactions that update two rows in
// opposite orders: each pair deadlocks, PostgreSQL rolls one back (40P01),
// and RunTx runs the victim again. Both rows count every transaction once.
func TestDeadlocks(t *testing.T) {
	noLeaks(t)
	codes := &retryCodes{}
	f := newFixture(t, func(c *pgxpool.Config) { c.ConnConfig.RuntimeParams["deadlock_timeout"] = "20ms" })
	f.p = policyWith(t, codes)
	f.w = pgxretry.New(f.pool, f.p)
	f.exec(t, itemsTable)
	f.exec(t, "CREATE TABLE acct (id int PRIMARY KEY, n int NOT NULL)")
	f.exec(t, "INSERT INTO acct VALUES (1, 0), (2, 0)")
	n := rounds(10, 200)
	ledger := contended(t, f.w, n, pgx.TxOptions{}, func(side int, id int64, meet func()) func(context.Context, pgx.Tx) error {
		first, second := 1+side, 2-side
		return func(ctx context.Context, tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "UPDATE acct SET n = n + 1 WHERE id = $1", first); err != nil {
				return err
			}
			meet()
			if _, err := tx.Exec(ctx, "UPDATE acct SET n = n + 1 WHERE id = $1", second); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, insertItem, id, "deadlock")
			return err
		}
	})
	c := f.check(t, ledger)
	t.Logf("calls %d (applied %d, refused %d, ambiguous %d); deadlock retries %d; lost %d, duplicated %d, misreported %d",
		c.calls, c.applied, c.refused, c.ambiguous, codes.get("40P01"), c.lost, c.duplicated, c.misreported)
	if c.applied != 2*n || c.lost+c.duplicated+c.misreported != 0 {
		t.Errorf("applied %d of %d; lost %d, duplicated %d, misreported %d", c.applied, 2*n, c.lost, c.duplicated, c.misreported)
	}
	if got := codes.get("40P01"); got < n {
		t.Errorf("%d deadlock retries in %d deadlocking rounds", got, n)
	}
	for _, id := range []int{1, 2} {
		if got := f.count(t, "SELECT n FROM acct WHERE id = $1", id); got != 2*n {
			t.Errorf("row %d counted %d transactions, want %d", id, got, 2*n)
		}
	}
}

// TestSerializationFailures runs pairs of SERIALIZABLE transactions that
// each read both rows and then write one of them (a write skew): the pair
// cannot be serialized, PostgreSQL fails one (40001), and RunTx runs it
// again. Every transaction adds one to its row once.
func TestSerializationFailures(t *testing.T) {
	noLeaks(t)
	codes := &retryCodes{}
	f := newFixture(t, nil)
	f.p = policyWith(t, codes)
	f.w = pgxretry.New(f.pool, f.p)
	f.exec(t, itemsTable)
	f.exec(t, "CREATE TABLE acct (id int PRIMARY KEY, n int NOT NULL)")
	f.exec(t, "INSERT INTO acct VALUES (1, 0), (2, 0)")
	n := rounds(10, 200)
	ledger := contended(t, f.w, n, pgx.TxOptions{IsoLevel: pgx.Serializable}, func(side int, id int64, meet func()) func(context.Context, pgx.Tx) error {
		return func(ctx context.Context, tx pgx.Tx) error {
			var sum int
			if err := tx.QueryRow(ctx, "SELECT sum(n) FROM acct").Scan(&sum); err != nil {
				return err
			}
			meet()
			if _, err := tx.Exec(ctx, "UPDATE acct SET n = n + 1 WHERE id = $1", 1+side); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, insertItem, id, "serializable")
			return err
		}
	})
	c := f.check(t, ledger)
	t.Logf("calls %d (applied %d, refused %d, ambiguous %d); serialization retries %d; lost %d, duplicated %d, misreported %d",
		c.calls, c.applied, c.refused, c.ambiguous, codes.get("40001"), c.lost, c.duplicated, c.misreported)
	if c.applied != 2*n || c.lost+c.duplicated+c.misreported != 0 {
		t.Errorf("applied %d of %d; lost %d, duplicated %d, misreported %d", c.applied, 2*n, c.lost, c.duplicated, c.misreported)
	}
	if got := codes.get("40001"); got < n {
		t.Errorf("%d serialization retries in %d conflicting rounds", got, n)
	}
	if got := f.count(t, "SELECT sum(n) FROM acct"); got != 2*n {
		t.Errorf("sum %d after %d increments", got, 2*n)
	}
}
