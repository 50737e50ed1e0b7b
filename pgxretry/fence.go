package pgxretry

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/sqlretry/sqlretry/internal/wait"
)

// fenceLimit bounds a fence: the termination and the wait for the backend
// to leave pg_stat_activity.
const fenceLimit = 10 * time.Second

// errNoSession: the failed attempt never had a session to fence.
var errNoSession = errors.New("pgxretry: the failed attempt's session is unknown, so it cannot be fenced")

// fence ends the backend pid on the server and returns once
// pg_stat_activity no longer lists it: a backend leaves it after it has
// aborted or finished its transaction, so what a verify reads afterwards
// is final. PostgreSQL does not notice a lost client while a statement
// runs: without the fence, a verify could read "not applied" of a
// statement that then commits.
//
// It runs on the raw pool: the verify calling it is itself retried by the
// Policy.
func (w *Pool) fence(ctx context.Context, pid uint32) error {
	if pid == 0 {
		return errNoSession
	}
	ctx, cancel := context.WithTimeout(ctx, fenceLimit)
	defer cancel()
	// pg_terminate_backend answers false, with a warning, for a pid that
	// is already gone.
	if _, err := w.pool.Exec(ctx, "SELECT pg_catalog.pg_terminate_backend($1)", int32(pid)); err != nil {
		return err
	}
	pause := 2 * time.Millisecond
	for {
		var n int
		err := w.pool.QueryRow(ctx, "SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE pid = $1", int32(pid)).Scan(&n)
		switch {
		case err != nil:
			return err
		case n == 0:
			return nil
		}
		if err := wait.Sleep(ctx, pause); err != nil {
			return errors.New("pgxretry: backend " + strconv.FormatUint(uint64(pid), 10) + " still listed after the fence's limit: " + err.Error())
		}
		pause = min(2*pause, 100*time.Millisecond)
	}
}
