// Package marker is the commit-marker CommitVerifier the engine packages
// export as MarkerVerifier (postgres, mysql, sqlite, mssql), parametrized
// by a small [Dialect]. Standard library and the root package only.
//
// Mark inserts a row with a random key into a marker table inside the
// transaction, just before COMMIT. After an ambiguous COMMIT, Committed
// looks for the key through the pool, on whatever server is primary now:
// found means committed. Not found is not yet final — the transaction may
// still be in flight on the server — so Committed then inserts the same key
// itself, as a tombstone, in autocommit. The primary key makes that insert
// wait for an uncommitted insert of the key: a duplicate-key error means
// the marked transaction committed, and a tombstone that lands means the
// marker can never commit any more (the transaction was rolled back).
// A row's tombstone flag tells the two apart when a Committed whose reply
// was lost is asked again.
//
// Old rows are pruned outside any user transaction: every PruneEvery-th
// BeforeTx (which RunTx calls before an attempt takes its connection)
// deletes at most 4×PruneEvery rows older than TTL, in autocommit. A
// delete inside the user's transaction would take its locks there (InnoDB
// next-key locks on the created_at range, PostgreSQL's serialization
// checks) and could make user transactions wait on, deadlock with, or fail
// a serialization check against each other.
package marker

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	sr "github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/internal/wait"
)

// Defaults of [Config]'s fields.
const (
	DefaultMaxWait    = 5 * time.Second
	DefaultTTL        = time.Hour
	DefaultPruneEvery = 100
	// pruneBatch is how many rows one prune deletes at most, per
	// PruneEvery: four times what the transactions in between added, so
	// a backlog drains.
	pruneBatch = 4
	// minTTL: a marker must outlive every settle of its transaction by far.
	minTTL = time.Minute
	// firstPause and maxPause bound the pauses between two tries while the
	// key is locked and the engine answered at once (SQLITE_BUSY, a lock
	// timeout shorter than MaxWait).
	firstPause = 10 * time.Millisecond
	maxPause   = 200 * time.Millisecond
)

// ErrInFlight is the error of Committed when the marker's key stayed locked
// for MaxWait: the marked transaction may still be committing (its server
// has not noticed the lost connection, or COMMIT waits on a synchronous
// replica). RunTx then ends the call with an error matching ErrAmbiguous.
var ErrInFlight = errors.New("the marked transaction may still be committing: its marker key stayed locked for MaxWait")

// Config is an engine package's MarkerVerifier, field for field; see
// postgres.MarkerVerifier for their documentation.
type Config struct {
	Table       string
	CreateTable bool
	MaxWait     time.Duration
	TTL         time.Duration
	PruneEvery  int

	// Test seams; nil means the real thing.
	Now    func() time.Time
	Sleep  func(ctx context.Context, d time.Duration) error
	NewKey func() string
}

// Verifier is a commit-marker verifier for one dialect and table. It is
// safe for concurrent use.
type Verifier struct {
	name    string // "postgres: MarkerVerifier", for errors
	d       *Dialect
	table   Name
	stmts   atomic.Pointer[statements] // qualified once resolve has run
	mu      sync.Mutex                 // serializes resolve
	done    atomic.Bool                // resolve found the schema, or need not run
	create  bool
	maxWait time.Duration
	ttl     time.Duration
	every   int64 // 0: never prune
	now     func() time.Time
	sleep   func(ctx context.Context, d time.Duration) error
	newKey  func() string

	created sync.Map // *sql.DB → struct{}: CreateTable done there
	calls   atomic.Int64
}

// New returns a Verifier for c, or an error naming the field that is wrong.
func New(d *Dialect, c Config) (*Verifier, error) {
	v := &Verifier{name: d.Engine + ": MarkerVerifier", d: d, create: c.CreateTable,
		maxWait: c.MaxWait, ttl: c.TTL, every: int64(c.PruneEvery), now: c.Now, sleep: c.Sleep, newKey: c.NewKey}
	table := c.Table
	if table == "" {
		table = DefaultTable
	}
	name, err := ParseName(table)
	if err != nil {
		return nil, v.fieldError("Table", err.Error())
	}
	v.table = name
	st := d.statements(name)
	v.stmts.Store(&st)
	v.done.Store(name.Schema != "" || d.Schema == nil)
	switch {
	case c.MaxWait < 0:
		return nil, v.fieldError("MaxWait", "is negative")
	case c.MaxWait == 0:
		v.maxWait = DefaultMaxWait
	}
	switch {
	case c.TTL == 0:
		v.ttl = DefaultTTL
	case c.TTL < minTTL:
		return nil, v.fieldError("TTL", fmt.Sprintf("%v is under %v: a marker must outlive every settle of its transaction by far", c.TTL, minTTL))
	}
	if v.ttl < 10*v.maxWait {
		// A COMMIT that waits (on a synchronous standby, say) up to about
		// MaxWait could see its marker pruned as it lands, and the
		// tombstone then calls a committed transaction not applied.
		return nil, v.fieldError("TTL", fmt.Sprintf("%v is under 10×MaxWait (%v): a marker must outlive every settle of its transaction by far", v.ttl, 10*v.maxWait))
	}
	switch {
	case c.PruneEvery == 0:
		v.every = DefaultPruneEvery
	case c.PruneEvery < 0:
		v.every = 0
	}
	v.setSeams()
	return v, nil
}

