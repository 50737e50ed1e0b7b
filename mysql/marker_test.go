package mysql

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"

	sr "github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/internal/dbtest"
	"github.com/sqlretry/sqlretry/internal/marker"
)

func markerMySQL(t *testing.T) (*sql.DB, context.Context) {
	t.Helper()
	db, err := sql.Open("mysql", dbtest.FreshMySQL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	if _, err := db.ExecContext(ctx, MarkerTableDDL); err != nil { // one statement: no multiStatements needed
		t.Fatalf("MarkerTableDDL: %v", err)
	}
	return db, ctx
}

// TestMarkerWaitsForHolder: another connection holds the marker key in an
// open transaction. Committed waits on it (seen in the process list); the holder
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
			db, ctx := markerMySQL(t)
			holder, key := holdMySQLMarker(t, ctx, db)
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

// holdMySQLMarker inserts a new key into the marker table in a transaction of
// a connection of its own, left open.
func holdMySQLMarker(t *testing.T, ctx context.Context, db *sql.DB) (*sql.Conn, string) {
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
	if _, err := holder.ExecContext(ctx, "INSERT INTO sqlretry_commit_marks VALUES (?, 0, 0)", key); err != nil {
		t.Fatal(err)
	}
	return holder, key
}

// waitForLockWaiter returns once another session of this database runs an
// INSERT into the marker table (the holder's is done: this is the
// verifier's, which the holder's row blocks), and fails the test if none
// does within ctx. (information_schema.innodb_trx lags behind on MariaDB.)
func waitForLockWaiter(t *testing.T, ctx context.Context, db *sql.DB) {
	t.Helper()
	for {
		var n int
		err := db.QueryRowContext(ctx, "SELECT count(*) FROM information_schema.processlist WHERE db = DATABASE() AND id <> CONNECTION_ID() AND info LIKE 'INSERT INTO %sqlretry_commit_marks%'").Scan(&n)
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
	db, ctx := markerMySQL(t)
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

// TestMarkerPruneUnderConcurrency: eight clients run transactions marked by
// one verifier that prunes before every one (PruneEvery 1), on InnoDB's
// default REPEATABLE READ, while old markers wait to be pruned. No user
// transaction may fail (retries are off, so a deadlock or a lock wait
// timeout would surface), every marker of theirs stays, and the old ones
// go.
func TestMarkerPruneUnderConcurrency(t *testing.T) {
	db, ctx := markerMySQL(t)
	if _, err := db.ExecContext(ctx, "CREATE TABLE orders (id int NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	now := time.Unix(2_000_000_000, 0)
	const old, clients, perClient = 150, 8, 40
	for i := range old {
		if _, err := db.ExecContext(ctx, "INSERT INTO sqlretry_commit_marks VALUES (?, ?, 0)", sr.NewKey(), now.Add(-2*time.Hour).Unix()+int64(i%7)); err != nil {
			t.Fatal(err)
		}
	}
	v := &MarkerVerifier{PruneEvery: 1}
	marker.Seams(v).Now = func() time.Time { return now }
	p, err := sr.New(sr.Config{Classifier: Classifier, CommitVerifier: v, MaxRetries: sr.NoRetries})
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, clients*perClient)
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for range perClient {
				errs <- sr.RunTx(ctx, db, p, sr.Write("order", nil), nil, func(ctx context.Context, tx *sql.Tx) error {
					_, err := tx.ExecContext(ctx, "INSERT INTO orders VALUES (1)")
					return err
				})
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("a user transaction failed: %v", err)
		}
	}
	var young, stale int
	q := "SELECT COALESCE(SUM(created_at >= ?), 0), COALESCE(SUM(created_at < ?), 0) FROM sqlretry_commit_marks"
	if err := db.QueryRowContext(ctx, q, now.Unix(), now.Unix()).Scan(&young, &stale); err != nil {
		t.Fatal(err)
	}
	if young != clients*perClient || stale != 0 {
		t.Errorf("markers: got %d young and %d old, want %d and 0", young, stale, clients*perClient)
	}
}
