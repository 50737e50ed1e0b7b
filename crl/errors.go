package crl

import (
	"strconv"
	"strings"
)

// The message keys of the JDBC driver's configuration errors, kept so that
// an operator can look them up in the driver's documentation.
const (
	// KeyInvalidParameterNumber: a token is not a number where an error
	// number or a timing was expected (SQLSTATE code with [SQLState]), or
	// the timings section has more than one comma.
	KeyInvalidParameterNumber = "R_invalidParameterNumber"
	// KeyInvalidRuleFormat: a rule has more than three sections, or a shape
	// the driver would misread (a statement rule without timings, a
	// connection rule with them, an unbalanced brace, a bad filter item).
	KeyInvalidRuleFormat = "R_InvalidRuleFormat"
	// KeyInvalidRetryInterval: a computed wait exceeds the query timeout, or
	// the 24-hour limit on any wait.
	KeyInvalidRetryInterval = "R_InvalidRetryInterval"
)

// Error is a rule that does not parse or validate. It names the driver's
// message key, the rule (1-based, counting the ";"-separated rules of the
// value) and the offending token with its byte offset in the value.
type Error struct {
	Key   string // KeyInvalidParameterNumber, KeyInvalidRuleFormat or KeyInvalidRetryInterval
	Rule  int    // 1-based rule number in the value; 0 when not about one rule
	Token string // the offending token, as written
	Pos   int    // byte offset of Token in the value
	Msg   string // what is wrong, in a few words
}

// Error returns "R_key: rule N, token "t" at offset P: msg".
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Key)
	b.WriteString(": ")
	if e.Rule > 0 {
		b.WriteString("rule ")
		b.WriteString(strconv.Itoa(e.Rule))
		b.WriteString(", ")
	}
	b.WriteString("token ")
	b.WriteString(strconv.Quote(e.Token))
	b.WriteString(" at offset ")
	b.WriteString(strconv.Itoa(e.Pos))
	b.WriteString(": ")
	b.WriteString(e.Msg)
	return b.String()
}
