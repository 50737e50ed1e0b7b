package pgxretry

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/internal/sqltext"
)

// verdictError carries the class this package gives a failure, which the
// Policy takes as it is (sqlretry reads a method Verdict() Class in the
// chain). The driver's error stays in the chain, so errors.As still finds
// the *pgconn.PgError.
type verdictError struct {
	err   error
	class sqlretry.Class
}

func (e *verdictError) Error() string           { return e.err.Error() }
func (e *verdictError) Unwrap() error           { return e.err }
func (e *verdictError) Verdict() sqlretry.Class { return e.class }

// withVerdict returns err carrying class c.
func withVerdict(err error, c sqlretry.Class) error { return &verdictError{err: err, class: c} }

// shape is what the text of a statement (or of a batch) says about
// replaying it.
type shape uint8

const (
	shapeRead  shape = iota // one read-only statement: replayed after any transient failure
	shapeWrite              // one statement that may write
	shapeParts              // several statements, opaque code (CALL, DO) or transaction control
)

// shapeOf reads sql once. It runs on failures only: the success path never
// reads the text. A read that calls functions by names a user's function
// may take (count(*), log('msg'), t.f: sqltext's Info.Calls) is shapeRead:
// it is no first write for an attached Op, and the failure path, given the
// text, asks the catalog before it replays it (readCalls, builtinCalls).
func shapeOf(sql string) shape {
	in := sqltext.Analyze(sql)
	switch {
	case in.TxControl || !in.OneStatement():
		return shapeParts
	case in.ReadOnly:
		return shapeRead
	}
	return shapeWrite
}

// failed returns a failed statement's error, outside a transaction,
// carrying this package's verdict; ctx is the caller's. A caller's own
// cancellation ends the call (the Policy's rule): a read it cut off applied
// nothing; a write's is returned as it is, of unknown outcome, for the
// Policy to settle.
//
// sql, if given, is the text (the texts, of a batch) that failed: a read
// among them that calls functions by names a user's function may take is
// replayed, or its cut-off called nothing applied, only once PostgreSQL's
// catalog holds no such function (builtinCalls); without sql such a read
// is taken for a read.
func (w *Pool) failed(ctx context.Context, err error, sh shape, closed bool, sql ...string) error {
	if ctx.Err() != nil {
		switch {
		case sh == shapeRead && (!readCalls(sql) || w.builtinCalls(ctx, sql) == nil):
			return withVerdict(err, sqlretry.Class{Phase: sqlretry.NotApplied, Code: "context", Reason: "the caller's context ended a read: nothing applied"})
		case sh == shapeParts && !pgconn.SafeToRetry(err):
			// The failed part's verdict (57014 after a cancel request)
			// says nothing of the parts before it.
			return withVerdict(err, sqlretry.Class{Phase: sqlretry.Unknown, Code: "context", Reason: "the caller's context ended a text of several parts: earlier parts may have committed"})
		}
		return err
	}
	c := w.classify(ctx, err, sh, closed, sql...)
	if !c.Retryable {
		// The Policy's classifier says the same: the error is returned
		// as it is, so comparing it with == keeps working.
		return err
	}
	return withVerdict(err, c)
}

// failedAs is failed for a statement run under op. An Idempotent op (a
// caller's, attached with WithOp to a write) consents to a replay, which a
// caller's ended context forbids: a failure of unknown outcome is then
// ErrAmbiguous and the context's error, not the context's error alone.
func (w *Pool) failedAs(ctx context.Context, op sqlretry.Op, err error, sh shape, closed bool, sql ...string) error {
	err = w.failed(ctx, err, sh, closed, sql...)
	if !op.IsIdempotent() || ctx.Err() == nil || pgconn.SafeToRetry(err) {
		return err
	}
	if c := w.p.Classify(err); c.Phase != sqlretry.Unknown {
		return err
	}
	return &sqlretry.Error{Op: op.Name, Attempts: 1, Class: w.p.Classify(err), Err: err, Cause: ambiguousAfter(ctx)}
}

// classify gives the verdict on a failed statement outside a transaction
// while the caller's context is alive: the Policy's classifier, with what
// pgconn and the connection can say that the error alone cannot, revised by
// what the text is.
//
//   - a context error is the attempt's CommandTimeout (the caller's context
//     is alive): transient, of unknown outcome;
//   - pgconn.SafeToRetry: nothing was sent, whatever else the error says;
//   - pgconn.Timeout: a timeout of pgx's own (a deadline handler, a
//     connect_timeout), transient, of unknown outcome;
//   - a session that ended in reply to a write (57P01 after
//     pg_terminate_backend, the connection closed): an autocommit
//     statement commits as it ends, so it may have committed first;
//   - a read that failed applied nothing: its transient failure of unknown
//     outcome is NotApplied, which lets the Policy replay it under a Write Op;
//     a read (of sql) that calls functions by names a user's may take is
//     judged as a write unless the catalog holds no such function;
//   - a write of unknown outcome that closed the connection is never a
//     plain error: it is settled;
//   - a text of several parts: only NotSent proves nothing of it applied.
func (w *Pool) classify(ctx context.Context, err error, sh shape, closed bool, sql ...string) sqlretry.Class {
	var c sqlretry.Class
	switch {
	case isContext(err):
		c = sqlretry.Class{Retryable: true, Phase: sqlretry.Unknown, Code: "command-timeout",
			Reason: "the command timeout fired: the command may have run", Kind: sqlretry.Unavailable}
	case pgconn.Timeout(err):
		c = sqlretry.Class{Retryable: true, Phase: sqlretry.Unknown, Code: "pgconn-timeout",
			Reason: "pgconn timeout: the command may have run", Kind: sqlretry.Unavailable}
	default:
		c = w.p.Classify(err)
	}
	if pgconn.SafeToRetry(err) {
		c.Retryable, c.Phase, c.Kind = true, sqlretry.NotSent, sqlretry.Unavailable
		c.Reason += " (pgconn.SafeToRetry: nothing was sent)"
	}
	closed = closed || fatal(err)
	if sh == shapeRead && readCalls(sql) {
		// The same failure of a write would be settled: the read is
		// one only if no function of a user's answers its calls.
		if wc := reshape(c, shapeWrite, closed); wc.Retryable && wc.Phase == sqlretry.Unknown {
			if cerr := w.builtinCalls(ctx, sql); cerr != nil {
				wc.Reason += " (a read that may call a function of a user's: " + cerr.Error() + ")"
				return wc
			}
		}
	}
	return reshape(c, sh, closed)
}

