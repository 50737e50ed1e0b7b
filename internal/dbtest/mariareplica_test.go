package dbtest

import (
	"context"
	"database/sql"
	"testing"
	"time"
)

// TestMariaDBReplica: rows reach the replica; after the I/O thread stops
// they do not; the primary is killed, the replica promoted, and it takes
// writes.
func TestMariaDBReplica(t *testing.T) {
	for _, semi := range []bool{false, true} {
		name := map[bool]string{false: "async", true: "semisync"}[semi]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := StartMariaDBReplica(t, MariaDBReplicaOptions{SemiSync: semi})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			primary, replica := open(t, "mysql", r.Primary.DSN()), open(t, "mysql", r.Replica.DSN())
			mustExec(t, primary, "CREATE TABLE rep (v int)")
			mustExec(t, primary, "INSERT INTO rep VALUES (1)")
			waitCount(t, ctx, replica, 1)
			if err := r.StopReceiving(ctx); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { _, err := primary.ExecContext(ctx, "INSERT INTO rep VALUES (2)"); done <- err }()
			if semi {
				waitStatus(t, ctx, primary, "RPL_SEMI_SYNC_MASTER_WAIT_SESSIONS", "1") // the COMMIT waits for the replica
			} else if err := <-done; err != nil {
				t.Fatal(err)
			}
			if err := r.Primary.Kill(); err != nil {
				t.Fatal(err)
			}
			if semi {
				if err := <-done; err == nil {
					t.Error("a COMMIT waiting for the semi-synchronous replica succeeded when the primary died")
				}
			}
			if err := r.Promote(ctx); err != nil {
				t.Fatal(err)
			}
			mustExec(t, replica, "INSERT INTO rep VALUES (3)")
			var n, sum int
			if err := replica.QueryRowContext(ctx, "SELECT count(*), coalesce(sum(v), 0) FROM rep").Scan(&n, &sum); err != nil {
				t.Fatal(err)
			}
			if n != 2 || sum != 4 {
				t.Errorf("promoted replica: %d rows summing to %d, want rows 1 and 3 (2 was written while it did not receive)", n, sum)
			}
		})
	}
}

// waitCount waits until rep holds n rows on db.
func waitCount(t *testing.T, ctx context.Context, db *sql.DB, n int) {
	t.Helper()
	for {
		var got int
		err := db.QueryRowContext(ctx, "SELECT count(*) FROM rep").Scan(&got)
		if err == nil && got == n {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("rep holds %d rows (error %v), want %d", got, err, n)
		case <-time.After(pollInterval):
		}
	}
}

// waitStatus waits until the global status variable name is want on db.
func waitStatus(t *testing.T, ctx context.Context, db *sql.DB, name, want string) {
	t.Helper()
	for {
		var got string
		err := db.QueryRowContext(ctx, "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = ?", name).Scan(&got)
		if err == nil && got == want {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("status %s = %q (error %v), want %s", name, got, err, want)
		case <-time.After(pollInterval):
		}
	}
}
