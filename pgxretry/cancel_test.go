package pgxretry_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/faults/proxy"
	"github.com/sqlretry/sqlretry/pgxretry"
	"github.com/sqlretry/sqlretry/postgres"
)

// cancelOnce cancels as soon as cond holds, polled; wait waits for it.
func cancelOnce(t *testing.T, cancel context.CancelFunc, cond func() bool) (wait func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		deadline := time.Now().Add(60 * time.Second)
		for !cond() && time.Now().Before(deadline) {
			time.Sleep(2 * time.Millisecond)
		}
		cancel()
	}()
	return func() { <-done }
}

// TestCancelDuringCommitSettled: the server committed, its answer to COMMIT
// is held, and the caller's context ends. Before, RunTx returned a plain
// "context canceled" for a row that is there, with pg_xact_status and with
// WithMarker alike; now the COMMIT is settled: nil, one row.
func TestCancelDuringCommitSettled(t *testing.T) {
	for i, marker := range []bool{false, true} {
		t.Run(map[bool]string{false: "pg_xact_status", true: "marker"}[marker], func(t *testing.T) {
			f, px := cutFixture(t)
			if marker {
				f.w = pgxretry.New(f.pool, f.p, pgxretry.WithMarker(&postgres.MarkerVerifier{CreateTable: true}))
			}
			id := int64(300 + i)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			held := px.Counts().HoldAfterCommit
			wait := cancelOnce(t, cancel, func() bool { return px.Counts().HoldAfterCommit > held })
			err := f.w.RunTx(ctx, sqlretry.Write("pay", nil), pgx.TxOptions{}, func(ctx context.Context, tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, insertItem, id, "held"); err != nil {
					return err
				}
				return px.SetFault(proxy.Fault{Mode: proxy.HoldAfterCommit})
			})
			wait()
			_ = px.SetFault(proxy.Fault{Mode: proxy.Pass})
			if n := f.count(t, "SELECT count(*) FROM items WHERE call_id = $1", id); n != 1 {
				t.Fatalf("%d rows; the test needs the held COMMIT to have landed", n)
			}
			if err != nil {
				t.Errorf("RunTx = %v (ErrAmbiguous %v), want nil: the COMMIT landed", err, errors.Is(err, sqlretry.ErrAmbiguous))
			}
		})
	}
}

// TestCancelBeforeSendIsPlain: a caller's context that ends before COMMIT
// was sent, or a read it cuts off, leaves nothing applied: the context's
// error, never ErrAmbiguous.
func TestCancelBeforeSendIsPlain(t *testing.T) {
	f, _ := cutFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	err := f.w.RunTx(ctx, sqlretry.Write("pay", nil), pgx.TxOptions{}, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, insertItem, 400, "cancelled")
		cancel()
		return err
	})
	if !errors.Is(err, context.Canceled) || errors.Is(err, sqlretry.ErrAmbiguous) {
		t.Errorf("RunTx = %v; want context.Canceled and not ErrAmbiguous", err)
	}
	if n := f.count(t, "SELECT count(*) FROM items WHERE call_id = 400"); n != 0 {
		t.Errorf("%d rows of a transaction never committed", n)
	}
	ctx, cancel = context.WithCancel(context.Background())
	wait := cancelOnce(t, cancel, func() bool {
		return f.count(t, "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep' AND application_name = $1", appName) > 0
	})
	_, err = f.w.Exec(ctx, "SELECT pg_sleep(30)")
	wait()
	if !errors.Is(err, context.Canceled) || errors.Is(err, sqlretry.ErrAmbiguous) {
		t.Errorf("a read cut off: %v; want context.Canceled and not ErrAmbiguous", err)
	}
}

