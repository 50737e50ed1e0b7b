package taskstore

import (
	"errors"
	"strconv"
	"strings"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sqlretry/sqlretry/internal/enum"
)

// Dialect is the SQL engine a [Store] talks to. The zero value is [SQLite].
type Dialect uint8

const (
	// SQLite (modernc.org/sqlite, driver name "sqlite"), the default. Open it
	// with _txlock=immediate and a busy_timeout: see [SQLiteDSN].
	SQLite Dialect = iota
	// Postgres: PostgreSQL 9.5 or later through pgx or lib/pq.
	Postgres
	// MariaDB: MariaDB 10.6 or later (SKIP LOCKED), or MySQL 8, through
	// go-sql-driver/mysql. On a MariaDB Galera cluster written through more
	// than one node, open each node through mysql.GaleraConnector: with the
	// driver's prepared statements, a claim the cluster aborted while it
	// read its task back was rolled back with no error, and told OK.
	MariaDB
)

var dialectNames = []string{"sqlite", "postgres", "mariadb"}

// dialectAliases are the other names ParseDialect accepts, lower-case.
var dialectAliases = map[string]string{"sqlite3": "sqlite", "postgresql": "postgres", "pg": "postgres", "mysql": "mariadb"}

// String returns "sqlite", "postgres" or "mariadb".
func (d Dialect) String() string { return enum.Name(dialectNames, d, "Dialect") }

// ParseDialect is the inverse of [Dialect.String], ignoring case; it also
// accepts "sqlite3", "pg", "postgresql" and "mysql".
func ParseDialect(s string) (Dialect, error) {
	key := strings.ToLower(s)
	if name, ok := dialectAliases[key]; ok {
		key = name
	}
	return enum.Parse[Dialect](dialectNames, key, s, "taskstore: unknown dialect")
}

// SQLiteDSN returns a modernc.org/sqlite data source name for the database
// file at path with the settings the store relies on: BEGIN IMMEDIATE, so a
// transaction takes the write lock up front instead of failing to upgrade a
// read lock, a busy timeout, and WAL.
func SQLiteDSN(path string) string {
	return "file:" + path + "?_txlock=immediate&_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)"
}

// sql writes every statement with ? placeholders; bind rewrites them for the
// dialect. Only the store's own constant statements pass through it, never
// input. Two markers stand for what differs:
//
//	?i   a BIGINT parameter in a SELECT list (PostgreSQL cannot infer its type there)
//	{skip} the row-lock clause of the claim's candidate query
//	{share} a shared row lock (SQLite: none; its BEGIN IMMEDIATE takes the write lock)
//	{update} an exclusive row lock (SQLite: none, as for {share})
func (d Dialect) bind(q string) string {
	switch d {
	case Postgres:
		q = strings.ReplaceAll(q, "?i", "CAST(? AS BIGINT)")
		q = strings.ReplaceAll(q, "{skip}", "FOR UPDATE SKIP LOCKED")
		q = strings.ReplaceAll(q, "{share}", "FOR SHARE")
		q = strings.ReplaceAll(q, "{update}", "FOR UPDATE")
		var b strings.Builder
		n := 0
		for i := 0; i < len(q); i++ {
			if q[i] == '?' {
				n++
				b.WriteByte('$')
				b.WriteString(strconv.Itoa(n))
				continue
			}
			b.WriteByte(q[i])
		}
		return b.String()
	case MariaDB:
		q = strings.ReplaceAll(q, "?i", "?")
		q = strings.ReplaceAll(q, "{share}", "LOCK IN SHARE MODE")
		q = strings.ReplaceAll(q, "{update}", "FOR UPDATE")
		return strings.ReplaceAll(q, "{skip}", "FOR UPDATE SKIP LOCKED")
	}
	// SQLite has one writer at a time and no row locks: _txlock=immediate
	// serialises claims instead.
	q = strings.ReplaceAll(q, "?i", "?")
	q = strings.ReplaceAll(q, "{share}", "")
	q = strings.ReplaceAll(q, "{update}", "")
	return strings.ReplaceAll(q, "{skip}", "")
}

// Constraint names one of the tasks table's unique constraints.
type Constraint string

// The tasks table's unique constraints, as the migrations name them.
const (
	ConstraintPrimaryKey Constraint = "pk_tasks"
	ConstraintTaskKey    Constraint = "ux_tasks_task_key"
	ConstraintOccurrence Constraint = "ux_tasks_occurrence"
)

// duplicateKey reports whether err is a unique-constraint violation on the
// tasks table and, if so, which constraint fired. ok with an empty
// Constraint means a duplicate the store cannot attribute: it is treated as
// neither "already inserted" nor a known collision.
func (d Dialect) duplicateKey(err error) (c Constraint, ok bool) {
	switch d {
	case Postgres:
		// SQLSTATE 23505 unique_violation; the constraint (or unique index)
		// name is in the error. PostgreSQL docs, Appendix A.
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "23505" {
			return byName(pe.ConstraintName), true
		}
		var ce interface {
			SQLState() string
		}
		if errors.As(err, &ce) && ce.SQLState() == "23505" { // lib/pq: name only in the message
			return byName(err.Error()), true
		}
	case MariaDB:
		// ER_DUP_ENTRY 1062: "Duplicate entry '...' for key 'PRIMARY'"; MySQL 8
		// prefixes the table: 'tasks.PRIMARY'. MariaDB error reference.
		var me *mysql.MySQLError
		if errors.As(err, &me) && me.Number == 1062 {
			msg := me.Message
			if i := strings.LastIndex(msg, "for key '"); i >= 0 {
				key := strings.TrimSuffix(msg[i+len("for key '"):], "'")
				if j := strings.LastIndexByte(key, '.'); j >= 0 {
					key = key[j+1:]
				}
				if key == "PRIMARY" {
					return ConstraintPrimaryKey, true
				}
				return byName(key), true
			}
			return "", true
		}
	case SQLite:
		// SQLITE_CONSTRAINT_PRIMARYKEY 1555 and SQLITE_CONSTRAINT_UNIQUE 2067
		// (sqlite.org/rescode.html); the message names the columns:
		// "UNIQUE constraint failed: tasks.task_key".
		var se interface{ Code() int }
		if errors.As(err, &se) {
			switch se.Code() {
			case 1555:
				return ConstraintPrimaryKey, true
			case 2067:
				msg := err.Error()
				switch {
				case strings.Contains(msg, "tasks.task_key"):
					return ConstraintTaskKey, true
				case strings.Contains(msg, "tasks.parent_id"):
					return ConstraintOccurrence, true
				case strings.Contains(msg, "tasks.id"):
					return ConstraintPrimaryKey, true
				}
				return "", true
			}
		}
	}
	return "", false
}

// byName finds a known constraint name in s.
func byName(s string) Constraint {
	for _, c := range []Constraint{ConstraintPrimaryKey, ConstraintTaskKey, ConstraintOccurrence} {
		if strings.Contains(s, string(c)) {
			return c
		}
	}
	return ""
}
