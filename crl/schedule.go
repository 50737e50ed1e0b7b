package crl

import (
	"fmt"
	"time"

	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/internal/sqltext"
)

// ExecSchedule is an [Exec] as a [sqlretry.Schedule] for
// [sqlretry.Config.Schedule]. For a failure whose Class.Code has a rule:
//
//   - Retry after Waits[Retry-1] while Failure.Retry <= the rule's retries
//     and the statement passes the rule's filter;
//   - Stop when the retries are used up or the filter does not match (the
//     driver rethrows the error);
//
// and Defer for a code with no rule, so the Policy's classifier, MaxRetries
// and backoff decide. Whatever the decision, the Policy still applies the
// Op's consent (an ambiguous failure of a write is verified or not replayed),
// its budget, its breaker and the caller's context.
//
// It implements [sqlretry.StatementConsent]. It is safe for concurrent use.
type ExecSchedule struct {
	exec Exec
	mode FilterMode
}

// Schedule returns the rules as a schedule whose filters match by mode.
func (x Exec) Schedule(mode FilterMode) *ExecSchedule {
	return &ExecSchedule{exec: x, mode: mode}
}

// Exec returns the schedule's rules.
func (s *ExecSchedule) Exec() Exec { return s.exec }

// Mode returns the schedule's filter mode.
func (s *ExecSchedule) Mode() FilterMode { return s.mode }

// Decide implements [sqlretry.Schedule].
func (s *ExecSchedule) Decide(f sqlretry.Failure) (sqlretry.Decision, time.Duration) {
	return withoutReason(s.decide(f, false))
}

// Explain is Decide with a one-line reason, for tools and logs.
func (s *ExecSchedule) Explain(f sqlretry.Failure) (sqlretry.Decision, time.Duration, string) {
	return s.decide(f, true)
}

// withoutReason is a decide's answer for Decide, which gives no reason.
func withoutReason(d sqlretry.Decision, wait time.Duration, _ string) (sqlretry.Decision, time.Duration) {
	return d, wait
}

func (s *ExecSchedule) decide(f sqlretry.Failure, why bool) (sqlretry.Decision, time.Duration, string) {
	i, ok := s.exec.index[f.Class.Code]
	if !ok {
		return sqlretry.Defer, 0, reason(why, "no rule for error %q: the Policy's classifier, MaxRetries and backoff decide", f.Class.Code)
	}
	e := &s.exec.entries[i]
	if f.Retry < 1 || f.Retry > e.Retries {
		return sqlretry.Stop, 0, reason(why, "error %s allows %d retries; retry %d is past them", e.Error, e.Retries, f.Retry)
	}
	if len(e.Filter) > 0 && f.Statement == "" {
		// No statement to filter (RunTx, Policy.Do): the rule cannot judge,
		// so it must not stop the Policy's own retry of a whole transaction.
		return sqlretry.Defer, 0, reason(why, "error %s: no statement to match the filter %v against: the Policy decides", e.Error, e.Filter)
	}
	if len(e.Filter) > 0 && !matches(e.Filter, s.mode, f.Statement) {
		tok := FirstToken(f.Statement)
		if s.mode == FilterVerb {
			tok = sqltext.Verb(f.Statement)
		}
		return sqlretry.Stop, 0, reason(why, "error %s: the statement's %s %q is not in the filter %v", e.Error, s.mode.word(), tok, e.Filter)
	}
	return sqlretry.Retry, e.Waits[f.Retry-1], reason(why, "error %s: retry %d of %d after %v", e.Error, f.Retry, e.Retries, e.Waits[f.Retry-1])
}

func (m FilterMode) word() string {
	if m == FilterVerb {
		return "verb"
	}
	return "first token"
}

func reason(why bool, format string, a ...any) string {
	if !why {
		return ""
	}
	return fmt.Sprintf(format, a...)
}

