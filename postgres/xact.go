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
	// ErrHistoryChanged: the server answering is not on the timeline the
	// transaction was marked on — a standby was promoted (or the server
	// was restored) since — so the transaction id may now name another
	// transaction, which a promoted standby hands out again.
	ErrHistoryChanged = errors.New("postgres: the server's timeline changed since the transaction was marked (a failover or a restore): its transaction id may name another transaction now")
)

// CommitVerifier is a [sr.CommitVerifier] for PostgreSQL 13 and later. Just
// before COMMIT it takes the transaction's id with pg_current_xact_id(),
// which assigns one if the transaction has none yet; after a COMMIT whose
// outcome is unknown it asks pg_xact_status on another connection of the
// pool:
//
//   - committed: the transaction was applied;
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
// root package's integration tests). The verdict is only meaningful on the
// server that ran the transaction: after a failover to a replica promoted
// with a different history, use an Op Verify that reads the data instead.
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
	// still in progress. If 0, 5 s.
	MaxWait time.Duration
	// Interval is the first pause between two questions; it doubles after
	// each. If 0, 20 ms.
	Interval time.Duration

	// sleep waits d or until ctx is done; tests replace it.
	sleep func(ctx context.Context, d time.Duration) error
}

var _ sr.CommitVerifier = CommitVerifier{}

// timelineExpr is the server's current timeline, as the first 8 hex digits
// of the name of the WAL file being written: a promotion (or a point-in-time
// restore) moves every later write to a new timeline. It fails during
// recovery, where nothing commits.
const timelineExpr = "substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8)"

// markQuery takes the transaction's id, assigning one if it has none, and
// the timeline it runs on: "xid@timeline". On a hot standby, where none can
// be assigned and nothing can commit, it returns NULL.
const markQuery = "SELECT CASE WHEN pg_is_in_recovery() THEN NULL ELSE pg_current_xact_id()::text || '@' || " + timelineExpr + " END"

// Mark returns the transaction's id and timeline as "xid@timeline",
// assigning an id if the transaction has none yet, or "" on a hot standby.
func (CommitVerifier) Mark(ctx context.Context, tx *sql.Tx) (string, error) {
	var xid sql.NullString
	if err := tx.QueryRowContext(ctx, markQuery).Scan(&xid); err != nil {
		return "", err
	}
	return xid.String, nil
}

// Committed reports whether the transaction Mark returned mark for
// committed, asking pg_xact_status on a connection of db — but only of a
// server on the timeline the transaction was marked on: after a promotion
// the new primary hands the lost transaction's id out again, and its status
// would be another transaction's, so Committed returns [ErrHistoryChanged]
// (the call then ends in ErrAmbiguous). A standby answering (the pool
// points at one) cannot tell its timeline mid-recovery: an error too. An
// empty mark (a transaction on a hot standby, which cannot commit
// anything) counts as committed.
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
	xid, timeline, ok := strings.Cut(mark, "@")
	if !ok || xid == "" || timeline == "" {
		return false, errors.New("postgres: CommitVerifier: not a mark: " + strconv.Quote(mark))
	}
	var waited time.Duration
	for {
		var status sql.NullString
		var now string
		if err := db.QueryRowContext(ctx, "SELECT pg_xact_status($1::text::xid8), "+timelineExpr, xid).Scan(&status, &now); err != nil {
			return false, err
		}
		if now != timeline {
			return false, ErrHistoryChanged
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
