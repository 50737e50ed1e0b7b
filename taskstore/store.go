package taskstore

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"time"

	"github.com/sqlretry/sqlretry"
)

// Status is a task's state.
type Status string

// The statuses a task moves through. Queued → Leased (Claim) → Running
// (Start: the handler starts, a job attempt is counted) → Succeeded
// (Complete), or back to Queued / on to Failed (Fail). An expired lease
// returns a Leased or Running task to Queued (Recover).
const (
	Queued    Status = "queued"
	Leased    Status = "leased"
	Running   Status = "running"
	Succeeded Status = "succeeded"
	Failed    Status = "failed"
)

// Task is one row of the tasks table.
type Task struct {
	// ID is the primary key, chosen by the client (so an ambiguous insert
	// can be read back). Persist generates one if it is empty.
	ID string
	// Key is an optional unique task key ("" for none): a second task with
	// the same key is refused with ErrTaskKeyTaken.
	Key string
	// ParentID and ScheduledAt place an occurrence in a recurring series:
	// the pair is unique (the occurrence index). Both empty for a plain task.
	ParentID    string
	ScheduledAt time.Time
	// DueAt is when the task may be claimed; Persist sets zero to now.
	DueAt  time.Time
	Status Status
	// JobAttempts counts handler starts, never storage retries.
	JobAttempts int
	// MaxAttempts bounds JobAttempts; Persist sets zero to Options.MaxAttempts.
	MaxAttempts     int
	LastExecutionAt time.Time
	// ScheduleVersion, CurrentRunCount and MaxRuns belong to a recurring
	// series' own row: see [Store.AdvanceRun]. MaxRuns 0 means unlimited.
	ScheduleVersion int64
	CurrentRunCount int
	MaxRuns         int
	LeaseOwner      string
	LeaseExpiresAt  time.Time
	Payload         []byte
}

// Policies holds one *sqlretry.Policy per operation. A nil field falls back
// to Options.Policy. The Policy sets limits, timeouts and the budget; what
// an operation may replay is decided by the operation itself (see the
// package documentation), never by a flag.
type Policies struct {
	Persist    *sqlretry.Policy // Persist, EnsureOccurrence
	SetStatus  *sqlretry.Policy // SetStatus
	AdvanceRun *sqlretry.Policy // AdvanceRun
	Claim      *sqlretry.Policy // Claim
	Finish     *sqlretry.Policy // Start, Complete, Fail
	Recover    *sqlretry.Policy // Recover
	Read       *sqlretry.Policy // Get, Migrate, Check, and the final confirm of a failed write
}

// Options configures a [Store]. The zero value works.
type Options struct {
	// Policy is every operation's Policy unless Policies names another.
	// If nil, a Policy with the dialect's classifier and default settings.
	Policy   *sqlretry.Policy
	Policies Policies
	// LeaseTTL is how long a claim (and a started run) holds its task. If
	// 0, 30 s.
	LeaseTTL time.Duration
	// MaxAttempts is the job attempts a task gets when Task.MaxAttempts is
	// 0. If 0, 3.
	MaxAttempts int
	// RecoverBatch bounds the expired leases one Recover call returns to
	// the queue. If 0, 100.
	RecoverBatch int
	// Now is the clock. If nil, time.Now.
	Now func() time.Time
	// NewID returns a fresh unique id for tasks, transitions, claims and
	// advances. If nil, 16 random bytes in hex.
	NewID func() string
	// Ledger, if set, records what every write told its caller, for
	// [Store.Check].
	Ledger *Ledger
}

// Store is the task storage. It is safe for concurrent use by multiple
// goroutines.
type Store struct {
	db      *sql.DB
	dialect Dialect
	q       *queries
	pol     Policies
	ttl     time.Duration
	maxAtt  int
	batch   int
	now     func() time.Time
	newID   func() string
	ledger  *Ledger
	naive   bool // the blind-replay store (naive.go), set only through internal/naivestore
}