func (v *Verifier) setSeams() {
	if v.now == nil {
		v.now = time.Now
	}
	if v.sleep == nil {
		v.sleep = wait.Sleep
	}
	if v.newKey == nil {
		v.newKey = sr.NewKey
	}
}

func (v *Verifier) fieldError(field, msg string) error {
	return errors.New(v.name + "." + field + ": " + msg)
}

// Lazy builds a Verifier on first use, so that an engine package's
// MarkerVerifier has a zero value ready to use.
type Lazy struct {
	once sync.Once
	v    *Verifier
	err  error
}

// Get returns the Verifier for d and c, built by the first call; later
// calls return the same one (or the same error), whatever c they pass.
func (l *Lazy) Get(d *Dialect, c Config) (*Verifier, error) {
	l.once.Do(func() { l.v, l.err = New(d, c) })
	return l.v, l.err
}

// stmt returns the verifier's statements: with the table qualified once
// resolve has run.
func (v *Verifier) stmt() *statements { return v.stmts.Load() }

// resolve qualifies an unqualified table name with the schema it resolves
// to through db (the pool, not a user's transaction), once. Unqualified,
// the marker INSERT sent inside a transaction that set its own search_path
// (a schema per tenant) or database (USE) would land in another table than
// the one the settle reads on another session: a committed transaction
// would find no marker there, its tombstone would land, and it would run
// again. The schema is written quoted (Dialect.Quote), whatever its name.
// The first answer is final, even none (an empty search_path): a later one
// could name another table than one a transaction was already marked in.
// RunTx calls BeforeTx, and so resolve, before each transaction.
func (v *Verifier) resolve(ctx context.Context, db *sql.DB) error {
	if v.done.Load() {
		return nil
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.done.Load() {
		return nil
	}
	schema, err := v.d.Schema(ctx, db, v.table)
	if err != nil {
		return fmt.Errorf("%s: resolving the marker table %s: %w", v.name, v.table, err)
	}
	if schema != "" {
		st := v.d.statements(Name{Schema: v.d.Quote(schema), Table: v.table.Table})
		v.stmts.Store(&st)
	}
	v.done.Store(true)
	return nil
}

// Mark inserts a new key into the marker table inside tx and returns it:
// one round trip.
func (v *Verifier) Mark(ctx context.Context, tx *sql.Tx) (string, error) {
	key := v.newKey()
	if _, err := tx.ExecContext(ctx, v.stmt().insert, key, v.now().Unix(), 0); err != nil {
		if slices.Contains(v.d.ReadOnly, v.d.Classify(err).Code) {
			// Read-only without sql.TxOptions saying so (SET TRANSACTION
			// READ ONLY, the session's default).
			return "", &readOnlyTx{err}
		}
		return "", err
	}
	return key, nil
}

// readOnlyTx is Mark's error in a transaction that is read-only: it
// matches sqlretry.ErrTxReadOnly and keeps the server's error.
type readOnlyTx struct{ err error }

func (e *readOnlyTx) Error() string   { return sr.ErrTxReadOnly.Error() + ": " + e.err.Error() }
func (e *readOnlyTx) Unwrap() []error { return []error{sr.ErrTxReadOnly, e.err} }

// BeforeTx creates the table on first use on db if CreateTable is set,
// and every PruneEvery-th call prunes old markers. A failed prune is not
// an error: the next one deletes what this one left.
func (v *Verifier) BeforeTx(ctx context.Context, db *sql.DB) error {
	// Resolved first, so that CreateTable creates the table where the
	// statements name it.
	if err := v.resolve(ctx, db); err != nil {
		return err
	}
	if err := v.ensure(ctx, db); err != nil {
		return err
	}
	if v.every > 0 && v.calls.Add(1)%v.every == 0 {
		_, _ = v.Prune(ctx, db)
	}
	return nil
}

// Prune deletes, in autocommit, at most 4×PruneEvery markers and
// tombstones older than TTL by the injected clock, waiting at most MaxWait,
// and returns how many it deleted.
func (v *Verifier) Prune(ctx context.Context, db *sql.DB) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, v.maxWait)
	defer cancel()
	limit := max(v.every, 1) * pruneBatch
	res, err := db.ExecContext(ctx, v.stmt().prune, v.now().Add(-v.ttl).Unix(), limit)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// ensure creates the table and its index on db once, if CreateTable is
// set. A failure to create a table that exists anyway (another client
// created it at the same moment: PostgreSQL's CREATE TABLE IF NOT EXISTS
// can fail with 23505 then, SQL Server's with 2714) is no failure.
func (v *Verifier) ensure(ctx context.Context, db *sql.DB) error {
	if !v.create {
		return nil
	}
	if _, ok := v.created.Load(db); ok {
		return nil
	}
	var err error
	for _, s := range v.stmt().ddl {
		if _, err = db.ExecContext(ctx, s); err != nil {
			break
		}
	}
	if err != nil {
		if _, _, perr := v.lookup(ctx, db, ""); perr != nil {
			return fmt.Errorf("%s: creating the marker table: %w", v.name, err)
		}
	}
	v.created.Store(db, struct{}{})
	return nil
}