// readCalls reports whether a read among sqls calls functions by names a
// user's function may take on PostgreSQL (sqltext's Info.Calls).
func readCalls(sqls []string) bool {
	for _, s := range sqls {
		if in := sqltext.Analyze(s); in.ReadOnly && in.Calls {
			return true
		}
	}
	return false
}

// checkLimit bounds the catalog look-up of builtinCalls once the caller's
// context has ended (the Policy's SettleTimeout default): it decides
// whether the read cut off applied nothing.
const checkLimit = 5 * time.Second

// checkOp is the look-up's Op: a read of the catalog, retried under the
// Policy like any call.
var checkOp = sqlretry.Idempotent("pgx function check")

// builtinCalls returns nil if PostgreSQL's catalog proves that no function
// of a user's answers the calls of the reads among sqls by name: a user's
// log(text) in any schema takes SELECT log('msg') (search_path and
// argument types decide), a user's f(t) takes SELECT t.f; its volatility
// proves nothing, since a STABLE function may call a VOLATILE one that
// writes. Otherwise it returns why not: such a function exists, a text
// names a schema's function, or the catalog could not be read. It asks on a
// connection of its own, outside the pool (the failed call may hold the
// pool's last), at each replay decision: never from a cache, which a
// CREATE FUNCTION would make wrong. Its answer does not depend on whether
// the failed attempt has ended: it needs no fence.
func (w *Pool) builtinCalls(ctx context.Context, sqls []string) error {
	var names []string
	for _, s := range sqls {
		if in := sqltext.Analyze(s); !in.ReadOnly || !in.Calls {
			continue
		}
		n, ok := sqltext.CalledNames(sqltext.Postgres, s)
		if !ok {
			return errors.New("pgxretry: the text calls a function the catalog cannot vouch for")
		}
		names = append(names, n...)
	}
	if len(names) == 0 {
		return nil
	}
	if ctx.Err() != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), checkLimit)
		defer cancel()
	}
	return w.p.Do(ctx, checkOp, func(actx context.Context) error {
		conn, err := pgx.ConnectConfig(actx, w.pool.Config().ConnConfig)
		if err != nil {
			return err
		}
		defer func() {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(actx), time.Second)
			defer cancel()
			conn.Close(cctx)
		}()
		err = sqltext.CheckUserFuncs(actx, sqltext.Postgres, names, func(ctx context.Context, q string, args []any) (bool, error) {
			rows, err := conn.Query(ctx, q, args...)
			if err != nil {
				return false, err
			}
			found := rows.Next()
			rows.Close()
			return found, rows.Err()
		})
		if uf := (*sqltext.UserFuncError)(nil); errors.As(err, &uf) {
			return withVerdict(uf, sqlretry.Class{Phase: sqlretry.NotApplied, Code: "user-function", Reason: uf.Error()})
		}
		return err
	})
}

// reshape revises a statement's class by what its text is.
func reshape(c sqlretry.Class, sh shape, closed bool) sqlretry.Class {
	switch {
	case sh == shapeRead && c.Retryable && c.Phase == sqlretry.Unknown:
		c.Phase = sqlretry.NotApplied
		c.Reason += " (a read: nothing to apply)"
	case sh == shapeRead:
	case sh == shapeParts && c.Phase != sqlretry.NotSent:
		c.Phase, c.Retryable = sqlretry.Unknown, true
		c.Reason += " (several statements, opaque code or transaction control: earlier parts may have committed)"
	case c.Phase == sqlretry.NotApplied && closed:
		c.Phase, c.Retryable = sqlretry.Unknown, true
		c.Reason += " (the session ended in reply: the statement may have committed first)"
	case c.Phase == sqlretry.Unknown && !c.Retryable && closed:
		// A failure that left the connection closed (a TLS or protocol
		// error after the send) is of the transport; an error of pgx's
		// own on a live connection (pgx.ErrNoRows, a scan error) is not.
		c.Retryable = true
		c.Reason += " (a write of unknown outcome: settled, not returned as a plain error)"
	}
	if c.Retryable && c.Kind == sqlretry.KindUnknown {
		c.Kind = sqlretry.Unavailable
	}
	return c
}

// fatal reports whether err is a server error of severity FATAL, which
// ends the session: where the connection is out of sight (a batch's), it
// says the session ended in reply.
func fatal(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.SeverityUnlocalized == "FATAL" || pe.Severity == "FATAL")
}

// isContext reports whether err is a context error.
func isContext(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}
