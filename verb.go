package sqlretry

import "github.com/sqlretry/sqlretry/internal/sqltext"

// Verb returns the statement's verb, lower-cased: the first keyword past
// leading whitespace, comments, opening parentheses and semicolons, and past
// a common table expression prefix, so that "WITH x AS (SELECT …) UPDATE t …"
// gives "update". The result is empty or made of lower-case ASCII letters; a
// WITH prefix that does not parse gives "with", so it is never mistaken for a
// read. Package crl's "verb" filter mode and the database/sql layer use it.
func Verb(statement string) string { return sqltext.Verb(statement) }

// IsReadOnly reports whether replaying statement cannot change what the
// database holds, judged from its text alone under the lexical rules of
// every engine sqlretry supports. It is conservative: when in doubt, or when
// two engines would read the text differently, it says false, and false only
// means "ask the operation's consent". Functions with side effects called
// from a SELECT cannot be seen in the text; an Op that calls one must not
// rely on IsReadOnly.
func IsReadOnly(statement string) bool { return sqltext.IsReadOnly(statement) }
