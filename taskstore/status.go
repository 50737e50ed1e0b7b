package taskstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/sqlretry/sqlretry"
)

// Transition is one audited status change: the task moves From → To, and
// one audit row records it under ID.
type Transition struct {
	// ID names the transition; SetStatus generates one if it is empty.
	// After an ambiguous COMMIT the store looks for the audit row with this
	// id to learn whether the transition happened.
	ID     string
	TaskID string
	From   Status // the guard: the transition applies only in this status
	To     Status
}

// change is a transition as the store runs it: a guarded UPDATE that
// touches one row when it applies, then the audit row.
type change struct {
	op     string // the Op's name
	id     string // the transition id, the audit row's key
	taskID string
	from   Status
	to     [2]Status // the audit row's to_status: one of these (Fail decides in SQL)
	lease  string    // the lease the UPDATE guards on, "" if none
	update string
	args   []any
	at     time.Time
}

// SetStatus moves a task from t.From to t.To and writes its audit row in
// the same transaction; a move into Running stamps the execution time. It
// returns the transition's id.
//
// Both statuses must be known. SetStatus never moves a task into Leased
// (Claim does, with a lease Recover can expire) and moves one into Running
// only from Queued: a manual run, with no lease and no job attempt counted,
// which the caller moves on itself (Recover does not return it). A task
// leaving Leased or Running loses its lease: the holder's next Start,
// Complete or Fail meets [ErrLeaseLost]. Anything else yields
// [ErrInvalidTransition].
//
// A transition id names one transition: it is matched on the id, the task
// and the target status, and the audit table holds at most one row per id.
// An id already used by another transition yields [ErrTransitionIDTaken]; an
// id ending in ":start", ":complete" or ":fail" or starting with "expire:"
// (the store's own forms) yields [ErrInvalidTransition].
//
// The write is not idempotent (a second run would insert a second audit row
// and re-stamp the execution time), so after an ambiguous COMMIT the store
// reads the audit table for the transition's id: found, SetStatus succeeds
// without a replay; not found, the transaction runs again. The guard on
// t.From makes a replay that meets the desired state already there fail
// instead of applying twice, and the store then checks for its own audit row
// before reporting a [*StatusError] matching [ErrStatusConflict].
func (s *Store) SetStatus(ctx context.Context, t Transition) (string, error) {
	if err := validMove(t.From, t.To); err != nil {
		return t.ID, err
	}
	if t.ID == "" {
		t.ID = s.newID()
	} else if reservedID(t.ID) {
		return t.ID, fmt.Errorf("%w: transition id %q has a form the store reserves for its own transitions (%q, %q, %q suffix, %q prefix)",
			ErrInvalidTransition, t.ID, ":start", ":complete", ":fail", ExpirePrefix)
	}
	now := s.now()
	var err error
	if s.naive {
		err = s.naiveTransition(ctx, s.pol.SetStatus, "taskstore.set-status", t.ID, t.TaskID, t.From, s.q.naiveSetStatus,
			func(now time.Time) []any { return []any{string(t.To), now.UnixMicro(), t.TaskID} })
	} else {
		c := change{op: "taskstore.set-status", id: t.ID, taskID: t.TaskID, from: t.From, to: [2]Status{t.To, t.To}, at: now,
			update: s.q.setStatus, args: []any{string(t.To), t.TaskID, string(t.From)}}
		if t.To == Running {
			c.update = s.q.setStatusRunning
			c.args = []any{string(t.To), now.UnixMicro(), t.TaskID, string(t.From)}
		}
		err = s.apply(ctx, s.pol.SetStatus, c)
	}
	s.record(Entry{Kind: OpSetStatus, ID: t.ID, TaskID: t.TaskID}, err)
	return t.ID, err
}

