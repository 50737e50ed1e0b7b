package sqlretry

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"reflect"
	"strings"

	"github.com/sqlretry/sqlretry/internal/txmark"
)

// ErrNestedTx is returned by [RunTx] when it is called with a context that a
// RunTx transaction function received: nested transactions are not
// supported. The outer transaction function should return the error, so the
// outer transaction rolls back; it is not retried.
var ErrNestedTx = errors.New("sqlretry: RunTx called inside a RunTx transaction function: nested transactions are not supported")

// errNoCommitVerifier is the cause of the ErrAmbiguous of a COMMIT whose
// outcome is unknown when nothing is configured to settle it.
var errNoCommitVerifier = &ambiguity{"the COMMIT may have landed, and no verifier is configured to settle it (the Op has no Verify, and Config has no CommitVerifier)"}

// errReadOnlyUnmarked is the cause of the ErrAmbiguous of a read-only
// transaction's COMMIT whose outcome is unknown when the CommitVerifier
// cannot mark a read-only transaction.
var errReadOnlyUnmarked = &ambiguity{"the COMMIT of a read-only transaction may have landed, and the CommitVerifier cannot mark one (a marker row cannot be inserted in it; sqlretry.Verifiers with postgres.CommitVerifier can)"}

// A CommitVerifier settles an ambiguous COMMIT for an Op that has no Verify
// of its own: it marks the transaction before COMMIT is sent, and after a
// COMMIT whose outcome is unknown (the connection was lost after COMMIT left)
// it asks the database, on another connection, whether the marked
// transaction committed. Package postgres implements it with
// pg_current_xact_id and pg_xact_status.
//
// Implementations must be safe for concurrent use.
type CommitVerifier interface {
	// Mark runs inside the transaction, after the transaction function
	// returned and just before COMMIT. It returns what Committed needs to
	// find the transaction again (PostgreSQL: its transaction id), or "" if
	// the transaction wrote nothing (then an ambiguous COMMIT is harmless).
	// An error from Mark fails the attempt before COMMIT: the transaction
	// is rolled back and retried under the usual rules.
	Mark(ctx context.Context, tx *sql.Tx) (mark string, err error)
	// Committed reports whether the transaction Mark returned mark for
	// committed. It runs on a connection of db, not the one that failed,
	// under the Policy as an idempotent read. It must answer false only when
	// the transaction can no longer commit (PostgreSQL: pg_xact_status says
	// aborted), since RunTx then runs the transaction again: while the
	// server may still be committing it, Committed must return an error. An
	// error means the outcome could not be settled: the caller gets an error
	// matching ErrAmbiguous.
	Committed(ctx context.Context, db *sql.DB, mark string) (committed bool, err error)
}

