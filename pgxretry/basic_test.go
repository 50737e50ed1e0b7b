package pgxretry_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/sqlretry/sqlretry"
)

func TestBasics(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	f.exec(t, "CREATE TABLE items (id int PRIMARY KEY, v text)")
	tag, err := f.w.Exec(ctx, "INSERT INTO items VALUES ($1, $2)", 1, "a")
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("Exec: %v %v", tag, err)
	}
	_, err = f.w.Exec(ctx, "INSERT INTO items VALUES ($1, $2)", 1, "a")
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "23505" {
		t.Fatalf("duplicate: want a *pgconn.PgError 23505, got %v", err)
	}
	var v string
	if err := f.w.QueryRow(ctx, "SELECT v FROM items WHERE id = $1", 1).Scan(&v); err != nil || v != "a" {
		t.Fatalf("QueryRow: %q %v", v, err)
	}
	if err := f.w.QueryRow(ctx, "SELECT v FROM items WHERE id = $1", 2).Scan(&v); !errors.Is(err, pgx.ErrNoRows) {
		t.Fatalf("QueryRow of no row: %v", err)
	}
	rows, err := f.w.Query(ctx, "SELECT g FROM generate_series(1, 5) g")
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil || len(got) != 5 || got[0] != 1 || got[4] != 5 {
		t.Fatalf("Query: %v %v", got, err)
	}
	if _, err := f.w.Query(ctx, "SELECT nosuchcolumn FROM items"); !errors.As(err, &pgErr) || pgErr.Code != "42703" {
		t.Fatalf("bad query: %v", err)
	}
	err = f.w.RunTx(ctx, sqlretry.Write("two", nil), pgx.TxOptions{}, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "INSERT INTO items VALUES (2, 'b'), (3, 'c')")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := f.count(t, "SELECT count(*) FROM items"); n != 3 {
		t.Fatalf("%d rows", n)
	}
	err = f.w.RunTx(ctx, sqlretry.Write("dup", nil), pgx.TxOptions{}, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "INSERT INTO items VALUES (3, 'c')")
		return err
	})
	if !errors.As(err, &pgErr) || pgErr.Code != "23505" {
		t.Fatalf("RunTx duplicate: %v", err)
	}
	err = f.w.RunTx(ctx, sqlretry.Write("nested", nil), pgx.TxOptions{}, func(ctx context.Context, tx pgx.Tx) error {
		return f.w.RunTx(ctx, sqlretry.Write("inner", nil), pgx.TxOptions{}, func(context.Context, pgx.Tx) error { return nil })
	})
	if !errors.Is(err, sqlretry.ErrNestedTx) {
		t.Fatalf("nested: %v", err)
	}

	// fn that ends the transaction itself: what it committed cannot be
	// undone, nor the transaction run again.
	for i, end := range []func(ctx context.Context, tx pgx.Tx) error{
		func(ctx context.Context, tx pgx.Tx) error { return tx.Commit(ctx) },
		func(ctx context.Context, tx pgx.Tx) error { _, err := tx.Exec(ctx, "COMMIT"); return err },
	} {
		id := 10 + i
		err = f.w.RunTx(ctx, sqlretry.Write("ends-itself", nil), pgx.TxOptions{}, func(ctx context.Context, tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "INSERT INTO items VALUES ($1, 'x')", id); err != nil {
				return err
			}
			return end(ctx, tx)
		})
		if !errors.Is(err, sqlretry.ErrAmbiguous) {
			t.Errorf("fn %d ended the transaction itself: %v, want ErrAmbiguous", i, err)
		}
	}
	// A panic in fn rolls back, goes on, and gives the connection back.
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the panic did not propagate")
			}
		}()
		_ = f.w.RunTx(ctx, sqlretry.Write("panics", nil), pgx.TxOptions{}, func(ctx context.Context, tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "INSERT INTO items VALUES (20, 'p')"); err != nil {
				return err
			}
			panic("in fn")
		})
	}()
	if n := f.count(t, "SELECT count(*) FROM items WHERE id = 20"); n != 0 {
		t.Errorf("the panicking transaction left %d rows", n)
	}
	if n := f.pool.Stat().AcquiredConns(); n != 0 {
		t.Errorf("%d connections still acquired after the panic", n)
	}
}