// validMove reports whether SetStatus makes the move from → to: both known
// statuses, never into Leased (only Claim leases, with a lease that expires),
// and into Running only from Queued (a manual run, with no lease and no job
// attempt counted; a claimed task is started by Start).
func validMove(from, to Status) error {
	known := func(st Status) bool {
		switch st {
		case Queued, Leased, Running, Succeeded, Failed:
			return true
		}
		return false
	}
	switch {
	case !known(from) || !known(to):
		return fmt.Errorf("%w: unknown status in %q → %q", ErrInvalidTransition, from, to)
	case to == Leased:
		return fmt.Errorf("%w: %q → %q: only Claim leases a task", ErrInvalidTransition, from, to)
	case to == Running && from != Queued:
		return fmt.Errorf("%w: %q → %q: a claimed task is started by Start; SetStatus runs only a queued task", ErrInvalidTransition, from, to)
	}
	return nil
}

// reservedID reports whether id has the form of a transition id the store
// makes itself: Start, Complete and Fail append a suffix to the lease token,
// Recover prefixes one.
func reservedID(id string) bool {
	for _, suf := range []string{":start", ":complete", ":fail"} {
		if strings.HasSuffix(id, suf) {
			return true
		}
	}
	return strings.HasPrefix(id, ExpirePrefix)
}

// apply runs c under p: the guarded UPDATE and the audit row in one
// transaction, settled after an ambiguous COMMIT by looking for the audit
// row.
func (s *Store) apply(ctx context.Context, p *sqlretry.Policy, c change) error {
	verify := func(ctx context.Context) (bool, error) { return s.transitionLanded(ctx, c.id, c.taskID, c.to) }
	err := sqlretry.RunTx(ctx, s.db, p, sqlretry.Write(c.op, verify).VerifyWaits(), nil, func(ctx context.Context, tx *sql.Tx) error {
		held, err := s.guard(ctx, tx, c)
		if err != nil {
			return err
		}
		if !held {
			// The guard failed. If it failed because this very transition
			// is already there (an earlier attempt committed after its
			// verify looked), it is done: succeed without a second row.
			if done, err := s.auditExists(ctx, tx, c.id, c.taskID, c.to); err != nil || done {
				return err
			}
			return s.guardError(ctx, tx, c)
		}
		_, err = tx.ExecContext(ctx, s.q.insertAudit, c.id, string(c.from), c.at.UnixMicro(), c.taskID)
		return err
	})
	if _, dup := s.dialect.duplicateKey(err); dup && ctx.Err() == nil {
		// The audit insert is the only insert here: the id already has a
		// row. Ours (an earlier attempt landed after its verify looked) is
		// success; anyone else's means the id was reused.
		ours, rerr := sqlretry.DoValue(ctx, s.pol.Read, sqlretry.Idempotent("taskstore.confirm"), verify)
		switch {
		case rerr == nil && ours:
			return nil
		case rerr == nil:
			return fmt.Errorf("%w: %q (task %s): %w", ErrTransitionIDTaken, c.id, c.taskID, err)
		}
		// The row under our id may be our own earlier attempt's: the
		// transition may have happened, and a plain error would say it
		// did not.
		return ambiguous(c.op, c.id, err, rerr)
	}
	return s.confirm(ctx, err, verify)
}

// guard runs c's guarded UPDATE in tx and reports whether its guard held.
//
// A self-transition (From = To: SetStatus's queued → queued, succeeded →
// succeeded, failed → failed) sets nothing its guard does not already
// require, so whether its UPDATE counts the row depends on the engine:
// PostgreSQL and SQLite count the rows matched, go-sql-driver/mysql the rows
// changed (unless the DSN sets clientFoundRows, the user's choice), which
// for a row already in shape is 0. Its guard is read instead, locking the
// row it finds until the transaction ends, and the UPDATE then runs on that
// row with its count ignored: one behaviour on every engine, whatever the
// DSN says. Every other transition changes the status, so its UPDATE
// changes the row exactly when its guard holds.
func (s *Store) guard(ctx context.Context, tx *sql.Tx, c change) (bool, error) {
	if c.from != c.to[0] || c.from != c.to[1] {
		n, err := affected(ctx, tx, c.update, c.args...)
		return err == nil && n > 0, err
	}
	if c.lease != "" {
		// Only SetStatus, which guards on no lease, moves a task to its
		// own status.
		return false, errors.New("taskstore: " + c.op + ": a self-transition guarded on a lease")
	}
	rows, err := tx.QueryContext(ctx, s.q.lockGuard, c.taskID, string(c.from))
	if err != nil {
		return false, err
	}
	held := rows.Next()
	err = rows.Err()
	if cerr := rows.Close(); err == nil {
		err = cerr
	}
	if err != nil || !held {
		return false, err
	}
	_, err = tx.ExecContext(ctx, c.update, c.args...)
	return err == nil, err
}

