package pgxretry

import (
	"context"
	"database/sql"
	"errors"
	"hash/fnv"
	"strconv"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/internal/marker"
	"github.com/sqlretry/sqlretry/postgres"
)

// An Option configures a [Pool] made by [New].
type Option func(*Pool)

// WithMarker makes [Pool.RunTx] settle a COMMIT of unknown outcome by v's
// marker table instead of pg_xact_status, at no extra round trip: the
// marker row (a key of 128 random bits, made by the client) is inserted in
// the same message as COMMIT, so the client knows the key before any
// reply, even when the connection dies before one arrives. On a pool in
// pgx's default exec mode (QueryExecModeCacheStatement) the INSERT and
// COMMIT are prepared once per connection, before its first marked BEGIN,
// and sent as one pipeline (about half the server's cost of the text);
// in any other mode (a pooler in transaction mode) as one simple query,
// "INSERT ...; COMMIT", the values written in. After an unknown COMMIT, v's
// Committed settles the key through the pool (as database/sql, see
// postgres.MarkerVerifier): found, applied; a tombstone of the key that
// lands (waiting while the transaction is still in flight), not applied and
// run again; still locked after v.MaxWait, sqlretry.ErrAmbiguous. Its
// verdict survives a failover, which pg_xact_status's does not.
//
// Every read-write transaction is marked, even one that only read: a
// transaction may apply something at COMMIT alone (a NOTIFY), so a missing
// marker is never read as "nothing to apply"; its COMMIT then writes WAL.
// A read-only one (pgx.ReadOnly), where the INSERT cannot run but a NOTIFY
// can, is marked by pg_xact_status instead (one round trip more).
//
// If the INSERT fails, the server abandons the rest of the message: COMMIT
// never runs, the transaction is rolled back, and RunTx treats the failure
// as one before COMMIT (replayed if transient, else returned: a missing
// table is 42P01). v's table must exist (postgres.MarkerTableDDL), or set
// v.CreateTable. Its fields' defaults are postgres.MarkerVerifier's; an
// invalid field makes every RunTx fail with an error naming it. An Op with
// its own Verify, or Idempotent, is settled by that and not marked.
//
// The Pool opens a *sql.DB over the pool (stdlib.OpenDBFromPool) for the
// verifier's own statements (create, prune, settle), closed by
// [Pool.Close]. v may be shared with sqlretry.RunTx on a *sql.DB.
func WithMarker(v *postgres.MarkerVerifier) Option {
	return func(w *Pool) { w.mk = &markerState{src: v, pool: w.pool, commitName: "sqlretry_commit"} }
}

// markerState is a Pool's marker verifier, built on first use.
type markerState struct {
	src  *postgres.MarkerVerifier
	pool *pgxpool.Pool

	once     sync.Once
	v        *marker.Verifier
	prepared bool    // the pool caches prepared statements: see prepare
	db       *sql.DB // the pool as database/sql, for v's own statements
	err      error

	// committed settles a key: v.Committed; tests swap in a liar.
	committed func(ctx context.Context, db *sql.DB, key string) (bool, error)

	// The names of the prepared marker INSERT (for insertText, the
	// verifier's once its table is resolved) and COMMIT, per Pool.
	nameMu     sync.Mutex
	insertText string
	insertName string
	commitName string
}

// statementName returns the name the prepared marker INSERT insert goes
// by: one per text, so that a Pool whose verifier names another table
// never meets a statement of this name with other text on a connection
// the pools share.
func (m *markerState) statementName(insert string) string {
	m.nameMu.Lock()
	defer m.nameMu.Unlock()
	if m.insertText != insert {
		h := fnv.New64a()
		_, _ = h.Write([]byte(insert))
		m.insertText, m.insertName = insert, "sqlretry_mark_"+strconv.FormatUint(h.Sum64(), 16)
	}
	return m.insertName
}