// RunTx runs fn in a transaction of db, and runs the whole transaction again
// when a failure proves it was not committed: a retryable failure of BEGIN,
// of any statement, or of anything else before COMMIT was sent (a deadlock
// victim, a serialization failure, SQLITE_BUSY_SNAPSHOT, a connection lost
// mid-transaction: a transaction that never sent COMMIT was rolled back by
// the server), or a COMMIT the classifier proves was not sent or was rolled
// back. A statement inside the transaction is never replayed on its own.
//
// A COMMIT whose outcome is unknown is never blindly replayed unless op is
// [Idempotent]: it is settled by op's Verify, and the call succeeds if the
// transaction was applied and runs it again if not. Without a Verify the
// call ends with an error matching [ErrAmbiguous], unless Config.CommitVerifier
// settles it (package postgres: pg_xact_status).
//
// fn receives a context bounded by Config.CommandTimeout, if set, which
// bounds the whole attempt. fn must return the database's errors unchanged
// or wrapped, must not commit or roll back tx itself, and must be free of
// side effects outside the transaction: it may run more than once, and
// values it computes are valid only when RunTx returns nil. A panic in fn
// rolls the transaction back and propagates; it is never retried. RunTx
// called with a context fn received returns [ErrNestedTx].
//
// Nor may fn run statements that commit part of the transaction on their
// own — a CALL of a procedure that commits inside (MySQL, SQL Server), a
// statement that commits implicitly (MySQL's DDL, LOCK TABLES) — since a
// failure after one is no rollback of the whole. Through a [Connector]
// handle RunTx sees them, and a failure after one ends in ErrAmbiguous
// rather than a replay; on a plain handle it cannot see them.
//
// opts are passed to db.BeginTx. A read-only transaction (opts.ReadOnly) is
// marked only by a verifier that can mark it without writing (see
// [ReadOnlyMarker]: pg_xact_status can, a marker row cannot); with none, its
// COMMIT of unknown outcome ends in ErrAmbiguous, since a driver may not
// enforce ReadOnly (modernc's SQLite does not). RunTx is safe for
// concurrent use.
func RunTx(ctx context.Context, db *sql.DB, p *Policy, op Op, opts *sql.TxOptions, fn func(ctx context.Context, tx *sql.Tx) error) error {
	if txmark.In(ctx) {
		return ErrNestedTx
	}
	t := &txRun{db: db, p: p, opts: opts, fn: fn, userVerify: op.verify, pq: isLibPQ(db.Driver())}
	if !op.idempotent && op.verify == nil {
		t.verifier = p.commitVerifier // replayed, or settled by the Op: no need to mark it
		if opts != nil && opts.ReadOnly {
			// A marker's INSERT would fail the transaction (25006, 1792).
			t.verifier = forReadOnly(t.verifier)
		}
	}
	switch {
	case op.idempotent:
		op.writes = opts == nil || !opts.ReadOnly
	case op.verify == nil && t.verifier == nil && p.commitVerifier != nil:
		op.unsettled = errReadOnlyUnmarked
	case op.verify == nil && t.verifier == nil:
		op.unsettled = errNoCommitVerifier
	default:
		// An ambiguous COMMIT is settled by the Op's Verify or the verifier.
		t.verifyWaits = op.fence != nil
		op.verify = t.verify
		op.fence = t.fence
	}
	op.rephase = t.rephase
	return p.Do(ctx, op, t.attempt)
}

// txStage is how far an attempt of a transaction got.
type txStage uint8

const (
	stageBegin  txStage = iota // BEGIN not yet done
	stageBody                  // inside the transaction: COMMIT not sent
	stageCommit                // COMMIT was handed to the driver
)

// txRun is one RunTx call. Its attempts run one after another, so its
// fields need no lock.
type txRun struct {
	db         *sql.DB
	p          *Policy
	opts       *sql.TxOptions
	verifier   CommitVerifier // marks the transaction; nil when the Op settles a COMMIT itself
	fn         func(ctx context.Context, tx *sql.Tx) error
	userVerify VerifyFunc
	pq         bool // the driver is lib/pq: its ErrBadConn does not prove COMMIT unsent

	stage   txStage
	mark    string
	hasMark bool
	// fenceSession ends the session the last COMMIT failed on, for a Verify
	// that reads "not applied"; nil if it cannot be fenced.
	fenceSession func(ctx context.Context) error
	// tainted: the attempt failed after a statement that may have committed
	// part of the transaction (the Connector saw it): not a clean rollback.
	tainted bool
	// verifyWaits: the Op's Verify waits out the attempt itself
	// (Op.VerifyWaits).
	verifyWaits bool
	// readOnly: a Mark found the transaction read-only (ErrTxReadOnly);
	// verifier is the one for read-only transactions since.
	readOnly bool
}

