package marker

import (
	"context"
	"database/sql"
	"strconv"
	"strings"
	"time"

	sr "github.com/sqlretry/sqlretry"
)

// A Dialect is what the marker verifier needs to know of one engine. The
// engine packages (postgres, mysql, sqlite, mssql) each define one.
type Dialect struct {
	// Engine names the engine in errors: "postgres".
	Engine string
	// Param returns the n-th (1-based) placeholder: "$1", "?", "@p1".
	Param func(n int) string
	// DDL returns the statements that create the table named t and its
	// index named index if they do not exist, run one at a time.
	DDL func(t Name, index string) []string
	// Prune returns the statement that deletes at most Param(2) markers
	// of table t created before Param(1) (unix seconds).
	Prune func(t, cutoff, limit string) string
	// Classify is the engine's classifier.
	Classify func(err error) sr.Class
	// Duplicate lists the Class.Code values of a duplicate primary key:
	// PostgreSQL 23505, MySQL 1062, SQLite's constraint codes 1555 and
	// 2067, SQL Server 2627 and 2601.
	Duplicate []string
	// ReadOnly lists the Class.Code values of a write refused because the
	// transaction is read-only (PostgreSQL 25006, MySQL 1792): Mark then
	// says so with sqlretry.ErrTxReadOnly, and RunTx runs the transaction
	// again, marked as a read-only one.
	ReadOnly []string
	// Confirm, if set, runs when the marker was found committed, before
	// Committed says so: an error means the commit may not survive a
	// failover yet (PostgreSQL: a COMMIT whose wait for the synchronous
	// standbys was cancelled committed on the primary alone).
	Confirm func(ctx context.Context, db *sql.DB, maxWait time.Duration) error
	// Schema, if set, returns the schema an unqualified table name t
	// resolves to through db, or "" if there is none. The verifier then
	// writes the name qualified, so that the marker INSERT inside a user's
	// transaction and the lookups of another session name the same table
	// whatever search_path or database that transaction switched to.
	Schema func(ctx context.Context, db *sql.DB, t Name) (string, error)
	// Quote writes a schema name Schema returned as a quoted identifier
	// (any name: upper case, a hyphen, a keyword). Set with Schema.
	Quote func(schema string) string
}

// Name is a table name, optionally qualified by a schema (or, for SQLite,
// an attached database): "sqlretry_commit_marks", "ops.commit_marks".
type Name struct {
	Schema, Table string
}

// String returns the name as it is written in SQL.
func (n Name) String() string {
	if n.Schema == "" {
		return n.Table
	}
	return n.Schema + "." + n.Table
}

// DefaultTable is the marker table's name when the verifier names none.
const DefaultTable = "sqlretry_commit_marks"

// maxIdent bounds each part of a table name: the index name adds
// "_created_at" and must stay within PostgreSQL's 63 bytes.
const maxIdent = 48

// ParseName reads a table name: one or two identifiers joined by a dot,
// each a letter or underscore followed by letters, digits or underscores,
// at most 48 bytes. The name is written into SQL unquoted, so nothing else
// is allowed.
func ParseName(s string) (Name, error) {
	n := Name{Table: s}
	if schema, table, ok := strings.Cut(s, "."); ok {
		n = Name{Schema: schema, Table: table}
	}
	if strings.Contains(s, ".") && !isIdent(n.Schema) || !isIdent(n.Table) {
		return Name{}, &nameError{s}
	}
	return n, nil
}

type nameError struct{ s string }

func (e *nameError) Error() string {
	return strconv.Quote(e.s) + " is not a table name: want an identifier (a letter or _, then letters, digits or _, at most " +
		strconv.Itoa(maxIdent) + " bytes), optionally after a schema and a dot"
}

func isIdent(s string) bool {
	if s == "" || len(s) > maxIdent {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		letter := c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
		if !letter && (i == 0 || c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// statements are a verifier's SQL for one table.
type statements struct {
	insert string // args: key, created_at, tombstone
	// inlineInsert is insert up to the key's opening quote, for InlineMark.
	inlineInsert string
	lookup       string // args: key; one row with the tombstone flag, or none
	prune        string // args: cutoff, limit
	ddl          []string
}

func (d *Dialect) statements(t Name) statements {
	p := d.Param
	return statements{
		insert:       "INSERT INTO " + t.String() + " (mark_key, created_at, tombstone) VALUES (" + p(1) + ", " + p(2) + ", " + p(3) + ")",
		inlineInsert: "INSERT INTO " + t.String() + " (mark_key, created_at, tombstone) SELECT '",
		lookup:       "SELECT tombstone FROM " + t.String() + " WHERE mark_key = " + p(1),
		prune:        d.Prune(t.String(), p(1), p(2)),
		ddl:          d.DDL(t, t.Table+"_created_at"),
	}
}
