package pgxretry_test

import (
	"context"
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/pgxretry"
)

// outcome is what a call was told.
type outcome uint8

const (
	applied   outcome = iota // nil
	refused                  // a plain error: nothing may be applied
	ambiguous                // ErrAmbiguous: either is right
)

// entry is one write call: its unique value, how many rows it writes, and
// what it was told.
type entry struct {
	id   int64
	rows int
	out  outcome
	err  error
}

func judge(err error) outcome {
	switch {
	case err == nil:
		return applied
	case errors.Is(err, sqlretry.ErrAmbiguous):
		return ambiguous
	}
	return refused
}

// tally is the check of a ledger against the table.
type tally struct {
	calls, applied, refused, ambiguous int
	lost, duplicated, misreported      int
}

func (f *fixture) check(t *testing.T, ledger []entry) tally {
	t.Helper()
	counts := map[int64]int{}
	rows, err := f.raw.Query(context.Background(), "SELECT call_id, count(*) FROM items GROUP BY call_id")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id int64
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			t.Fatal(err)
		}
		counts[id] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var c tally
	for _, e := range ledger {
		c.calls++
		n := counts[e.id]
		switch {
		case n > e.rows:
			c.duplicated++
		case e.out == applied && n < e.rows:
			c.lost++
		case e.out == refused && n != 0, e.out == ambiguous && n != 0 && n != e.rows:
			c.misreported++
			t.Logf("call %d: %d of %d rows, told %v", e.id, n, e.rows, e.err)
		}
		switch e.out {
		case applied:
			c.applied++
		case refused:
			c.refused++
			if c.refused <= 3 {
				t.Logf("call %d refused (%d rows): %v", e.id, n, e.err)
			}
		case ambiguous:
			c.ambiguous++
		}
	}
	return c
}

// storm terminates the backends of the pool under test every few
// milliseconds until stop is closed, and counts those it ended.
func (f *fixture) storm(stop <-chan struct{}, killed *atomic.Int64) {
	tick := time.NewTicker(40 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		n, _ := f.terminate(context.Background())
		killed.Add(int64(n))
	}
}

const itemsTable = "CREATE TABLE items (seq bigserial PRIMARY KEY, call_id bigint NOT NULL, note text NOT NULL DEFAULT '')"

