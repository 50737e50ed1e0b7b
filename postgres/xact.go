package postgres

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"strings"
	"time"

	sr "github.com/sqlretry/sqlretry"
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

// historyExpr names the server history a transaction id belongs to. Ids
// are handed out again when a history forks, so a status is only believed
// from the history that gave the id out. It joins three values, each read
// from the server, none of them depending on the session's settings:
//
//   - the timeline, as the first 8 hex digits of the name of the WAL file
//     being written: a promotion (or a point-in-time restore) moves every
//     later write to a new timeline, and the new primary hands the ids of
//     transactions it never received out again;
//   - pg_postmaster_start_time(), in microseconds: a restart after a crash
//     (pg_ctl stop -m immediate, a power loss) recovers only the WAL that was
//     written out, and hands out again the ids that only the lost WAL named
//     (a transaction whose COMMIT was in flight), on the same timeline. It
//     also tells apart two servers on the same timeline number (another
//     cluster, a standby);
//   - the statistics reset time of pg_stat_bgwriter, in microseconds: when
//     a backend crashes the postmaster ends every session and runs crash
//     recovery without restarting itself (its start time stays), and crash
//     recovery discards the statistics and resets this time. An
//     administrator's pg_stat_reset_shared('bgwriter') resets it too, which
//     only makes an unknown COMMIT of that moment ambiguous. Reading it
//     costs microseconds, except in a session that set
//     stats_fetch_consistency = snapshot (not the default), where the
//     first read of a transaction copies every statistics entry.
//
// Not in it: the system identifier, which pg_control_system() reads from
// the pg_control file on every call, a read that can catch the file being
// rewritten by a checkpoint on servers before PostgreSQL 16 (a CRC error
// that would fail the transaction); the start time already tells two
// clusters apart. pg_walfile_name fails during recovery, where nothing
// commits.
const historyExpr = "pg_catalog.substr(pg_catalog.pg_walfile_name(pg_catalog.pg_current_wal_lsn()), 1, 8)" +
	" || '/' || (extract(epoch FROM pg_catalog.pg_postmaster_start_time()) * 1000000)::bigint" +
	" || '/' || coalesce((extract(epoch FROM (SELECT stats_reset FROM pg_catalog.pg_stat_bgwriter)) * 1000000)::bigint::text, '-')"

// markQuery takes the transaction's id, assigning one if it has none, and
// the history it runs on: "xid@history". On a hot standby, where none can be
// assigned and nothing can commit, it returns NULL.
const markQuery = "SELECT CASE WHEN pg_catalog.pg_is_in_recovery() THEN NULL ELSE pg_catalog.pg_current_xact_id()::text || '@' || " + historyExpr + " END"

// statusQuery asks the status of transaction $1 if the server is on
// history $2, and returns the server's history (NULL on a standby, in
// recovery) and whether it has synchronous standbys. pg_xact_status itself
// fails for an id the server has not handed out yet.
const statusQuery = "SELECT h, CASE WHEN h = $2 THEN pg_catalog.pg_xact_status($1::text::xid8) END, " +
	"pg_catalog.current_setting('synchronous_standby_names') <> '' FROM " +
	"(SELECT CASE WHEN pg_catalog.pg_is_in_recovery() THEN NULL ELSE " + historyExpr + " END) AS s(h)"

// The barrier's two statements: synchronous_commit at least "on" for its
// transaction (a session or role may have set local or off), and one WAL
// record, a transactional logical message (which any user may write; with
// wal_level=logical, decoding plugins see it, prefix "sqlretry").
const (
	barrierSyncCommit = "SELECT pg_catalog.set_config('synchronous_commit', CASE WHEN pg_catalog.current_setting('synchronous_commit') IN ('off', 'local') " +
		"THEN 'on' ELSE pg_catalog.current_setting('synchronous_commit') END, true)"
	barrierWrite = "SELECT pg_catalog.pg_logical_emit_message(true, 'sqlretry', '')"
)

// Mark returns the transaction's id and server history as "xid@history",
// assigning an id if the transaction has none yet, or "" on a hot standby.
func (CommitVerifier) Mark(ctx context.Context, tx *sql.Tx) (string, error) {
	var xid sql.NullString
	if err := tx.QueryRowContext(ctx, markQuery).Scan(&xid); err != nil {
		return "", err
	}
	return xid.String, nil
}

// Committed reports whether the transaction Mark returned mark for
// committed, asking pg_xact_status on a connection of db — but only of the
// server history the transaction was marked on (see historyExpr): after a
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
	if err := db.QueryRowContext(ctx, statusQuery, xid, history).Scan(&now, &status, &syncStandbys); err != nil {
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
	if err := db.QueryRowContext(ctx, syncStandbysQuery).Scan(&sync); err != nil || !sync {
		return err
	}
	return syncBarrier(ctx, db, maxWait)
}

// syncStandbysQuery reports whether the server waits for synchronous
// standbys.
const syncStandbysQuery = "SELECT pg_catalog.current_setting('synchronous_standby_names') <> ''"

// syncBarrier returns once the synchronous standbys have every COMMIT the
// primary has written so far, or [ErrNotReplicated] after maxWait. It
// commits a transaction that wrote one WAL record, with synchronous_commit
// on: its COMMIT returns once the standbys have its WAL, which follows the
// marked transaction's commit record. (An administrator who cancels the
// barrier's own wait would fool it.)
func syncBarrier(ctx context.Context, db *sql.DB, maxWait time.Duration) error {
	bctx, cancel := context.WithTimeout(ctx, max(maxWait, time.Millisecond))
	defer cancel()
	tx, err := db.BeginTx(bctx, nil)
	if err == nil {
		for _, q := range []string{barrierSyncCommit, barrierWrite} {
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
	if err != nil && ctx.Err() == nil && bctx.Err() != nil {
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
