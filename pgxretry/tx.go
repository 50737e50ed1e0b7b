package pgxretry

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/internal/txmark"
)

// RunTx runs fn in a transaction of the pool, and runs the whole
// transaction again when a failure proves it was not committed: a
// transient failure of BEGIN, of any statement, or of anything else before
// COMMIT was sent (a deadlock victim 40P01, a serialization failure 40001,
// a connection lost mid-transaction: a transaction that never sent COMMIT
// is rolled back by the server), or a COMMIT that failed with the session
// alive and the server's rollback reported (a serialization failure at
// COMMIT). A statement inside the transaction is never replayed on its own.
//
// A COMMIT whose outcome is unknown (the connection was lost after COMMIT
// left, the session ended in reply to it) is never replayed blindly unless
// op is Idempotent. It is settled by op's Verify, called once the failed
// session was ended on the server and confirmed gone; for a Write Op
// without a Verify, on a Pool made [WithMarker], by a marker row inserted
// in the same message as COMMIT (no extra round trip; see WithMarker);
// otherwise by pg_xact_status: the transaction's id is taken just
// before COMMIT (one more round trip) and marked with the server's history
// (timeline, postmaster start, crash recovery), and after an unknown
// COMMIT another connection asks whether that id committed — never across
// a history change (a failover, a restore, a restart), which ends the call
// in an error matching sqlretry.ErrAmbiguous, as does an id whose status
// is gone. Applied: RunTx returns nil; not applied: it runs the
// transaction again.
//
// fn receives a context bounded by the Policy's CommandTimeout, if set.
// It must return the database's errors unchanged or wrapped (so
// errors.As finds the *pgconn.PgError), must not commit or roll back tx
// itself nor end the transaction in SQL text (RunTx checks the session's
// transaction status after fn: a transaction fn ended is treated as partly
// committed, and a failure then ends in ErrAmbiguous; COMMIT AND CHAIN
// leaves the session inside a new transaction, which that check cannot
// tell from the first, so a failure after it would run fn again over a
// committed part: never use it in fn), and must be free of
// side effects outside the transaction: it may run more than once. A panic
// in fn rolls the transaction back and propagates. RunTx called with a
// context fn received returns sqlretry.ErrNestedTx.
func (w *Pool) RunTx(ctx context.Context, op sqlretry.Op, opts pgx.TxOptions, fn func(ctx context.Context, tx pgx.Tx) error) error {
	if txmark.In(ctx) {
		return sqlretry.ErrNestedTx
	}
	t := &txRun{w: w, caller: ctx, opts: opts, fn: fn, userVerify: op.Verify(), idempotent: op.IsIdempotent(), name: op.Name}
	t.marked.Context = ctx
	if op.IsIdempotent() {
		return w.p.Do(ctx, sqlretry.Idempotent(op.Name), t.attempt)
	}
	// A read-only transaction cannot insert a marker, yet may apply
	// something (a NOTIFY): it is marked by pg_xact_status.
	t.marking = t.userVerify == nil && (w.mk == nil || opts.AccessMode == pgx.ReadOnly)
	t.pipelined = t.userVerify == nil && w.mk != nil && opts.AccessMode != pgx.ReadOnly
	// The verify waits out the attempt itself: a user's Verify reads after
	// the session was fenced, and pg_xact_status answers "aborted" only of
	// a transaction that can no longer commit.
	return w.p.Do(ctx, sqlretry.Write(op.Name, t.verify).VerifyWaits(), t.attempt)
}

// markedCtx is a context marked as a RunTx attempt's (package txmark: the
// root package's Policy.Do and RunTx read the same mark). It lives inside the
// txRun, and wraps the caller's context, which no attempt changes: fn gets
// it without an allocation when the attempt's context is the caller's (no
// CommandTimeout), which is the common case.
type markedCtx struct{ context.Context }

func (c *markedCtx) Value(key any) any {
	if key == (txmark.Key{}) {
		return true
	}
	return c.Context.Value(key)
}

// fnContext returns the context fn receives in an attempt whose context is
// actx.
func (t *txRun) fnContext(actx context.Context) context.Context {
	if actx.Done() == t.caller.Done() {
		return &t.marked // the attempt's context is the caller's
	}
	return txmark.With(actx)
}