// TestTerminateStorm drives every kind of call through the wrapper and a
// sqlc-shaped Queries while another goroutine terminates the pool's
// backends, then checks every write call against the table: nothing lost,
// nothing duplicated, no call told the wrong outcome; every read
// succeeded.
func TestTerminateStorm(t *testing.T) {
	noLeaks(t)
	workers, perWorker := 4, 60 // ~3,000 backends ended; SQLRETRY_LONG=1 for 1,500 a worker
	if os.Getenv("SQLRETRY_LONG") == "1" {
		perWorker = 1500
	}
	f := newFixture(t, nil)
	// Retries enough to outlast the storm: it ends every backend each
	// 40 ms, and on a slow machine (a loaded CI box, -race) 21 attempts in
	// a row were each ended before their read finished. The property is
	// that a read is replayed after any transient failure, not how many
	// replays a given storm takes.
	f.p = policyWith(t, nil, func(c *sqlretry.Config) { c.MaxRetries = 200 })
	f.w = pgxretry.New(f.pool, f.p)
	f.exec(t, itemsTable)
	q := NewQueries(f.w)
	stop := make(chan struct{})
	var killed atomic.Int64
	var stormDone sync.WaitGroup
	stormDone.Go(func() { f.storm(stop, &killed) })

	var (
		mu        sync.Mutex
		ledger    []entry
		readFails atomic.Int64
		wg        sync.WaitGroup
	)
	for w := range workers {
		wg.Go(func() {
			for i := range perWorker {
				id := int64(w*perWorker + i + 1)
				e, readErr := f.call(q, id)
				if readErr != nil {
					readFails.Add(1)
					t.Logf("read failed: %v", readErr)
				}
				mu.Lock()
				ledger = append(ledger, e)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(stop)
	stormDone.Wait()

	c := f.check(t, ledger)
	st := f.p.Stats()
	t.Logf("calls %d (applied %d, refused %d, ambiguous %d); backends terminated %d; policy: %d calls, %d failures, %d retries, %d verifications; lost %d, duplicated %d, misreported %d, failed reads %d",
		c.calls, c.applied, c.refused, c.ambiguous, killed.Load(), st.Calls, st.Failures, st.Retries, st.Verifications, c.lost, c.duplicated, c.misreported, readFails.Load())
	if c.lost+c.duplicated+c.misreported != 0 {
		t.Errorf("lost %d, duplicated %d, misreported %d: want 0", c.lost, c.duplicated, c.misreported)
	}
	if readFails.Load() != 0 {
		t.Errorf("%d reads failed: a read is replayed after any transient failure", readFails.Load())
	}
	if killed.Load() == 0 || st.Retries == 0 {
		t.Errorf("the storm ended %d backends and caused %d retries: the test tested nothing", killed.Load(), st.Retries)
	}
}

// call makes one call of the kind id picks, and one read.
func (f *fixture) call(q *Queries, id int64) (entry, error) {
	ctx := context.Background()
	e := entry{id: id, rows: 1}
	var err error
	switch id % 6 {
	case 0: // :exec, settled by an attached verify
		err = q.InsertItem(sqlretry.WithOp(ctx, sqlretry.Write("insert", f.exists(id))), id, "exec")
	case 1: // :one INSERT … RETURNING, no verify
		_, err = q.CreateItem(ctx, id, "one")
	case 2: // RunTx, settled by pg_xact_status
		e.rows = 2
		err = f.w.RunTx(ctx, sqlretry.Write("tx", nil), pgx.TxOptions{}, func(ctx context.Context, tx pgx.Tx) error {
			qt := q.WithTx(tx)
			if err := qt.InsertItem(ctx, id, "tx-a"); err != nil {
				return err
			}
			return qt.InsertItem(ctx, id, "tx-b")
		})
	case 3: // RunTx, settled by the Op's Verify
		err = f.w.RunTx(ctx, sqlretry.Write("tx-verify", f.exists(id)), pgx.TxOptions{}, func(ctx context.Context, tx pgx.Tx) error {
			return q.WithTx(tx).InsertItem(ctx, id, "tx-verify")
		})
	case 4: // a batch of two writes
		e.rows = 2
		b := &pgx.Batch{}
		b.Queue(insertItem, id, "batch-a")
		b.Queue(insertItem, id, "batch-b")
		err = f.w.SendBatch(ctx, b).Close()
	case 5: // :copyfrom
		e.rows = 3
		_, err = q.CopyItems(ctx, []CopyItemsParams{{id, "c1"}, {id, "c2"}, {id, "c3"}})
	}
	e.out, e.err = judge(err), err
	if _, rerr := q.CountItems(ctx, id); rerr != nil {
		return e, rerr
	}
	return e, f.list(ctx, id)
}

// list reads the rows from id on, as sqlc's :many does. A failure after
// the first row is not replayed, by design: it is not counted.
func (f *fixture) list(ctx context.Context, from int64) error {
	rows, err := f.w.Query(ctx, listItems, from)
	if err != nil {
		return err
	}
	defer rows.Close()
	seen := 0
	for rows.Next() {
		seen++
	}
	if err := rows.Err(); err != nil && seen == 0 {
		return err
	}
	return nil
}

// exists is the verify of a call's write: does a row carry its id? It
// reads through the checks' pool.
func (f *fixture) exists(id int64) sqlretry.VerifyFunc {
	return func(ctx context.Context) (bool, error) {
		var n int
		err := f.raw.QueryRow(ctx, "SELECT count(*) FROM items WHERE call_id = $1", id).Scan(&n)
		return n > 0, err
	}
}
