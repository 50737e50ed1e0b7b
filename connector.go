package sqlretry

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"io"
	"sync"
	"sync/atomic"

	"github.com/sqlretry/sqlretry/internal/sqltext"
	"github.com/sqlretry/sqlretry/internal/txmark"
)

// Connector returns a driver.Connector that opens inner's connections under
// p, for use with sql.OpenDB, and makes database/sql code survive transient
// failures unchanged:
//
//   - Connecting is retried under Config.ConnectSchedule, or the Policy's
//     own rules without one. Authentication failures are not retried: the
//     classifiers mark them permanent.
//   - A statement outside an explicit transaction (ExecContext,
//     QueryContext, a prepared statement's Exec and Query, and so
//     db.QueryRowContext(...).Scan) is retried under the Policy: after a
//     failure of phase NotSent or NotApplied any statement; after one of
//     phase Unknown only a statement [IsReadOnly] finds read-only, or one
//     the Policy's Schedule consents to replay ([StatementConsent]), or one
//     whose context carries an Op ([WithOp]) that settles it. Others fail
//     with an error matching [ErrAmbiguous]. A text that is not provably
//     one statement (several statements, CALL, DO, EXEC) is a write of
//     unknown outcome after any failure that does not prove it unsent. An
//     error raised while rows are already being read is not retried: a
//     read's is returned as it is, a write's (INSERT … RETURNING) ends in
//     ErrAmbiguous unless it proves the statement rolled back.
//   - When a failure left the connection unusable, the statement is retried
//     on a new connection opened underneath, with its prepared statements
//     prepared again there, rather than by handing driver.ErrBadConn to
//     database/sql, whose own loop would retry without backoff. An error
//     the Connector returns never matches driver.ErrBadConn for that
//     reason; a connection it could not repair reports itself invalid
//     (driver.Validator), so the pool drops it.
//   - Inside an explicit transaction nothing is retried statement by
//     statement: use [RunTx] to retry the whole transaction. That holds
//     for a transaction opened in SQL text too (BEGIN, SET autocommit=0,
//     XA START, SET IMPLICIT_TRANSACTIONS ON …): the Connector reads the
//     session's transaction state from every text it runs, and where it
//     cannot be sure the session is outside a transaction, it replays
//     nothing on it.
//
// Session state is lost when a connection is replaced underneath: settings
// made with SET, temporary tables, session variables, advisory locks held by
// a *sql.Conn. Re-apply settings with Config.SessionInit; code that depends
// on locks or temporary tables must run in a transaction.
//
// Every optional interface of database/sql/driver that inner's connections,
// statements and rows implement is forwarded, and none they lack is
// advertised, except where the interface documents driver.ErrSkip as
// "continue as if unimplemented" (ExecerContext, QueryerContext,
// NamedValueChecker, which a connection may advertise and answer with
// driver.ErrSkip), where database/sql's own fallback is reproduced
// exactly (ConnPrepareContext, ConnBeginTx, StmtExecContext,
// StmtQueryContext), and driver.Validator, which the Connector always
// implements so the pool drops a connection it could not repair. A read's
// rows are returned unwrapped; a write's are wrapped to settle their errors,
// and answer the optional Rows interfaces the inner rows lack as
// database/sql does when they are absent.
//
// For github.com/lib/pq, whose driver.ErrBadConn does not prove a command
// unsent (lib/pq#939), ErrBadConn from a statement or a COMMIT is read as a
// lost connection with an unknown outcome. The driver is recognised by its
// package path, without an import.
//
// The Connector is safe for concurrent use; it implements io.Closer when
// inner does.
func Connector(inner driver.Connector, p *Policy) driver.Connector {
	c := newConnector(inner, p, engineOf(inner), isLibPQ(inner) || isLibPQ(inner.Driver()))
	if cl, ok := inner.(io.Closer); ok {
		return &closingConnector{c, cl}
	}
	return c
}

// Open opens a database/sql handle on the driver registered as driverName,
// with every connection under p: through the driver's
// driver.DriverContext when it implements it, else through a connector that
// calls its Open with dsn. Like sql.Open, it does not connect.
func Open(driverName, dsn string, p *Policy) (*sql.DB, error) {
	probe, err := sql.Open(driverName, dsn)
	if err != nil {
		return nil, err
	}
	d := probe.Driver()
	_ = probe.Close()
	var inner driver.Connector
	if dc, ok := d.(driver.DriverContext); ok {
		if inner, err = dc.OpenConnector(dsn); err != nil {
			return nil, err
		}
	} else {
		inner = dsnConnector{dsn: dsn, d: d}
	}
	return sql.OpenDB(Connector(inner, p)), nil
}

