package faults

import (
	"cmp"
	"database/sql/driver"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
	mssql "github.com/microsoft/go-mssqldb"

	"github.com/sqlretry/sqlretry"
)

// Error is the error every injected fault returns. It unwraps to the
// simulated cause (driver.ErrBadConn, a reset *net.OpError, an engine error,
// a context error), so classifiers see exactly what a real failure would show
// them, and errors.As(err, new(*faults.Error)) tells a test the failure was
// injected.
type Error struct {
	Kind      Kind
	Op        Op
	Statement string // "" for calls without one
	Err       error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("faults: injected ")
	b.WriteString(string(e.Kind))
	b.WriteString(" on ")
	b.WriteString(string(e.Op))
	if e.Statement != "" {
		b.WriteString(" ")
		b.WriteString(strconv.Quote(shorten(e.Statement, 60)))
	}
	b.WriteString(": ")
	b.WriteString(e.Err.Error())
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// AttemptEnded reports true: an injected fault fires in the client after the
// inner call it stands for has returned (or instead of it), so nothing of the
// attempt can still change the database, and a verify's answer is final
// (sqlretry.Class.Ended).
func (e *Error) AttemptEnded() bool { return true }

func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// ErrTxAborted is returned by every call in a transaction after an injected
// ServerError rolled it back, until the caller rolls back.
var ErrTxAborted = errors.New("faults: transaction rolled back by an injected server error")

// ResetError returns the error a client sees when the server resets the
// connection after the command was sent: a *net.OpError wrapping ECONNRESET.
// sqlretry.ClassifyNeutral gives it phase unknown.
func ResetError() error {
	return &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
}

// RefusedError returns the error of a refused dial: a *net.OpError with Op
// "dial" wrapping ECONNREFUSED. sqlretry.ClassifyNeutral gives it phase
// not-sent.
func RefusedError() error {
	return &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
}

// Engine chooses the error type of a ServerError fault.
type Engine string

// The engines [EngineError] builds errors for.
const (
	Postgres  Engine = "postgres" // *pgconn.PgError
	MySQL     Engine = "mysql"    // *mysql.MySQLError (go-sql-driver/mysql)
	SQLServer Engine = "mssql"    // mssql.Error (go-mssqldb)
	SQLite    Engine = "sqlite"   // *SQLiteError, with Code() int like modernc.org/sqlite's
)

// SQLiteError imitates modernc.org/sqlite's *sqlite.Error, whose fields are
// unexported: a classifier recognises both by their Code() int method.
type SQLiteError struct {
	code int
	msg  string
}

// Code returns the SQLite (extended) result code.
func (e *SQLiteError) Code() int { return e.code }

func (e *SQLiteError) Error() string { return fmt.Sprintf("%s (%d)", e.msg, e.code) }

// SQLite result codes EngineError knows by name (sqlite.org rescode.html).
var sqliteMessages = map[int]string{
	5:   "database is locked (SQLITE_BUSY)",
	6:   "database table is locked (SQLITE_LOCKED)",
	261: "database is locked (SQLITE_BUSY_RECOVERY)",
	517: "database is locked (SQLITE_BUSY_SNAPSHOT)",
	773: "database is locked (SQLITE_BUSY_TIMEOUT)",
	262: "database table is locked (SQLITE_LOCKED_SHAREDCACHE)",
	9:   "interrupted (SQLITE_INTERRUPT)",
	10:  "disk I/O error (SQLITE_IOERR)",
	13:  "database or disk is full (SQLITE_FULL)",
}

// EngineError builds a synthetic server error of engine's own type with the
// given code: a SQLSTATE for PostgreSQL ("40P01"), an error number for MySQL
// ("1213") and SQL Server ("1205"), a result code for SQLite ("5"). An empty
// code is the engine's deadlock or busy code: 40P01, 1213, 1205, 5.
func EngineError(engine Engine, code string) (error, error) {
	switch engine {
	case Postgres, "":
		return postgresError(cmp.Or(code, "40P01"))
	case MySQL:
		return mysqlError(cmp.Or(code, "1213"))
	case SQLServer:
		return mssqlError(cmp.Or(code, "1205"))
	case SQLite:
		return sqliteError(cmp.Or(code, "5"))
	}
	return nil, fmt.Errorf("faults: unknown Engine %q (want postgres, mysql, mssql or sqlite)", engine)
}

func postgresError(code string) (error, error) {
	if len(code) != 5 {
		return nil, fmt.Errorf("faults: postgres code %q is not a 5-character SQLSTATE", code)
	}
	return &pgconn.PgError{Severity: "ERROR", Code: code, Message: "injected server error " + code}, nil
}

func mysqlError(code string) (error, error) {
	n, err := strconv.ParseUint(code, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("faults: mysql code %q is not an error number", code)
	}
	e := &mysql.MySQLError{Number: uint16(n), Message: "injected server error " + code}
	copy(e.SQLState[:], "HY000")
	if n == 1213 {
		copy(e.SQLState[:], "40001")
	}
	return e, nil
}

func mssqlError(code string) (error, error) {
	n, err := strconv.ParseInt(code, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("faults: mssql code %q is not an error number", code)
	}
	e := mssql.Error{Number: int32(n), Class: 13, Message: "injected server error " + code}
	e.All = []mssql.Error{e}
	return e, nil
}

func sqliteError(code string) (error, error) {
	n, err := strconv.Atoi(code)
	if err != nil {
		return nil, fmt.Errorf("faults: sqlite code %q is not a result code", code)
	}
	msg, ok := sqliteMessages[n]
	if !ok {
		msg = "injected server error"
	}
	return &SQLiteError{code: n, msg: msg}, nil
}

// errFor returns the error the rule's fault gives the caller.
func errFor(r Rule, c call) error {
	inner := r.Err
	if inner == nil {
		switch r.Kind {
		case BeforeSend:
			if c.op == OpConnect {
				inner = RefusedError()
			} else {
				inner = driver.ErrBadConn
			}
		case AfterExec, AppliedReplyLost, CommitAppliedReplyLost:
			inner = ResetError()
		case CommitNotApplied:
			inner = driver.ErrBadConn
		case ServerError:
			inner, _ = EngineError(r.Engine, r.Code)
		case Outage:
			switch {
			case r.Phase == sqlretry.Unknown:
				inner = ResetError()
			case c.op == OpConnect:
				inner = RefusedError()
			default: // NotSent; NotApplied means nothing more for a server that is down
				inner = driver.ErrBadConn
			}
		}
	}
	return &Error{Kind: r.Kind, Op: c.op, Statement: c.stmt, Err: inner}
}