// confirm reads once more before the store reports a failure whose last
// attempt ended with an unknown outcome (a command timeout, a lost
// connection) and that the Policy did not report as ambiguous: such an
// attempt may have committed, and a write that landed must not be reported
// as failed. It costs one read, on error paths only, and never runs after
// the caller's context is done.
func (s *Store) confirm(ctx context.Context, err error, verify sqlretry.VerifyFunc) error {
	var re *sqlretry.Error
	if err == nil || ctx.Err() != nil || errors.Is(err, sqlretry.ErrAmbiguous) || !errors.As(err, &re) || re.Class.Phase != sqlretry.Unknown {
		return err
	}
	applied, verr := sqlretry.DoValue(ctx, s.pol.Read, sqlretry.Idempotent("taskstore.confirm"), verify)
	if verr == nil && applied {
		return nil
	}
	return err
}

// ambiguous is the error of a write whose outcome the store could not
// settle: it matches sqlretry.ErrAmbiguous and wraps err, the write's
// error, and rerr, the settling read's.
func ambiguous(op, id string, err, rerr error) error {
	return fmt.Errorf("taskstore: %s %s: %w: settling it failed: %w (the write's error: %w)", op, id, sqlretry.ErrAmbiguous, rerr, err)
}

// A verdict ("applied", "not applied") about an attempt that failed is
// given only once that attempt is dead on the server. A client that saw its
// connection drop may have left its COMMIT on the way: the server reads it
// later and commits, after a read on another connection said "not there"
// (the chaos command's PostgreSQL and MariaDB runs meet it; SQLite runs in
// the process, so a failed call has finished). Every write here commits
// only after its last statement was answered, and that statement holds a
// lock until the transaction ends: the UPDATE holds the task's row, the
// audit insert the transition id's unique-index entry. A verdict therefore
// first takes the same lock in a transaction it rolls back, which waits
// until no transaction that could still commit the write is in flight, then
// reads. (A Persist is a single autocommit INSERT: there is no lock to wait
// behind until the server has started it, so it has no such barrier.)

// awaitTransition waits until no transaction that may still commit the
// audit row of transition id is in flight.
func (s *Store) awaitTransition(ctx context.Context, id string) error {
	return s.barrier(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, s.q.probeAudit, id)
		return err
	})
}

// awaitTask waits until no transaction that updated task id is in flight.
func (s *Store) awaitTask(ctx context.Context, id string) error {
	return s.barrier(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, s.q.lockTask, id)
		if err != nil {
			return err
		}
		return rows.Close()
	})
}

