package sqlretry

import "github.com/sqlretry/sqlretry/internal/sqltext"

// TaintsOnMySQL is the session tracker's verdict on text run inside a
// transaction on MySQL or MariaDB, for the tests outside the package that
// hold it against the server's.
func TaintsOnMySQL(text string) bool { return taints(sqltext.MySQL, text, sqltext.Analyze(text)) }