// txStage is how far an attempt of a transaction got.
type txStage uint8

const (
	stageBegin  txStage = iota // BEGIN not yet done
	stageBody                  // inside the transaction: COMMIT not sent
	stageCommit                // COMMIT was handed to pgx
)

// txRun is one RunTx call. Its attempts run one after another, so its
// fields need no lock.
type txRun struct {
	w          *Pool
	caller     context.Context
	opts       pgx.TxOptions
	fn         func(ctx context.Context, tx pgx.Tx) error
	userVerify sqlretry.VerifyFunc
	marking    bool      // settle an unknown COMMIT by pg_xact_status
	pipelined  bool      // settle it by the marker sent with COMMIT (WithMarker)
	marked     markedCtx // the caller's context, marked

	stage   txStage
	pid     uint32 // the attempt's backend, fenced before a user's Verify reads
	mark    string // "xid@history", taken just before COMMIT; or the marker key
	hasMark bool
	tainted bool // fn ended the transaction itself: part of it may have committed

	idempotent bool   // the Op is Idempotent: replayed, not settled
	name       string // the Op's name

	// The marker INSERT and COMMIT prepared on the attempt's connection
	// (nil: sent as text), and their pipeline, reused by each attempt.
	insert, commit *pgconn.StatementDescription
	batch          pgconn.Batch
	params         [3][]byte // the INSERT's: key, created_at, tombstone
	paramBuf       [64]byte  // key and created_at's bytes
}

// attempt runs the transaction once, on a connection of its own.
func (t *txRun) attempt(actx context.Context) error {
	t.stage, t.pid, t.mark, t.hasMark, t.tainted = stageBegin, 0, "", false, false
	if t.pipelined {
		if err := t.w.mk.beforeTx(actx); err != nil {
			return t.failed(err) // no transaction yet: nothing applied
		}
	}
	c, err := t.w.pool.Acquire(actx)
	if err != nil {
		return t.w.acquireFailed(t.caller, err)
	}
	defer c.Release()
	if t.userVerify != nil {
		identify(actx, c.Conn().PgConn()) // before BEGIN: see txBackend
	}
	if t.pipelined {
		if t.insert, t.commit, err = t.w.mk.prepare(actx, c); err != nil {
			return t.failed(err) // no transaction yet: nothing applied
		}
	}
	tx, err := c.Conn().BeginTx(actx, t.opts)
	if err != nil {
		return t.failed(err)
	}
	t.stage = stageBody
	if t.userVerify != nil {
		if t.pid, err = txBackend(actx, c); err != nil {
			_ = tx.Rollback(actx)
			return t.failed(err)
		}
	}
	if err := t.body(t.fnContext(actx), c, tx); err != nil {
		// The transaction is over whether or not the rollback succeeds: a
		// server rolls back a transaction whose connection is gone, and
		// the pool destroys a connection left inside one.
		_ = tx.Rollback(actx)
		return t.failed(err)
	}
	t.stage = stageCommit
	if t.pipelined && c.Conn().PgConn().TxStatus() == 'T' {
		// (A failed transaction, 'E', takes tx.Commit's path: ROLLBACK.)
		return t.commitMarked(actx, c, tx, t.w.mk)
	}
	if err := tx.Commit(actx); err != nil {
		return t.commitFailed(c, err)
	}
	return nil
}

// body runs fn and, if it succeeded, marks the transaction. A panic in fn
// rolls the transaction back and goes on.
func (t *txRun) body(ctx context.Context, c *pgxpool.Conn, tx pgx.Tx) (err error) {
	finished := false
	defer func() {
		if !finished {
			_ = tx.Rollback(ctx)
		}
	}()
	err = t.fn(ctx, tx)
	finished = true
	if pc := c.Conn().PgConn(); !pc.IsClosed() && pc.TxStatus() == 'I' {
		// fn ended the transaction (tx.Commit, or COMMIT in SQL text):
		// what it committed is not undone by a rollback.
		t.tainted = true
		if err == nil {
			err = errEndedInside
		}
	}
	if err == nil && t.marking {
		t.mark, err = markTx(ctx, tx)
		t.hasMark = err == nil
	}
	return err
}

