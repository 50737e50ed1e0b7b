// Package rawsql runs a statement on a database/sql/driver connection
// directly, below database/sql: what a Fencer or a verifier needs on a
// connection it was handed as a driver.Conn. Standard library only.
package rawsql

import (
	"context"
	"database/sql/driver"
	"errors"
	"io"
	"strconv"
	"time"
)

// Exec runs query, which takes no arguments, on conn.
func Exec(ctx context.Context, conn driver.Conn, query string) error {
	if e, ok := conn.(driver.ExecerContext); ok {
		_, err := e.ExecContext(ctx, query, nil)
		if err != driver.ErrSkip {
			return err
		}
	}
	st, err := prepare(ctx, conn, query)
	if err != nil {
		return err
	}
	defer st.Close()
	if e, ok := st.(driver.StmtExecContext); ok {
		_, err = e.ExecContext(ctx, nil)
		return err
	}
	_, err = st.Exec(nil) //nolint:staticcheck // the fallback database/sql uses
	return err
}

// Scalar runs query, which takes no arguments, on conn and returns the first
// column of its first row, or io.EOF if it returned no row.
func Scalar(ctx context.Context, conn driver.Conn, query string) (driver.Value, error) {
	rows, done, err := queryRows(ctx, conn, query, nil)
	if err != nil {
		return nil, err
	}
	defer done()
	dest := make([]driver.Value, len(rows.Columns()))
	if len(dest) == 0 {
		return nil, errors.New("rawsql: the query returned no column")
	}
	if err := rows.Next(dest); err != nil {
		return nil, err
	}
	return dest[0], nil
}

// Int reads an integer value as drivers return it: int64, a decimal string
// or []byte (go-sql-driver/mysql's text protocol), or another integer type.
func Int(v driver.Value) (int64, error) {
	switch x := v.(type) {
	case int64:
		return x, nil
	case int32:
		return int64(x), nil
	case int:
		return int64(x), nil
	case uint32:
		return int64(x), nil
	case uint64:
		return int64(x), nil
	case []byte:
		return strconv.ParseInt(string(x), 10, 64)
	case string:
		return strconv.ParseInt(x, 10, 64)
	}
	return 0, errors.New("rawsql: not an integer value")
}

func prepare(ctx context.Context, conn driver.Conn, query string) (driver.Stmt, error) {
	if p, ok := conn.(driver.ConnPrepareContext); ok {
		return p.PrepareContext(ctx, query)
	}
	return conn.Prepare(query)
}

// ErrNoRow is io.EOF under a name that says what it means here.
var ErrNoRow = io.EOF

// WaitNone runs query, a count, every poll (10 ms if 0) until it returns 0,
// or ctx is done. A Fencer uses it to wait until the server no longer lists
// a session it ended.
func WaitNone(ctx context.Context, conn driver.Conn, query string, poll time.Duration) error {
	if poll <= 0 {
		poll = 10 * time.Millisecond
	}
	for {
		v, err := Scalar(ctx, conn, query)
		if err != nil {
			return err
		}
		n, err := Int(v)
		if err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		t := time.NewTimer(poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
			// select picks at random when both are ready: a done ctx
			// must still end the wait before the next poll.
			if err := ctx.Err(); err != nil {
				return err
			}
		}
	}
}

// SessionID runs query, which returns the session's id as an integer, and
// returns the id in decimal.
func SessionID(ctx context.Context, conn driver.Conn, query string) (string, error) {
	v, err := Scalar(ctx, conn, query)
	if err != nil {
		return "", err
	}
	n, err := Int(v)
	if err != nil {
		return "", err
	}
	return strconv.FormatInt(n, 10), nil
}

// A Fencer is an engine's sqlretry.Fencer, made of the engine's statements:
// it learns a session's id, ends a session and waits until the server no
// longer lists it. The engine packages export one each (postgres.Fencer,
// mysql.Fencer, mssql.Fencer).
type Fencer struct {
	Engine string                 // "postgres", for errors
	ID     string                 // returns the session's id as an integer
	Stmt   func(id string) string // ends session id
	Gone   func(id string) string // counts the sessions with id: 0 once gone
	Absent func(err error) bool   // Stmt's error says the session was already gone
	Poll   time.Duration          // between two counts; 10 ms if 0
	// Check, if set, proves that id, which the server gave on conn, names
	// the session conn's statements run on, and returns an error if it
	// cannot (PostgreSQL behind a connection pooler: the next statement
	// may run on another server session). SessionID then fails, and no
	// attempt on conn is fenced.
	Check func(conn driver.Conn, id string) error
}

