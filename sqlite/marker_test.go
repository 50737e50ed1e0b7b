package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	sr "github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/internal/marker"
	"github.com/sqlretry/sqlretry/internal/wait"
)

// markerDB opens a fresh database file with no busy timeout: a locked
// database answers SQLITE_BUSY at once, and the verifier's own loop waits.
func markerDB(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "m.db")+"?_pragma=journal_mode(wal)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func markerCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestMarkerTableDDL: the shipped DDL makes a table the verifier works with.
func TestMarkerTableDDL(t *testing.T) {
	db, ctx := markerDB(t), markerCtx(t)
	if _, err := db.ExecContext(ctx, MarkerTableDDL); err != nil {
		t.Fatal(err)
	}
	v := &MarkerVerifier{}
	key := markInTx(t, ctx, db, v, true)
	if ok, err := v.Committed(ctx, db, key); err != nil || !ok {
		t.Fatalf("Committed: got %v, %v; want true", ok, err)
	}
}

// markInTx marks a transaction of db with v and commits or rolls it back.
func markInTx(t *testing.T, ctx context.Context, db *sql.DB, v *MarkerVerifier, commit bool) string {
	t.Helper()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	key, err := v.Mark(ctx, tx)
	if err != nil {
		t.Fatalf("Mark: %v", err)
	}
	end := tx.Rollback
	if commit {
		end = tx.Commit
	}
	if err := end(); err != nil {
		t.Fatal(err)
	}
	return key
}

// TestMarkerSettles: committed → true; rolled back → false, final (the
// tombstone stays and a second ask says false again, as after a lost reply
// of the first); a key never marked → false.
func TestMarkerSettles(t *testing.T) {
	db, ctx := markerDB(t), markerCtx(t)
	v := &MarkerVerifier{CreateTable: true}
	if err := v.BeforeTx(ctx, db); err != nil {
		t.Fatal(err)
	}
	committed := markInTx(t, ctx, db, v, true)
	rolledBack := markInTx(t, ctx, db, v, false)
	for _, tc := range []struct {
		name string
		key  string
		want bool
	}{
		{"committed", committed, true},
		{"rolled back", rolledBack, false},
		{"rolled back, asked again", rolledBack, false},
		{"committed, asked again", committed, true},
		{"never marked", sr.NewKey(), false},
	} {
		got, err := v.Committed(ctx, db, tc.key)
		if err != nil || got != tc.want {
			t.Errorf("%s: got %v, %v; want %v", tc.name, got, err, tc.want)
		}
	}
	var tombs int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM sqlretry_commit_marks WHERE tombstone = 1").Scan(&tombs); err != nil {
		t.Fatal(err)
	}
	if tombs != 2 {
		t.Errorf("tombstones: got %d, want 2 (rolled back, never marked)", tombs)
	}
	if _, err := v.Committed(ctx, db, "not-a-key"); err == nil {
		t.Error("Committed of a malformed mark: got nil error")
	}
}

