package pgxretry

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqlretry/sqlretry/internal/wait"
)

// fenceLimit bounds a fence: the termination and the wait for the backend
// to leave pg_stat_activity.
const fenceLimit = 10 * time.Second

// errNoSession: the failed attempt never had a session to fence.
var errNoSession = errors.New("pgxretry: the failed attempt's session is unknown, so it cannot be fenced")

// ErrPooler is why a failed attempt is not fenced on a connection through a
// connection pooler (pgbouncer, in any pool mode): the backend pid pgx
// learned at connect (pgbouncer's own cancel key) is not the server's
// pg_backend_pid(), and outside a transaction the pooler may run each
// statement on another server session, so no pid names the session that
// ran the attempt. A Verify's "not applied" is then no proof — the
// statement may still be running, and land — and the call ends in an error
// matching sqlretry.ErrAmbiguous (a Verify's "applied" is still believed).
// Inside a transaction the pooler holds one server session until it ends:
// [Pool.RunTx] asks that session for its pid, and fences it.
var ErrPooler = errors.New("pgxretry: a connection pooler sits between the pool and PostgreSQL (pg_backend_pid() is not the backend pid pgx learned at connect), so the server session that ran the attempt cannot be named, nor fenced")

// errUnidentified: the connection's server session could not be asked for
// its pid before the attempt.
var errUnidentified = errors.New("pgxretry: the server was not asked which session the attempt ran on (the connection failed first), so it cannot be fenced")

// backendKey is the key of a connection's backend in its pgconn
// CustomData: what the server said of the session, asked once per
// connection.
const backendKey = "sqlretry/pgxretry.backend"

// backend is what the server said of a connection's session.
type backend struct {
	pid    uint32 // pg_backend_pid(), equal to the pid pgx learned at connect
	pooler bool   // pg_backend_pid() differs from pgx's pid: a pooler is in between
}

// identify asks the server, once per connection, which backend pc's
// statements run on, and caches the answer on pc: pg_backend_pid() equal
// to the pid pgx learned at connect (BackendKeyData) proves a direct
// connection to that backend; another pid proves something in between
// that answers connects with a key of its own (pgbouncer's is random).
// One round trip, in the simple protocol (any exec mode, any pooler, no
// statement cached), the first time a connection serves an attempt that
// may need a fence; a failure leaves the connection unidentified, and its
// attempt unfenced.
func identify(ctx context.Context, pc *pgconn.PgConn) (backend, bool) {
	data := pc.CustomData()
	if b, ok := data[backendKey].(backend); ok {
		return b, true
	}
	pid, err := serverPID(ctx, pc)
	if err != nil {
		return backend{}, false
	}
	b := backend{pid: pid, pooler: pid != pc.PID()}
	if b.pooler {
		b.pid = 0
	}
	data[backendKey] = b
	return b, true
}

// serverPID runs SELECT pg_backend_pid() on pc, in the simple protocol.
func serverPID(ctx context.Context, pc *pgconn.PgConn) (uint32, error) {
	res, err := pc.Exec(ctx, "SELECT pg_catalog.pg_backend_pid()").ReadAll()
	if err != nil {
		return 0, err
	}
	if len(res) != 1 || len(res[0].Rows) != 1 || len(res[0].Rows[0]) != 1 {
		return 0, errors.New("pgxretry: SELECT pg_backend_pid() did not return one value")
	}
	pid, err := strconv.ParseUint(string(res[0].Rows[0][0]), 10, 32)
	return uint32(pid), err
}

// fence ends the backend pid on the server and returns once
// pg_stat_activity no longer lists it: a backend leaves it after it has
// aborted or finished its transaction, so what a verify reads afterwards
// is final. PostgreSQL does not notice a lost client while a statement
// runs: without the fence, a verify could read "not applied" of a
// statement that then commits.
//
// It runs on the raw pool: the verify calling it is itself retried by the
// Policy.
func (w *Pool) fence(ctx context.Context, pid uint32) error {
	if pid == 0 {
		return errNoSession
	}
	ctx, cancel := context.WithTimeout(ctx, fenceLimit)
	defer cancel()
	// pg_terminate_backend answers false, with a warning, for a pid that
	// is already gone.
	if _, err := w.pool.Exec(ctx, "SELECT pg_catalog.pg_terminate_backend($1)", int32(pid)); err != nil {
		return err
	}
	pause := 2 * time.Millisecond
	for {
		var n int
		err := w.pool.QueryRow(ctx, "SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE pid = $1", int32(pid)).Scan(&n)
		switch {
		case err != nil:
			return err
		case n == 0:
			return nil
		}
		if err := wait.Sleep(ctx, pause); err != nil {
			return errors.New("pgxretry: backend " + strconv.FormatUint(uint64(pid), 10) + " still listed after the fence's limit: " + err.Error())
		}
		pause = min(2*pause, 100*time.Millisecond)
	}
}

// session is the backend of a statement's last failed attempt, as the
// server named it: pid, or why it cannot be fenced.
type session struct {
	pid uint32
	why error // when pid is 0
}

// acquired asks, before the attempt runs on c, which backend c's
// statements run on (once per connection; see identify). s is nil when
// nothing will be fenced.
func (s *session) acquired(ctx context.Context, c *pgxpool.Conn) {
	if s != nil {
		identify(ctx, c.Conn().PgConn())
	}
}

// note records the backend of c, a failed attempt's connection, as
// acquired found it.
func (s *session) note(c *pgxpool.Conn) {
	if s == nil {
		return
	}
	b, ok := c.Conn().PgConn().CustomData()[backendKey].(backend)
	switch {
	case !ok:
		s.pid, s.why = 0, errUnidentified
	case b.pooler:
		s.pid, s.why = 0, ErrPooler
	default:
		s.pid, s.why = b.pid, nil
	}
}

// fence ends the session s names (see Pool.fence).
func (s *session) fence(ctx context.Context, w *Pool) error {
	if s.pid == 0 && s.why != nil {
		return s.why
	}
	return w.fence(ctx, s.pid)
}

// fencedVerify is v run for a failed attempt whose session fence ends: a
// "not applied" is believed only once the fence has ended the session; an
// "applied" needs no fence (the write is there, whatever else still runs),
// so a fence that cannot be made leaves the outcome knowable where the
// write landed.
func fencedVerify(ctx context.Context, fence func(context.Context) error, v func(context.Context) (bool, error)) (bool, error) {
	ferr := fence(ctx)
	applied, err := v(ctx)
	switch {
	case err != nil:
		return false, err
	case applied:
		return true, nil
	}
	return false, ferr
}

// txBackend returns the backend of a transaction just begun on c, for a
// fence of its COMMIT: the pid pgx learned at connect on a direct
// connection; through a pooler, the server session's own pg_backend_pid(),
// asked inside the transaction (one round trip), since a pooler holds one
// server session from BEGIN to the transaction's end. 0 if the server
// could not be asked: the COMMIT is then not fenced.
func txBackend(ctx context.Context, c *pgxpool.Conn) (uint32, error) {
	pc := c.Conn().PgConn()
	b, ok := pc.CustomData()[backendKey].(backend)
	switch {
	case !ok:
		return 0, nil
	case !b.pooler:
		return b.pid, nil
	}
	return serverPID(ctx, pc)
}
