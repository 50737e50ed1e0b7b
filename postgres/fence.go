package postgres

import (
	"database/sql/driver"
	"errors"
	"reflect"
	"strconv"

	sr "github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/internal/rawsql"
)

// Fencer is the PostgreSQL [sr.Fencer]: pass it as sqlretry.Config.Fencer.
// It learns each session's backend pid (pg_backend_pid(), once per
// connection the Connector opens), and fences a session by
// pg_terminate_backend, then waits until pg_stat_activity no longer lists
// the pid. A backend leaves pg_stat_activity after it has aborted or
// finished its transaction, so a verify that reads "not applied" afterwards
// reads a final answer. Without it PostgreSQL may still be running a
// statement whose client gave up: it does not notice a lost client while a
// statement runs (unless client_connection_check_interval is set).
//
// A pid is accepted only when it names the session the connection's
// statements run on: pg_backend_pid() must equal the backend pid the
// driver learned at connect (the BackendKeyData of pgx's stdlib and of
// lib/pq, read through a wrapper's Unwrap() driver.Conn). Behind a
// connection pooler the two differ (pgbouncer answers with a random key of
// its own) and, outside a transaction, the next statement may run on
// another server session: the session is not fenced ([ErrPooler]), and a
// verify's "not applied" ends the call in ErrAmbiguous. Inside a
// transaction block a pooler holds one server session until the
// transaction ends, so a pid asked there (RunTx on a handle not opened
// through the Connector asks before COMMIT) is accepted. A driver whose
// backend pid cannot be read is not fenced either.
//
// Terminating another role's backend needs superuser, the
// pg_signal_backend role, or the same role. It is safe for concurrent use.
var Fencer sr.Fencer = rawsql.Fencer{
	Engine: "postgres",
	ID:     "SELECT pg_backend_pid()",
	// pg_terminate_backend answers false, with a warning, for a pid that
	// is already gone.
	Stmt:  func(id string) string { return "SELECT pg_terminate_backend(" + id + ")" },
	Gone:  func(id string) string { return "SELECT count(*) FROM pg_stat_activity WHERE pid = " + id },
	Check: checkSession,
}

// ErrPooler is the error of [Fencer]'s SessionID on a connection through a
// connection pooler (pgbouncer): pg_backend_pid() is not the backend pid the
// driver learned at connect, so the server session that will run the
// connection's next statement cannot be named, and its attempts are not
// fenced.
var ErrPooler = errors.New("postgres: Fencer: a connection pooler sits between the client and the server (pg_backend_pid() is not the backend pid the driver learned at connect): the server session a statement runs on cannot be named, so it is not fenced")

// errDriverPID: the driver's backend pid could not be read.
var errDriverPID = errors.New("postgres: Fencer: the backend pid the driver learned at connect cannot be read (pgx's stdlib and lib/pq are read; a wrapping driver.Conn needs an Unwrap() driver.Conn method), so a pooler in between cannot be ruled out, and the session is not fenced")

// checkSession accepts id, pg_backend_pid() on conn, when it is the
// backend pid the driver learned at connect, or when conn is inside a
// transaction block (which a pooler keeps on one server session).
func checkSession(conn driver.Conn, id string) error {
	d, ok := driverSession(conn)
	if !ok {
		return errDriverPID
	}
	if strconv.FormatInt(d.pid, 10) == id || d.inTx {
		return nil
	}
	return ErrPooler
}

// session is what a driver learned of its connection's session.
type session struct {
	pid  int64 // BackendKeyData's process id
	inTx bool  // the last ReadyForQuery said: in a transaction block ('T' or 'E')
}

// driverSession reads what the driver behind conn learned of its session,
// through wrappers' Unwrap() driver.Conn: pgx's stdlib (v5, v4) by its
// methods Conn().PgConn().PID() and TxStatus(), lib/pq by its fields pid
// and txnStatus. Reflection, so as to import no driver; once per
// connection.
func driverSession(conn driver.Conn) (session, bool) {
	for i := 0; i < 16; i++ {
		u, ok := conn.(interface{ Unwrap() driver.Conn })
		if !ok {
			break
		}
		if conn = u.Unwrap(); conn == nil {
			return session{}, false
		}
	}
	v := reflect.ValueOf(conn)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return session{}, false
	}
	switch v.Type().Elem().PkgPath() {
	case "github.com/jackc/pgx/v5/stdlib", "github.com/jackc/pgx/v4/stdlib":
		pc := call(call(v, "Conn"), "PgConn")
		pid, tx := call(pc, "PID"), call(pc, "TxStatus")
		if !pid.CanUint() || !tx.CanUint() {
			return session{}, false
		}
		return session{pid: int64(pid.Uint()), inTx: tx.Uint() == 'T' || tx.Uint() == 'E'}, true
	case "github.com/lib/pq":
		pid, tx := v.Elem().FieldByName("pid"), v.Elem().FieldByName("txnStatus")
		if !pid.CanInt() || !tx.CanUint() {
			return session{}, false
		}
		return session{pid: pid.Int(), inTx: tx.Uint() == 'T' || tx.Uint() == 'E'}, true
	}
	return session{}, false
}

// call calls v's method name, which takes nothing and returns one value;
// the zero Value if there is no such method, or it returns a nil pointer.
func call(v reflect.Value, name string) reflect.Value {
	if !v.IsValid() {
		return v
	}
	m := v.MethodByName(name)
	if !m.IsValid() || m.Type().NumIn() != 0 || m.Type().NumOut() != 1 {
		return reflect.Value{}
	}
	out := m.Call(nil)[0]
	if out.Kind() == reflect.Pointer && out.IsNil() {
		return reflect.Value{}
	}
	return out
}
