package sqlretry

import "time"

// A Failure describes one failed attempt to a [Schedule].
type Failure struct {
	Op        string        // the Op's name
	Statement string        // the Op's statement, if known
	Err       error         // the attempt's error
	Class     Class         // the classifier's verdict
	Retry     int           // the number of the retry being considered: 1 for the first retry
	Elapsed   time.Duration // since the first attempt started (connects), or since the first failure (Do)
}

// Decision is a [Schedule]'s answer for one failure.
type Decision uint8

const (
	// Defer: the schedule has no rule for this failure; the Policy's
	// classifier, MaxRetries and backoff decide.
	Defer Decision = iota
	// Retry: retry after the returned wait, even if the classifier said the
	// error is not retryable (the rule is the operator's consent). The Op's
	// phase rules, the budget, the breaker and the caller's context still apply.
	Retry
	// Stop: do not retry.
	Stop
)

// String returns "defer", "retry" or "stop".
func (d Decision) String() string {
	switch d {
	case Defer:
		return "defer"
	case Retry:
		return "retry"
	case Stop:
		return "stop"
	}
	return "Decision(?)"
}

// A Schedule overrides the Policy's retry decision and waits for the failures
// it has rules for. Package crl builds one from the JDBC driver's retryExec and
// retryConn rule language. A Schedule must be safe for concurrent use.
type Schedule interface {
	Decide(f Failure) (d Decision, wait time.Duration)
}

// ScheduleFunc adapts a function to a [Schedule].
type ScheduleFunc func(f Failure) (Decision, time.Duration)

// Decide calls s(f).
func (s ScheduleFunc) Decide(f Failure) (Decision, time.Duration) { return s(f) }

// StatementConsent is an optional interface of a [Schedule]: the database/sql
// layer asks it, after a failure of phase Unknown with the engine code code,
// whether the operator consented to replaying statement (package crl: the
// rule for that code names the statement in its query filter). Without that
// consent, only read-only statements are replayed after an ambiguous failure.
// Consent is per code: a rule for deadlocks is no consent to replay a write
// whose connection dropped.
type StatementConsent interface {
	ConsentsToReplay(statement, code string) bool
}

// ConnectBound is an optional interface of a connect [Schedule]: the whole
// connect, its retries included, must end within ConnectTimeout (the JDBC
// driver's loginTimeout), so a login that hangs is cut too, not only the
// waits between attempts. 0 means no bound.
type ConnectBound interface {
	ConnectTimeout() time.Duration
}
