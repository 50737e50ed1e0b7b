package sqlretry

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"time"
)

// settle decides a failure of unknown outcome for a write: without a verify
// it ends the call with ErrAmbiguous; with one, applied ends it in success and
// a failed verify in ErrAmbiguous. settled is false only when the verify found
// the write not applied, so it may be retried.
//
// "Not applied" is a verdict only about an attempt that has provably
// stopped (Class.Ended, or fenced by op.fence before the verify reads):
// otherwise the server may still be running it, and the call ends in
// ErrAmbiguous rather than risk a second copy.
//
// The fence and the verify run under settleContext: the caller's context
// ending does not end them, since the write's outcome is still unknown
// then, but SettleTimeout after it does. An ambiguity the caller hears
// after its context ended matches that context's error too.
func (p *Policy) settle(ctx context.Context, op Op, attempts int, class Class, err error) (ret error, settled bool) {
	if op.verify == nil {
		cause := ErrAmbiguous
		if op.unsettled != nil {
			cause = op.unsettled
		}
		return p.giveUp(ctx, op, attempts, class, err, withCallerEnd(ctx, cause), true), true
	}
	sctx, stop := p.settleContext(ctx)
	defer stop()
	ended := class.Ended
	var ferr error = errNoSession
	if !ended && op.fence != nil {
		ferr = op.fence(sctx)
		ended = ferr == nil
	}
	applied, verr := p.runVerify(sctx, op)
	switch {
	case verr != nil:
		p.emit(Event{Ctx: ctx, Kind: EventVerifyFailed, Op: op.Name, Attempt: attempts, Err: verr, Class: class})
		var cause error = &verifyErr{verr}
		if sctx.Err() != nil {
			cause = &ambiguity{"the caller's context ended and the settlement did not finish within SettleTimeout (" + p.settleTimeout.String() + "): " + verr.Error()}
		}
		return p.giveUp(ctx, op, attempts, class, err, withCallerEnd(ctx, cause), true), true
	case applied:
		p.verifiedApplied.Add(1)
		p.recovered.Add(1)
		p.emit(Event{Ctx: ctx, Kind: EventVerified, Op: op.Name, Attempt: attempts, Err: err, Class: class, Applied: true})
		return nil, true
	case !ended:
		p.emit(Event{Ctx: ctx, Kind: EventVerifyFailed, Op: op.Name, Attempt: attempts, Err: ferr, Class: class})
		cause := &ambiguity{"the verify found no write, but the attempt may still be running on the server (" + ferr.Error() + ")"}
		return p.giveUp(ctx, op, attempts, class, err, withCallerEnd(ctx, cause), true), true
	}
	p.verifiedNotApplied.Add(1)
	p.emit(Event{Ctx: ctx, Kind: EventVerified, Op: op.Name, Attempt: attempts, Err: err, Class: class, Applied: false})
	return nil, false
}

// cutOff ends a call whose caller's context is done when an attempt failed
// with err: the caller's cancellation is final, no retry is started. But an
// attempt the context cut off may have been a write that landed — a COMMIT
// the server received, an INSERT that ran — so a write of unknown outcome
// is settled first: nil if it landed, the context's error if it provably
// did not, and an error matching ErrAmbiguous as well if no one can say. A
// failure that proves nothing was sent or applied (the classifier's, a
// RunTx before COMMIT, pgconn's SafeToRetry) is the context's error alone.
func (p *Policy) cutOff(ctx context.Context, op Op, attempts int, err error, timedOut bool, cerr error) error {
	c := p.classify(err, timedOut)
	if op.rephase != nil {
		c = op.rephase(err, c)
	}
	if inner, ok := errors.AsType[*Error](err); ok && inner.Cause != nil {
		// An inner loop (a Connector handle's call inside Do) settled
		// what it could; an outer verify may settle its ambiguity.
		return p.nested(ctx, op, attempts, c, err, inner) // as it is, but for an ambiguity a verify settles
	}
	// SafeToRetry speaks of the last statement sent; a verdict of the
	// layer above (a text of several parts, a transaction partly
	// committed) outranks it.
	_, judged := verdictOf(err)
	unsent := !judged && sentNothing(err)
	if op.idempotent && op.writes && c.Phase == Unknown && !unsent {
		// Consent to replay it, and no replay allowed: unknown.
		p.failures.Add(1)
		return p.giveUp(ctx, op, attempts, c, err, withCallerEnd(ctx, ErrAmbiguous), true)
	}
	if !op.mustSettle(c) || unsent {
		return p.stopped(ctx, op, attempts, c, err, cerr)
	}
	p.failures.Add(1)
	if ret, settled := p.settle(ctx, op, attempts, c, err); settled {
		return ret
	}
	return p.stopped(ctx, op, attempts, c, err, cerr) // not applied
}

