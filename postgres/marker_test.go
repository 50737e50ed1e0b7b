package postgres

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	sr "github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/internal/dbtest"
	"github.com/sqlretry/sqlretry/internal/marker"
)

func markerPG(t *testing.T) (*sql.DB, context.Context) {
	t.Helper()
	db, err := sql.Open("pgx", dbtest.FreshPostgres(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	if _, err := db.ExecContext(ctx, MarkerTableDDL); err != nil {
		t.Fatalf("MarkerTableDDL: %v", err)
	}
	return db, ctx
}

// TestMarkerWaitsForHolder: another connection holds the marker key in an
// open transaction. Committed waits on it (seen in pg_locks); the holder
// then commits → true, rolls back → false, or holds on past MaxWait →
// ErrMarkerInFlight.
func TestMarkerWaitsForHolder(t *testing.T) {
	for _, tc := range []struct {
		name    string
		end     string
		maxWait time.Duration
		want    bool
		wantErr error
	}{
		{"holder commits", "COMMIT", 20 * time.Second, true, nil},
		{"holder rolls back", "ROLLBACK", 20 * time.Second, false, nil},
		{"holder hangs past MaxWait", "", 3 * time.Second, false, ErrMarkerInFlight},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db, ctx := markerPG(t)
			holder, key := holdPGMarker(t, ctx, db)
			v := &MarkerVerifier{MaxWait: tc.maxWait}
			type answer struct {
				ok  bool
				err error
			}
			done := make(chan answer, 1)
			go func() {
				ok, err := v.Committed(ctx, db, key)
				done <- answer{ok, err}
			}()
			waitForLockWaiter(t, ctx, db)
			if tc.end != "" {
				if _, err := holder.ExecContext(ctx, tc.end); err != nil {
					t.Fatal(err)
				}
			}
			got := <-done
			if got.ok != tc.want || !errors.Is(got.err, tc.wantErr) || (tc.wantErr == nil) != (got.err == nil) {
				t.Fatalf("got %v, %v; want %v, %v", got.ok, got.err, tc.want, tc.wantErr)
			}
		})
	}
}

// holdPGMarker inserts a new key into the marker table in a transaction of
// a connection of its own, left open.
func holdPGMarker(t *testing.T, ctx context.Context, db *sql.DB) (*sql.Conn, string) {
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
	if _, err := holder.ExecContext(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	if _, err := holder.ExecContext(ctx, "INSERT INTO sqlretry_commit_marks VALUES ($1, 0, 0)", key); err != nil {
		t.Fatal(err)
	}
	return holder, key
}

// waitForLockWaiter returns once a session of this database waits on a
// lock, and fails the test if none does within ctx.
func waitForLockWaiter(t *testing.T, ctx context.Context, db *sql.DB) {
	t.Helper()
	for {
		var n int
		err := db.QueryRowContext(ctx, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'").Scan(&n)
		if err != nil {
			t.Fatalf("no session waited on the holder's lock: %v", err)
		}
		if n > 0 {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestMarkerSettles: a committed marker → true; a rolled-back one → false,
// and false again when asked twice (the tombstone's flag, as after a lost
// reply of the first answer).
func TestMarkerSettles(t *testing.T) {
	db, ctx := markerPG(t)
	v := &MarkerVerifier{}
	keys := map[bool]string{}
	for _, commit := range []bool{true, false} {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if keys[commit], err = v.Mark(ctx, tx); err != nil {
			t.Fatal(err)
		}
		if commit {
			err = tx.Commit()
		} else {
			err = tx.Rollback()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, commit := range []bool{true, false, true, false} {
		if got, err := v.Committed(ctx, db, keys[commit]); err != nil || got != commit {
			t.Errorf("committed %v: got %v, %v", commit, got, err)
		}
	}
}

// movedHistory is a CommitVerifier asked after a failover: it asks with the
// mark's history replaced by one the server is not on, so the real
// pg_xact_status check answers ErrHistoryChanged; it records each error.
type movedHistory struct {
	CommitVerifier
	errs *[]error
}

func (m movedHistory) Committed(ctx context.Context, db *sql.DB, mark string) (bool, error) {
	xid, _, _ := strings.Cut(mark, "@")
	ok, err := m.CommitVerifier.Committed(ctx, db, xid+"@00000099/0/0")
	*m.errs = append(*m.errs, err)
	return ok, err
}

// TestVerifiersFallBackToMarker: pg_xact_status cannot answer after a
// failover (ErrHistoryChanged); sqlretry.Verifiers then settles by the
// marker, both ways, on the real server.
func TestVerifiersFallBackToMarker(t *testing.T) {
	db, ctx := markerPG(t)
	for _, commit := range []bool{true, false} {
		var errs []error
		v := sr.Verifiers(movedHistory{CommitVerifier{}, &errs}, &MarkerVerifier{})
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		mark, err := v.Mark(ctx, tx)
		if err != nil {
			t.Fatal(err)
		}
		if commit {
			err = tx.Commit()
		} else {
			err = tx.Rollback()
		}
		if err != nil {
			t.Fatal(err)
		}
		got, err := v.Committed(ctx, db, mark)
		if err != nil || got != commit {
			t.Errorf("committed %v: got %v, %v", commit, got, err)
		}
		if len(errs) != 1 || !errors.Is(errs[0], ErrHistoryChanged) {
			t.Errorf("committed %v: the first verifier answered %v, want ErrHistoryChanged", commit, errs)
		}
	}
}

// TestMarkerPrunes: BeforeTx's prune deletes at most 4×PruneEvery rows
// older than TTL by the injected clock, and nothing younger.
func TestMarkerPrunes(t *testing.T) {
	db, ctx := markerPG(t)
	now := time.Unix(2_000_000_000, 0)
	for i := range 6 {
		if _, err := db.ExecContext(ctx, "INSERT INTO sqlretry_commit_marks VALUES ($1, $2, $3)", sr.NewKey(), now.Add(-2*time.Hour).Unix()+int64(i), i%2); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.ExecContext(ctx, "INSERT INTO sqlretry_commit_marks VALUES ($1, $2, 0)", sr.NewKey(), now.Add(-59*time.Minute).Unix()); err != nil {
		t.Fatal(err)
	}
	v := &MarkerVerifier{PruneEvery: 1}
	marker.Seams(v).Now = func() time.Time { return now }
	for _, want := range []int{3, 1, 1} { // 4 at most per prune; the young row stays
		if err := v.BeforeTx(ctx, db); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := db.QueryRowContext(ctx, "SELECT count(*) FROM sqlretry_commit_marks").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != want {
			t.Fatalf("got %d rows, want %d", n, want)
		}
	}
}
