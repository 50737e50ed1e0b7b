package sqlretry

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"testing"
	"time"
)

// TestConnPinnedFollowsSession: the flag the fast path reads (conn.pinned)
// is the session's Pinned after every text that moves the session's state
// (the fake driver knows BEGIN, COMMIT and ROLLBACK). The failure path asks the session
// itself, so a stale flag would only send a pinned session's reads the fast
// way; this holds the flag to the state it stands for.
func TestConnPinnedFollowsSession(t *testing.T) {
	srv := newFakeServer()
	db := sql.OpenDB(Connector(&fakeConnector{s: srv}, testPolicy(t, Config{})))
	defer db.Close()
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	check := func(after string, want bool) {
		t.Helper()
		if err := conn.Raw(func(dc any) error {
			c := wrapped(t, dc.(driver.Conn))
			if c.pinned != c.sess.Pinned() || c.pinned != want {
				t.Errorf("after %q: pinned %v, session's Pinned %v, want %v", after, c.pinned, c.sess.Pinned(), want)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	check("(new session)", false)
	for _, step := range []struct {
		text string
		want bool
	}{
		{"BEGIN", true},
		{"SELECT 1", true},
		{"COMMIT", false},
		{"SELECT 1", false},
		{"BEGIN", true},
		{"ROLLBACK", false},
	} {
		if _, err := conn.ExecContext(ctx, step.text); err != nil {
			t.Fatalf("%s: %v", step.text, err)
		}
		check(step.text, step.want)
	}
}

// A session the tracker takes as "possibly in a transaction" (txUnsure:
// here after a CALL, which a pooled connection keeps until a plain
// ROLLBACK) but that may be in autocommit mode is pinned; a pinned query's
// rows are wrapped as any other's: INSERT … RETURNING whose connection is
// lost after the commit, while its rows are read, is ErrAmbiguous, not a
// plain driver error.
//
// History: found in the review of issue 12's changes (finding 1): the
// pinned path returned its rows unwrapped, which brought the plain error
// back for every connection that ever ran a CALL.
func TestPinnedWriteRowsErrorIsAmbiguous(t *testing.T) {
	srv := newFakeServer()
	db, _ := openPassthrough(t, srv, Config{})
	conn := heldConn(t, db)
	ctx := context.Background()
	if _, err := conn.ExecContext(ctx, "CALL noop"); err != nil {
		t.Fatal(err)
	}
	srv.addFaults(&fault{op: "next", err: errLost, kill: true})
	var v int64
	err := conn.QueryRowContext(ctx, "ADD n 1 RETURNING").Scan(&v)
	if srv.get("n") != 1 {
		t.Fatalf("n = %d, want 1 (the write committed)", srv.get("n"))
	}
	if !errors.Is(err, ErrAmbiguous) {
		t.Errorf("got %v, want ErrAmbiguous: the write committed, its rows' error is a plain error", err)
	}
}

// On a pinned session (here after a CALL) a write that fails while the
// caller's context is done matches ctx.Err() or ErrAmbiguous, as the
// Policy's own path (Policy.stopped) makes it: the write applied, and rule 1
// forbids a bare driver error.
//
// History: found in the review of issue 12's changes (finding 8): the
// pinned path returned the driver's bare error.
func TestPinnedFailureAfterCallerEndsIsWrapped(t *testing.T) {
	srv := newFakeServer()
	db, _ := openPassthrough(t, srv, Config{})
	conn := heldConn(t, db)
	if _, err := conn.ExecContext(context.Background(), "CALL noop"); err != nil {
		t.Fatal(err)
	}
	srv.addFaults(&fault{op: "exec", match: "ADD n 1", err: errLost, apply: true, kill: true})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := conn.ExecContext(ctx, "ADD n 1")
	if srv.get("n") != 1 {
		t.Fatalf("n = %d, want 1", srv.get("n"))
	}
	if !errors.Is(err, context.Canceled) && !errors.Is(err, ErrAmbiguous) {
		t.Errorf("got %v, want an error matching context.Canceled (and the driver's): the write applied", err)
	}
}

// CommandTimeout bounds a pinned statement as any other. A pooled
// connection that once ran a CALL stays pinned (txUnsure) until a plain
// ROLLBACK; a hung write on it must fail after CommandTimeout, not block a
// caller without a deadline for good.
//
// History: found in the review of issue 12's changes (finding 12): pinned
// statements ran under the caller's context alone.
func TestPinnedStatementKeepsCommandTimeout(t *testing.T) {
	srv := newFakeServer()
	db, _ := openPassthrough(t, srv, Config{CommandTimeout: 50 * time.Millisecond})
	conn := heldConn(t, db)
	if _, err := conn.ExecContext(context.Background(), "CALL noop"); err != nil {
		t.Fatal(err)
	}
	srv.addFaults(&fault{op: "exec", match: "ADD n 1", block: true})
	stop, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	done := make(chan error, 1)
	go func() {
		_, err := conn.ExecContext(stop, "ADD n 1")
		done <- err
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("the statement still runs after 2 s with CommandTimeout 50 ms: a pinned session has no command timeout")
	}
}