// attempt runs the transaction once.
func (t *txRun) attempt(ctx context.Context) error {
	t.stage, t.mark, t.hasMark, t.fenceSession, t.tainted = stageBegin, "", false, nil, false
	// The mark tells fn's nested RunTx calls apart, and tells a Connector
	// not to retry the connect and the BEGIN on their own: RunTx retries
	// the whole attempt, and the two loops must not multiply.
	ctx = txmark.With(ctx)
	if t.verifier != nil {
		// Outside the transaction and before it takes a connection: a
		// marker verifier creates its table and prunes old rows here.
		if err := beforeTx(ctx, t.verifier, t.db); err != nil {
			return setupFailed(t.p, err)
		}
	}
	// The transaction runs on a pinned connection, so that after a failed
	// COMMIT RunTx can ask the driver whether the session survived.
	conn, err := t.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	// The Connector's connection, if it is one, read now: once a
	// transaction is open, database/sql may close conn from another
	// goroutine when ctx ends, and Raw then races with it.
	wc := connectorConn(conn)
	tx, err := conn.BeginTx(ctx, t.opts)
	if err != nil {
		return err
	}
	t.stage = stageBody
	finished := false
	defer func() {
		if !finished { // fn panicked: roll back, and let the panic go on
			if tx.Rollback() != nil && wc == nil {
				discard(conn)
			}
		}
	}()
	err = t.fn(ctx, tx)
	if err == nil && t.verifier != nil {
		t.mark, err = t.verifier.Mark(ctx, tx)
		t.hasMark = err == nil
		if errors.Is(err, ErrTxReadOnly) {
			// Read-only though opts did not say so: nothing committed; run
			// it again marked as a read-only transaction is.
			t.verifier, t.readOnly = forReadOnly(t.verifier), true
			err = &verdictError{err: err, class: Class{Retryable: true, Phase: NotApplied, Code: "read-only-tx", Kind: Contention,
				Reason: "the transaction is read-only, so the commit verifier could not mark it and COMMIT never ran: run again, marked as a read-only one"}}
		}
	}
	if err != nil {
		finished = true
		if wc != nil && wc.txTainted() {
			// A statement in it may have committed part of it (a CALL
			// whose procedure commits, MySQL's implicit commit of DDL):
			// the rollback undoes only what came after.
			t.tainted = true
			err = partlyCommitted(err, t.p.Classify(err))
		}
		// The transaction is over whether or not the rollback succeeds: a
		// server rolls back a transaction whose connection is gone, and a
		// session whose ROLLBACK failed is dropped.
		if tx.Rollback() != nil && wc == nil {
			discard(conn)
		}
		return err
	}
	t.stage = stageCommit
	finished = true
	return t.commit(ctx, conn, tx, wc != nil)
}

// commit sends COMMIT and reads what its failure proves. viaConnector
// tells that conn is the Connector's, which drops a session whose COMMIT
// failed by itself.
func (t *txRun) commit(ctx context.Context, conn *sql.Conn, tx *sql.Tx, viaConnector bool) error {
	if t.userVerify != nil && !t.verifyWaits && t.p.fencer != nil {
		t.fenceSession = t.sessionFence(ctx, conn)
	}
	doneBefore := ctx.Err() != nil
	err := tx.Commit()
	if err != nil && !viaConnector {
		// A refused COMMIT may leave the transaction open on the session
		// (a Galera node's 1047; SQLite's busy COMMIT with some drivers),
		// and the next BEGIN on it would commit it: the session is dropped,
		// after sessionEnded has read whether it lived on.
		defer discard(conn)
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, sql.ErrTxDone) || (doneBefore && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded))):
		// database/sql refused to send COMMIT because the attempt's context
		// had already ended (it checks before sending), and rolled the
		// transaction back. A context that ends while COMMIT is in flight
		// proves nothing: the COMMIT may have landed, so it stays ambiguous.
		t.stage = stageBody
	case t.pq && errors.Is(err, driver.ErrBadConn):
		return lostAfter(&badConnError{msg: err.Error()})
	case t.p.Classify(err).Phase == NotApplied && sessionEnded(ctx, conn):
		// A rollback the server reports and survives (a serialization
		// failure, a deadlock, a deferred constraint) proves COMMIT failed.
		// A session that ended in reply to COMMIT (PostgreSQL 57P01 after
		// pg_terminate_backend) may have committed first.
		return lostAfter(err)
	}
	return err
}

