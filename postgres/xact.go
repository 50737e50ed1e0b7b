package postgres

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"strings"
	"time"

	sr "github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/internal/pgxact"
	"github.com/sqlretry/sqlretry/internal/wait"
)

// The errors of [CommitVerifier.Committed] when it cannot settle a COMMIT;
// sqlretry.RunTx then returns an error matching sqlretry.ErrAmbiguous.
var (
	// ErrXactTooOld: pg_xact_status returned NULL, the server no longer
	// keeps the transaction's commit status.
	ErrXactTooOld = errors.New("postgres: pg_xact_status is NULL: the transaction is too old for its status to be known")
	// ErrXactInProgress: the transaction was still in progress after
	// CommitVerifier.MaxWait.
	ErrXactInProgress = errors.New("postgres: the transaction is still in progress")
	// ErrHistoryChanged: the server answering is not the server history
	// the transaction was marked on — a standby was promoted, the server
	// was restored, restarted or recovered from a crash since, or the pool
	// reaches another server — so the transaction id may now name another
	// transaction: a promoted standby, and a server recovered from a crash,
	// hand the ids of lost transactions out again.
	ErrHistoryChanged = errors.New("postgres: the server's history changed since the transaction was marked (a failover, a restore, a restart or a crash): its transaction id may name another transaction now")
	// ErrStandby: the server answering is in recovery (a standby, or a
	// server still recovering): it cannot settle a COMMIT.
	ErrStandby = errors.New("postgres: the server answering is in recovery (a standby): it cannot settle a COMMIT")
	// ErrNotReplicated: the transaction committed on the primary, but the
	// synchronous standbys (synchronous_standby_names) did not confirm
	// that they have it within CommitVerifier.MaxWait: a failover could
	// still lose it.
	ErrNotReplicated = errors.New("postgres: the transaction committed on the primary, but the synchronous standbys did not confirm they have it")
)

// CommitVerifier is a [sr.CommitVerifier] for PostgreSQL 13 and later. Just
// before COMMIT it takes the transaction's id with pg_current_xact_id(),
// which assigns one if the transaction has none yet; after a COMMIT whose
// outcome is unknown it asks pg_xact_status on another connection of the
// pool:
//
//   - committed: the transaction was applied; where the server has
//     synchronous standbys (synchronous_standby_names), only once they
//     have it too, which a COMMIT of its own proves (see syncBarrier): a
//     COMMIT whose wait for them was cancelled (a client's cancel request,
//     pg_cancel_backend) commits on the primary alone, and a failover
//     loses it. Not confirmed within MaxWait: [ErrNotReplicated];
//   - aborted: it was not (a transaction cut off before COMMIT arrived is
//     aborted when its backend notices);
//   - in progress: the backend has not finished yet; ask again after a
//     pause, for at most MaxWait, then give up with [ErrXactInProgress];
//   - NULL: the status is gone (the id is older than the commit log the
//     server keeps): [ErrXactTooOld].
//
// The id is assigned at Mark, not left to COMMIT, because a transaction can
// commit something without having an id before COMMIT: NOTIFY (and
// pg_notify) queues its notification in the session and takes an id only
// inside COMMIT, so pg_current_xact_id_if_assigned() is NULL for a
// NOTIFY-only transaction, and an unknown COMMIT of it could not be told
// from a transaction that did nothing. With the id taken at Mark, the
// notification is delivered exactly when that id commits. The cost falls on
// transactions that wrote nothing: each now uses a transaction id and
// writes a commit record (on a 2-core machine with synchronous_commit on,
// about 0.1 ms more per such transaction); transactions that wrote already
// have their id and pay nothing more. Read-only work should not go through
// a Write Op with a CommitVerifier at all: an idempotent Op needs no
// verdict. The other effects that can happen without an id need none:
// nextval() takes effect when it is called, committed or not; advisory locks
// and LISTEN/UNLISTEN belong to the session, which an unknown COMMIT leaves
// dead. On a hot standby (pg_is_in_recovery()) no id can be assigned and
// nothing can commit (NOTIFY is refused during recovery): the mark is empty
// and the COMMIT counts as applied.
//
// Marking costs one round trip per transaction (see the benchmarks in the
// root package's integration tests). The verdict is only given by the
// server history that ran the transaction: the mark names it (timeline,
// postmaster start, crash recovery), and after a failover, a crash, a
// restart, or with a pool that reaches another server, Committed returns
// [ErrHistoryChanged] and the call ends in ErrAmbiguous. To settle those
// too, use an Op Verify that reads the data.
//
// Set it as the Policy's Config.CommitVerifier; RunTx uses it for every
// Write Op without a Verify of its own:
//
//	p, err := sqlretry.New(sqlretry.Config{Classifier: postgres.Classifier, CommitVerifier: postgres.CommitVerifier{}})
//	err = sqlretry.RunTx(ctx, db, p, sqlretry.Write("transfer", nil), nil, fn)
//
// The zero value is ready to use and safe for concurrent use.
type CommitVerifier struct {
	// MaxWait bounds how long Committed waits for a transaction that is
	// still in progress, and then, where the server has synchronous
	// standbys, how long it waits for them to confirm it. If 0, 5 s.
	MaxWait time.Duration
	// Interval is the first pause between two questions; it doubles after
	// each. If 0, 20 ms.
	Interval time.Duration

	// sleep waits d or until ctx is done; tests replace it.
	sleep func(ctx context.Context, d time.Duration) error
}

