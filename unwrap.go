package sqlretry

import "database/sql/driver"

// UnwrapConn returns the driver's own connection behind driverConn, the
// value database/sql's [database/sql.Conn.Raw] passes to its function, when
// the connection is one of a [Connector] (or [Open]); any other value is
// returned as it is. It is how code reaches what only the driver offers —
// pgx's CopyFrom, LISTEN/NOTIFY, a MySQL driver's own methods — through a
// retried handle:
//
//	err := conn.Raw(func(dc any) error {
//		pc := sqlretry.UnwrapConn(dc).(*stdlib.Conn).Conn() // *pgx.Conn
//		_, err := pc.CopyFrom(ctx, pgx.Identifier{"items"}, cols, rows)
//		return err
//	})
//
// What runs on the driver's connection is neither retried nor seen by the
// Connector: leave the session as the function found it (no transaction
// open, autocommit on), since the Connector's statements on it afterwards
// still take the session's transaction state from what they saw. The value
// must not be used after the function returns, as database/sql's own rule
// for Raw says. It is nil if the connection was lost and not replaced (Raw
// is then handed a connection database/sql is about to drop).
func UnwrapConn(driverConn any) any {
	if u, ok := driverConn.(interface{ Unwrap() driver.Conn }); ok {
		if inner := u.Unwrap(); inner != nil {
			return inner
		}
		return nil
	}
	return driverConn
}

// Unwrap returns the driver's connection this one wraps, or nil after a
// failed reconnect; see [UnwrapConn].
func (c *conn) Unwrap() driver.Conn { return c.inner }
