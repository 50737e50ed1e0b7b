package pgxretry_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/pgxretry"
)

// killIdle terminates the one idle connection of the pool under test and
// waits until its backend is gone: the next statement on it meets a dead
// session (PostgreSQL's FATAL 57P01 waiting in the socket).
func (f *fixture) killIdle(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	if err := f.pool.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := f.terminate(ctx); err != nil || n != 1 {
		t.Fatalf("terminated %d backends (%v), want 1", n, err)
	}
	for f.count(t, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1", appName) != 0 {
		time.Sleep(2 * time.Millisecond)
	}
}

// TestIdleSessionKilled runs each kind of call on a pool whose one
// connection's backend was terminated while idle (a failover, an
// administrator's pg_terminate_backend). A read and a transaction are run
// again and succeed. A write without a verify ends in ErrAmbiguous: the
// session's end arrives as the reply to the write, and nothing tells it
// from an end while the write ran. With a verify it is settled.
func TestIdleSessionKilled(t *testing.T) {
	noLeaks(t)
	f := newFixture(t, func(c *pgxpool.Config) { c.MaxConns = 1 })
	f.exec(t, itemsTable)
	f.exec(t, "INSERT INTO items (call_id) VALUES (0)")
	cases := []struct {
		name string
		rows int   // rows the call writes when applied
		want error // nil, or what the error must match
		call func(ctx context.Context, id int64) error
	}{
		{"Exec read", 0, nil, func(ctx context.Context, _ int64) error {
			_, err := f.w.Exec(ctx, "SELECT 1")
			return err
		}},
		{"QueryRow read", 0, nil, func(ctx context.Context, _ int64) error {
			var n int
			return f.w.QueryRow(ctx, "SELECT count(*) FROM items").Scan(&n)
		}},
		{"Query read", 0, nil, func(ctx context.Context, _ int64) error {
			rows, err := f.w.Query(ctx, "SELECT call_id FROM items")
			if err != nil {
				return err
			}
			_, err = pgx.CollectRows(rows, pgx.RowTo[int64])
			return err
		}},
		{"batch of reads", 0, nil, func(ctx context.Context, _ int64) error {
			b := &pgx.Batch{}
			b.Queue("SELECT 1")
			b.Queue("SELECT count(*) FROM items")
			return f.w.SendBatch(ctx, b).Close()
		}},
		{"RunTx", 1, nil, func(ctx context.Context, id int64) error {
			return f.w.RunTx(ctx, sqlretry.Write("tx", nil), pgx.TxOptions{}, func(ctx context.Context, tx pgx.Tx) error {
				_, err := tx.Exec(ctx, insertItem, id, "tx")
				return err
			})
		}},
		{"Exec write", 1, sqlretry.ErrAmbiguous, func(ctx context.Context, id int64) error {
			_, err := f.w.Exec(ctx, insertItem, id, "exec")
			return err
		}},
		{"Exec write with a verify", 1, nil, func(ctx context.Context, id int64) error {
			_, err := f.w.Exec(sqlretry.WithOp(ctx, sqlretry.Write("insert", f.exists(id))), insertItem, id, "exec")
			return err
		}},
		{"batch of writes", 2, sqlretry.ErrAmbiguous, func(ctx context.Context, id int64) error {
			b := &pgx.Batch{}
			b.Queue(insertItem, id, "a")
			b.Queue(insertItem, id, "b")
			return f.w.SendBatch(ctx, b).Close()
		}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			id := int64(i + 1)
			f.killIdle(t)
			retries := f.p.Stats().Retries + f.p.Stats().Ambiguous
			err := tc.call(context.Background(), id)
			switch {
			case tc.want == nil && err != nil:
				t.Fatalf("%v, want nil", err)
			case tc.want != nil && !errors.Is(err, tc.want):
				t.Fatalf("%v, want %v", err, tc.want)
			}
			if f.p.Stats().Retries+f.p.Stats().Ambiguous == retries {
				t.Fatal("the dead session went unnoticed: no retry, no ambiguity")
			}
			n := f.count(t, "SELECT count(*) FROM items WHERE call_id = $1", id)
			if err == nil && n != tc.rows || err != nil && n != 0 {
				t.Fatalf("%d rows after %v, want %d", n, err, tc.rows)
			}
		})
	}
}

// TestCommandTimeout runs calls under a Policy whose CommandTimeout is
// short: the rows of a query are read after the attempt returned, under
// the attempt's deadline; a read that outlives it is retried until the
// retries run out; a write that outlives it is ambiguous.
func TestCommandTimeout(t *testing.T) {
	noLeaks(t)
	f := newFixture(t, nil)
	p, err := sqlretry.New(sqlretry.Config{CommandTimeout: 150 * time.Millisecond, MaxRetries: 2, BaseDelay: time.Millisecond, Budget: sqlretry.NoBudget})
	if err != nil {
		t.Fatal(err)
	}
	w := pgxretry.New(f.pool, p)
	f.exec(t, itemsTable)
	ctx := context.Background()
	rows, err := w.Query(ctx, "SELECT g FROM generate_series(1, 3) g")
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil || len(got) != 3 {
		t.Fatalf("rows read after the attempt returned: %v, %v", got, err)
	}
	var re *sqlretry.Error
	err = w.QueryRow(ctx, "SELECT pg_sleep(5)").Scan(new(any))
	if !errors.Is(err, sqlretry.ErrRetriesExhausted) || !errors.As(err, &re) || re.Attempts != 3 || re.Class.Code != "command-timeout" {
		t.Fatalf("a read past the command timeout: %v, want ErrRetriesExhausted after 3 attempts", err)
	}
	_, err = w.Exec(ctx, "INSERT INTO items (call_id) SELECT 7 FROM pg_sleep(5)")
	// An attempt may fail earlier, waiting for a connection the pool is
	// still closing after the read's cancelled attempts: not sent, so
	// retried.
	if !errors.Is(err, sqlretry.ErrAmbiguous) || !errors.As(err, &re) || re.Class.Code != "command-timeout" {
		t.Fatalf("a write past the command timeout: %v, want ErrAmbiguous", err)
	}
}

// TestBatchTx sends a batch that begins its own transaction
// (Batch.BeginTx): it is never replayed, its Tx commits, and its
// connection goes back to the pool.
func TestBatchTx(t *testing.T) {
	noLeaks(t)
	f := newFixture(t, nil)
	f.exec(t, itemsTable)
	ctx := context.Background()
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{})
	b.Queue(insertItem, 1, "batch-tx")
	br := f.w.SendBatch(ctx, b)
	tx := br.Tx()
	if tx == nil {
		t.Fatal("no Tx")
	}
	if err := br.Close(); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if n := f.count(t, "SELECT count(*) FROM items WHERE call_id = 1"); n != 1 {
		t.Fatalf("%d rows", n)
	}
	if n := f.pool.Stat().AcquiredConns(); n != 0 {
		t.Fatalf("%d connections still acquired", n)
	}
}
