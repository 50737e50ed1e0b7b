package sqlretry

import (
	"context"
	"database/sql/driver"
	"errors"
	"time"
)

// A Fencer makes the outcome of a failed attempt final. A server may go on
// running a statement after its client gave up on it — go-sql-driver/mysql
// only closes its socket when a context ends, and neither PostgreSQL nor
// MariaDB notices a lost client while a statement runs — so a verify that
// reads "not applied" right after a command timeout or a lost connection
// may be reading before the write lands. A Fencer ends the attempt's
// session on the server and waits until the server confirms it gone; only
// then is a verify's "not applied" trusted. Without one, such an answer ends
// the call with ErrAmbiguous.
//
// Package postgres (pg_terminate_backend) and package mysql (KILL) implement
// it. Implementations must be safe for concurrent use.
type Fencer interface {
	// SessionID returns the server's id of the session conn is on
	// (PostgreSQL's backend pid, MySQL's connection id). The Connector asks
	// once for each connection it opens; RunTx on a handle not opened
	// through the Connector asks once per transaction whose Op has a Verify.
	SessionID(ctx context.Context, conn driver.Conn) (string, error)
	// Fence ends the session id, using conn, another connection to the same
	// server, and returns nil only once the server confirms that the
	// session is gone and its transaction, if any, ended.
	Fence(ctx context.Context, conn driver.Conn, id string) error
}

// errNoSession: no Fencer, or the session's id is not known.
var errNoSession = errors.New("sqlretry: no Fencer knows the failed attempt's session")

// sessionID asks the Policy's Fencer for ic's session id; "" if there is no
// Fencer or it could not tell (the connection is then usable, but its
// attempts cannot be fenced).
func (c *connector) sessionID(ctx context.Context, ic driver.Conn) string {
	if c.p.fencer == nil {
		return ""
	}
	id, err := c.p.fencer.SessionID(ctx, ic)
	if err != nil {
		return ""
	}
	return id
}

// fence ends session id from a new inner connection, within fenceTimeout
// (or CommandTimeout, if larger).
func (c *connector) fence(ctx context.Context, id string) error {
	if c.p.fencer == nil || id == "" {
		return errNoSession
	}
	ctx, cancel := context.WithTimeout(ctx, max(fenceTimeout, c.p.commandTimeout))
	defer cancel()
	fc, err := c.inner.Connect(ctx)
	if err != nil {
		return err
	}
	defer fc.Close()
	return c.p.fencer.Fence(ctx, fc, id)
}

// fenceFunc returns the fence of the attempt that just failed on c, bound to
// its session, or nil if it cannot be fenced. It may run after c went back
// to the pool: it touches no field of c but the atomic fenced, which c
// reads at its next use and then drops the session it was on.
func (c *conn) fenceFunc() func(ctx context.Context) error {
	id, cc := c.sid, c.c
	if cc.p.fencer == nil || id == "" {
		return nil
	}
	return func(ctx context.Context) error {
		err := cc.fence(ctx, id)
		if err == nil {
			c.fenced.Store(&id)
		}
		return err
	}
}

// fenceTimeout bounds one fence when CommandTimeout does not bound it more
// loosely: the dial, the kill and the wait for the server to drop the
// session. A fence that does not finish leaves the outcome ambiguous.
const fenceTimeout = 10 * time.Second