// SessionID returns the session's id, from f.ID, once f.Check (if set)
// has accepted it.
func (f Fencer) SessionID(ctx context.Context, conn driver.Conn) (string, error) {
	id, err := SessionID(ctx, conn, f.ID)
	if err != nil || f.Check == nil {
		return id, err
	}
	if err := f.Check(conn, id); err != nil {
		return "", err
	}
	return id, nil
}

// Fence ends session id (a positive decimal integer) over conn and waits
// until the server no longer lists it, or ctx is done.
func (f Fencer) Fence(ctx context.Context, conn driver.Conn, id string) error {
	k := f
	n, err := strconv.ParseInt(id, 10, 64)
	if err != nil || n <= 0 {
		return errors.New(k.Engine + ": Fencer: not a session id: " + strconv.Quote(id))
	}
	id = strconv.FormatInt(n, 10)
	if err := Exec(ctx, conn, k.Stmt(id)); err != nil && (k.Absent == nil || !k.Absent(err)) {
		return err
	}
	return WaitNone(ctx, conn, k.Gone(id), k.Poll)
}

// Exists runs query with args on conn and reports whether it returned a
// row. Arguments are converted as database/sql converts them: by the
// connection's NamedValueChecker, else driver.DefaultParameterConverter
// (which calls driver.Valuer).
func Exists(ctx context.Context, conn driver.Conn, query string, args []any) (bool, error) {
	nv := make([]driver.NamedValue, len(args))
	checker, _ := conn.(driver.NamedValueChecker)
	for i, a := range args {
		nv[i] = driver.NamedValue{Ordinal: i + 1, Value: a}
		if checker != nil {
			if err := checker.CheckNamedValue(&nv[i]); err == nil {
				continue
			} else if err != driver.ErrSkip {
				return false, err
			}
		}
		v, err := driver.DefaultParameterConverter.ConvertValue(a)
		if err != nil {
			return false, err
		}
		nv[i].Value = v
	}
	rows, done, err := queryRows(ctx, conn, query, nv)
	if err != nil {
		return false, err
	}
	defer done()
	dest := make([]driver.Value, len(rows.Columns()))
	switch err := rows.Next(dest); err {
	case nil:
		return true, nil
	case io.EOF:
		return false, nil
	default:
		return false, err
	}
}

// queryRows runs query with nv on conn as database/sql would: through
// QueryerContext, else (or when that answers driver.ErrSkip, or no rows and
// no error) through a prepared statement. done closes the rows, then the statement if one was
// prepared; it is nil when err is not.
func queryRows(ctx context.Context, conn driver.Conn, query string, nv []driver.NamedValue) (rows driver.Rows, done func(), err error) {
	if q, ok := conn.(driver.QueryerContext); ok {
		rows, err = q.QueryContext(ctx, query, nv)
		switch {
		case err != nil && (rows != nil || err != driver.ErrSkip):
			return nil, nil, err
		case rows != nil:
			return rows, func() { rows.Close() }, nil
		}
	}
	st, err := prepare(ctx, conn, query)
	if err != nil {
		return nil, nil, err
	}
	if q, ok := st.(driver.StmtQueryContext); ok {
		rows, err = q.QueryContext(ctx, nv)
	} else {
		rows, err = st.Query(valuesOf(nv)) //nolint:staticcheck
	}
	if err != nil {
		st.Close()
		return nil, nil, err
	}
	return rows, func() { rows.Close(); st.Close() }, nil
}

// valuesOf is nv's values in order, for a pre-context driver.Stmt; nil for
// no arguments.
func valuesOf(nv []driver.NamedValue) []driver.Value {
	if len(nv) == 0 {
		return nil
	}
	vals := make([]driver.Value, len(nv))
	for i := range nv {
		vals[i] = nv[i].Value
	}
	return vals
}

// Legacy calls a driver method from before contexts and named parameters
// the way database/sql does (ctxDriverExec and its siblings): with the
// arguments as positional values, failing with named if one has a name,
// and not at all once ctx is done.
func Legacy[T any](ctx context.Context, args []driver.NamedValue, named error, call func([]driver.Value) (T, error)) (T, error) {
	var none T
	vals := make([]driver.Value, len(args))
	for i, a := range args {
		if a.Name != "" {
			return none, named
		}
		vals[i] = a.Value
	}
	if err := ctx.Err(); err != nil {
		return none, err
	}
	return call(vals)
}
