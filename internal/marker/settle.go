package marker

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"strconv"
	"time"

	sr "github.com/sqlretry/sqlretry"
)

// Committed reports whether the transaction Mark returned key for
// committed, asking db (the current primary). It answers false only after
// its own tombstone for key landed, which proves the marker can never
// commit; while the key stays locked it tries again for at most MaxWait,
// then returns an error matching [ErrInFlight].
func (v *Verifier) Committed(ctx context.Context, db *sql.DB, key string) (bool, error) {
	if !isKey(key) {
		return false, errors.New(v.name + ": not a marker key: " + strconv.Quote(key))
	}
	if err := v.resolve(ctx, db); err != nil {
		return false, err
	}
	wctx, cancel := context.WithTimeout(ctx, v.maxWait)
	defer cancel()
	pause := firstPause
	for {
		committed, err := v.settle(wctx, db, key)
		switch {
		case err == nil && committed && v.d.Confirm != nil:
			if err := v.d.Confirm(ctx, db, v.maxWait); err != nil {
				return false, err
			}
			return true, nil
		case err == nil:
			return committed, nil
		case ctx.Err() != nil:
			return false, err
		case wctx.Err() != nil:
			return false, &inFlightError{v.name, v.maxWait, err}
		case !v.busy(err):
			return false, err
		}
		// The engine gave up on the lock before MaxWait did (SQLITE_BUSY,
		// a lock timeout): wait, then ask again.
		if serr := v.sleep(wctx, pause); serr != nil {
			if ctx.Err() != nil {
				return false, serr
			}
			return false, &inFlightError{v.name, v.maxWait, err}
		}
		pause = min(2*pause, maxPause)
	}
}

// settle asks once: the key's row if it is committed, else a tombstone
// inserted in its place, which waits for an uncommitted insert of the key.
func (v *Verifier) settle(ctx context.Context, db *sql.DB, key string) (bool, error) {
	tomb, found, err := v.lookup(ctx, db, key)
	if err != nil || found {
		return found && !tomb, err
	}
	_, err = db.ExecContext(ctx, v.stmt().insert, key, v.now().Unix(), 1)
	switch {
	case err == nil:
		return false, nil // the marker can never commit now
	case !v.duplicate(err):
		return false, err
	}
	// The key committed between the look-up and the insert, or while the
	// insert waited: the marked transaction's, or the tombstone of an
	// earlier call whose reply was lost. The flag tells.
	tomb, found, err = v.lookup(ctx, db, key)
	if err == nil && !found {
		err = errors.New(v.name + ": the key was reported a duplicate, yet it is not in the table (was it pruned? TTL must be far longer than MaxWait)")
	}
	return found && !tomb, err
}

// lookup reads the key's row: found, and whether it is a tombstone.
func (v *Verifier) lookup(ctx context.Context, db *sql.DB, key string) (tomb, found bool, err error) {
	var flag int64
	err = db.QueryRowContext(ctx, v.stmt().lookup, key).Scan(&flag)
	if errors.Is(err, sql.ErrNoRows) {
		return false, false, nil
	}
	return flag != 0, err == nil, err
}

// duplicate reports whether err is the engine's duplicate-key error.
func (v *Verifier) duplicate(err error) bool {
	return slices.Contains(v.d.Duplicate, v.d.Classify(err).Code)
}

// busy reports whether err is the engine giving up on a lock: worth
// another try while MaxWait lasts.
func (v *Verifier) busy(err error) bool {
	c := v.d.Classify(err)
	return c.Retryable && c.Kind == sr.Contention
}

// isKey reports whether s can be a key Mark returned: 32 lower-case
// hexadecimal digits, as sqlretry.NewKey makes them.
func isKey(s string) bool {
	if len(s) != 32 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if (s[i] < '0' || s[i] > '9') && (s[i] < 'a' || s[i] > 'f') {
			return false
		}
	}
	return true
}

// inFlightError is Committed's error after MaxWait: it matches ErrInFlight
// and wraps the last database error. Its verdict is final (not retryable):
// the Policy must not spend another MaxWait on it.
type inFlightError struct {
	name    string
	maxWait time.Duration
	last    error
}

func (e *inFlightError) Error() string {
	return e.name + ": " + ErrInFlight.Error() + " (" + e.maxWait.String() + "): " + e.last.Error()
}

func (e *inFlightError) Is(target error) bool { return target == ErrInFlight }

func (e *inFlightError) Unwrap() error { return e.last }

// Verdict keeps the Policy from retrying Committed after MaxWait.
func (e *inFlightError) Verdict() sr.Class {
	return sr.Class{Phase: sr.Unknown, Code: "marker-in-flight", Reason: "the marked transaction may still be committing"}
}