// sentNothing reports whether err proves that its attempt sent nothing:
// pgconn's SafeToRetry, which is true of the error pgx returns for a
// context already done when it was called.
func sentNothing(err error) bool {
	s, ok := errors.AsType[interface {
		error
		SafeToRetry() bool
	}](err)
	return ok && s.SafeToRetry()
}

// settleContext returns the context a settlement runs under: ctx's values
// without its end. While ctx lives, the settlement ends SettleTimeout after
// ctx's deadline at the latest; once ctx has ended (now, or while the
// settlement runs), SettleTimeout after that. stop releases it.
func (p *Policy) settleContext(ctx context.Context) (sctx context.Context, stop func()) {
	if ctx.Done() == nil {
		return ctx, func() {} // a context that never ends: nothing to outlive
	}
	base := context.WithoutCancel(ctx)
	if ctx.Err() != nil {
		return context.WithTimeout(base, p.settleTimeout)
	}
	var cancel context.CancelFunc
	if dl, ok := ctx.Deadline(); ok {
		sctx, cancel = context.WithDeadline(base, dl.Add(p.settleTimeout))
	} else {
		sctx, cancel = context.WithCancel(base)
	}
	var timer atomic.Pointer[time.Timer]
	unhook := context.AfterFunc(ctx, func() { timer.Store(time.AfterFunc(p.settleTimeout, cancel)) })
	return sctx, func() {
		unhook()
		if t := timer.Load(); t != nil {
			t.Stop()
		}
		cancel()
	}
}

// withCallerEnd returns cause, the reason a write's outcome is unknown, so
// that it also matches the caller's context's error if that has ended.
func withCallerEnd(ctx context.Context, cause error) error {
	if cerr := ctx.Err(); cerr != nil {
		return &callerEnded{ctxErr: cerr, cause: cause}
	}
	return cause
}

// callerEnded is the cause of an ambiguous outcome the caller hears after
// its context ended: it matches the context's error and the ambiguity.
type callerEnded struct{ ctxErr, cause error }

func (e *callerEnded) Error() string {
	return "sqlretry: " + e.ctxErr.Error() + " while the write was in flight, and " + strings.TrimPrefix(e.cause.Error(), "sqlretry: ")
}

func (e *callerEnded) Unwrap() []error { return []error{e.ctxErr, e.cause} }

// nested ends a call whose attempt failed with an inner call's *Error: the
// inner loop retried, or gave up, already. Its error is returned as it is,
// but for a write the inner loop could not settle: the Op's verify settles
// it here (applied: success; not applied: the inner error, now a plain
// failure, wrapped with ErrRetriesExhausted, or the caller's context's error
// if that has ended).
func (p *Policy) nested(ctx context.Context, op Op, attempts int, class Class, err error, inner *Error) error {
	if !errors.Is(inner.Cause, ErrAmbiguous) || op.idempotent || op.verify == nil {
		return err
	}
	class = inner.Class // the verdict on the database's error, not on the inner loop's
	class.Phase = Unknown
	class.Ended = class.Ended || attemptEnded(err)
	op.fence = inner.fence // the inner layer's session, fenced only if the verify will read
	if ret, settled := p.settle(ctx, op, attempts, class, err); settled {
		return ret
	}
	if cerr := ctx.Err(); cerr != nil {
		return p.stopped(ctx, op, attempts, inner.Class, inner.Err, cerr)
	}
	return p.giveUp(ctx, op, attempts, inner.Class, inner.Err, ErrRetriesExhausted, false)
}

// runVerify settles an ambiguous write by the Op's verify, itself run under
// the Policy as an idempotent read.
func (p *Policy) runVerify(ctx context.Context, op Op) (applied bool, err error) {
	p.verifications.Add(1)
	// run, not Do: a verify is not a call of its own in Stats, and no
	// statement rule applies to it.
	err = p.run(ctx, Idempotent(op.Name+" verify"), func(ctx context.Context) error {
		var verr error
		applied, verr = op.verify(ctx)
		return verr
	}, nil, nil)
	return applied, err
}
