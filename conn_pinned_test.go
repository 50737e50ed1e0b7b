package sqlretry

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"testing"
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
