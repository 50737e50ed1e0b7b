package dbtest

import (
	"context"
	"testing"
	"time"
)

// TestPostgresReplica walks a primary and standby through a failover: rows
// reach the standby while it receives, not while it is stopped (in
// synchronous mode the COMMIT then waits for it), the primary stops
// immediately, the standby is promoted and the multi-host DSN reaches it.
func TestPostgresReplica(t *testing.T) {
	for _, sync := range []bool{false, true} {
		name := map[bool]string{false: "async", true: "sync"}[sync]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := StartPostgresReplica(t, ReplicaOptions{Sync: sync})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			primary := open(t, "pgx", r.Primary.DSN())
			mustExec(t, primary, "CREATE TABLE rep (v int)")
			mustExec(t, primary, "INSERT INTO rep VALUES (1)")
			if err := pollCount(ctx, r.Standby.DSN(), 1, "SELECT count(*) FROM rep"); err != nil {
				t.Fatal(err)
			}

			if err := r.StopReceiving(ctx); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { _, err := primary.ExecContext(ctx, "INSERT INTO rep VALUES (2)"); done <- err }()
			if sync {
				// The COMMIT waits for the standby.
				if err := pollCount(ctx, r.Primary.DSN(), 1, "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'"); err != nil {
					t.Fatal(err)
				}
			} else if err := <-done; err != nil {
				t.Fatal(err)
			}
			if err := r.Primary.StopImmediate(); err != nil {
				t.Fatal(err)
			}
			if sync {
				if err := <-done; err == nil {
					t.Error("a COMMIT waiting for the synchronous standby succeeded when the primary stopped")
				}
			}
			if err := r.Promote(ctx); err != nil {
				t.Fatal(err)
			}
			multi := open(t, "pgx", r.MultiHostDSN())
			mustExec(t, multi, "INSERT INTO rep VALUES (3)")
			var got []int
			rows, err := multi.QueryContext(ctx, "SELECT v FROM rep ORDER BY v")
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
				var v int
				rows.Scan(&v)
				got = append(got, v)
			}
			if len(got) != 2 || got[0] != 1 || got[1] != 3 {
				t.Errorf("rows on the promoted standby: %v, want [1 3] (2 was written while it did not receive)", got)
			}
		})
	}
}

// TestPostgresReplicaPauseReplay: a paused standby receives the WAL but
// does not apply it until replay resumes; a standby that stopped receiving
// catches up once it receives again.
func TestPostgresReplicaPauseReplay(t *testing.T) {
	t.Parallel()
	r := StartPostgresReplica(t, ReplicaOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	primary := open(t, "pgx", r.Primary.DSN())
	mustExec(t, primary, "CREATE TABLE rep (v int)")
	if err := pollCount(ctx, r.Standby.DSN(), 0, "SELECT count(*) FROM rep"); err != nil {
		t.Fatal(err)
	}
	if err := r.PauseReplay(ctx); err != nil {
		t.Fatal(err)
	}
	if err := pollCount(ctx, r.Standby.DSN(), 1, "SELECT count(*) FROM (SELECT pg_get_wal_replay_pause_state() AS s) p WHERE s = 'paused'"); err != nil {
		t.Fatal(err)
	}
	var lsn string
	if err := primary.QueryRowContext(ctx, "INSERT INTO rep VALUES (1) RETURNING pg_current_wal_insert_lsn()::text").Scan(&lsn); err != nil {
		t.Fatal(err)
	}
	// Received (and flushed) by the standby, yet not applied.
	if err := pollCount(ctx, r.Standby.DSN(), 1, "SELECT count(*) FROM (SELECT pg_last_wal_receive_lsn() >= $1::pg_lsn AS got) s WHERE got", lsn); err != nil {
		t.Fatal(err)
	}
	standby := open(t, "pgx", r.Standby.DSN())
	var n int
	if err := standby.QueryRowContext(ctx, "SELECT count(*) FROM rep").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("a paused standby shows %d rows of the WAL it received, want 0", n)
	}
	if err := r.ResumeReplay(ctx); err != nil {
		t.Fatal(err)
	}
	if err := pollCount(ctx, r.Standby.DSN(), 1, "SELECT count(*) FROM rep"); err != nil {
		t.Fatal(err)
	}
	if err := r.StopReceiving(ctx); err != nil {
		t.Fatal(err)
	}
	mustExec(t, primary, "INSERT INTO rep VALUES (2)")
	if err := r.ResumeReceiving(ctx); err != nil {
		t.Fatal(err)
	}
	if err := pollCount(ctx, r.Standby.DSN(), 2, "SELECT count(*) FROM rep"); err != nil {
		t.Fatal(err)
	}
}