// barrier runs wait in a transaction it rolls back: nothing it does is
// ever committed.
func (s *Store) barrier(ctx context.Context, wait func(tx *sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	err = wait(tx)
	// A rollback that fails leaves nothing behind either: a server rolls
	// back a transaction whose connection is gone.
	_ = tx.Rollback()
	return err
}

// transitionLanded is the verdict on transition id: whether its audit row
// (on task taskID, into one of the statuses to) exists, read once no
// attempt that could still commit it is in flight.
func (s *Store) transitionLanded(ctx context.Context, id, taskID string, to [2]Status) (bool, error) {
	if err := s.awaitTransition(ctx, id); err != nil {
		return false, err
	}
	return s.auditExists(ctx, s.db, id, taskID, to)
}

// auditExists reports whether the audit row of transition id exists: on
// task taskID, into one of the statuses to.
func (s *Store) auditExists(ctx context.Context, q querier, id, taskID string, to [2]Status) (bool, error) {
	var n int
	if err := q.QueryRowContext(ctx, s.q.auditCount, id, taskID, string(to[0]), string(to[1])).Scan(&n); err != nil {
		return false, err
	}
	return n > 0, nil
}

// guardError explains a guard that failed.
func (s *Store) guardError(ctx context.Context, q querier, c change) error {
	t, err := s.get(ctx, q, c.taskID)
	if errors.Is(err, ErrNotFound) {
		return &StatusError{TaskID: c.taskID, Want: c.from, cause: ErrNotFound}
	}
	if err != nil {
		return err
	}
	if c.lease != "" {
		var token sql.NullString
		var exp sql.NullInt64
		if err := q.QueryRowContext(ctx, s.q.leaseOf, c.taskID).Scan(&token, &exp); err != nil {
			return err
		}
		if token.String != c.lease {
			return &StatusError{TaskID: c.taskID, Want: c.from, Got: t.Status, cause: ErrLeaseLost}
		}
	}
	return &StatusError{TaskID: c.taskID, Want: c.from, Got: t.Status, cause: ErrStatusConflict}
}

// Lease is a claimed task: the worker that holds it, the token that proves
// it, and until when.
type Lease struct {
	Token     string
	Owner     string
	ExpiresAt time.Time
	Task      Task
}

// errClaimRace: the candidate the claim selected was gone when it was
// updated. Row locks (PostgreSQL, MariaDB) and BEGIN IMMEDIATE (SQLite)
// rule it out; it is reported, not retried, if a misconfiguration allows it.
var errClaimRace = errors.New("taskstore: claim: the selected task changed before it was leased (is the SQLite database opened with _txlock=immediate?)")

// Claim leases the next due task to owner for Options.LeaseTTL, and returns
// nil when no task is due. The candidate is locked with FOR UPDATE SKIP
// LOCKED where the engine has it, so concurrent workers take different
// tasks; the lease and its audit row commit together.
//
// After an ambiguous COMMIT the claim is settled by reading what this worker
// holds: the audit row of the claim's token, then the task it leased. So a
// claimed task is neither lost (a claim that landed is returned, not
// abandoned) nor run twice (a claim that landed is not replayed to take a
// second task). A claim whose outcome cannot be settled leaves at worst a
// lease nobody uses, which expires and is returned to the queue by
// [Store.Recover]. A claim that landed but whose lease expired and was taken
// back before it was settled returns a [*StatusError] matching
// [ErrLeaseLost]: the caller holds nothing. The ledger records that claim as
// applied (it was), not as a failed write.
func (s *Store) Claim(ctx context.Context, owner string) (*Lease, error) {
	token := s.newID()
	var lease *Lease
	lost := false
	attempt := 0
	body := func(ctx context.Context, tx *sql.Tx) error {
		lease = nil
		attempt++
		if attempt > 1 && !s.naive {
			// Retry only if the claim is not already there: an earlier
			// attempt may have committed although its error said otherwise.
			l, landed, err := s.holding(ctx, tx, token, owner)
			if err != nil {
				return err
			}
			if landed {
				lease, lost = l, l == nil
				return nil
			}
		}
		var err error
		lease, err = s.leaseNext(ctx, tx, token, owner)
		return err
	}
	var err error
	if s.naive {
		err = sqlretry.RunTx(ctx, s.db, s.pol.Claim, sqlretry.Idempotent("taskstore.claim"), nil, body)
	} else {
		verify := func(ctx context.Context) (bool, error) {
			l, held, err := s.claimLanded(ctx, token, owner)
			if err != nil || !held {
				return held, err
			}
			lease, lost = l, l == nil
			return true, nil
		}
		err = sqlretry.RunTx(ctx, s.db, s.pol.Claim, sqlretry.Write("taskstore.claim", verify).VerifyWaits(), nil, body)
		err = s.confirm(ctx, err, verify)
		if err == nil && lost {
			err = &StatusError{Want: Leased, cause: ErrLeaseLost}
		}
	}
	s.recordClaim(token, lease, lost, err)
	if err != nil {
		return nil, err
	}
	return lease, nil
}

// leaseNext leases the next due task, if any, to owner under token in tx,
// and writes the claim's audit row (the token is its transition id).
func (s *Store) leaseNext(ctx context.Context, tx *sql.Tx, token, owner string) (*Lease, error) {
	now := s.now()
	var id string
	err := tx.QueryRowContext(ctx, s.q.claimCandidate, now.UnixMicro()).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	exp := now.Add(s.ttl)
	if n, err := affected(ctx, tx, s.q.claim, owner, token, exp.UnixMicro(), id); err != nil {
		return nil, err
	} else if n != 1 {
		return nil, errClaimRace
	}
	if _, err := tx.ExecContext(ctx, s.q.insertAudit, token, string(Queued), now.UnixMicro(), id); err != nil {
		return nil, err
	}
	t, err := s.get(ctx, tx, id)
	if err != nil {
		return nil, err
	}
	return &Lease{Token: token, Owner: owner, ExpiresAt: fromUS(us(exp)), Task: t}, nil
}

// recordClaim tells the ledger what a claim told its caller. A claim that
// found no task due wrote nothing, and is not recorded.
func (s *Store) recordClaim(token string, lease *Lease, lost bool, err error) {
	if lease == nil && err == nil {
		return
	}
	e := Entry{Kind: OpClaim, ID: token}
	if lease != nil {
		e.TaskID = lease.Task.ID
	}
	if lost {
		// The claim was applied (its audit row is there); the lease was
		// lost after it. The write is recorded as applied, so the ledger
		// does not count the caller's ErrLeaseLost as a misreported
		// failure.
		err = nil
	}
	s.record(e, err)
}

// claimLanded is the verdict on the claim with token: holding, read once no
// attempt that could still commit the claim is in flight (the claim's audit
// row carries the token as its transition id).
func (s *Store) claimLanded(ctx context.Context, token, owner string) (lease *Lease, landed bool, err error) {
	if err := s.awaitTransition(ctx, token); err != nil {
		return nil, false, err
	}
	return s.holding(ctx, s.db, token, owner)
}

// holding settles an ambiguous claim: landed reports whether the claim with
// token committed; lease is what owner holds under it now (nil if the lease
// has since expired and been taken back).
func (s *Store) holding(ctx context.Context, q querier, token, owner string) (lease *Lease, landed bool, err error) {
	var id string
	err = q.QueryRowContext(ctx, s.q.auditTask, token).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	var held sql.NullString
	var exp sql.NullInt64
	err = q.QueryRowContext(ctx, s.q.leaseOf, id).Scan(&held, &exp)
	if err != nil {
		return nil, true, err
	}
	if held.String != token {
		return nil, true, nil
	}
	t, err := s.get(ctx, q, id)
	if err != nil {
		return nil, true, err
	}
	return &Lease{Token: token, Owner: owner, ExpiresAt: fromUS(exp), Task: t}, true, nil
}

// Start marks the leased task Running and counts one job attempt: call it
// when the handler is about to start, and only then. Storage retries never
// reach the counter: Start is a transition like SetStatus, settled by its
// audit row after an ambiguous COMMIT, so a replay cannot count the attempt
// twice. The lease is extended by Options.LeaseTTL.
func (s *Store) Start(ctx context.Context, l *Lease) error {
	id := l.Token + ":start"
	now := s.now()
	var err error
	if s.naive {
		err = s.naiveTransition(ctx, s.pol.Finish, "taskstore.start", id, l.Task.ID, Leased, s.q.naiveStart,
			func(now time.Time) []any { return []any{now.UnixMicro(), now.Add(s.ttl).UnixMicro(), l.Task.ID} })
	} else {
		err = s.apply(ctx, s.pol.Finish, change{op: "taskstore.start", id: id, taskID: l.Task.ID, from: Leased, to: [2]Status{Running, Running}, lease: l.Token, at: now,
			update: s.q.start, args: []any{now.UnixMicro(), now.Add(s.ttl).UnixMicro(), l.Task.ID, l.Token}})
	}
	s.record(Entry{Kind: OpStart, ID: id, TaskID: l.Task.ID}, err)
	return err
}

// Started reports whether [Store.Start] on l landed, by reading the audit
// row of its start transition under the Read policy (retried on any
// transient failure), once no Start attempt that could still commit is in
// flight on the server. A caller whose Start returned an error matching
// sqlretry.ErrAmbiguous settles the job attempt with it, or with
// [Store.SettleStart], which also outlasts an outage: true means the attempt
// was counted and the handler must run (or the attempt is spent for
// nothing); false means it was not, and the lease expires unused.
// [Store.Work] settles it itself.
func (s *Store) Started(ctx context.Context, l *Lease) (bool, error) {
	landed, _, err := s.startState(ctx, l, false)
	return landed, err
}

// startState reads, under the Read policy and once no Start attempt that
// could still commit is in flight, whether l's Start landed and, with
// lease, whether l still holds the task.
func (s *Store) startState(ctx context.Context, l *Lease, lease bool) (landed, held bool, err error) {
	id := l.Token + ":start"
	err = s.pol.Read.Do(ctx, sqlretry.Idempotent("taskstore.started"), func(ctx context.Context) error {
		var err error
		landed, err = s.transitionLanded(ctx, id, l.Task.ID, [2]Status{Running, Running})
		if err != nil || !landed || !lease {
			return err
		}
		var token sql.NullString
		var exp sql.NullInt64
		if err := s.db.QueryRowContext(ctx, s.q.leaseOf, l.Task.ID).Scan(&token, &exp); err != nil {
			return err
		}
		held = token.Valid && token.String == l.Token
		return nil
	})
	return landed, held, err
}

// Settling an ambiguous Start waits between reads from settleBase, doubling
// up to settleCap.
const (
	settleBase = 50 * time.Millisecond
	settleCap  = time.Second
)

// SettleStart settles a Start on l whose outcome is unknown (its error
// matches sqlretry.ErrAmbiguous): true means the job attempt was counted and
// l still holds the task, so the handler must run now; false with a nil
// error means the Start did not land (and never will), so the lease expires
// unused.
//
// A Start is left ambiguous when its reply and then its verify were lost:
// on a server, typically as an outage begins. So, unlike [Store.Started],
// SettleStart does not give up when one read fails: it reads again, with
// capped exponential backoff, until the database answers, for as long as a
// lease lasts (Options.LeaseTTL on the store's clock: past that, a Start
// that landed has lost its task to [Store.Recover]) or until ctx is done.
// Giving up earlier would leave a job attempt counted with no handler start.
// It then returns the last read's error. A Start that landed on a lease
// that has since been taken back yields a [*StatusError] matching
// [ErrLeaseLost]: the attempt was counted, but the task is no longer the
// caller's to run.
func (s *Store) SettleStart(ctx context.Context, l *Lease) (bool, error) {
	until := s.now().Add(s.ttl)
	var prev time.Duration
	for n := 1; ; n++ {
		landed, held, err := s.startState(ctx, l, true)
		switch {
		case err == nil && landed && !held:
			return false, &StatusError{TaskID: l.Task.ID, Want: Running, cause: ErrLeaseLost}
		case err == nil:
			return landed, nil
		case ctx.Err() != nil || !s.now().Before(until):
			return false, err
		}
		prev = sqlretry.Delay(sqlretry.EqualJitter, settleBase, settleCap, n, prev, rand.Float64())
		t := time.NewTimer(prev)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return false, err
		}
	}
}

