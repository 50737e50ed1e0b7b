// Package naivestore builds the blind-replay task store, to show the
// damage a blind replay does (`sqlretry chaos --compare naive` and
// `--naive`). It is internal so that no program outside this repository can
// build one: it is not part of the library.
//
// The naive store is a [taskstore.Store] whose writes replay blindly after
// any retryable error, as EF Core's EnableRetryOnFailure does, with no
// verify: a duplicate key on a replayed Persist is read as "already inserted"
// whatever constraint fired; SetStatus, Start and Complete are unguarded and
// insert a fresh audit row each time they run (the unique transition id then
// makes the replay fail, so a write that landed is reported failed); Claim
// replays without looking for the lease it may already hold; and AdvanceRun
// takes the compare-and-swap that guards on the schedule version without
// consuming it. Never use it for real data.
package naivestore

import (
	"database/sql"

	"github.com/sqlretry/sqlretry/internal/naivestore/hook"
	"github.com/sqlretry/sqlretry/taskstore"
)

// New returns taskstore.New(db, d, o) in blind-replay mode.
func New(db *sql.DB, d taskstore.Dialect, o taskstore.Options) (*taskstore.Store, error) {
	s, err := taskstore.New(db, d, o)
	if err != nil {
		return nil, err
	}
	hook.Enable(s)
	return s, nil
}
