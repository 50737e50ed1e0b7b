package sqlretry

import (
	"context"
	"database/sql/driver"
	"errors"
	"testing"
	"time"
)

// unconfirmedFencer knows every session's id and never confirms a fence: a
// session stuck in rollback (MariaDB "Killed" while it undoes a large
// UPDATE), a fence connection that cannot reach the server during the
// outage that caused the failure, a pid reused by a long-lived backend.
type unconfirmedFencer struct{ stop chan struct{} }

func (unconfirmedFencer) SessionID(context.Context, driver.Conn) (string, error) { return "42", nil }

func (f unconfirmedFencer) Fence(ctx context.Context, _ driver.Conn, _ string) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-f.stop:
		return errors.New("test: over")
	}
}

// After a write ends in ErrAmbiguous the Connector fences its session
// under a bound of its own: a fence that never confirms (rollback of a large
// UPDATE, a fence connection that cannot reach the server) does not hang a
// caller without a deadline, whose answer (ErrAmbiguous) was known at once
// and who asked for no verify.
//
// History: found in the review of issue 12's changes (finding 5): the fence
// ran under the caller's context alone, bounded neither by CommandTimeout
// nor by anything else.
func TestFenceIsBoundedByCommandTimeout(t *testing.T) {
	srv := newFakeServer()
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	db, _ := openPassthrough(t, srv, Config{Classifier: serverClassifier, CommandTimeout: 50 * time.Millisecond, Fencer: unconfirmedFencer{stop}})
	if err := db.PingContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv.addFaults(&fault{op: "exec", err: errLost, apply: true, kill: true})
	done := make(chan error, 1)
	go func() {
		_, err := db.ExecContext(context.Background(), "ADD n 1")
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, ErrAmbiguous) {
			t.Errorf("got %v, want ErrAmbiguous", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("ExecContext still waiting on the fence after 3 s (CommandTimeout 50 ms, no verify to serve)")
	}
}