// discard closes conn's session instead of returning it to the pool: a
// driver.ErrBadConn from Raw's function makes database/sql close it.
func discard(conn *sql.Conn) {
	_ = conn.Raw(func(any) error { return driver.ErrBadConn })
}

// sessionFence returns a fence for the session conn is on, taken before
// COMMIT is sent (after a failure there is no asking the session): from the
// Connector's connection when conn is one, else from the Fencer, asked now.
func (t *txRun) sessionFence(ctx context.Context, conn *sql.Conn) func(context.Context) error {
	var f func(context.Context) error
	_ = conn.Raw(func(dc any) error {
		if w, ok := dc.(interface {
			fenceFunc() func(context.Context) error
		}); ok {
			if f = w.fenceFunc(); f != nil {
				return nil
			}
			// The Fencer named no session when the Connector opened the
			// connection (behind a pooler it names one only inside a
			// transaction): ask it now, inside this one.
			s, ok := dc.(interface{ sessionState() (driver.Conn, bool) })
			if !ok {
				return nil
			}
			if dc, _ = s.sessionState(); dc == nil {
				return nil
			}
		}
		ic, ok := dc.(driver.Conn)
		if !ok {
			return nil
		}
		id, err := t.p.fencer.SessionID(ctx, ic)
		if err != nil || id == "" {
			return nil
		}
		db, fencer := t.db, t.p.fencer
		f = func(ctx context.Context) error {
			fc, err := db.Conn(ctx)
			if err != nil {
				return err
			}
			defer fc.Close()
			return fc.Raw(func(dc any) error {
				if w, ok := dc.(interface{ sessionState() (driver.Conn, bool) }); ok {
					dc, _ = w.sessionState()
				}
				ic, ok := dc.(driver.Conn)
				if !ok {
					return errNoSession
				}
				return fencer.Fence(ctx, ic, id)
			})
		}
		return nil
	})
	return f
}

// fence makes an ambiguous COMMIT's outcome final before the verify reads
// it. A CommitVerifier's answers are final by its contract; an Op's Verify
// needs the session fenced.
func (t *txRun) fence(ctx context.Context) error {
	switch {
	case t.userVerify == nil, t.verifyWaits:
		return nil
	case t.fenceSession != nil:
		return t.fenceSession(ctx)
	}
	return errNoSession
}

// errPartlyCommitted is the verify error of a transaction that failed after
// a statement that may have committed part of it.
var errPartlyCommitted = errors.New("sqlretry: the transaction failed after a statement that may have committed part of it (a CALL of a procedure that commits, a MySQL statement that commits implicitly): it cannot be settled, nor run again")

// partlyCommitted gives err, a failure before COMMIT of a tainted
// transaction, the verdict Unknown whatever its own says: the rollback it
// reports does not reach what a statement before it committed.
func partlyCommitted(err error, c Class) error {
	if c.Phase == NotSent && !c.Retryable {
		return err
	}
	c.Phase, c.Retryable = Unknown, true
	c.Reason += " (after a statement that may have committed part of the transaction)"
	return &verdictError{err: err, class: c, prefix: "transaction partly committed: "}
}

// connectorConn returns the Connector's connection under conn, or nil if
// conn is not one of a Connector's.
func connectorConn(conn *sql.Conn) interface{ txTainted() bool } {
	var w interface{ txTainted() bool }
	_ = conn.Raw(func(dc any) error {
		w, _ = dc.(interface{ txTainted() bool })
		return nil
	})
	return w
}

