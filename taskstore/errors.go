package taskstore

import (
	"errors"
	"fmt"
)

// The sentinels the store's errors match with errors.Is. None of them is
// retried: each reports a fact about the data, not a transient failure.
var (
	// ErrNotFound: no task has the given id.
	ErrNotFound = errors.New("taskstore: task not found")
	// ErrIDTaken: Persist found a task already stored under the id: a
	// different one, or the same task persisted by an earlier call (a
	// re-submission, which never passes for "inserted": that task may have
	// run since).
	ErrIDTaken = errors.New("taskstore: task id already holds a task")
	// ErrTaskKeyTaken: Persist collided with another task's unique task key.
	// It never means "already inserted".
	ErrTaskKeyTaken = errors.New("taskstore: task key already used by another task")
	// ErrOccurrenceTaken: Persist collided with another task of the same
	// recurring series at the same scheduled time (the occurrence index).
	// It never means "already inserted".
	ErrOccurrenceTaken = errors.New("taskstore: occurrence (parent id, scheduled time) already exists")
	// ErrStatusConflict: a transition's guard failed: the task is not in the
	// status the transition starts from.
	ErrStatusConflict = errors.New("taskstore: task is not in the expected status")
	// ErrLeaseLost: the caller's lease expired or was taken over; the task
	// belongs to someone else now.
	ErrLeaseLost = errors.New("taskstore: lease lost")
	// ErrVersionConflict: AdvanceRun's expected schedule version is stale:
	// another worker advanced the series first.
	ErrVersionConflict = errors.New("taskstore: schedule version changed: another worker advanced the series")
	// ErrSeriesComplete: AdvanceRun found the series at MaxRuns.
	ErrSeriesComplete = errors.New("taskstore: series has reached its maximum runs")
	// ErrUnattributedDuplicate: Persist hit a unique violation the store
	// could not attribute to a known constraint. Not "already inserted".
	ErrUnattributedDuplicate = errors.New("taskstore: unique constraint violation on an unknown constraint")
	// ErrTransitionIDTaken: a transition's id already names another
	// transition (of another task, or to another status). Transition ids
	// are unique: at most one audit row carries each.
	ErrTransitionIDTaken = errors.New("taskstore: transition id already used by another transition")
	// ErrInvalidTransition: SetStatus was asked for a transition it does not
	// make: an unknown status, a move into Leased or Running that only
	// Claim and Start make, or an id in the store's reserved forms.
	ErrInvalidTransition = errors.New("taskstore: invalid transition")
)

// ConflictError is a Persist collision: which unique constraint fired, and
// the id of the task it collided with where the store could read it. It
// matches [ErrIDTaken], [ErrTaskKeyTaken], [ErrOccurrenceTaken] or
// [ErrUnattributedDuplicate] with errors.Is, and wraps the driver's error.
type ConflictError struct {
	TaskID     string     // the task Persist tried to store
	Constraint Constraint // the unique constraint that fired
	Err        error      // the driver's error
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("taskstore: persist %s: %v (constraint %s)", e.TaskID, e.sentinel(), e.Constraint)
}

func (e *ConflictError) sentinel() error {
	switch e.Constraint {
	case ConstraintPrimaryKey:
		return ErrIDTaken
	case ConstraintTaskKey:
		return ErrTaskKeyTaken
	case ConstraintOccurrence:
		return ErrOccurrenceTaken
	}
	return ErrUnattributedDuplicate
}

// Unwrap returns the sentinel and the driver's error.
func (e *ConflictError) Unwrap() []error { return []error{e.sentinel(), e.Err} }

// StatusError is a transition whose guard failed. It matches
// [ErrStatusConflict], [ErrLeaseLost] or [ErrNotFound].
type StatusError struct {
	TaskID string
	Want   Status // the status the transition starts from
	Got    Status // the status the task is in; "" if not found
	cause  error
}

func (e *StatusError) Error() string {
	if e.cause == ErrNotFound {
		return "taskstore: task " + e.TaskID + " not found"
	}
	return fmt.Sprintf("taskstore: task %s: %v (want %s, got %s)", e.TaskID, e.cause, e.Want, e.Got)
}

// Unwrap returns the sentinel.
func (e *StatusError) Unwrap() error { return e.cause }

// VersionError is an AdvanceRun that found the series moved on. It matches
// [ErrVersionConflict] or [ErrSeriesComplete].
type VersionError struct {
	TaskID   string
	Expected int64 // the caller's schedule version
	Current  int64 // the stored one
	Runs     int   // the stored run count
	MaxRuns  int
	cause    error
}

func (e *VersionError) Error() string {
	return fmt.Sprintf("taskstore: advance %s at version %d: %v (version %d, runs %d of %d)",
		e.TaskID, e.Expected, e.cause, e.Current, e.Runs, e.MaxRuns)
}

// Unwrap returns the sentinel.
func (e *VersionError) Unwrap() error { return e.cause }
