package sqlretry

import (
	"context"
	"time"
)

// EventKind names what an [Event] reports.
type EventKind uint8

const (
	EventRetry              EventKind = iota + 1 // an attempt failed and will be retried after Wait
	EventGiveUp                                  // the call failed: Err is the error returned to the caller
	EventVerified                                // a verify settled an ambiguous attempt: see Applied
	EventVerifyFailed                            // a verify could not settle an ambiguous attempt
	EventBudgetExhausted                         // a retry was refused for want of a budget token
	EventBreakerStateChange                      // the breaker moved from From to To
)

var eventNames = [...]string{"", "retry", "give-up", "verified", "verify-failed", "budget-exhausted", "breaker-state-change"}

// String returns the kind's name, such as "retry".
func (k EventKind) String() string {
	if int(k) < len(eventNames) && k != 0 {
		return eventNames[k]
	}
	return "event(?)"
}

// An Event reports one thing a Policy did. Events are emitted only off the
// success path: a first-try success emits nothing.
type Event struct {
	// Ctx is the call's context (nil for breaker changes), for an Observer
	// that reads what the caller put there — the active trace span, say.
	// It must not be kept past Observe.
	Ctx     context.Context
	Kind    EventKind
	Op      string
	Attempt int           // the attempt that failed (1 for the first); 0 for breaker changes
	Err     error         // the attempt's error, or for EventGiveUp the returned error
	Class   Class         // the verdict on Err, where there is one
	Wait    time.Duration // EventRetry: the wait before the next attempt
	Applied bool          // EventVerified: the verify's answer
	From    BreakerState  // EventBreakerStateChange
	To      BreakerState  // EventBreakerStateChange
}

// An Observer receives a Policy's events. It is called synchronously on the
// goroutine that caused the event, never while the Policy holds a lock, and
// must be safe for concurrent use. Keep it fast.
type Observer interface {
	Observe(Event)
}

// ObserverFunc adapts a function to an [Observer].
type ObserverFunc func(Event)

// Observe calls f(e).
func (f ObserverFunc) Observe(e Event) { f(e) }