// New returns a Store on db for dialect d. It does not touch the database:
// call [Store.Migrate] to create the tables.
func New(db *sql.DB, d Dialect, o Options) (*Store, error) {
	if db == nil {
		return nil, errors.New("taskstore: New: nil *sql.DB")
	}
	if d > MariaDB {
		return nil, errors.New("taskstore: New: unknown " + d.String())
	}
	switch {
	case o.LeaseTTL < 0:
		return nil, errors.New("taskstore: Options.LeaseTTL must be >= 0, got " + o.LeaseTTL.String())
	case o.MaxAttempts < 0:
		return nil, errors.New("taskstore: Options.MaxAttempts must be >= 0")
	case o.RecoverBatch < 0:
		return nil, errors.New("taskstore: Options.RecoverBatch must be >= 0")
	}
	s := &Store{db: db, dialect: d, q: queriesFor(d), pol: o.Policies, ttl: o.LeaseTTL, maxAtt: o.MaxAttempts,
		batch: o.RecoverBatch, now: o.Now, newID: o.NewID, ledger: o.Ledger}
	def := o.Policy
	if def == nil {
		var err error
		if def, err = sqlretry.New(sqlretry.Config{Classifier: Classifier(d)}); err != nil {
			return nil, err
		}
	}
	for _, p := range []**sqlretry.Policy{&s.pol.Persist, &s.pol.SetStatus, &s.pol.AdvanceRun, &s.pol.Claim, &s.pol.Finish, &s.pol.Recover, &s.pol.Read} {
		if *p == nil {
			*p = def
		}
	}
	if s.ttl == 0 {
		s.ttl = 30 * time.Second
	}
	if s.maxAtt == 0 {
		s.maxAtt = 3
	}
	if s.batch == 0 {
		s.batch = 100
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.newID == nil {
		s.newID = randomID
	}
	return s, nil
}

// DB returns the store's database handle.
func (s *Store) DB() *sql.DB { return s.db }

// Dialect returns the store's dialect.
func (s *Store) Dialect() Dialect { return s.dialect }

// Ledger returns the ledger the store records into, nil if none.
func (s *Store) Ledger() *Ledger { return s.ledger }

func randomID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// us converts t to the stored form: Unix microseconds, NULL for zero.
func us(t time.Time) sql.NullInt64 {
	if t.IsZero() {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: t.UnixMicro(), Valid: true}
}

func fromUS(n sql.NullInt64) time.Time {
	if !n.Valid {
		return time.Time{}
	}
	return time.UnixMicro(n.Int64).UTC()
}

func nullStr(s string) sql.NullString { return sql.NullString{String: s, Valid: s != ""} }

// Persist inserts t as a new queued task and returns it as stored (with its
// id and defaults filled in).
//
// The insert is not idempotent, so it is replayed only when a failure proves
// it was not applied. After an ambiguous failure (a timeout or a connection
// lost after the INSERT left) the store reads the row back by primary key:
// if it is there and it is ours (same content), the insert was applied and
// Persist succeeds; if not, it is retried. A duplicate-key error proves
// success only on a retry after an attempt of this call whose outcome was
// unknown, and only when the row stored under our primary key is ours (a
// second insert of our own row may be reported on any of its unique keys,
// so the row decides, not the constraint name). Otherwise it is a collision:
// a task already stored under the id (a different one, or this very task
// persisted by an earlier call: re-submitting a task is not a retry) is a
// [*ConflictError] matching [ErrIDTaken], and a task-key or occurrence
// collision one matching [ErrTaskKeyTaken] or [ErrOccurrenceTaken]: never
// "already inserted".
func (s *Store) Persist(ctx context.Context, t Task) (Task, error) {
	t = s.prepare(t)
	var err error
	if s.naive {
		err = s.naivePersist(ctx, t)
	} else {
		op := sqlretry.Write("taskstore.persist", func(ctx context.Context) (bool, error) {
			return s.isOurs(ctx, s.db, t)
		})
		// landed: an attempt of this call ended with an unknown outcome, so
		// the row under t.ID may be its insert.
		landed := false
		err = s.pol.Persist.Do(ctx, op, func(ctx context.Context) error {
			err := s.insert(ctx, t)
			if err == nil {
				return nil
			}
			c, dup := s.dialect.duplicateKey(err)
			if !dup {
				landed = landed || mayHaveApplied(ctx, s.pol.Persist, err)
				return err
			}
			// The row under our id decides. If this call may have inserted
			// it and it is ours, our own earlier attempt landed (its reply
			// was lost) and every unique key it holds is ours too: the engine
			// may name any of them, so the proof is the row, not the
			// constraint. Any other row under our id, or ours before any
			// attempt of this call can have landed (the task was persisted
			// before), means the id is taken; with no row under it, the
			// constraint says which collision this is.
			got, rerr := s.get(ctx, s.db, t.ID)
			switch {
			case errors.Is(rerr, ErrNotFound):
				return &ConflictError{TaskID: t.ID, Constraint: c, Err: err}
			case rerr != nil:
				return rerr
			case landed && sameTask(got, t):
				return nil
			}
			return &ConflictError{TaskID: t.ID, Constraint: ConstraintPrimaryKey, Err: err}
		})
	}
	s.record(Entry{Kind: OpPersist, ID: t.ID, TaskID: t.ID, Fingerprint: fingerprint(t)}, err)
	return t, err
}

// mayHaveApplied reports whether the attempt that failed with err may have
// applied its write: its outcome is unknown (the command timeout ended it,
// or p's classifier says so), not proved not sent or not applied.
func mayHaveApplied(ctx context.Context, p *sqlretry.Policy, err error) bool {
	return ctx.Err() != nil || errors.Is(err, sqlretry.ErrAmbiguous) || p.Classify(err).Phase == sqlretry.Unknown
}

// prepare fills in Persist's defaults.
func (s *Store) prepare(t Task) Task {
	if t.ID == "" {
		t.ID = s.newID()
	}
	if t.DueAt.IsZero() {
		t.DueAt = s.now()
	}
	if t.MaxAttempts == 0 {
		t.MaxAttempts = s.maxAtt
	}
	t.Status = Queued
	t.JobAttempts, t.ScheduleVersion, t.CurrentRunCount = 0, 0, 0
	t.LastExecutionAt, t.LeaseOwner, t.LeaseExpiresAt = time.Time{}, "", time.Time{}
	// The stored form keeps microseconds: compare what was stored.
	t.DueAt = t.DueAt.Truncate(time.Microsecond).UTC()
	if !t.ScheduledAt.IsZero() {
		t.ScheduledAt = t.ScheduledAt.Truncate(time.Microsecond).UTC()
	}
	if t.Payload == nil {
		t.Payload = []byte{}
	}
	return t
}

func (s *Store) insert(ctx context.Context, t Task) error {
	_, err := s.db.ExecContext(ctx, s.q.insert, t.ID, nullStr(t.Key), nullStr(t.ParentID), us(t.ScheduledAt),
		t.DueAt.UnixMicro(), string(Queued), t.MaxAttempts, t.MaxRuns, t.Payload, s.now().UnixMicro())
	return err
}

// isOurs reads the row stored under t.ID and reports whether it is t: the
// same content Persist tried to store.
func (s *Store) isOurs(ctx context.Context, q querier, t Task) (bool, error) {
	got, err := s.get(ctx, q, t.ID)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return sameTask(got, t), nil
}

// sameTask compares the content Persist stores that no later write
// changes (DueAt moves on a job retry).
func sameTask(a, b Task) bool {
	return a.ID == b.ID && a.Key == b.Key && a.ParentID == b.ParentID && a.ScheduledAt.Equal(b.ScheduledAt) &&
		a.MaxAttempts == b.MaxAttempts && a.MaxRuns == b.MaxRuns && bytes.Equal(a.Payload, b.Payload)
}

// querier is what *sql.DB and *sql.Tx share.
type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// affected runs a write and returns how many rows it changed.
func affected(ctx context.Context, q querier, query string, args ...any) (int64, error) {
	res, err := q.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// eachRow runs query and calls scan on each row it returns.
func eachRow(ctx context.Context, q querier, query string, args []any, scan func(*sql.Rows) error) error {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := scan(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// Get reads one task. It is a read, so it is replayed on any transient
// failure.
func (s *Store) Get(ctx context.Context, id string) (Task, error) {
	return sqlretry.DoValue(ctx, s.pol.Read, sqlretry.Idempotent("taskstore.get"), func(ctx context.Context) (Task, error) {
		return s.get(ctx, s.db, id)
	})
}

func (s *Store) get(ctx context.Context, q querier, id string) (Task, error) {
	t, err := scanTask(q.QueryRowContext(ctx, s.q.get, id))
	if errors.Is(err, sql.ErrNoRows) {
		return Task{}, ErrNotFound
	}
	return t, err
}

// scanTask reads the taskColumns of one row.
func scanTask(row interface{ Scan(dest ...any) error }) (Task, error) {
	var (
		t                              Task
		key, parent, owner             sql.NullString
		sched, lastExec, leaseExp, due sql.NullInt64
		status                         string
	)
	err := row.Scan(&t.ID, &key, &parent, &sched, &due, &status, &t.JobAttempts,
		&t.MaxAttempts, &lastExec, &t.ScheduleVersion, &t.CurrentRunCount, &t.MaxRuns, &owner, &leaseExp, &t.Payload)
	if err != nil {
		return Task{}, err
	}
	t.Key, t.ParentID, t.LeaseOwner, t.Status = key.String, parent.String, owner.String, Status(status)
	t.ScheduledAt, t.DueAt, t.LastExecutionAt, t.LeaseExpiresAt = fromUS(sched), fromUS(due), fromUS(lastExec), fromUS(leaseExp)
	if t.Payload == nil {
		t.Payload = []byte{}
	}
	return t, nil
}

// record tells the ledger, if any, what a write told its caller.
func (s *Store) record(e Entry, err error) {
	if s.ledger != nil {
		s.ledger.Record(e, err)
	}
}
