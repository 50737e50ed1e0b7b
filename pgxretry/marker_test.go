package pgxretry_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/faults/proxy"
	"github.com/sqlretry/sqlretry/pgxretry"
	"github.com/sqlretry/sqlretry/postgres"
)

// markerFixture is cutFixture with the wrapper settling by a marker that
// travels with COMMIT, its table created, and a liar if lie is set.
func markerFixture(t *testing.T, lie *bool) (*fixture, *proxy.Proxy) {
	t.Helper()
	return markerFixtureMode(t, lie, pgx.QueryExecModeCacheStatement)
}

// markerFixtureMode is markerFixture in exec mode mode: pgx's default
// (QueryExecModeCacheStatement) sends the marker as a pipeline of prepared
// statements, any other mode as one simple query.
func markerFixtureMode(t *testing.T, lie *bool, mode pgx.QueryExecMode) (*fixture, *proxy.Proxy) {
	t.Helper()
	f, px := cutFixtureMode(t, mode)
	f.exec(t, postgres.MarkerTableDDL)
	f.w = pgxretry.New(f.pool, f.p, pgxretry.WithMarker(&postgres.MarkerVerifier{}))
	t.Cleanup(f.w.Close)
	if lie != nil {
		pgxretry.LieAboutMarkers(f.w, *lie)
	}
	return f, px
}

// The ways a marked COMMIT meets a fault, on the first attempt only.
const (
	// cutAfterCommit: the proxy forwards the INSERT and COMMIT, the server
	// commits, the reply is cut: applied, the client cannot know.
	cutAfterCommit = "reply cut after COMMIT ran"
	// heldThenReset: the proxy holds the message, then resets the
	// connection: it never reaches the server, and the client, whose send
	// succeeded, cannot know.
	heldThenReset = "message held, then the connection reset"
	// resetBeforeSend: the connection is reset before the message is
	// written: as one simple query, pgconn knows nothing left (SafeToRetry),
	// no settle needed; as a pipeline, pgconn's ExecBatch does not say how
	// much its failed write sent, and the key settles it (a tombstone).
	resetBeforeSend = "connection reset before the send"
	// killDuringCommit: the INSERT's reply arrives, then the backend is
	// terminated while COMMIT runs a deferred trigger: never applied, the
	// connection dies between the two replies.
	killDuringCommit = "backend killed between the INSERT's reply and COMMIT's"
)

// TestMarkerSettlesCommit: the pipelined marker settles an unknown COMMIT
// both ways, with exactly one row in the end, by one verification; a liar
// verifier in its place is caught (a lost or doubled write), which proves
// that the scenarios depend on the verdict.
func TestMarkerSettlesCommit(t *testing.T) {
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeExec} {
		t.Run(mode.String(), func(t *testing.T) { markerSettlesCommit(t, mode) })
	}
}

