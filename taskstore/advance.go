package taskstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/sqlretry/sqlretry"
)

// Advance is one counted run of a recurring series.
type Advance struct {
	ID      string // the advance's id, recorded with the run
	RunNo   int    // the series' run count after this run: 1 for the first
	Version int64  // the schedule version after this advance
}

// AdvanceRun counts one run of the recurring series seriesID, a
// compare-and-swap on its schedule version: it applies only if the stored
// version is still expected and the series has runs left.
//
// The statement consumes its own token: it increments ScheduleVersion
// together with CurrentRunCount, so the identical statement replayed after a
// COMMIT that landed fails its guard instead of counting the run twice. The
// run and the id of the call that counted it are recorded in task_runs in
// the same transaction, so after an ambiguous COMMIT the store can tell "my
// advance landed" (success, no replay) from "it did not" (replay) and from
// "another worker won" (a [*VersionError] matching [ErrVersionConflict]).
// A series at MaxRuns yields [ErrSeriesComplete]; it never ends early.
func (s *Store) AdvanceRun(ctx context.Context, seriesID string, expected int64) (Advance, error) {
	a := Advance{ID: s.newID()}
	var err error
	if s.naive {
		err = s.naiveAdvance(ctx, seriesID, expected, &a)
	} else {
		verify := func(ctx context.Context) (bool, error) { return s.advanceLanded(ctx, seriesID, &a) }
		err = sqlretry.RunTx(ctx, s.db, s.pol.AdvanceRun, sqlretry.Write("taskstore.advance-run", verify).VerifyWaits(), nil, func(ctx context.Context, tx *sql.Tx) error {
			n, err := affected(ctx, tx, s.q.advance, a.ID, seriesID, expected)
			if err != nil {
				return err
			}
			if n == 0 {
				if done, err := s.advanced(ctx, tx, &a); err != nil || done {
					return err
				}
				return s.versionError(ctx, tx, seriesID, expected)
			}
			if _, err := tx.ExecContext(ctx, s.q.insertRun, a.ID, s.now().UnixMicro(), seriesID); err != nil {
				return err
			}
			_, err = s.advanced(ctx, tx, &a)
			return err
		})
		err = s.confirm(ctx, err, verify)
	}
	s.record(Entry{Kind: OpAdvance, ID: a.ID, TaskID: seriesID}, err)
	if err != nil {
		return Advance{ID: a.ID}, err
	}
	return a, nil
}

// advanceLanded is the verdict on advance a of series seriesID: advanced,
// read once no attempt that could still commit it is in flight (each one
// that can commit has updated the series' row).
func (s *Store) advanceLanded(ctx context.Context, seriesID string, a *Advance) (bool, error) {
	if err := s.awaitTask(ctx, seriesID); err != nil {
		return false, err
	}
	return s.advanced(ctx, s.db, a)
}

// advanced reports whether the advance a.ID was counted, and fills in its
// run number and version if so.
func (s *Store) advanced(ctx context.Context, q querier, a *Advance) (bool, error) {
	err := q.QueryRowContext(ctx, s.q.runByID, a.ID).Scan(&a.RunNo, &a.Version)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

func (s *Store) versionError(ctx context.Context, q querier, id string, expected int64) error {
	t, err := s.get(ctx, q, id)
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return &StatusError{TaskID: id, cause: ErrNotFound}
		}
		return err
	}
	e := &VersionError{TaskID: id, Expected: expected, Current: t.ScheduleVersion, Runs: t.CurrentRunCount, MaxRuns: t.MaxRuns, cause: ErrVersionConflict}
	if t.ScheduleVersion == expected && t.MaxRuns > 0 && t.CurrentRunCount >= t.MaxRuns {
		e.cause = ErrSeriesComplete
	}
	return e
}

// EnsureOccurrence inserts the occurrence of series parentID at t.ScheduledAt
// unless it exists, and returns the occurrence as stored and whether this
// call created it. t.ScheduledAt must not be zero, and the derived id
// (parentID + "@" + the time, 23 bytes) must fit the 64-byte id column. It is an idempotent write
// by construction, the contrast to Persist: its id is derived from the series
// and the time, and the occurrence index turns a second insert into a no-op
// (ON CONFLICT DO NOTHING; on MariaDB a duplicate key read back by
// occurrence), so it is replayed freely after any transient failure.
//
// The returned task is the stored row, read back by (parentID,
// t.ScheduledAt): if the occurrence was stored earlier (by Persist, under
// another id), that is the id returned. A different task already holding the
// derived id yields a [*ConflictError] matching [ErrIDTaken]. "created" is
// false after a replay whose first attempt landed: use Persist when the
// caller must know.
func (s *Store) EnsureOccurrence(ctx context.Context, parentID string, t Task) (Task, bool, error) {
	if t.ScheduledAt.IsZero() {
		return t, false, errors.New("taskstore: EnsureOccurrence: ScheduledAt is zero: an occurrence needs its scheduled time")
	}
	t.ParentID = parentID
	t.ID = parentID + "@" + t.ScheduledAt.UTC().Format("20060102T150405.000000")
	if len(t.ID) > maxIDLen {
		// SQLite would store it; PostgreSQL and MariaDB would refuse it.
		return t, false, fmt.Errorf("taskstore: EnsureOccurrence: parent id %q is too long: the occurrence id %q exceeds %d bytes", parentID, t.ID, maxIDLen)
	}
	t.Key = ""
	t = s.prepare(t)
	var created bool
	err := s.pol.Persist.Do(ctx, sqlretry.Idempotent("taskstore.ensure-occurrence"), func(ctx context.Context) error {
		created = false
		res, err := s.db.ExecContext(ctx, s.q.ensureOccurrence, t.ID, t.ParentID, us(t.ScheduledAt), t.DueAt.UnixMicro(),
			t.MaxAttempts, t.Payload, s.now().UnixMicro())
		if c, dup := s.dialect.duplicateKey(err); dup {
			// The occurrence exists (a no-op), or another task holds the id.
			if _, rerr := s.occurrence(ctx, t); errors.Is(rerr, ErrNotFound) {
				return &ConflictError{TaskID: t.ID, Constraint: c, Err: err}
			} else if rerr != nil {
				return rerr
			}
			return nil
		}
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		created = n == 1
		return err
	})
	if err != nil {
		return t, false, err
	}
	stored, err := sqlretry.DoValue(ctx, s.pol.Read, sqlretry.Idempotent("taskstore.get"), func(ctx context.Context) (Task, error) {
		return s.occurrence(ctx, t)
	})
	if err != nil {
		return t, created, err
	}
	return stored, created, nil
}

// maxIDLen is the tasks.id column's width in the PostgreSQL and MariaDB
// migrations.
const maxIDLen = 64

// occurrence reads the task stored at t's place in its series.
func (s *Store) occurrence(ctx context.Context, t Task) (Task, error) {
	got, err := scanTask(s.db.QueryRowContext(ctx, s.q.occurrence, t.ParentID, us(t.ScheduledAt)))
	if errors.Is(err, sql.ErrNoRows) {
		return Task{}, ErrNotFound
	}
	return got, err
}
