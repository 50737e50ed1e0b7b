package postgres

import (
	"context"
	"database/sql"
	"errors"
	"time"

	sr "github.com/sqlretry/sqlretry"
)

// The errors of [CommitVerifier.Committed] when it cannot settle a COMMIT;
// sqlretry.RunTxWith then returns an error matching sqlretry.ErrAmbiguous.
var (
	// ErrXactTooOld: pg_xact_status returned NULL, the server no longer
	// keeps the transaction's commit status.
	ErrXactTooOld = errors.New("postgres: pg_xact_status is NULL: the transaction is too old for its status to be known")
	// ErrXactInProgress: the transaction was still in progress after
	// CommitVerifier.MaxWait.
	ErrXactInProgress = errors.New("postgres: the transaction is still in progress")
)

// CommitVerifier is a [sr.CommitVerifier] for PostgreSQL 13 and later. Just
// before COMMIT it records the transaction's id with
// pg_current_xact_id_if_assigned(); after a COMMIT whose outcome is unknown
// it asks pg_xact_status on another connection of the pool:
//
//   - committed: the transaction was applied;
//   - aborted: it was not (a transaction cut off before COMMIT arrived is
//     aborted when its backend notices);
//   - in progress: the backend has not finished yet; ask again after a
//     pause, for at most MaxWait, then give up with [ErrXactInProgress];
//   - NULL: the status is gone (the id is older than the commit log the
//     server keeps): [ErrXactTooOld].
//
// A transaction that wrote nothing has no id; its COMMIT cannot have changed
// anything, so it counts as applied, and marking it costs no transaction id.
//
// Marking costs one round trip per transaction (see the benchmarks in the
// root package's integration tests). The verdict is only meaningful on the
// server that ran the transaction: after a failover to a replica promoted
// with a different history, use an Op Verify that reads the data instead.
//
// Use it with sqlretry.RunTxWith:
//
//	err := sqlretry.RunTxWith(ctx, db, p, sqlretry.Write("transfer", nil),
//		sqlretry.TxConfig{Verifier: postgres.CommitVerifier{}}, fn)
//
// The zero value is ready to use and safe for concurrent use.
type CommitVerifier struct {
	// MaxWait bounds how long Committed waits for a transaction that is
	// still in progress. If 0, 5 s.
	MaxWait time.Duration
	// Interval is the first pause between two questions; it doubles after
	// each. If 0, 20 ms.
	Interval time.Duration

	// sleep waits d or until ctx is done; tests replace it.
	sleep func(ctx context.Context, d time.Duration) error
}

var _ sr.CommitVerifier = CommitVerifier{}

// Mark returns the transaction's id as text, or "" if it has none (it has
// written nothing).
func (CommitVerifier) Mark(ctx context.Context, tx *sql.Tx) (string, error) {
	var xid sql.NullString
	if err := tx.QueryRowContext(ctx, "SELECT pg_current_xact_id_if_assigned()::text").Scan(&xid); err != nil {
		return "", err
	}
	return xid.String, nil
}

// Committed reports whether the transaction Mark returned mark for
// committed, asking pg_xact_status on a connection of db.
func (v CommitVerifier) Committed(ctx context.Context, db *sql.DB, mark string) (bool, error) {
	if mark == "" {
		return true, nil
	}
	maxWait, pause := v.MaxWait, v.Interval
	if maxWait <= 0 {
		maxWait = 5 * time.Second
	}
	if pause <= 0 {
		pause = 20 * time.Millisecond
	}
	sleep := v.sleep
	if sleep == nil {
		sleep = sleepCtx
	}
	var waited time.Duration
	for {
		var status sql.NullString
		if err := db.QueryRowContext(ctx, "SELECT pg_xact_status($1::text::xid8)", mark).Scan(&status); err != nil {
			return false, err
		}
		committed, again, err := settle(status)
		if !again {
			return committed, err
		}
		if waited >= maxWait {
			return false, ErrXactInProgress
		}
		d := min(pause, maxWait-waited)
		if err := sleep(ctx, d); err != nil {
			return false, err
		}
		waited += d
		pause *= 2
	}
}

// settle reads one answer of pg_xact_status.
func settle(status sql.NullString) (committed, again bool, err error) {
	switch {
	case !status.Valid:
		return false, false, ErrXactTooOld
	case status.String == "committed":
		return true, false, nil
	case status.String == "aborted":
		return false, false, nil
	case status.String == "in progress":
		return false, true, nil
	}
	return false, false, errors.New("postgres: pg_xact_status returned " + status.String)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