func markerSettlesCommit(t *testing.T, mode pgx.QueryExecMode) {
	noLeaks(t)
	yes, no := true, false
	// Settled not applied after a reset before the send: none as one
	// simple query, one as a pipeline (see resetBeforeSend).
	var unsent int64
	if mode == pgx.QueryExecModeCacheStatement {
		unsent = 1
	}
	for _, tc := range []struct {
		fault        string
		lie          *bool
		rows         int
		attempts     int
		applied, not int64 // verifications
	}{
		{cutAfterCommit, nil, 1, 1, 1, 0},
		{heldThenReset, nil, 1, 2, 0, 1},
		{killDuringCommit, nil, 1, 2, 0, 1},
		{resetBeforeSend, nil, 1, 2, 0, unsent},
		{cutAfterCommit, &no, 2, 2, 0, 1}, // the liar doubles the write
		{heldThenReset, &yes, 0, 1, 1, 0}, // the liar loses it
	} {
		name := tc.fault
		if tc.lie != nil {
			name = "liar: " + name
		}
		t.Run(name, func(t *testing.T) {
			f, px := markerFixtureMode(t, tc.lie, mode)
			if tc.fault == killDuringCommit {
				f.slowCommits(t)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			before := f.p.Stats()
			attempts := 0
			err := f.w.RunTx(ctx, sqlretry.Write("marked", nil), pgx.TxOptions{}, func(ctx context.Context, tx pgx.Tx) error {
				attempts++
				note := "slow" // slows COMMIT down where slowCommits ran
				if attempts > 1 {
					note = "marked"
				}
				if _, err := tx.Exec(ctx, insertItem, 1, note); err != nil {
					return err
				}
				if attempts > 1 {
					return px.SetFault(proxy.Fault{Mode: proxy.Pass})
				}
				return f.inject(ctx, t, px, tx, tc.fault)
			})
			_ = px.SetFault(proxy.Fault{Mode: proxy.Pass})
			after := f.p.Stats()
			if err != nil || attempts != tc.attempts {
				t.Fatalf("RunTx: %v after %d attempts; want nil after %d", err, attempts, tc.attempts)
			}
			if n := f.count(t, "SELECT count(*) FROM items WHERE call_id = 1"); n != tc.rows {
				t.Errorf("%d rows, want %d", n, tc.rows)
			}
			if a, n := after.VerifiedApplied-before.VerifiedApplied, after.VerifiedNotApplied-before.VerifiedNotApplied; a != tc.applied || n != tc.not {
				t.Errorf("verifications: %d applied, %d not; want %d, %d", a, n, tc.applied, tc.not)
			}
			if tc.lie == nil {
				// One live marker per committed attempt, one tombstone per
				// attempt settled as never committed.
				live := f.count(t, "SELECT count(*) FROM sqlretry_commit_marks WHERE tombstone = 0")
				tombs := f.count(t, "SELECT count(*) FROM sqlretry_commit_marks WHERE tombstone = 1")
				if live != 1 || int64(tombs) != tc.not {
					t.Errorf("marker table: %d live, %d tombstones; want 1, %d", live, tombs, tc.not)
				}
			}
		})
	}
}

// inject arms fault for the marked COMMIT that follows fn's return.
func (f *fixture) inject(ctx context.Context, t *testing.T, px *proxy.Proxy, tx pgx.Tx, fault string) error {
	switch fault {
	case cutAfterCommit:
		return px.SetFault(proxy.Fault{Mode: proxy.CutAfterCommit})
	case resetBeforeSend:
		return px.SetConnFault(proxiedConn(t, px, tx), proxy.Fault{Mode: proxy.Reset})
	case heldThenReset:
		id, seen := proxiedConn(t, px, tx), px.Counts().CommitsSeen
		if err := px.SetConnFault(id, proxy.Fault{Mode: proxy.Blackhole}); err != nil {
			return err
		}
		go func() {
			// Once the proxy holds the message with COMMIT, reset.
			for ctx.Err() == nil && px.Counts().CommitsSeen == seen {
				time.Sleep(time.Millisecond)
			}
			_ = px.SetConnFault(id, proxy.Fault{Mode: proxy.Reset})
		}()
	case killDuringCommit:
		pid := tx.Conn().PgConn().PID()
		f.whenCommitSleeps(ctx, pid, func(err error) {
			if err == nil {
				_, _ = f.raw.Exec(ctx, "SELECT pg_terminate_backend($1)", pid)
			}
		})
	}
	return nil
}

// whenCommitSleeps calls do, in a goroutine of its own, once backend pid
// sleeps in slowCommits's trigger (do(nil)) or ctx is done (do(ctx.Err())).
func (f *fixture) whenCommitSleeps(ctx context.Context, pid uint32, do func(err error)) {
	go func() {
		for ctx.Err() == nil {
			var sleeping bool
			err := f.raw.QueryRow(ctx, "SELECT wait_event = 'PgSleep' FROM pg_stat_activity WHERE pid = $1", pid).Scan(&sleeping)
			if err == nil && sleeping {
				do(nil)
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
		do(ctx.Err())
	}()
}

// proxiedConn returns the proxy's id of tx's connection.
func proxiedConn(t *testing.T, px *proxy.Proxy, tx pgx.Tx) uint64 {
	me := tx.Conn().PgConn().Conn().LocalAddr().String()
	for _, c := range px.Conns() {
		if c.Client == me {
			return c.ID
		}
	}
	t.Fatalf("no proxied connection from %s", me)
	return 0
}

// slowCommits makes a COMMIT sleep in a deferred trigger (after the marker
// INSERT's reply was sent, before the commit) when its transaction
// inserted an item noted "slow": what it reads is rolled back with it, so
// neither a settle's tombstone nor the run again sleeps, even after a
// crash.
func (f *fixture) slowCommits(t *testing.T) {
	f.exec(t, `CREATE FUNCTION slow_commit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF EXISTS (SELECT 1 FROM items WHERE note = 'slow') THEN PERFORM pg_sleep(20); END IF;
	RETURN NULL;
END $$`)
	f.exec(t, "CREATE CONSTRAINT TRIGGER slow_commit AFTER INSERT ON sqlretry_commit_marks DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION slow_commit()")
}

// TestMarkerInsertFails: when the marker INSERT fails, COMMIT never runs
// (the server abandons the rest of the message). A permanent failure (no
// marker table) is returned with nothing committed and the connection
// back in the pool outside a transaction — before BEGIN, where the marker
// INSERT is prepared, as a pipeline; a transient one (40001 raised by a
// trigger on the first INSERT) runs the transaction again, which commits
// once.
func TestMarkerInsertFails(t *testing.T) {
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeExec} {
		t.Run(mode.String(), func(t *testing.T) { markerInsertFails(t, mode) })
	}
}

func markerInsertFails(t *testing.T, mode pgx.QueryExecMode) {
	noLeaks(t)
	f, _ := cutFixtureMode(t, mode)
	// Attempts of fn before the missing table fails the transaction: none
	// when the INSERT is prepared before BEGIN.
	want := int32(1)
	if mode == pgx.QueryExecModeCacheStatement {
		want = 0
	}
	f.w = pgxretry.New(f.pool, f.p, pgxretry.WithMarker(&postgres.MarkerVerifier{}))
	t.Cleanup(f.w.Close)
	ctx := context.Background()
	var attempts atomic.Int32
	insert := func(id int) func(ctx context.Context, tx pgx.Tx) error {
		return func(ctx context.Context, tx pgx.Tx) error {
			attempts.Add(1)
			_, err := tx.Exec(ctx, insertItem, id, "marked")
			return err
		}
	}

	err := f.w.RunTx(ctx, sqlretry.Write("no table", nil), pgx.TxOptions{}, insert(1))
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "42P01" || attempts.Load() != want {
		t.Fatalf("without the marker table: %v after %d attempts; want 42P01 after %d", err, attempts.Load(), want)
	}
	if n := f.count(t, "SELECT count(*) FROM items WHERE call_id = 1"); n != 0 {
		t.Fatalf("%d rows committed by a transaction whose marker failed, want 0", n)
	}
	st := f.pool.Stat()
	if st.AcquiredConns() != 0 || st.TotalConns() < 1 {
		t.Fatalf("pool after the failure: %d acquired, %d in all; want 0 and the connection kept", st.AcquiredConns(), st.TotalConns())
	}

	f.exec(t, postgres.MarkerTableDDL)
	f.exec(t, "CREATE SEQUENCE fail_once") // not rolled back with the failed attempt
	f.exec(t, `CREATE FUNCTION fail_once() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF nextval('fail_once') = 1 THEN RAISE EXCEPTION 'injected' USING ERRCODE = 'serialization_failure'; END IF;
	RETURN NEW;
END $$`)
	f.exec(t, "CREATE TRIGGER fail_once BEFORE INSERT ON sqlretry_commit_marks FOR EACH ROW EXECUTE FUNCTION fail_once()")
	attempts.Store(0)
	if err := f.w.RunTx(ctx, sqlretry.Write("fails once", nil), pgx.TxOptions{}, insert(2)); err != nil {
		t.Fatalf("a transient marker failure: %v", err)
	}
	if n := f.count(t, "SELECT count(*) FROM items WHERE call_id = 2"); n != 1 || attempts.Load() != 2 {
		t.Fatalf("%d rows after %d attempts, want 1 after 2", n, attempts.Load())
	}
}

// TestMarkerReadOnly: a read-only transaction, which could not insert a
// marker (25006) but may apply a NOTIFY, is marked by pg_xact_status
// instead: a reply of its COMMIT cut after it ran is settled applied, and
// it does not run again.
func TestMarkerReadOnly(t *testing.T) {
	f, px := markerFixture(t, nil)
	attempts := 0
	err := f.w.RunTx(context.Background(), sqlretry.Write("read", nil), pgx.TxOptions{AccessMode: pgx.ReadOnly},
		func(ctx context.Context, tx pgx.Tx) error {
			attempts++
			var n int
			if err := tx.QueryRow(ctx, "SELECT count(*) FROM items").Scan(&n); err != nil {
				return err
			}
			mode := proxy.CutAfterCommit
			if attempts > 1 {
				mode = proxy.Pass
			}
			return px.SetFault(proxy.Fault{Mode: mode})
		})
	_ = px.SetFault(proxy.Fault{Mode: proxy.Pass})
	if err != nil || attempts != 1 {
		t.Fatalf("a read-only transaction: %v after %d attempts; want nil after 1", err, attempts)
	}
	if st := f.p.Stats(); st.VerifiedApplied != 1 {
		t.Errorf("%d verifications found it applied, want 1", st.VerifiedApplied)
	}
	if m := f.count(t, "SELECT count(*) FROM sqlretry_commit_marks"); m != 0 {
		t.Errorf("%d markers, want 0", m)
	}
}

// TestMarkerNothingWritten: a transaction that only reads is marked all
// the same (a NOTIFY-only one looks the same until COMMIT): a reply of its
// COMMIT cut after it ran is settled applied by its marker, and it does
// not run again.
func TestMarkerNothingWritten(t *testing.T) {
	noLeaks(t)
	f, px := markerFixture(t, nil)
	ctx := context.Background()
	attempts := 0
	read := func(ctx context.Context, tx pgx.Tx) error {
		attempts++
		var n int
		if err := tx.QueryRow(ctx, "SELECT count(*) FROM items").Scan(&n); err != nil {
			return err
		}
		mode := proxy.CutAfterCommit
		if attempts > 1 {
			mode = proxy.Pass
		}
		return px.SetFault(proxy.Fault{Mode: mode})
	}
	err := f.w.RunTx(ctx, sqlretry.Write("read", nil), pgx.TxOptions{}, read)
	_ = px.SetFault(proxy.Fault{Mode: proxy.Pass})
	if err != nil || attempts != 1 {
		t.Fatalf("RunTx: %v after %d attempts; want nil after 1", err, attempts)
	}
	if st := f.p.Stats(); st.VerifiedApplied != 1 {
		t.Errorf("%d verifications found it applied, want 1", st.VerifiedApplied)
	}
	live := f.count(t, "SELECT count(*) FROM sqlretry_commit_marks WHERE tombstone = 0")
	tombs := f.count(t, "SELECT count(*) FROM sqlretry_commit_marks WHERE tombstone = 1")
	if live != 1 || tombs != 0 {
		t.Errorf("marker table: %d live, %d tombstones; want 1, 0", live, tombs)
	}
}

// TestMarkerStatementsDeallocated: fn sends DEALLOCATE ALL as SQL text,
// behind pgx's back, and the session loses the prepared marker INSERT; its
// Bind fails (26000), COMMIT never runs. The transaction runs again, the
// statements prepared anew, and commits once — not returned as a failure.
func TestMarkerStatementsDeallocated(t *testing.T) {
	f, _ := markerFixture(t, nil)
	ctx := context.Background()
	attempts := 0
	err := f.w.RunTx(ctx, sqlretry.Write("deallocated", nil), pgx.TxOptions{}, func(ctx context.Context, tx pgx.Tx) error {
		attempts++
		if _, err := tx.Exec(ctx, insertItem, pgx.QueryExecModeSimpleProtocol, 1, "deallocated"); err != nil {
			return err
		}
		if attempts == 1 {
			_, err := tx.Conn().PgConn().Exec(ctx, "DEALLOCATE ALL").ReadAll()
			return err
		}
		return nil
	})
	if err != nil || attempts != 2 {
		t.Fatalf("RunTx: %v after %d attempts; want nil after 2", err, attempts)
	}
	if n := f.count(t, "SELECT count(*) FROM items WHERE call_id = 1"); n != 1 {
		t.Errorf("%d rows, want 1", n)
	}
}
