package sqlretry

import (
	"context"
	"errors"
	"testing"
)

// A SELECT of a user's function may write (PostgreSQL's usual way to call
// stored code): after a failure of unknown outcome it is not replayed as a
// read, and the caller gets ErrAmbiguous, not success with the function's
// write applied twice.
//
// History: found in the review of issue 12's changes (finding 7): SELECT of
// a function was judged read-only.
func TestSelectOfWritingFunctionNotReplayed(t *testing.T) {
	srv := newFakeServer()
	db, _ := openPassthrough(t, srv, Config{})
	if err := db.PingContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv.addFaults(&fault{op: "query", match: "create_order", err: errLost, apply: true, kill: true})
	var id int64
	err := db.QueryRowContext(context.Background(), "SELECT create_order()").Scan(&id)
	if n := srv.get("orders"); n != 1 || !errors.Is(err, ErrAmbiguous) {
		t.Errorf("got (%d, %v) with %d orders, want ErrAmbiguous with 1: the function's write was replayed", id, err, n)
	}
}