// Complete marks the started task Succeeded and releases its lease. A lease
// that expired and was taken over yields [ErrLeaseLost].
func (s *Store) Complete(ctx context.Context, l *Lease) error {
	id := l.Token + ":complete"
	var err error
	if s.naive {
		err = s.naiveTransition(ctx, s.pol.Finish, "taskstore.complete", id, l.Task.ID, Running, s.q.naiveComplete,
			func(time.Time) []any { return []any{l.Task.ID} })
	} else {
		err = s.apply(ctx, s.pol.Finish, change{op: "taskstore.complete", id: id, taskID: l.Task.ID, from: Running, to: [2]Status{Succeeded, Succeeded}, lease: l.Token, at: s.now(),
			update: s.q.complete, args: []any{l.Task.ID, l.Token}})
	}
	s.record(Entry{Kind: OpComplete, ID: id, TaskID: l.Task.ID}, err)
	return err
}

// Fail records a failed job attempt: the task goes back to Queued, due at
// retryAt (zero: now), while it has attempts left, and to Failed when
// JobAttempts reached MaxAttempts. The decision is made in the UPDATE from
// the stored counter, which only Start moves.
func (s *Store) Fail(ctx context.Context, l *Lease, retryAt time.Time) error {
	id := l.Token + ":fail"
	now := s.now()
	if retryAt.IsZero() {
		retryAt = now
	}
	err := s.apply(ctx, s.pol.Finish, change{op: "taskstore.fail", id: id, taskID: l.Task.ID, from: Running, to: [2]Status{Queued, Failed}, lease: l.Token, at: now,
		update: s.q.fail, args: []any{retryAt.UnixMicro(), l.Task.ID, l.Token}})
	s.record(Entry{Kind: OpFail, ID: id, TaskID: l.Task.ID}, err)
	return err
}

