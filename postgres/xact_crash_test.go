package postgres

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sqlretry/sqlretry/internal/dbtest"
)

// TestCommitVerifierAcrossCrash: a crash loses the WAL that was not yet
// written out, and with it every trace of the transaction ids it named;
// crash recovery then sets the next id from what survived and hands the lost
// ids out again, on the same timeline. A transaction whose COMMIT was in
// flight when the server crashed is such a lost transaction: a new one then
// takes its id and commits, and pg_xact_status answers "committed" for it.
// Committed must not answer across the crash. Two crashes: an immediate stop
// and start (a new postmaster), and a backend killed, after which the same
// postmaster reinitialises and recovers (pg_postmaster_start_time unchanged).
func TestCommitVerifierAcrossCrash(t *testing.T) {
	for _, tc := range []struct {
		name  string
		crash func(t *testing.T, srv *dbtest.Server, db *sql.DB)
	}{
		{"stop -m immediate, start", func(t *testing.T, srv *dbtest.Server, db *sql.DB) {
			if err := srv.StopImmediate(); err != nil {
				t.Fatal(err)
			}
			if err := srv.Start(); err != nil {
				t.Fatal(err)
			}
		}},
		{"a backend killed, the postmaster recovers in place", killBackend},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			crashCase(t, tc.crash)
		})
	}
}

// crashCase marks a transaction that wrote, crashes the server before its
// COMMIT is sent, takes the lost id again, and asks Committed.
func crashCase(t *testing.T, crash func(t *testing.T, srv *dbtest.Server, db *sql.DB)) {
	// A long walwriter delay keeps the transaction's WAL in shared memory
	// until the crash (nothing else here writes it out): the lost id is then
	// reissued every time, not only when the crash wins a race.
	srv := dbtest.StartPostgresWith(t, dbtest.Options{Settings: map[string]string{"wal_writer_delay": "10s"}})
	db, err := sql.Open("pgx", srv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxIdleConns(0) // no connection the crash killed is used again
	ctx := context.Background()
	for _, q := range []string{"CREATE TABLE t (v int)", "CHECKPOINT"} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO t VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	v := CommitVerifier{MaxWait: time.Second}
	mark, err := v.Mark(ctx, tx)
	if err != nil {
		t.Fatal(err)
	}
	crash(t, srv, db)
	tx.Rollback() // its connection died with the server
	reissued := takeXid(t, db, markXid(t, mark))
	var n int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM t").Scan(&n); err != nil {
		t.Fatal(err)
	}
	t.Logf("mark %s; its id given to a new transaction that committed: %v; rows of the lost transaction: %d", mark, reissued, n)
	ok, err := v.Committed(ctx, db, mark)
	if ok {
		t.Fatalf("Committed = true for a transaction lost in the crash (%d rows; id reissued: %v)", n, reissued)
	}
	if !errors.Is(err, ErrHistoryChanged) {
		t.Errorf("Committed = %v, %v; want ErrHistoryChanged", ok, err)
	}
}

// killBackend kills one backend with SIGKILL: the postmaster ends all the
// others, reinitialises shared memory and runs crash recovery, without
// restarting itself. It waits until the server answers again.
func killBackend(t *testing.T, srv *dbtest.Server, db *sql.DB) {
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var pid int
	if err := conn.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		// A ping may reach the server before it noticed the crash: wait
		// for the recovery's own trace in the log, then for an answer.
		if strings.Contains(srv.Log(), "all server processes terminated; reinitializing") && db.PingContext(ctx) == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server did not recover from a killed backend in 30 s:\n%s", srv.Log())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// markXid is the transaction id of a mark.
func markXid(t *testing.T, mark string) uint64 {
	xid, _, _ := strings.Cut(mark, "@")
	n, err := strconv.ParseUint(xid, 10, 64)
	if err != nil {
		t.Fatalf("mark %q: %v", mark, err)
	}
	return n
}

// takeXid commits new transactions, each taking an id, until one takes xid
// or the ids pass it. It reports whether xid was handed out again.
func takeXid(t *testing.T, db *sql.DB, xid uint64) bool {
	for range 1000 {
		var got uint64
		if err := db.QueryRow("SELECT pg_current_xact_id()::text::bigint").Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got >= xid {
			return got == xid
		}
	}
	t.Fatalf("1000 new transactions did not reach id %d", xid)
	return false
}

// TestCommitVerifierOtherServer: a pool that reaches another server — a
// second cluster on the same timeline number, or the same server after a
// clean restart — gets no answer. Both hand out ids from the same range, so
// pg_xact_status there would answer about some other transaction.
func TestCommitVerifierOtherServer(t *testing.T) {
	srv := dbtest.StartPostgres(t)
	other, err := sql.Open("pgx", srv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	other.SetMaxIdleConns(0) // no connection outlives the restart
	db := openFresh(t)
	ctx := context.Background()
	v := CommitVerifier{}
	// A mark of the throwaway server's (a copy of a fresh cluster: a low
	// id), asked of the shared server, which handed that id out long ago.
	tx, err := other.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	mark, err := v.Mark(ctx, tx)
	if err != nil {
		t.Fatal(err)
	}
	tx.Rollback()
	takeXid(t, db, markXid(t, mark))
	if ok, err := v.Committed(ctx, db, mark); ok || !errors.Is(err, ErrHistoryChanged) {
		t.Errorf("another cluster: got %v, %v; want false, ErrHistoryChanged", ok, err)
	}

	// A clean restart loses nothing, but tells no more than a crash does
	// from outside: no answer either.
	tx, err = other.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	mark, err = v.Mark(ctx, tx)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	if ok, err := v.Committed(ctx, other, mark); ok || !errors.Is(err, ErrHistoryChanged) {
		t.Errorf("after a clean restart: got %v, %v; want false, ErrHistoryChanged", ok, err)
	}
}
