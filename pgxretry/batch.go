package pgxretry

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/sqlretry/sqlretry"
)

// SendBatch sends a batch outside a transaction. pgx sends a batch in the
// extended protocol with one Sync at its end, so PostgreSQL runs it as one
// implicit transaction: an error in any query rolls all of them back,
// unless the batch holds its own transaction control (BEGIN, COMMIT,
// Batch.BeginTx).
//
// What is replayed: only a failure of the first result the caller reads
// (by Exec, Query or QueryRow, or by Close when no query has a callback),
// when nothing has been handed to the caller yet, and under [Pool.Exec]'s
// rules read as for one statement: a batch of read-only queries is
// replayed after any transient failure; a batch with any write only when
// nothing was sent or the server's error ended it (the implicit
// transaction was rolled back). A batch that holds transaction control is
// never replayed. A failure of a later result is not replayed: the caller
// has results from the failed attempt. Then, for a batch with a write, a
// failure of unknown outcome is an error matching sqlretry.ErrAmbiguous;
// other failures are returned as they are (the implicit transaction was
// rolled back: the results read before it are void too, as in pgx).
//
// The Policy's CommandTimeout does not bound a batch: its results are read
// after SendBatch returns. Bound it with ctx.
func (w *Pool) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	r := &batchResults{w: w, ctx: ctx, b: b, sh: batchUnread, unsent: ctx.Err() != nil}
	r.br = w.pool.SendBatch(ctx, b)
	return r
}

// batchUnread: the batch's text has not been read (it is read on a failure).
const batchUnread shape = 255

// batchResults is the results of one SendBatch.
type batchResults struct {
	w     *Pool
	ctx   context.Context
	b     *pgx.Batch
	br    pgx.BatchResults // the last attempt's
	sh    shape            // the batch's shape, once read
	read  int              // results handed to the caller
	tries int              // attempts made
	// unsent: the caller's context had ended before SendBatch, so pgx
	// sent nothing (its Acquire fails first).
	unsent bool
}

// shape reads the batch's texts: the widest shape of its queries.
func (r *batchResults) shape() shape {
	if r.sh == batchUnread {
		r.sh = shapeRead
		for _, q := range r.b.QueuedQueries {
			r.sh = max(r.sh, shapeOf(q.SQL))
		}
	}
	return r.sh
}

// texts returns the texts of the batch's queries.
func (r *batchResults) texts() []string {
	t := make([]string, len(r.b.QueuedQueries))
	for i, q := range r.b.QueuedQueries {
		t[i] = q.SQL
	}
	return t
}

// callbacks reports whether a query of the batch has a callback, which
// Close calls: a Close that fails may have handed results to them.
func (r *batchResults) callbacks() bool {
	for _, q := range r.b.QueuedQueries {
		if q.Fn != nil {
			return true
		}
	}
	return false
}

// next reads the next result with read, replaying the batch if it is the
// first result and the rules allow.
func (r *batchResults) next(read func(br pgx.BatchResults) error) error {
	first := r.read == 0
	r.read++
	r.tries = max(r.tries, 1)
	err := read(r.br)
	switch {
	case err == nil:
		return nil
	case !first || r.shape() == shapeParts:
		return r.late(err)
	}
	return r.replay(err, read)
}

// replay runs the batch again, under the Policy, after its first result
// failed with err.
func (r *batchResults) replay(err error, read func(br pgx.BatchResults) error) error {
	op := batchOp
	if r.sh != shapeRead {
		if u, ok := takeWriteOp(r.ctx); ok && u.IsIdempotent() {
			op = sqlretry.Idempotent(u.Name)
		}
	}
	failed := err
	return r.w.p.Do(r.ctx, op, func(context.Context) error {
		if failed != nil {
			// The first attempt was made: this is its failure.
			err, failed = failed, nil
			if r.unsent {
				return withVerdict(err, sqlretry.Class{Phase: sqlretry.NotSent, Code: "context", Reason: "the caller's context had ended before the batch was sent"})
			}
			return r.w.failedAs(r.ctx, op, err, r.sh, false, r.texts()...)
		}
		_ = r.br.Close()
		r.tries++
		r.br = r.w.pool.SendBatch(r.ctx, resend(r.b))
		if err := read(r.br); err != nil {
			return r.w.failedAs(r.ctx, op, err, r.sh, false, r.texts()...)
		}
		return nil
	})
}

// resend copies b for another connection: pgx keeps in each query the
// statement it prepared on the connection the batch was sent on.
func resend(b *pgx.Batch) *pgx.Batch {
	c := &pgx.Batch{QueuedQueries: make([]*pgx.QueuedQuery, len(b.QueuedQueries))}
	for i, q := range b.QueuedQueries {
		c.QueuedQueries[i] = &pgx.QueuedQuery{SQL: q.SQL, Arguments: q.Arguments, Fn: q.Fn}
	}
	return c
}

// late judges a failure that is not replayed: for a batch with a write, an
// unknown outcome is never a plain error.
func (r *batchResults) late(err error) error {
	if err == nil || r.unsent {
		return err // (unsent: the caller's context had ended before SendBatch)
	}
	sh := r.shape()
	if sh == shapeRead {
		if texts := r.texts(); !readCalls(texts) || r.w.builtinCalls(r.ctx, texts) == nil {
			return err
		}
		sh = shapeWrite // a function of a user's may have written
	}
	if r.ctx.Err() != nil { // cut off by the caller: it may have committed all the same
		return &sqlretry.Error{Op: batchOp.Name, Attempts: r.tries, Class: r.w.p.Classify(err), Err: err, Cause: ambiguousAfter(r.ctx)}
	}
	c := r.w.classify(r.ctx, err, sh, false)
	if c.Phase != sqlretry.Unknown {
		return err
	}
	return &sqlretry.Error{Op: batchOp.Name, Attempts: r.tries, Class: c, Err: err, Cause: sqlretry.ErrAmbiguous}
}

// Exec reads the next query's result as pgx's Exec does.
func (r *batchResults) Exec() (pgconn.CommandTag, error) {
	var tag pgconn.CommandTag
	err := r.next(func(br pgx.BatchResults) (err error) {
		tag, err = br.Exec()
		return err
	})
	return tag, err
}

// Query reads the next query's rows. Only a failure before them is
// judged: an error while reading them is pgx's own.
func (r *batchResults) Query() (pgx.Rows, error) {
	var rows pgx.Rows
	err := r.next(func(br pgx.BatchResults) (err error) {
		rows, err = br.Query()
		return err
	})
	if err != nil && rows == nil {
		rows = errRows{err: err}
	}
	return rows, err
}

// QueryRow reads the next query's row. pgx defers its errors to Scan, so
// the replay of a first result happens in Scan.
func (r *batchResults) QueryRow() pgx.Row {
	return batchRow{r}
}

type batchRow struct{ r *batchResults }

func (b batchRow) Scan(dest ...any) error {
	return b.r.next(func(br pgx.BatchResults) error { return br.QueryRow().Scan(dest...) })
}

// Close reads the results left and gives the connection back. As the
// first read of a batch without callbacks it is replayed as one.
func (r *batchResults) Close() error {
	if r.read == 0 && !r.callbacks() {
		return r.next(func(br pgx.BatchResults) error { return br.Close() })
	}
	return r.late(r.br.Close())
}

// Tx returns the transaction the batch began (Batch.BeginTx), or nil.
func (r *batchResults) Tx() pgx.Tx { return r.br.Tx() }
