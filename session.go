package sqlretry

import (
	"context"
	"database/sql/driver"
	"reflect"
	"strings"

	"github.com/sqlretry/sqlretry/internal/rawsql"
	"github.com/sqlretry/sqlretry/internal/sqltext"
)

// engineOf names the engine of inner's driver, found by its package path so
// the root package imports no driver: it decides the few statements whose
// effect on a session's transaction state differs between engines.
func engineOf(inner driver.Connector) sqltext.Engine {
	var d any = inner.Driver()
	if w, ok := d.(interface{ innerDriver() any }); ok {
		d = w.innerDriver()
	}
	t := reflect.TypeOf(d)
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil {
		return sqltext.AnyEngine
	}
	switch p := t.PkgPath(); {
	case strings.HasPrefix(p, "github.com/jackc/pgx"), strings.HasPrefix(p, "github.com/lib/pq"):
		return sqltext.Postgres
	case strings.HasPrefix(p, "github.com/go-sql-driver/mysql"):
		return sqltext.MySQL
	case strings.HasPrefix(p, "github.com/microsoft/go-mssqldb"), strings.HasPrefix(p, "github.com/denisenkom/go-mssqldb"):
		return sqltext.SQLServer
	case strings.HasPrefix(p, "modernc.org/sqlite"), strings.HasPrefix(p, "github.com/mattn/go-sqlite3"):
		return sqltext.SQLite
	}
	return sqltext.AnyEngine
}

// newSession returns the transaction state of a session the Connector just
// opened (after Config.SessionInit). A new session has no transaction open;
// only MySQL and MariaDB can start one with autocommit off (the DSN's
// autocommit=0, init_connect, the server's global default, SessionInit), so
// there the Connector asks: SELECT @@autocommit, one round trip per new
// connection. A session it cannot ask is taken as Unsure: nothing on it is
// replayed until its state is settled. SQL Server's server-wide 'user
// options' can turn IMPLICIT_TRANSACTIONS on for every session; it is not
// read (a round trip per connection for a setting almost nobody uses), so
// a server configured so must not be used with the Connector's statement
// retry. Config.SessionInit must not turn autocommit off on an engine other
// than MySQL: the Connector would not know.
func (c *connector) newSession(ctx context.Context, ic driver.Conn) sqltext.Session {
	if c.engine != sqltext.MySQL {
		return sqltext.NewSession(c.engine, true)
	}
	v, err := rawsql.Scalar(ctx, ic, "SELECT @@autocommit")
	if err != nil {
		return sqltext.UnknownSession(c.engine)
	}
	n, err := rawsql.Int(v)
	if err != nil {
		return sqltext.UnknownSession(c.engine)
	}
	return sqltext.NewSession(c.engine, n != 0)
}

// taints reports whether a statement run inside a transaction may commit
// part of it on its own: a text of transaction control that may end the
// transaction on this engine (a COMMIT in SQL text), a procedure or block
// that may commit inside (MySQL's CALL, SQL Server's EXEC; a PostgreSQL
// procedure cannot commit inside a transaction block), or, on MySQL and
// MariaDB, a statement that commits implicitly (commitsImplicitly: DDL,
// CHECK TABLE, LOCK TABLES, SET PASSWORD …). A failure later in the
// transaction does not prove it was rolled back whole.
//
// A word of transaction control inside a statement (a column named begin,
// the BEGIN … END body of a CREATE PROCEDURE) does not stop the verb from
// being read: the CREATE commits on MySQL whatever its body says.
func taints(e sqltext.Engine, text string, in sqltext.Info) bool {
	if in.Opaque {
		return e != sqltext.Postgres
	}
	// Only if it may act on the transaction on this engine: ON COMMIT
	// DROP or a column named begin does nothing on PostgreSQL.
	if in.TxControl && sqltext.EndsTx(e, text) {
		return true
	}
	return (e == sqltext.MySQL || e == sqltext.AnyEngine) && commitsImplicitly(text, in)
}