// Recover returns tasks whose lease expired to the queue (a Running task
// whose attempts are spent goes to Failed), each with an audit row, and
// reports how many it moved. It is the pass that heals whatever a failed
// write left stale: a claim nobody knows it holds, a worker that died.
//
// Recover is idempotent by construction: each release is guarded on the
// lease token it found and audited under "expire:" + that token, so a replay
// after an ambiguous COMMIT finds nothing left to release. It is replayed
// freely.
func (s *Store) Recover(ctx context.Context) (int, error) {
	var moved int
	err := sqlretry.RunTx(ctx, s.db, s.pol.Recover, sqlretry.Idempotent("taskstore.recover"), nil, func(ctx context.Context, tx *sql.Tx) error {
		moved = 0
		now := s.now()
		type exp struct{ id, status, token string }
		var found []exp
		err := eachRow(ctx, tx, s.q.expired, []any{now.UnixMicro(), s.batch}, func(rows *sql.Rows) error {
			var e exp
			var token sql.NullString
			if err := rows.Scan(&e.id, &e.status, &token); err != nil {
				return err
			}
			e.token = token.String
			found = append(found, e)
			return nil
		})
		if err != nil {
			return err
		}
		for _, e := range found {
			if n, err := affected(ctx, tx, s.q.expire, now.UnixMicro(), e.id, nullStr(e.token), now.UnixMicro()); err != nil {
				return err
			} else if n == 0 {
				continue
			}
			if _, err := tx.ExecContext(ctx, s.q.insertAudit, ExpirePrefix+e.token, e.status, now.UnixMicro(), e.id); err != nil {
				return err
			}
			moved++
		}
		return nil
	})
	return moved, err
}

