package pgxretry

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/sqlretry/sqlretry"
)

// CopyFrom copies rows into a table outside a transaction (COPY FROM
// STDIN, one statement: all of it is applied or none). The server ends a
// COPY only when the client says the data is done, which pgx says after
// rowSrc's Next returned false: a failure before that proves nothing was
// applied. A COPY reads its rows from rowSrc as it sends them, and a
// source cannot be rewound, so it is replayed only when the failure
// proves nothing was applied and rowSrc was not read yet (the connection
// could not be acquired, say). Any other failure proving nothing applied
// is returned as it is; one of unknown outcome (after the end of the data
// was sent) is settled by an Op attached with [sqlretry.WithOp] (its verify finding
// it not applied returns the failure), else it ends in an error matching
// sqlretry.ErrAmbiguous.
func (w *Pool) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, rowSrc pgx.CopyFromSource) (int64, error) {
	var (
		n int64
		s *session
	)
	src := &copySource{src: rowSrc}
	op := copyOp
	if u, ok := takeWriteOp(ctx); ok {
		if u.Verify() != nil {
			s = &session{}
		}
		op = w.attachedOp(copyOp, u, s)
		if op.IsIdempotent() {
			op = copyOp // a source read once cannot be replayed
		}
	}
	err := w.p.Do(ctx, op, func(actx context.Context) error {
		if src.read {
			// A verify found the last attempt not applied, and the source
			// cannot be read again: the failure is the answer.
			return withVerdict(src.failure, sqlretry.Class{Phase: sqlretry.NotApplied, Code: "copy-source-read",
				Reason: "verified not applied, and the source was read: not replayed"})
		}
		c, err := w.pool.Acquire(actx)
		if err != nil {
			return w.acquireFailed(ctx, err)
		}
		defer c.Release()
		s.acquired(actx, c)
		if n, err = c.CopyFrom(actx, table, columns, src); err != nil {
			s.note(c)
			src.failure = err
			return src.failed(w, ctx, err, c.Conn().IsClosed())
		}
		return nil
	})
	return n, err
}

// failed judges a failed COPY: once the source was read, only a failure
// of unknown outcome goes on (to be settled); any other is final.
func (s *copySource) failed(w *Pool, ctx context.Context, err error, closed bool) error {
	if ctx.Err() != nil {
		if !s.ended { // the end of the data was never sent: nothing applied
			return withVerdict(err, sqlretry.Class{Phase: sqlretry.NotApplied, Code: "context",
				Reason: "the caller's context ended the COPY before the end of its data was sent"})
		}
		return err // of unknown outcome: the Policy settles it
	}
	c := w.classify(ctx, err, shapeWrite, closed)
	if !s.ended && c.Phase == sqlretry.Unknown {
		// The end of the data was never sent: the server cannot have
		// ended the COPY, and rolls it back with the failed session.
		c.Phase = sqlretry.NotApplied
		c.Reason += " (before the end of the COPY data was sent)"
	}
	if s.read && c.Phase != sqlretry.Unknown {
		if !c.Retryable {
			return err
		}
		c.Retryable = false
		c.Reason += " (the source was read: not replayed)"
	}
	return withVerdict(err, c)
}

// copySource notes whether pgx has read the source.
type copySource struct {
	src     pgx.CopyFromSource
	read    bool  // Next was called
	ended   bool  // Next returned false: pgx may have sent the end of the data
	failure error // the attempt's error, returned as it is once the source was read
}

func (s *copySource) Next() bool {
	s.read = true
	more := s.src.Next()
	s.ended = !more
	return more
}

func (s *copySource) Values() ([]any, error) { return s.src.Values() }
func (s *copySource) Err() error             { return s.src.Err() }