// errEndedInside is the failure of a transaction fn ended itself.
var errEndedInside = errors.New("pgxretry: the transaction function ended the transaction itself (tx.Commit, tx.Rollback, or COMMIT in SQL text): RunTx cannot commit it, and cannot tell what it committed")

// errPartlyCommitted is the verify error of a transaction that failed after
// fn ended it itself.
var errPartlyCommitted = errors.New("pgxretry: the transaction failed after the transaction function ended it itself: part of it may have committed, so it can be neither settled nor run again")

// failed judges a failure before COMMIT was sent: a transient failure of
// unknown outcome left nothing applied, since a transaction that never
// committed is rolled back — unless fn ended it itself, and what it
// committed then stays whatever the last failure says.
func (t *txRun) failed(err error) error {
	if t.caller.Err() != nil {
		if t.tainted {
			// Of unknown outcome whatever err says (pgconn's SafeToRetry
			// speaks of the last statement only), and it cannot be
			// settled: ErrAmbiguous.
			return withVerdict(err, sqlretry.Class{Phase: sqlretry.Unknown, Code: "context",
				Reason: "the caller's context ended after the transaction function ended the transaction itself: part of it may have committed"})
		}
		// Cut off before COMMIT was sent: the Policy ends the call with
		// the caller's context's error, nothing applied.
		return withVerdict(err, sqlretry.Class{Phase: sqlretry.NotApplied, Code: "context",
			Reason: "the caller's context ended before COMMIT was sent: the transaction was rolled back"})
	}
	if t.tainted {
		cl := t.w.classify(t.caller, err, shapeParts, false)
		cl.Phase, cl.Retryable = sqlretry.Unknown, true
		cl.Reason = "the transaction failed after the transaction function ended it itself: " + cl.Reason
		return withVerdict(err, cl)
	}
	cl := t.w.classify(t.caller, err, shapeRead, false)
	if !cl.Retryable {
		return err // fn's own error, or a permanent one: returned as it is
	}
	cl.Reason += " (before COMMIT was sent: the transaction was rolled back)"
	return withVerdict(err, cl)
}

// commitFailed judges a failure of COMMIT: a rollback the server reports
// on a session that survives (a serialization failure at COMMIT) proves it
// failed; a session that ended in reply to COMMIT (57P01 after
// pg_terminate_backend) may have committed first; a failure after COMMIT
// left is settled, never returned as a plain error.
func (t *txRun) commitFailed(c *pgxpool.Conn, err error) error {
	if t.idempotent && t.caller.Err() != nil && t.opts.AccessMode != pgx.ReadOnly &&
		!pgconn.SafeToRetry(err) && !errors.Is(err, pgx.ErrTxCommitRollback) {
		// Cut off by the caller: the replay an Idempotent Op consents to
		// is not allowed, and the COMMIT may have landed.
		return &sqlretry.Error{Op: t.name, Attempts: 1, Class: t.w.p.Classify(err), Err: err, Cause: ambiguousAfter(t.caller)}
	}
	if t.caller.Err() != nil || errors.Is(err, pgx.ErrTxCommitRollback) {
		// The transaction had failed already (fn went on after an error):
		// COMMIT rolled it back.
		return err
	}
	return withVerdict(err, t.w.classify(t.caller, err, shapeWrite, c.Conn().IsClosed()))
}

// verify settles a failure of unknown outcome for the Policy.
func (t *txRun) verify(ctx context.Context) (bool, error) {
	switch {
	case t.stage != stageCommit:
		return false, errPartlyCommitted
	case t.userVerify != nil:
		return fencedVerify(ctx, func(ctx context.Context) error { return t.w.fence(ctx, t.pid) }, t.userVerify)
	case t.hasMark && t.pipelined:
		return t.w.mk.committed(ctx, t.w.mk.db, t.mark)
	case t.hasMark:
		return t.w.committed(ctx, t.mark)
	}
	return false, errors.New("pgxretry: the COMMIT's outcome is unknown and the transaction was not marked")
}
