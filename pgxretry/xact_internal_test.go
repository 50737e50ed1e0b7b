package pgxretry

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/internal/dbtest"
)

// TestCommitted asks pg_xact_status about marks taken in real
// transactions: committed, rolled back, and marked on another server
// history (a failover, a restart), which it must refuse to answer.
func TestCommitted(t *testing.T) {
	dsn := dbtest.PostgresDSN(t)
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	p, err := sqlretry.New(sqlretry.Config{})
	if err != nil {
		t.Fatal(err)
	}
	w := New(pool, p)
	ctx := context.Background()
	mark := func(commit bool) string {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		m, err := markTx(ctx, tx)
		if err != nil {
			t.Fatal(err)
		}
		if commit {
			err = tx.Commit(ctx)
		} else {
			err = tx.Rollback(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	committed, aborted := mark(true), mark(false)
	xid, history, _ := strings.Cut(committed, "@")
	cases := []struct {
		mark string
		want bool
		err  error
	}{
		{committed, true, nil},
		{aborted, false, nil},
		{xid + "@00000002/" + strings.SplitN(history, "/", 2)[1], false, ErrHistoryChanged}, // a promotion: timeline 2
		{xid + "@" + history + "0", false, ErrHistoryChanged},                               // another start time
		{"", true, nil}, // a hot standby's: nothing could commit
	}
	for _, tc := range cases {
		got, err := w.committed(ctx, tc.mark)
		if got != tc.want || !errors.Is(err, tc.err) {
			t.Errorf("committed(%q) = %v, %v; want %v, %v", tc.mark, got, err, tc.want, tc.err)
		}
	}
	if _, err := w.committed(ctx, "not a mark"); err == nil {
		t.Error("committed of a malformed mark: no error")
	}
}