// ConsentsToReplay implements [sqlretry.StatementConsent]: it reports whether
// the rule for error code, with retries, explicitly names the statement in its
// filter. The filters are the operator's consent to replaying a write whose
// outcome is unknown after that error (SQL Server's client timeout -2, say);
// a rule without a filter is not, since it names no statement, and a rule
// for another code is not: consent to retry deadlocks is no consent to replay
// a write whose connection dropped.
func (s *ExecSchedule) ConsentsToReplay(statement, code string) bool {
	i, ok := s.exec.index[code]
	if !ok {
		return false
	}
	e := &s.exec.entries[i]
	return e.Retries > 0 && len(e.Filter) > 0 && matches(e.Filter, s.mode, statement)
}

// Matches reports whether statement passes filter under mode; an empty
// filter passes every statement.
func Matches(filter []string, mode FilterMode, statement string) bool {
	return len(filter) == 0 || matches(filter, mode, statement)
}

func matches(filter []string, mode FilterMode, statement string) bool {
	tok := FirstToken(statement)
	if mode == FilterVerb {
		tok = sqltext.Verb(statement)
	}
	if tok == "" {
		return false
	}
	for _, f := range filter {
		if sqltext.EqualFold(tok, f) {
			return true
		}
	}
	return false
}

// FirstToken returns the statement's first whitespace-delimited token, as
// the JDBC driver's filter sees it (the driver lower-cases it; compare with
// ASCII case folding).
func FirstToken(statement string) string {
	i := 0
	for i < len(statement) && isSQLSpace(statement[i]) {
		i++
	}
	j := i
	for j < len(statement) && !isSQLSpace(statement[j]) {
		j++
	}
	return statement[i:j]
}

func isSQLSpace(c byte) bool { return isSpace(c) || c == '\f' || c == '\v' }

// Connect holds the driver's connection properties that pace and bound the
// connect retry loop. The zero value means the driver's defaults.
type Connect struct {
	// RetryCount is connectRetryCount: retries after a failed connect. If 0,
	// the driver's default, 1. NoConnectRetries (negative) disables connect
	// retries, like connectRetryCount=0 in the driver; rules then have no
	// effect. At most 255.
	RetryCount int
	// RetryInterval is connectRetryInterval, in seconds: the wait before
	// every retry but the first, which is immediate. If 0, 10. 1 to 60.
	RetryInterval int
	// LoginTimeout is loginTimeout, in seconds: the bound on the whole
	// connect, retries included; a retry whose wait would reach it is not
	// started. If 0, the driver's default, 30. NoLoginTimeout (negative)
	// removes the bound. At most 65535.
	LoginTimeout int
}

const (
	// NoConnectRetries, as Connect.RetryCount, disables connect retries.
	NoConnectRetries = -1
	// NoLoginTimeout, as Connect.LoginTimeout, removes the overall bound.
	NoLoginTimeout = -1
)

// norm validates c and fills in the defaults.
func (c Connect) norm() (Connect, error) {
	switch {
	case c.RetryCount > 255:
		return c, errorf("Connect.RetryCount (connectRetryCount) must be 0 to 255, got %d", c.RetryCount)
	case c.RetryInterval < 0 || c.RetryInterval > 60:
		return c, errorf("Connect.RetryInterval (connectRetryInterval) must be 1 to 60 seconds (0 for the default 10), got %d", c.RetryInterval)
	case c.LoginTimeout > 65535:
		return c, errorf("Connect.LoginTimeout (loginTimeout) must be at most 65535 seconds, got %d", c.LoginTimeout)
	}
	switch {
	case c.RetryCount == 0:
		c.RetryCount = 1
	case c.RetryCount < 0:
		c.RetryCount = 0
	}
	if c.RetryInterval == 0 {
		c.RetryInterval = 10
	}
	switch {
	case c.LoginTimeout == 0:
		c.LoginTimeout = 30
	case c.LoginTimeout < 0:
		c.LoginTimeout = 0
	}
	return c, nil
}

