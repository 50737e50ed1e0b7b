package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/sqlretry/sqlretry/internal/dbtest"
)

func TestSettle(t *testing.T) {
	tests := []struct {
		status    sql.NullString
		committed bool
		again     bool
		err       error
	}{
		{sql.NullString{String: "committed", Valid: true}, true, false, nil},
		{sql.NullString{String: "aborted", Valid: true}, false, false, nil},
		{sql.NullString{String: "in progress", Valid: true}, false, true, nil},
		{sql.NullString{}, false, false, ErrXactTooOld},
	}
	for _, tt := range tests {
		c, a, err := settle(tt.status)
		if c != tt.committed || a != tt.again || !errors.Is(err, tt.err) {
			t.Errorf("settle(%v) = %v, %v, %v; want %v, %v, %v", tt.status, c, a, err, tt.committed, tt.again, tt.err)
		}
	}
	if _, _, err := settle(sql.NullString{String: "odd", Valid: true}); err == nil {
		t.Error("settle(odd) gave no error, want one")
	}
}

func openFresh(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", dbtest.FreshPostgres(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := db.Exec("CREATE TABLE t (id int PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	return db
}

func TestCommitVerifierServer(t *testing.T) {
	db := openFresh(t)
	ctx := context.Background()
	v := CommitVerifier{}
	mark := func(t *testing.T, tx *sql.Tx) string {
		t.Helper()
		m, err := v.Mark(ctx, tx)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}

	t.Run("committed", func(t *testing.T) {
		tx, _ := db.BeginTx(ctx, nil)
		tx.Exec("INSERT INTO t VALUES (1)")
		m := mark(t, tx)
		if m == "" {
			t.Fatal("got an empty mark for a transaction that wrote")
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if ok, err := v.Committed(ctx, db, m); !ok || err != nil {
			t.Errorf("got %v, %v; want true, nil", ok, err)
		}
	})
	t.Run("aborted", func(t *testing.T) {
		tx, _ := db.BeginTx(ctx, nil)
		tx.Exec("INSERT INTO t VALUES (2)")
		m := mark(t, tx)
		tx.Rollback()
		if ok, err := v.Committed(ctx, db, m); ok || err != nil {
			t.Errorf("got %v, %v; want false, nil", ok, err)
		}
	})
	t.Run("a transaction that wrote nothing gets an id too", func(t *testing.T) {
		// It may have queued a NOTIFY, which takes its id only inside
		// COMMIT: an empty mark could not tell it from nothing.
		tx, _ := db.BeginTx(ctx, nil)
		var n int
		tx.QueryRow("SELECT count(*) FROM t").Scan(&n)
		m := mark(t, tx)
		tx.Rollback()
		if m == "" {
			t.Fatal("got an empty mark for a transaction with no id yet, want one assigned at Mark")
		}
		if ok, err := v.Committed(ctx, db, m); ok || err != nil {
			t.Errorf("rolled back: got %v, %v; want false, nil", ok, err)
		}
	})
	t.Run("another history: no answer", func(t *testing.T) {
		// A promoted standby, and a server recovered from a crash, hand
		// the lost transaction's id out again: a mark from another
		// timeline, postmaster start or statistics reset must not be
		// answered.
		tx, _ := db.BeginTx(ctx, nil)
		tx.Exec("INSERT INTO t VALUES (40)")
		m := mark(t, tx)
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		xid, history, _ := strings.Cut(m, "@")
		parts := strings.Split(history, "/")
		if len(parts) != 3 || len(parts[0]) != 8 {
			t.Fatalf("mark %q: want xid@timeline/start/reset", m)
		}
		for i, name := range []string{"timeline", "postmaster start", "statistics reset"} {
			other := slices.Clone(parts)
			other[i] = fmt.Sprintf("%08X", 0x7fffffff)
			if ok, err := v.Committed(ctx, db, xid+"@"+strings.Join(other, "/")); ok || !errors.Is(err, ErrHistoryChanged) {
				t.Errorf("another %s: got %v, %v; want false, ErrHistoryChanged", name, ok, err)
			}
		}
		if _, err := v.Committed(ctx, db, xid); err == nil {
			t.Error("a mark without a history was answered")
		}
	})
	t.Run("an id not handed out yet: no answer", func(t *testing.T) {
		// The same id one epoch (2^32 ids) later: a mark that cannot come
		// from this history gets an error, not a verdict.
		tx, _ := db.BeginTx(ctx, nil)
		m := mark(t, tx)
		tx.Rollback()
		xid, history, _ := strings.Cut(m, "@")
		n, err := strconv.ParseUint(xid, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := v.Committed(ctx, db, strconv.FormatUint(n+1<<32, 10)+"@"+history); ok || err == nil {
			t.Errorf("got %v, %v; want false and an error", ok, err)
		}
	})
	t.Run("the session's time zone and date style do not change the history", func(t *testing.T) {
		tx, _ := db.BeginTx(ctx, nil)
		defer tx.Rollback()
		for _, q := range []string{"SET LOCAL TIME ZONE 'Asia/Kathmandu'", "SET LOCAL DateStyle = 'SQL, DMY'", "SET LOCAL extra_float_digits = -15", "INSERT INTO t VALUES (41)"} {
			if _, err := tx.Exec(q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		m := mark(t, tx)
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if ok, err := v.Committed(ctx, db, m); !ok || err != nil {
			t.Errorf("got %v, %v; want true, nil", ok, err)
		}
	})
	t.Run("an empty mark (hot standby) counts as applied", func(t *testing.T) {
		if ok, err := v.Committed(ctx, db, ""); !ok || err != nil {
			t.Errorf("got %v, %v; want true, nil", ok, err)
		}
	})
	t.Run("in progress, then committed", func(t *testing.T) {
		tx, _ := db.BeginTx(ctx, nil)
		tx.Exec("INSERT INTO t VALUES (3)")
		m := mark(t, tx)
		sleeps := 0
		w := CommitVerifier{sleep: func(ctx context.Context, d time.Duration) error {
			sleeps++
			if sleeps == 1 {
				return tx.Commit()
			}
			return nil
		}}
		if ok, err := w.Committed(ctx, db, m); !ok || err != nil {
			t.Errorf("got %v, %v; want true, nil", ok, err)
		}
		if sleeps != 1 {
			t.Errorf("got %d pauses, want 1", sleeps)
		}
	})
	t.Run("in progress beyond MaxWait", func(t *testing.T) {
		tx, _ := db.BeginTx(ctx, nil)
		defer tx.Rollback()
		tx.Exec("INSERT INTO t VALUES (4)")
		m := mark(t, tx)
		var waits []time.Duration
		w := CommitVerifier{MaxWait: 100 * time.Millisecond, Interval: 20 * time.Millisecond,
			sleep: func(ctx context.Context, d time.Duration) error { waits = append(waits, d); return nil }}
		if ok, err := w.Committed(ctx, db, m); ok || !errors.Is(err, ErrXactInProgress) {
			t.Errorf("got %v, %v; want false, ErrXactInProgress", ok, err)
		}
		want := []time.Duration{20 * time.Millisecond, 40 * time.Millisecond, 40 * time.Millisecond}
		if len(waits) != len(want) {
			t.Fatalf("got pauses %v, want %v", waits, want)
		}
		for i := range want {
			if waits[i] != want[i] {
				t.Errorf("got pauses %v, want %v", waits, want)
				break
			}
		}
	})
}