// ExpirePrefix starts the transition id of every audit row Recover writes.
const ExpirePrefix = "expire:"

// A Handler runs one task. Its error fails the job attempt.
type Handler func(ctx context.Context, t Task) error

// Work runs one task end to end, the loop a worker repeats: Claim, Start
// (the job attempt is counted as the handler starts, and the ledger, if
// any, records the start), the handler, then Complete or Fail. It reports
// whether a task was claimed. A Start whose outcome is ambiguous is settled
// with [Store.SettleStart], through an outage if need be: if it landed, the
// handler runs. A storage error leaves the lease to expire, and Recover
// returns the task to the queue; a caller's cancellation ends Work without a
// Fail, so it never turns into a job retry.
func (s *Store) Work(ctx context.Context, owner string, h Handler, retryDelay time.Duration) (bool, error) {
	l, err := s.Claim(ctx, owner)
	if err != nil || l == nil {
		return false, err
	}
	if err := s.Start(ctx, l); err != nil {
		// An ambiguous Start may have counted the attempt: settle it, and
		// run the handler if it did, or the attempt is spent for nothing.
		if OutcomeOf(err) != ToldAmbiguous || ctx.Err() != nil {
			return true, err
		}
		started, serr := s.SettleStart(ctx, l)
		if errors.Is(serr, ErrLeaseLost) {
			return true, serr
		}
		if serr != nil || !started {
			return true, err
		}
	}
	if s.ledger != nil {
		s.ledger.HandlerStarted(l.Task.ID)
	}
	herr := h(ctx, l.Task)
	if ctx.Err() != nil {
		return true, ctx.Err()
	}
	if herr != nil {
		return true, s.Fail(ctx, l, s.now().Add(retryDelay))
	}
	return true, s.Complete(ctx, l)
}