// TestCancelDuringWriteIsSettled: an autocommit INSERT waits on a lock when
// the caller's context ends. Without a verify: ErrAmbiguous and the
// context's error (before: the context's error alone). With WithOp's
// verify, the session is fenced first and the verify's answer is final.
func TestCancelDuringWriteIsSettled(t *testing.T) {
	for i, attach := range []bool{false, true} {
		t.Run(map[bool]string{false: "no verify", true: "WithOp"}[attach], func(t *testing.T) {
			f, _ := cutFixture(t)
			id := int64(500 + i)
			ctx := context.Background()
			lock, err := f.raw.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer lock.Rollback(ctx)
			if _, err := lock.Exec(ctx, "LOCK TABLE items IN SHARE MODE"); err != nil {
				t.Fatal(err)
			}
			cctx, cancel := context.WithCancel(ctx)
			defer cancel()
			wait := cancelOnce(t, cancel, func() bool {
				return f.count(t, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND application_name = $1", appName) > 0
			})
			if attach {
				cctx = sqlretry.WithOp(cctx, sqlretry.Write("pay", f.exists(id)))
			}
			_, err = f.w.Exec(cctx, "INSERT INTO items (call_id) VALUES ($1)", id)
			wait()
			if err := lock.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
			for f.count(t, "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND application_name = $1", appName) > 0 {
				time.Sleep(2 * time.Millisecond) // a live INSERT takes the lock now
			}
			n := f.count(t, "SELECT count(*) FROM items WHERE call_id = $1", id)
			switch {
			case err == nil && n != 1:
				t.Errorf("Exec = nil with %d rows", n)
			case err != nil && n == 1 && !errors.Is(err, sqlretry.ErrAmbiguous):
				t.Errorf("Exec = %v and the row is there: want nil or ErrAmbiguous", err)
			case !errors.Is(err, context.Canceled):
				t.Errorf("Exec = %v (%d rows); want it to match context.Canceled", err, n)
			case !attach && !errors.Is(err, sqlretry.ErrAmbiguous):
				t.Errorf("Exec = %v (%d rows); without a verify want ErrAmbiguous too", err, n)
			case attach && (n != 0 || errors.Is(err, sqlretry.ErrAmbiguous)):
				t.Errorf("Exec = %v, %d rows; fenced and verified: want no row and the context's error alone", err, n)
			}
		})
	}
}

// TestCancelWhileReadingWriteRows: the caller's context ends while it reads
// the rows of an INSERT … RETURNING: the INSERT may commit or not, and the
// caller must not hear a plain "context canceled" (before: it did).
func TestCancelWhileReadingWriteRows(t *testing.T) {
	f, _ := cutFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rows, err := f.w.Query(ctx, "INSERT INTO items (call_id) SELECT g FROM generate_series(1, 200000) g RETURNING call_id")
	if err != nil {
		t.Fatal(err)
	}
	if !rows.Next() {
		t.Fatalf("no first row: %v", rows.Err())
	}
	cancel()
	for rows.Next() {
	}
	err = rows.Err()
	rows.Close()
	n := f.count(t, "SELECT count(*) FROM items")
	if err == nil && n == 200000 {
		t.Skip("every row arrived before the cancel took effect")
	}
	if !errors.Is(err, sqlretry.ErrAmbiguous) || !errors.Is(err, context.Canceled) {
		t.Errorf("rows.Err() = %v (%d rows committed); want ErrAmbiguous and context.Canceled", err, n)
	}
}

// TestCancelDuringCommitIdempotentIsAmbiguous: an Idempotent RunTx's
// COMMIT, which landed, cut off by the caller, whose end forbids the replay
// the Op consents to: ErrAmbiguous and the context's error (before: the
// context's error alone).
func TestCancelDuringCommitIdempotentIsAmbiguous(t *testing.T) {
	f, px := cutFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	held := px.Counts().HoldAfterCommit
	wait := cancelOnce(t, cancel, func() bool { return px.Counts().HoldAfterCommit > held })
	err := f.w.RunTx(ctx, sqlretry.Idempotent("pay"), pgx.TxOptions{}, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, insertItem, 901, "held"); err != nil {
			return err
		}
		return px.SetFault(proxy.Fault{Mode: proxy.HoldAfterCommit})
	})
	wait()
	_ = px.SetFault(proxy.Fault{Mode: proxy.Pass})
	if n := f.count(t, "SELECT count(*) FROM items WHERE call_id = 901"); n != 1 {
		t.Fatalf("%d rows; the test needs the held COMMIT to have landed", n)
	}
	if !errors.Is(err, sqlretry.ErrAmbiguous) || !errors.Is(err, context.Canceled) {
		t.Errorf("RunTx = %v; want ErrAmbiguous and context.Canceled", err)
	}
}

// TestCancelAfterFnCommittedIsAmbiguous: fn commits part of the transaction
// itself (COMMIT in SQL text), the caller cancels, and fn's next statement
// is refused by pgx as never sent (SafeToRetry). That speaks of the last
// statement only: the committed part is there, so ErrAmbiguous (before: the
// context's error alone).
func TestCancelAfterFnCommittedIsAmbiguous(t *testing.T) {
	f, _ := cutFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	err := f.w.RunTx(ctx, sqlretry.Write("pay", nil), pgx.TxOptions{}, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, insertItem, 902, "first"); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "COMMIT"); err != nil {
			return err
		}
		cancel()
		_, err := tx.Exec(ctx, insertItem, 902, "second")
		return err
	})
	if n := f.count(t, "SELECT count(*) FROM items WHERE call_id = 902"); n != 1 {
		t.Fatalf("%d rows; the test needs fn's own COMMIT to have landed", n)
	}
	if !errors.Is(err, sqlretry.ErrAmbiguous) || !errors.Is(err, context.Canceled) {
		t.Errorf("RunTx = %v with the first part committed: want ErrAmbiguous and context.Canceled", err)
	}
}

