package taskstore

import (
	"context"
	"database/sql"
	"time"

	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/internal/naivestore/hook"
)

// This file holds the unsafe shapes of the blind-replay store, which only
// internal/naivestore can build (for `sqlretry chaos --compare naive`). They
// exist only so the chaos command can show the damage a blind replay does;
// every one of them is what the seeds say not to do.

func init() {
	hook.Enable = func(store any) { store.(*Store).naive = true }
}

// naivePersist replays the INSERT after any retryable failure and reads a
// duplicate key on a replay as "already inserted", whatever constraint fired
// and whoever owns the row (only the primary key and our own row
// prove that).
func (s *Store) naivePersist(ctx context.Context, t Task) error {
	attempt := 0
	return s.pol.Persist.Do(ctx, sqlretry.Idempotent("taskstore.naive-persist"), func(ctx context.Context) error {
		attempt++
		err := s.insert(ctx, t)
		if _, dup := s.dialect.duplicateKey(err); dup && attempt > 1 {
			return nil
		}
		return err
	})
}

// naiveTransition runs an unguarded UPDATE and a fresh audit row, replayed
// blindly: after a COMMIT whose reply was lost, the replay inserts a second
// audit row, re-stamps the execution time and, for Start, counts a second job
// attempt (a status change with a full audit trail is not idempotent).
func (s *Store) naiveTransition(ctx context.Context, p *sqlretry.Policy, name, id, taskID string, from Status, update string, args func(now time.Time) []any) error {
	return sqlretry.RunTx(ctx, s.db, p, sqlretry.Idempotent(name), nil, func(ctx context.Context, tx *sql.Tx) error {
		now := s.now()
		if _, err := tx.ExecContext(ctx, update, args(now)...); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, s.q.insertAudit, id, string(from), now.UnixMicro(), taskID)
		return err
	})
}

// naiveAdvance is a compare-and-swap of a recurring task's run: it guards on the
// schedule version and increments the run count without changing the
// version, so an identical replay after an ambiguous COMMIT passes the guard
// again and counts the run twice, spending MaxRuns early.
func (s *Store) naiveAdvance(ctx context.Context, seriesID string, expected int64, a *Advance) error {
	return sqlretry.RunTx(ctx, s.db, s.pol.AdvanceRun, sqlretry.Idempotent("taskstore.naive-advance-run"), nil, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, s.q.naiveAdvance, a.ID, seriesID, expected)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return s.versionError(ctx, tx, seriesID, expected)
		}
		if _, err := tx.ExecContext(ctx, s.q.insertRun, a.ID, s.now().UnixMicro(), seriesID); err != nil {
			return err
		}
		_, err = s.advanced(ctx, tx, a)
		return err
	})
}