var _ sr.CommitVerifier = CommitVerifier{}

// Mark returns the transaction's id and server history as "xid@history",
// assigning an id if the transaction has none yet, or "" on a hot standby.
func (CommitVerifier) Mark(ctx context.Context, tx *sql.Tx) (string, error) {
	var xid sql.NullString
	if err := tx.QueryRowContext(ctx, pgxact.MarkQuery).Scan(&xid); err != nil {
		return "", err
	}
	return xid.String, nil
}

// Committed reports whether the transaction Mark returned mark for
// committed, asking pg_xact_status on a connection of db — but only of the
// server history the transaction was marked on (see pgxact.HistoryExpr): after a
// promotion, a crash or a restart the server may have handed the lost
// transaction's id out again, and its status would be another
// transaction's, so Committed returns [ErrHistoryChanged] (the call then
// ends in ErrAmbiguous). A standby answering (the pool points at one)
// returns [ErrStandby]. An empty mark (a transaction on a hot standby,
// which cannot commit anything) counts as committed.
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
		sleep = wait.Sleep
	}
	xid, history, ok := strings.Cut(mark, "@")
	if !ok || xid == "" || history == "" {
		return false, errors.New("postgres: CommitVerifier: not a mark: " + strconv.Quote(mark))
	}
	var waited time.Duration
	for {
		status, syncStandbys, err := xactStatus(ctx, db, xid, history)
		if err != nil {
			return false, err
		}
		committed, again, err := settle(status)
		if committed && syncStandbys {
			// A COMMIT whose wait for the standbys was cancelled commits
			// on the primary alone: wait until they have it too.
			if err := syncBarrier(ctx, db, maxWait); err != nil {
				return false, err
			}
			return true, nil
		}
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

// xactStatus asks pg_xact_status about xid, if the server answering is on
// history.
func xactStatus(ctx context.Context, db *sql.DB, xid, history string) (status sql.NullString, syncStandbys bool, err error) {
	var now sql.NullString
	if err := db.QueryRowContext(ctx, pgxact.StatusQuery, xid, history).Scan(&now, &status, &syncStandbys); err != nil {
		return status, false, err
	}
	if !now.Valid {
		return status, false, ErrStandby
	}
	if now.String != history {
		return status, false, ErrHistoryChanged
	}
	return status, syncStandbys, nil
}

// confirmReplicated returns nil once a COMMIT found on the primary is on
// its synchronous standbys too, if it has any: the same barrier as
// CommitVerifier's, for the marker verifier, whose row is found on the
// primary even when the COMMIT's wait for the standbys was cancelled.
func confirmReplicated(ctx context.Context, db *sql.DB, maxWait time.Duration) error {
	var sync bool
	if err := db.QueryRowContext(ctx, pgxact.SyncStandbysQuery).Scan(&sync); err != nil || !sync {
		return err
	}
	return syncBarrier(ctx, db, maxWait)
}

// syncBarrier returns once the synchronous standbys have every COMMIT the
// primary has written so far, or [ErrNotReplicated] after maxWait. It
// commits a transaction that wrote one WAL record, with synchronous_commit
// on: its COMMIT returns once the standbys have its WAL, which follows the
// marked transaction's commit record. A COMMIT whose wait is cancelled
// returns success all the same, with a warning: lib/pq sends such a cancel
// when bctx ends, so a barrier that ends after its deadline proves nothing,
// whatever it returned. (An administrator who cancels the barrier's own
// wait would still fool it.)
func syncBarrier(ctx context.Context, db *sql.DB, maxWait time.Duration) error {
	bctx, cancel := context.WithTimeout(ctx, max(maxWait, time.Millisecond))
	defer cancel()
	tx, err := db.BeginTx(bctx, nil)
	if err == nil {
		for _, q := range []string{pgxact.BarrierSyncCommit, pgxact.BarrierWrite} {
			if _, err = tx.ExecContext(bctx, q); err != nil {
				break
			}
		}
		if err == nil {
			err = tx.Commit()
		} else {
			tx.Rollback()
		}
	}
	if bctx.Err() != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return ErrNotReplicated
	}
	return err
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