// dsnConnector is database/sql's connector for a driver without
// DriverContext.
type dsnConnector struct {
	dsn string
	d   driver.Driver
}

func (c dsnConnector) Connect(context.Context) (driver.Conn, error) { return c.d.Open(c.dsn) }
func (c dsnConnector) Driver() driver.Driver                        { return c.d }

type connector struct {
	inner  driver.Connector
	p      *Policy
	pq     bool
	engine sqltext.Engine // the driver's engine, for the statements engines read differently

	// plain reports that the Policy lets a statement that may take the fast
	// path run with nothing around it but the budget's count of successes:
	// no CommandTimeout, no breaker, no call counting. A Policy never
	// changes after New, so the connector reads it once.
	plain  bool
	budget *Budget // p.budget

	// texts caches sqltext.Analyze's reading of the statement texts run
	// through the Connector (an application runs the same few texts over
	// and over), up to maxTexts of them.
	texts  sync.Map // string → *sqltext.Info, never changed once stored
	ntexts atomic.Int32
}

// maxTexts bounds the texts a Connector keeps read: past it, a text is read
// at each call (a program that builds texts with values in them).
const maxTexts = 4096

// analyze returns the reading of statement text q, cached. The Info is
// shared: it must not be changed.
func (c *connector) analyze(q string) *sqltext.Info {
	if v, ok := c.texts.Load(q); ok {
		return v.(*sqltext.Info)
	}
	in := new(sqltext.Info)
	*in = sqltext.Analyze(q)
	if c.ntexts.Load() < maxTexts {
		if _, loaded := c.texts.LoadOrStore(q, in); !loaded {
			c.ntexts.Add(1)
		}
	}
	return in
}

func newConnector(inner driver.Connector, p *Policy, engine sqltext.Engine, pq bool) *connector {
	return &connector{
		inner: inner, p: p, pq: pq, engine: engine,
		plain:  p.commandTimeout <= 0 && p.breaker == nil && !p.countCalls,
		budget: p.budget,
	}
}

type closingConnector struct {
	*connector
	cl io.Closer
}

// Close closes the inner connector.
func (c *closingConnector) Close() error { return c.cl.Close() }

var connectOp = Idempotent("connect")

// Connect opens a connection, retrying under the connect schedule.
func (c *connector) Connect(ctx context.Context) (driver.Conn, error) {
	if inRunTx(ctx) { // RunTx retries the whole attempt
		ic, err := c.connectOnce(ctx)
		if err != nil {
			return nil, hideBadConn(err)
		}
		return c.wrap(ctx, ic), nil
	}
	if b, ok := c.p.connSchedule.(ConnectBound); ok {
		if d := b.ConnectTimeout(); d > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, d)
			defer cancel()
		}
	}
	var ic driver.Conn
	err := c.p.run(ctx, connectOp, func(ctx context.Context) error {
		var err error
		ic, err = c.connectOnce(ctx)
		return err
	}, nil, c.p.connSchedule)
	if err != nil {
		return nil, hideBadConn(err)
	}
	return c.wrap(ctx, ic), nil
}

// inRunTx reports whether ctx is a RunTx attempt's.
func inRunTx(ctx context.Context) bool { return txmark.In(ctx) }

// connectOnce opens one inner connection and runs SessionInit on it.
func (c *connector) connectOnce(ctx context.Context) (driver.Conn, error) {
	ic, err := c.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	if c.p.sessionInit != nil {
		if err := c.p.sessionInit(ctx, ic); err != nil {
			_ = ic.Close()
			return nil, err
		}
	}
	return ic, nil
}

// Driver returns a driver whose Open opens inner's driver connections
// under the Policy.
func (c *connector) Driver() driver.Driver { return wrapDriver{c} }

type wrapDriver struct{ c *connector }

// Open opens a connection of the inner driver by name, under the Policy.
func (d wrapDriver) Open(name string) (driver.Conn, error) {
	inner := d.c.inner.Driver()
	dc := newConnector(dsnConnector{dsn: name, d: inner}, d.c.p, d.c.engine, d.c.pq)
	return dc.Connect(context.Background())
}

func (d wrapDriver) innerDriver() any { return d.c.inner.Driver() }
