package pgxretry

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqlretry/sqlretry/internal/pgxact"
	"github.com/sqlretry/sqlretry/internal/wait"
	"github.com/sqlretry/sqlretry/postgres"
)

// The errors of a pg_xact_status settlement that cannot settle; RunTx then
// returns an error matching sqlretry.ErrAmbiguous. They are package
// postgres's, so that errors.Is gives one answer whichever layer settled.
var (
	// ErrXactTooOld: pg_xact_status returned NULL: the server no longer
	// keeps the transaction's commit status.
	ErrXactTooOld = postgres.ErrXactTooOld
	// ErrXactInProgress: the transaction was still in progress after
	// xactMaxWait.
	ErrXactInProgress = postgres.ErrXactInProgress
	// ErrHistoryChanged: the server answering is not the server history
	// the transaction was marked on (a promoted standby, a restore, a
	// restart or crash recovery, another server): its transaction id may
	// name another transaction now.
	ErrHistoryChanged = postgres.ErrHistoryChanged
	// ErrStandby: the server answering is in recovery: it cannot settle a
	// COMMIT.
	ErrStandby = postgres.ErrStandby
	// ErrNotReplicated: the transaction committed on the primary, but the
	// synchronous standbys did not confirm they have it within
	// xactMaxWait: a failover could still lose it.
	ErrNotReplicated = postgres.ErrNotReplicated
)

// xactMaxWait bounds how long committed waits for a transaction still in
// progress; xactPause is the first pause between two questions.
const (
	xactMaxWait = 5 * time.Second
	xactPause   = 20 * time.Millisecond
)

// markTx returns the transaction's "xid@history", or "" on a hot standby.
func markTx(ctx context.Context, tx pgx.Tx) (string, error) {
	var mark *string
	if err := tx.QueryRow(ctx, pgxact.MarkQuery).Scan(&mark); err != nil || mark == nil {
		return "", err
	}
	return *mark, nil
}

// committed reports whether the transaction marked mark committed, asking
// pg_xact_status on another connection — but only of the server history
// the transaction was marked on. It answers false only when the
// transaction can no longer commit ("aborted"); while it is in progress it
// asks again, for at most xactMaxWait. An empty mark (a hot standby, which
// commits nothing) counts as committed.
func (w *Pool) committed(ctx context.Context, mark string) (bool, error) {
	if mark == "" {
		return true, nil
	}
	xid, history, ok := strings.Cut(mark, "@")
	if !ok || xid == "" || history == "" {
		return false, errors.New("pgxretry: not a transaction mark: " + strconv.Quote(mark))
	}
	pause, waited := xactPause, time.Duration(0)
	for {
		status, syncStandbys, err := w.xactStatus(ctx, xid, history)
		if err != nil {
			return false, err
		}
		switch status {
		case "committed":
			if syncStandbys {
				// A COMMIT whose wait for the standbys was cancelled
				// commits on the primary alone: wait until they have it.
				if err := w.syncBarrier(ctx); err != nil {
					return false, err
				}
			}
			return true, nil
		case "aborted":
			return false, nil
		case "in progress":
		default:
			return false, errors.New("pgxretry: pg_xact_status returned " + strconv.Quote(status))
		}
		if waited >= xactMaxWait {
			return false, ErrXactInProgress
		}
		d := min(pause, xactMaxWait-waited)
		if err := wait.Sleep(ctx, d); err != nil {
			return false, err
		}
		waited, pause = waited+d, 2*pause
	}
}

// xactStatus asks pg_xact_status about xid, if the server answering is on
// history, and whether the server has synchronous standbys.
func (w *Pool) xactStatus(ctx context.Context, xid, history string) (string, bool, error) {
	var now, status *string
	var syncStandbys bool
	if err := w.pool.QueryRow(ctx, pgxact.StatusQuery, xid, history).Scan(&now, &status, &syncStandbys); err != nil {
		return "", false, err
	}
	switch {
	case now == nil:
		return "", false, ErrStandby
	case *now != history:
		return "", false, ErrHistoryChanged
	case status == nil:
		return "", false, ErrXactTooOld
	}
	return *status, syncStandbys, nil
}

// syncBarrier returns once the synchronous standbys have every COMMIT the
// primary has written so far, or ErrNotReplicated after xactMaxWait: a
// transaction of its own that writes one WAL record and commits with
// synchronous_commit on (package postgres's barrier, over pgx).
func (w *Pool) syncBarrier(ctx context.Context) error {
	bctx, cancel := context.WithTimeout(ctx, xactMaxWait)
	defer cancel()
	err := pgx.BeginFunc(bctx, w.pool, func(tx pgx.Tx) error {
		for _, q := range []string{pgxact.BarrierSyncCommit, pgxact.BarrierWrite} {
			if _, err := tx.Exec(bctx, q); err != nil {
				return err
			}
		}
		return nil
	})
	// A COMMIT whose wait for the standbys is cancelled returns success,
	// with a warning: with pgx's CancelRequestContextWatcherHandler, bctx's
	// end sends such a cancel, so a barrier that ends after its deadline
	// proves nothing, whatever it returned.
	if bctx.Err() != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return ErrNotReplicated
	}
	return err
}
