package pgxretry

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/sqlretry/sqlretry/internal/wait"
)

// The errors of a pg_xact_status settlement that cannot settle; RunTx then
// returns an error matching sqlretry.ErrAmbiguous.
var (
	// ErrXactTooOld: pg_xact_status returned NULL: the server no longer
	// keeps the transaction's commit status.
	ErrXactTooOld = errors.New("pgxretry: pg_xact_status is NULL: the transaction is too old for its status to be known")
	// ErrXactInProgress: the transaction was still in progress after
	// xactMaxWait.
	ErrXactInProgress = errors.New("pgxretry: the transaction is still in progress")
	// ErrHistoryChanged: the server answering is not the server history
	// the transaction was marked on (a promoted standby, a restore, a
	// restart or crash recovery, another server): its transaction id may
	// name another transaction now.
	ErrHistoryChanged = errors.New("pgxretry: the server's history changed since the transaction was marked (a failover, a restore, a restart or a crash): its transaction id may name another transaction now")
	// ErrStandby: the server answering is in recovery: it cannot settle a
	// COMMIT.
	ErrStandby = errors.New("pgxretry: the server answering is in recovery (a standby): it cannot settle a COMMIT")
)

// historyExpr names the server history a transaction id belongs to, as
// package postgres's CommitVerifier does (keep the two in step): the
// timeline (the first 8 hex digits of the current WAL file's name: a
// promotion or a point-in-time restore moves to a new one, and the new
// primary hands the lost transactions' ids out again), the postmaster's
// start time (a restart after a crash recovers only the WAL written out,
// and hands out again the ids only the lost WAL named) and the statistics
// reset time of pg_stat_bgwriter (crash recovery without a restart
// resets it).
const historyExpr = "pg_catalog.substr(pg_catalog.pg_walfile_name(pg_catalog.pg_current_wal_lsn()), 1, 8)" +
	" || '/' || (extract(epoch FROM pg_catalog.pg_postmaster_start_time()) * 1000000)::bigint" +
	" || '/' || coalesce((extract(epoch FROM (SELECT stats_reset FROM pg_catalog.pg_stat_bgwriter)) * 1000000)::bigint::text, '-')"

// markQuery takes the transaction's id, assigning one if it has none (a
// NOTIFY-only transaction takes one only inside COMMIT), and the history
// it runs on: "xid@history". On a hot standby, where nothing can commit, it
// returns NULL.
const markQuery = "SELECT CASE WHEN pg_catalog.pg_is_in_recovery() THEN NULL ELSE pg_catalog.pg_current_xact_id()::text || '@' || " + historyExpr + " END"

// statusQuery asks the status of transaction $1 if the server is on
// history $2, and returns the server's history (NULL in recovery).
const statusQuery = "SELECT h, CASE WHEN h = $2 THEN pg_catalog.pg_xact_status($1::text::xid8) END FROM " +
	"(SELECT CASE WHEN pg_catalog.pg_is_in_recovery() THEN NULL ELSE " + historyExpr + " END) AS s(h)"

// xactMaxWait bounds how long committed waits for a transaction still in
// progress; xactPause is the first pause between two questions.
const (
	xactMaxWait = 5 * time.Second
	xactPause   = 20 * time.Millisecond
)

// markTx returns the transaction's "xid@history", or "" on a hot standby.
func markTx(ctx context.Context, tx pgx.Tx) (string, error) {
	var mark *string
	if err := tx.QueryRow(ctx, markQuery).Scan(&mark); err != nil || mark == nil {
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
		status, err := w.xactStatus(ctx, xid, history)
		if err != nil {
			return false, err
		}
		switch status {
		case "committed":
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
// history.
func (w *Pool) xactStatus(ctx context.Context, xid, history string) (string, error) {
	var now, status *string
	if err := w.pool.QueryRow(ctx, statusQuery, xid, history).Scan(&now, &status); err != nil {
		return "", err
	}
	switch {
	case now == nil:
		return "", ErrStandby
	case *now != history:
		return "", ErrHistoryChanged
	case status == nil:
		return "", ErrXactTooOld
	}
	return *status, nil
}
