package postgres

import (
	"database/sql"
	"errors"
	"testing"
	"time"

	_ "github.com/lib/pq"
)

// TestSyncBarrierCutShort: the verifiers prove that the synchronous
// standbys have a transaction found committed on the primary by committing
// a barrier transaction of their own, bounded by MaxWait. A COMMIT whose
// wait for the standbys is cancelled returns success with only a warning,
// committed on the primary alone — and lib/pq sends exactly such a cancel
// request when the context of a query ends. A barrier cut short by its own
// deadline must not be taken for proof: Committed must answer
// ErrNotReplicated (both verifiers, through lib/pq and through pgx), not
// true. (A statement_timeout does not cut the wait: PostgreSQL disables it
// before the commit itself runs.)
func TestSyncBarrierCutShort(t *testing.T) {
	r, ctx, db := syncPrimary(t)
	if _, err := db.ExecContext(ctx, MarkerTableDDL); err != nil {
		t.Fatal(err)
	}
	if err := r.StopReceiving(ctx); err != nil {
		t.Fatal(err)
	}
	// A transaction committed on the primary alone: its wait for the
	// standby cancelled.
	xv := CommitVerifier{MaxWait: time.Second}
	mv := &MarkerVerifier{MaxWait: time.Second}
	tx, xmark := markedInsert(t, ctx, db, xv, 1)
	mmark, err := mv.Mark(ctx, tx)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- tx.Commit() }()
	cancelSyncWait(t, ctx, db)
	<-done

	for _, driver := range []string{"postgres", "pgx"} {
		pool, err := sql.Open(driver, r.Primary.DSN())
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		if ok, err := xv.Committed(ctx, pool, xmark); ok || !errors.Is(err, ErrNotReplicated) {
			t.Errorf("%s: CommitVerifier.Committed = %v, %v for a transaction the synchronous standby lacks; want false, ErrNotReplicated", driver, ok, err)
		}
		if ok, err := mv.Committed(ctx, pool, mmark); ok || !errors.Is(err, ErrNotReplicated) {
			t.Errorf("%s: MarkerVerifier.Committed = %v, %v for a transaction the synchronous standby lacks; want false, ErrNotReplicated", driver, ok, err)
		}
	}
	promoteWithout(t, ctx, r, 1)
}