// get builds the verifier and its *sql.DB on first use.
func (m *markerState) get() (*marker.Verifier, error) {
	m.once.Do(func() {
		m.v, m.err = marker.Built(m.src)
		if m.err == nil {
			// The pool's mode, read once: (*pgx.Conn).Config copies the
			// whole configuration at every call.
			m.prepared = m.pool.Config().ConnConfig.DefaultQueryExecMode == pgx.QueryExecModeCacheStatement
			m.db = stdlib.OpenDBFromPool(m.pool)
			if m.committed == nil {
				m.committed = m.v.Committed
			}
		}
	})
	return m.v, m.err
}

// beforeTx creates the table (CreateTable) and prunes old markers, in
// autocommit, before an attempt takes its connection.
func (m *markerState) beforeTx(ctx context.Context) error {
	v, err := m.get()
	if err != nil {
		return err
	}
	return v.BeforeTx(ctx, m.db)
}

// close closes the *sql.DB, if one was opened.
func (m *markerState) close() {
	if m.db != nil {
		_ = m.db.Close()
	}
}

// markThenCommit ends the marker INSERT. It inserts in every transaction
// it marks, even one that wrote nothing: a transaction with no id yet may
// still apply something at COMMIT (a NOTIFY, which gets its id there), so a
// missing marker cannot be read as "nothing to apply". The price is the
// COMMIT of a transaction that only read: it writes and flushes WAL.
const markThenCommit = "; COMMIT"

// commitMarked sends the marker INSERT and COMMIT in one message and judges
// what came back. The server runs the statements of one message (a simple
// query, or a pipeline up to its Sync) in order and abandons the rest at
// the first error, so:
//
//   - two results: the INSERT and COMMIT both ran: committed;
//   - no result and an error of the statement, on a session that lives
//     on: the INSERT failed, COMMIT never ran, the transaction is aborted:
//     a failure before COMMIT;
//   - no result and a FATAL error, or a session that ended: settled by
//     the key like what follows. The server flushes the INSERT's reply
//     before a FATAL of its own, but a pooler in between (pgbouncer's
//     "server conn crashed?") answers for a backend that died after its
//     COMMIT was durable and before its replies went out;
//   - anything else (the connection lost before either reply, or after the
//     INSERT's, COMMIT's own error): COMMIT may have run; the key, known
//     since before the send, settles it.
//
// pgx's Tx never sees this COMMIT: it is not used again, and the
// connection goes back to the pool outside any transaction (a pool destroys
// one released inside a transaction).
func (t *txRun) commitMarked(ctx context.Context, c *pgxpool.Conn, tx pgx.Tx, m *markerState) error {
	mrr, err := t.sendMarked(ctx, c, m)
	if err != nil {
		// Nothing was sent: a bad key.
		t.stage, t.mark, t.hasMark = stageBody, "", false
		_ = tx.Rollback(ctx)
		return t.failed(err)
	}
	// Read result by result (ReadAll would allocate each one).
	n, last := 0, ""
	for mrr.NextResult() {
		tag, _ := mrr.ResultReader().Close() // its error is mrr's too
		n++
		last = tag.String()
	}
	err = mrr.Close()
	switch {
	case err == nil && last == "ROLLBACK":
		return pgx.ErrTxCommitRollback // as tx.Commit says it: not committed
	case err == nil:
		return nil
	case n == 0 && statementError(err) && !c.Conn().PgConn().IsClosed():
		t.stage, t.mark, t.hasMark = stageBody, "", false
		_ = tx.Rollback(ctx)
		switch pgErrCode(err) {
		case readOnlyTx:
			// The transaction was read-only without pgx.ReadOnly saying so
			// (SET TRANSACTION READ ONLY, default_transaction_read_only):
			// the INSERT failed, COMMIT never ran, nothing was applied.
			// Run it again, marked by pg_xact_status, as a declared one is.
			t.pipelined, t.marking = false, true
			return withVerdict(err, sqlretry.Class{Retryable: true, Phase: sqlretry.NotApplied, Code: readOnlyTx,
				Reason: "the transaction is read-only, so the marker could not be inserted and COMMIT never ran: run again, marked by pg_xact_status"})
		case noSuchStatement:
			if t.insert == nil {
				break
			}
			// The session lost the prepared marker INSERT behind pgx's back
			// (DEALLOCATE ALL or DISCARD ALL sent as SQL text): COMMIT never
			// ran. pgx forgets the statements, and the next attempt prepares
			// them again.
			_ = c.Conn().Deallocate(ctx, t.insert.Name)
			_ = c.Conn().Deallocate(ctx, t.commit.Name)
			return withVerdict(err, sqlretry.Class{Retryable: true, Phase: sqlretry.NotApplied, Code: noSuchStatement,
				Reason: "the session lost the prepared marker INSERT, so COMMIT never ran: run again"})
		}
		return t.failed(err)
	}
	return t.commitFailed(c, err)
}