// TestCancelBeforeBatchIsPlain: a batch whose caller's context had ended
// before SendBatch was never sent: the context's error alone, for a batch
// of several parts and for a batch of writes (before: ErrAmbiguous).
func TestCancelBeforeBatchIsPlain(t *testing.T) {
	f, _ := cutFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for name, queries := range map[string][]string{"parts": {"BEGIN", insertItem, "COMMIT"}, "writes": {insertItem, insertItem}} {
		b := &pgx.Batch{}
		for _, q := range queries {
			if q == insertItem {
				b.Queue(q, 903, name)
			} else {
				b.Queue(q)
			}
		}
		br := f.w.SendBatch(ctx, b)
		_, err := br.Exec()
		_ = br.Close()
		if !errors.Is(err, context.Canceled) || errors.Is(err, sqlretry.ErrAmbiguous) {
			t.Errorf("%s: a batch never sent: %v; want the context's error alone", name, err)
		}
	}
	if n := f.count(t, "SELECT count(*) FROM items WHERE call_id = 903"); n != 0 {
		t.Errorf("%d rows of batches never sent", n)
	}
}

// TestCancelDuringPartsIsAmbiguous: a pool whose connections send a cancel
// request when the context ends (pgconn.CancelRequestContextWatcherHandler):
// a text that commits part of itself and runs on is cut off during its
// tail, and the server answers 57014 for the last part. That verdict says
// nothing of the committed INSERT: ErrAmbiguous (before: the context's
// error alone).
func TestCancelDuringPartsIsAmbiguous(t *testing.T) {
	f, _ := cutFixture(t)
	pool := openPool(t, f.dsn, appName, func(c *pgxpool.Config) {
		c.ConnConfig.BuildContextWatcherHandler = func(pc *pgconn.PgConn) ctxwatch.Handler {
			return &pgconn.CancelRequestContextWatcherHandler{Conn: pc, CancelRequestDelay: 0, DeadlineDelay: 10 * time.Second}
		}
		c.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	})
	w := pgxretry.New(pool, f.p)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wait := cancelOnce(t, cancel, func() bool {
		return f.count(t, "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep' AND query LIKE 'BEGIN; INSERT INTO items%'") > 0
	})
	_, err := w.Exec(ctx, "BEGIN; INSERT INTO items (call_id, note) VALUES (905, 'x'); COMMIT; SELECT pg_sleep(30)")
	wait()
	if n := f.count(t, "SELECT count(*) FROM items WHERE call_id = 905"); n != 1 {
		t.Fatalf("%d rows; the test needs the INSERT committed before the cancel", n)
	}
	if !errors.Is(err, sqlretry.ErrAmbiguous) || !errors.Is(err, context.Canceled) {
		t.Errorf("Exec = %v with the INSERT committed: want ErrAmbiguous and context.Canceled", err)
	}
}

// TestCancelDuringIdempotentWriteIsAmbiguous: an autocommit write given an
// Idempotent Op with WithOp, waiting on a lock when the caller's context
// ends: the replay its Op allows is forbidden, and the write may land:
// ErrAmbiguous and the context's error (before: the context's error alone).
func TestCancelDuringIdempotentWriteIsAmbiguous(t *testing.T) {
	f, _ := cutFixture(t)
	ctx := context.Background()
	lock, err := f.raw.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback(ctx)
	if _, err := lock.Exec(ctx, "LOCK TABLE items IN SHARE MODE"); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wait := cancelOnce(t, cancel, func() bool {
		return f.count(t, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND application_name = $1", appName) > 0
	})
	_, err = f.w.Exec(sqlretry.WithOp(cctx, sqlretry.Idempotent("upsert")), "INSERT INTO items (call_id) VALUES (906)")
	wait()
	if !errors.Is(err, sqlretry.ErrAmbiguous) || !errors.Is(err, context.Canceled) {
		t.Errorf("Exec = %v; want ErrAmbiguous and context.Canceled", err)
	}
}