// sessionEnded reports whether the driver connection under conn is
// unusable: by its driver.Validator, or, for a driver without one (pgx's
// stdlib), by a ping. Under a [Connector], it looks at the inner
// connection, which the Connector would otherwise replace underneath. With
// neither interface it cannot tell, and reports false.
func sessionEnded(ctx context.Context, conn *sql.Conn) bool {
	ended := false
	_ = conn.Raw(func(dc any) error {
		if w, ok := dc.(interface{ sessionState() (driver.Conn, bool) }); ok {
			inner, broken := w.sessionState()
			if broken || inner == nil {
				ended = true
				return nil
			}
			dc = inner
		}
		if v, ok := dc.(driver.Validator); ok {
			ended = !v.IsValid()
		} else if p, ok := dc.(driver.Pinger); ok {
			ended = p.Ping(ctx) != nil
		}
		return nil
	})
	return ended
}

// rephase revises the class of a failed attempt: a failure of unknown
// outcome before COMMIT was sent (a connection lost mid-transaction,
// a statement timeout) left nothing applied, since a server rolls back a
// transaction that never committed.
//
// At COMMIT it is the other way round: a failure of unknown outcome is
// settled (by the Op's Verify or the CommitVerifier) even when the classifier
// does not call it transient — "tls: bad record MAC", a severity-20 error —
// since the transaction may have committed, and the caller must not be told
// a plain error about a write that landed.
func (t *txRun) rephase(err error, c Class) Class {
	switch {
	case t.stage != stageCommit && !t.tainted && c.Phase == Unknown:
		// Retryable or not (the caller's context cut it off, say).
		c.Phase = NotApplied
		c.Reason += " (before COMMIT was sent: the transaction was rolled back)"
	case t.stage == stageCommit && !c.Retryable && c.Phase == Unknown && c.Code != "context":
		c.Retryable = true
		c.Reason += " (in reply to COMMIT: the outcome is unknown, so it is settled)"
	}
	return c
}

// verify settles an Unknown-phase failure of COMMIT for the Policy.
func (t *txRun) verify(ctx context.Context) (bool, error) {
	switch {
	case t.stage != stageCommit:
		// A failure before COMMIT that is still of unknown outcome: part
		// of the transaction may have committed inside it (tainted), and a
		// verify written for the COMMIT cannot say.
		return false, errPartlyCommitted
	case t.userVerify != nil:
		return t.userVerify(ctx)
	case t.hasMark:
		return t.verifier.Committed(ctx, t.db, t.mark)
	case t.readOnly:
		return false, errReadOnlyUnmarked
	}
	return false, errNoCommitVerifier
}

// isLibPQ reports whether v's type comes from github.com/lib/pq, found by
// its package path so the root package needs no import of it.
func isLibPQ(v any) bool {
	if v == nil {
		return false
	}
	t := reflect.TypeOf(v)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if w, ok := v.(interface{ innerDriver() any }); ok {
		return isLibPQ(w.innerDriver())
	}
	return strings.HasPrefix(t.PkgPath(), "github.com/lib/pq")
}

// setupFailed is the failure of the commit verifier's setup (BeforeTx: its
// table's resolve and creation, a prune), which RunTx runs in autocommit
// before BEGIN: nothing of the transaction ran, whatever became of the
// setup's own statement. Its inner *Error (the Connector's loop gives up on
// such a statement with ErrAmbiguous when its session died in reply) is
// taken off, or the Policy would settle it as the transaction's and say
// "may have committed part of it": the database's error goes on, not sent,
// retried under its own class.
func setupFailed(p *Policy, err error) error {
	cause := err
	if inner, ok := errors.AsType[*Error](err); ok && inner.Err != nil {
		cause = inner.Err
	}
	c := p.Classify(cause)
	c.Phase = NotSent
	c.Reason = "the commit verifier's setup failed before BEGIN, so the transaction did not begin: " + c.Reason
	return &verdictError{err: &setupError{msg: err.Error(), err: cause}, class: c}
}

// setupError is a setup's error with its own message, unwrapping to the
// database's error under the inner loop's.
type setupError struct {
	msg string
	err error
}

func (e *setupError) Error() string { return e.msg }
func (e *setupError) Unwrap() error { return e.err }