// TestMarkerWaitsForHolder: another connection holds the marker key
// uncommitted (here: SQLite's write lock). Committed waits (SQLITE_BUSY,
// tried again after each pause); the holder then commits → true, rolls
// back → false, or holds on past MaxWait → ErrMarkerInFlight.
func TestMarkerWaitsForHolder(t *testing.T) {
	for _, tc := range []struct {
		name    string
		end     string // what the holder does at the verifier's first pause
		want    bool
		wantErr error
	}{
		{"holder commits", "COMMIT", true, nil},
		{"holder rolls back", "ROLLBACK", false, nil},
		{"holder hangs", "", false, ErrMarkerInFlight},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db, ctx := markerDB(t), markerCtx(t)
			if _, err := db.ExecContext(ctx, MarkerTableDDL); err != nil {
				t.Fatal(err)
			}
			holder, key := holdMarker(t, ctx, db)
			pauses := 0
			v := &MarkerVerifier{MaxWait: 300 * time.Millisecond}
			marker.Seams(v).Sleep = func(ctx context.Context, d time.Duration) error {
				pauses++
				if pauses == 1 && tc.end != "" {
					if _, err := holder.ExecContext(ctx, tc.end); err != nil {
						t.Errorf("holder %s: %v", tc.end, err)
					}
				}
				return wait.Sleep(ctx, d)
			}
			got, err := v.Committed(ctx, db, key)
			if pauses == 0 {
				t.Errorf("Committed never waited: the holder's lock was not in its way")
			}
			if got != tc.want || !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("got %v, %v; want %v, %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

// holdMarker inserts a new key into the marker table on a connection of its
// own, in a transaction left open.
func holdMarker(t *testing.T, ctx context.Context, db *sql.DB) (*sql.Conn, string) {
	t.Helper()
	holder, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = holder.ExecContext(context.Background(), "ROLLBACK")
		holder.Close()
	})
	key := sr.NewKey()
	if _, err := holder.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	if _, err := holder.ExecContext(ctx, "INSERT INTO sqlretry_commit_marks VALUES (?, 0, 0)", key); err != nil {
		t.Fatal(err)
	}
	return holder, key
}

// TestMarkerPrunes: every PruneEvery-th BeforeTx deletes at most
// 4×PruneEvery rows older than TTL by the injected clock, markers and
// tombstones alike, and nothing younger.
func TestMarkerPrunes(t *testing.T) {
	db, ctx := markerDB(t), markerCtx(t)
	now := time.Unix(1_000_000, 0)
	v := &MarkerVerifier{CreateTable: true, PruneEvery: 2, TTL: time.Hour}
	marker.Seams(v).Now = func() time.Time { return now }
	if err := v.BeforeTx(ctx, db); err != nil { // call 1: creates, no prune
		t.Fatal(err)
	}
	old := now.Add(-2 * time.Hour).Unix()
	for i := range 10 {
		mustExecMarker(t, db, "INSERT INTO sqlretry_commit_marks VALUES (?, ?, ?)", fmt.Sprintf("%032x", i), old+int64(i), i%2)
	}
	young := markInTx(t, ctx, db, v, true)
	count := func() int {
		var n int
		if err := db.QueryRowContext(ctx, "SELECT count(*) FROM sqlretry_commit_marks").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for i, want := range []int{11, 3, 3, 1, 1, 1} { // BeforeTx calls 2 to 6: calls 2, 4 and 6 prune, 8 rows at most each
		if i > 0 {
			if err := v.BeforeTx(ctx, db); err != nil {
				t.Fatal(err)
			}
		}
		if got := count(); got != want {
			t.Fatalf("after %d more BeforeTx: got %d rows, want %d", i, got, want)
		}
	}
	if ok, err := v.Committed(ctx, db, young); err != nil || !ok {
		t.Errorf("the young marker: got %v, %v; want it kept", ok, err)
	}
}

func mustExecMarker(t *testing.T, db *sql.DB, q string, args ...any) {
	t.Helper()
	if _, err := db.Exec(q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// TestMarkerConfigErrors: an invalid field fails every call with an error
// that names it.
func TestMarkerConfigErrors(t *testing.T) {
	db, ctx := markerDB(t), markerCtx(t)
	for _, tc := range []struct {
		v     *MarkerVerifier
		field string
	}{
		{&MarkerVerifier{Table: "marks; DROP TABLE x"}, "MarkerVerifier.Table"},
		{&MarkerVerifier{Table: "a.b.c"}, "MarkerVerifier.Table"},
		{&MarkerVerifier{MaxWait: -1}, "MarkerVerifier.MaxWait"},
		{&MarkerVerifier{TTL: time.Second}, "MarkerVerifier.TTL"},
	} {
		err := tc.v.BeforeTx(ctx, db)
		_, cerr := tc.v.Committed(ctx, db, sr.NewKey())
		for _, err := range []error{err, cerr} {
			if err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("%+v: got %v, want an error naming %s", tc.v, err, tc.field)
			}
		}
	}
}