// prepare prepares the marker INSERT and COMMIT on c, before BEGIN, once
// per connection (pgx keeps them with its own prepared statements; a
// cached one costs a map lookup), on a pool whose connections cache
// prepared statements (pgx's default, QueryExecModeCacheStatement, in its
// ConnConfig; a BeforeConnect that changes it is not seen): sent as one
// pipeline of the two prepared statements, the INSERT costs the server
// about half what it costs as text, parsed and planned each time. On
// another connection (a pooler in transaction mode, say) it returns nil
// statements, and the two go as one simple query with the values written
// in. Before BEGIN, so that its round trip is never part of the COMMIT's
// message, and a failure (no marker table: 42P01) leaves nothing to roll
// back.
func (m *markerState) prepare(ctx context.Context, c *pgxpool.Conn) (ins, commit *pgconn.StatementDescription, err error) {
	if !m.prepared {
		return nil, nil, nil
	}
	conn := c.Conn()
	insert := m.v.InsertText()
	if ins, err = conn.Prepare(ctx, m.statementName(insert), insert); err != nil {
		return nil, nil, err
	}
	if commit, err = conn.Prepare(ctx, m.commitName, "COMMIT"); err != nil {
		return nil, nil, err
	}
	return ins, commit, nil
}

// sendMarked sends the marker INSERT and COMMIT in one message, the key
// taken first: the statements prepared before BEGIN as one pipeline, or
// else one simple query. An error means nothing was sent.
func (t *txRun) sendMarked(ctx context.Context, c *pgxpool.Conn, m *markerState) (*pgconn.MultiResultReader, error) {
	if t.insert == nil {
		key, text, err := m.v.InlineMark(markThenCommit)
		if err != nil {
			return nil, err
		}
		t.mark, t.hasMark = key, true
		return c.Conn().PgConn().Exec(ctx, text), nil
	}
	key, createdAt, err := m.v.NewMark()
	if err != nil {
		return nil, err
	}
	t.mark, t.hasMark = key, true
	// The parameters live in t (already on the heap): no allocation each.
	p := append(t.paramBuf[:0], key...)
	p = strconv.AppendInt(p, createdAt, 10)
	t.params = [3][]byte{p[:len(key)], p[len(key):], zero}
	b := &t.batch
	*b = pgconn.Batch{}
	b.ExecStatement(t.insert, t.params[:], nil, nil)
	b.ExecStatement(t.commit, nil, nil, nil)
	return c.Conn().PgConn().ExecBatch(ctx, b), nil
}

// zero is the tombstone parameter of a marker: 0, a marker.
var zero = []byte("0")

// readOnlyTx is read_only_sql_transaction (PostgreSQL manual, Appendix A).
const readOnlyTx = "25006"

// noSuchStatement is invalid_sql_statement_name: a prepared statement the
// session does not have.
const noSuchStatement = "26000"

// pgErrCode returns the SQLSTATE of the server's error in err's chain, or
// "".
func pgErrCode(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// statementError reports whether err is the server's error reply to a
// statement, not one that ends the session (FATAL, PANIC). (Its own
// function: the target errors.As needs escapes, and allocates only here.)
func statementError(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Severity != "FATAL" && pgErr.Severity != "PANIC"
}
