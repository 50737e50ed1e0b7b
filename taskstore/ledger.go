package taskstore

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"sync"

	"github.com/sqlretry/sqlretry"
)

// OpKind names a write in the [Ledger].
type OpKind string

// The writes a Ledger records.
const (
	OpPersist   OpKind = "persist"
	OpSetStatus OpKind = "set-status"
	OpClaim     OpKind = "claim"
	OpStart     OpKind = "start"
	OpComplete  OpKind = "complete"
	OpFail      OpKind = "fail"
	OpAdvance   OpKind = "advance-run"
)

// Outcome is what a write told its caller.
type Outcome uint8

const (
	// ToldOK: the call returned nil: the write was applied exactly once.
	ToldOK Outcome = iota
	// ToldAmbiguous: the error matches sqlretry.ErrAmbiguous: the write may or
	// may not have been applied, and the error says so.
	ToldAmbiguous
	// ToldCanceled: the caller's context ended the call; the write may or may
	// not have been applied.
	ToldCanceled
	// ToldFailed: any other error: the write was not applied.
	ToldFailed
)

var outcomeNames = [...]string{"ok", "ambiguous", "canceled", "failed"}

// String returns "ok", "ambiguous", "canceled" or "failed".
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "outcome(?)"
}

// OutcomeOf reads what err tells the caller. An error that says the next
// wait would pass the caller's deadline (sqlretry.ErrDeadline) comes after
// the last attempt's outcome was settled, so it is Failed, not Canceled.
func OutcomeOf(err error) Outcome {
	if err == nil {
		return ToldOK
	}
	if errors.Is(err, sqlretry.ErrAmbiguous) {
		return ToldAmbiguous
	}
	// A *sqlretry.Error says why the Policy stopped in Cause; its last
	// database error may itself be a command timeout's context error, which
	// is not the caller's.
	var re *sqlretry.Error
	if errors.As(err, &re) && re.Cause != nil {
		if !errors.Is(re.Cause, sqlretry.ErrDeadline) && (errors.Is(re.Cause, context.Canceled) || errors.Is(re.Cause, context.DeadlineExceeded)) {
			return ToldCanceled
		}
		return ToldFailed
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return ToldCanceled
	}
	return ToldFailed
}

// Entry is one write as its caller saw it.
type Entry struct {
	Kind OpKind
	// ID identifies the write in the database: the task id for a persist,
	// the transition id (the audit row's) for a status change, the advance
	// id (the task_runs row's) for an advance.
	ID     string
	TaskID string // "" when not known (a claim whose outcome is unknown)
	// Fingerprint identifies a persisted task's content.
	Fingerprint string
	Outcome     Outcome
	Err         string // the error's text, "" for OK
}

// Ledger is the client side of the invariant check: what every write told
// its caller, and how many times each task's handler started. The store
// records into it when Options.Ledger is set; a harness records handler
// starts. It is safe for concurrent use by multiple goroutines.
type Ledger struct {
	mu      sync.Mutex
	entries []Entry
	starts  map[string]int
}

// NewLedger returns an empty Ledger.
func NewLedger() *Ledger { return &Ledger{starts: map[string]int{}} }

// Record adds e with the outcome err gives.
func (l *Ledger) Record(e Entry, err error) {
	e.Outcome = OutcomeOf(err)
	if err != nil {
		e.Err = err.Error()
	}
	l.mu.Lock()
	l.entries = append(l.entries, e)
	l.mu.Unlock()
}

// HandlerStarted records that the handler of task id started.
func (l *Ledger) HandlerStarted(id string) {
	l.mu.Lock()
	if l.starts == nil {
		l.starts = map[string]int{}
	}
	l.starts[id]++
	l.mu.Unlock()
}

// Entries returns a copy of the recorded writes.
func (l *Ledger) Entries() []Entry {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Entry(nil), l.entries...)
}

// Starts returns a copy of the handler starts per task.
func (l *Ledger) Starts() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := make(map[string]int, len(l.starts))
	for k, v := range l.starts {
		m[k] = v
	}
	return m
}

// fingerprint identifies the content Persist stores.
func fingerprint(t Task) string {
	h := sha256.New()
	var b [8]byte
	for _, s := range []string{t.ID, t.Key, t.ParentID} {
		binary.BigEndian.PutUint64(b[:], uint64(len(s)))
		h.Write(b[:])
		h.Write([]byte(s))
	}
	for _, n := range []int64{us(t.ScheduledAt).Int64, int64(t.MaxAttempts), int64(t.MaxRuns), int64(len(t.Payload))} {
		binary.BigEndian.PutUint64(b[:], uint64(n))
		h.Write(b[:])
	}
	h.Write(t.Payload)
	return hex.EncodeToString(h.Sum(nil)[:12])
}