// ConnSchedule is a [Conn] with the connect properties as a
// [sqlretry.Schedule] for [sqlretry.Config.ConnectSchedule]. It decides every
// connect failure:
//
//   - Stop when connect retries are disabled or Failure.Retry passes
//     RetryCount;
//   - Stop for an authentication failure ([NeverRetried]), even if a rule
//     names it;
//   - for a code the rule language can name (a number for SQL Server, a
//     SQLSTATE for PostgreSQL): Stop unless it is in the effective list;
//   - for an engine-neutral code the language cannot name ("dial",
//     "bad-conn", "conn-reset"…): the classifier's Retryable verdict;
//   - Stop when Failure.Elapsed (since the first attempt started) plus the
//     next wait would reach LoginTimeout;
//   - else Retry, at once for the first retry and after RetryInterval for
//     the others.
//
// It is safe for concurrent use.
type ConnSchedule struct {
	conn     Conn
	count    int
	interval time.Duration
	login    time.Duration
}

// Schedule returns the rules with the connect properties p as a schedule,
// or an error naming the property out of range.
func (c Conn) Schedule(p Connect) (*ConnSchedule, error) {
	p, err := p.norm()
	if err != nil {
		return nil, err
	}
	return &ConnSchedule{
		conn:     c,
		count:    p.RetryCount,
		interval: time.Duration(p.RetryInterval) * time.Second,
		login:    time.Duration(p.LoginTimeout) * time.Second,
	}, nil
}

// Conn returns the schedule's rules.
func (s *ConnSchedule) Conn() Conn { return s.conn }

// Connect returns the schedule's connect properties, defaults filled in
// (RetryCount 0 here means disabled, LoginTimeout 0 unbounded).
func (s *ConnSchedule) Connect() Connect {
	return Connect{RetryCount: s.count, RetryInterval: int(s.interval / time.Second), LoginTimeout: int(s.login / time.Second)}
}

// ConnectTimeout implements [sqlretry.ConnectBound]: loginTimeout bounds the
// whole connect, a hung login included. 0 with NoLoginTimeout.
func (s *ConnSchedule) ConnectTimeout() time.Duration { return s.login }

// Decide implements [sqlretry.Schedule].
func (s *ConnSchedule) Decide(f sqlretry.Failure) (sqlretry.Decision, time.Duration) {
	return withoutReason(s.decide(f, false))
}

// Explain is Decide with a one-line reason, for tools and logs.
func (s *ConnSchedule) Explain(f sqlretry.Failure) (sqlretry.Decision, time.Duration, string) {
	return s.decide(f, true)
}

func (s *ConnSchedule) decide(f sqlretry.Failure, why bool) (sqlretry.Decision, time.Duration, string) {
	if s.count == 0 {
		return sqlretry.Stop, 0, reason(why, "connect retries are disabled (connectRetryCount 0)")
	}
	if f.Retry < 1 || f.Retry > s.count {
		return sqlretry.Stop, 0, reason(why, "connectRetryCount %d: retry %d is past it", s.count, f.Retry)
	}
	code := f.Class.Code
	switch {
	case isAuth(s.conn.syntax, code):
		return sqlretry.Stop, 0, reason(why, "error %s is an authentication failure: never retried (it does not heal, and retries count toward account lockout)", code)
	case nameable(s.conn.syntax, code):
		if !s.conn.Retries(code) {
			return sqlretry.Stop, 0, reason(why, "error %s is not in the %s list of transient connection errors", code, s.conn.Mode())
		}
	case !f.Class.Retryable:
		return sqlretry.Stop, 0, reason(why, "%q is not a code the rules can name, and the classifier says it is not retryable", code)
	}
	var wait time.Duration
	if f.Retry > 1 {
		wait = s.interval
	}
	if s.login > 0 && f.Elapsed+wait >= s.login {
		return sqlretry.Stop, 0, reason(why, "elapsed %v plus the next wait %v reaches loginTimeout %v", f.Elapsed, wait, s.login)
	}
	return sqlretry.Retry, wait, reason(why, "connect retry %d of %d after %v", f.Retry, s.count, wait)
}

// nameable reports whether the rule language can name code.
func nameable(e Syntax, code string) bool {
	if code == "" {
		return false
	}
	if e == SQLState {
		if len(code) != 5 {
			return false
		}
		for i := 0; i < 5; i++ {
			c := code[i]
			if !(c >= '0' && c <= '9' || c >= 'A' && c <= 'Z') {
				return false
			}
		}
		return true
	}
	for i := 0; i < len(code); i++ {
		if code[i] < '0' || code[i] > '9' {
			return false
		}
	}
	return true
}
