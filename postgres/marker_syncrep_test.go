package postgres

import (
	"testing"
	"time"

	sr "github.com/sqlretry/sqlretry"
)

// TestMarkerSyncStandby is TestCommitVerifierSyncStandby for the marker
// verifier, alone and as CommitVerifier's fallback: a COMMIT whose wait for
// the synchronous standby was cancelled committed on the primary alone, and
// its marker row is there to be found, yet the promoted standby lacks it.
// The marker now waits for the standbys too, as CommitVerifier does.
func TestMarkerSyncStandby(t *testing.T) {
	for _, tc := range []struct {
		name string
		v    sr.CommitVerifier
	}{
		{"marker", &MarkerVerifier{CreateTable: true, MaxWait: 500 * time.Millisecond}},
		{"pg_xact_status, then marker", sr.Verifiers(CommitVerifier{MaxWait: 500 * time.Millisecond},
			&MarkerVerifier{CreateTable: true, MaxWait: 500 * time.Millisecond})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, ctx, db := syncPrimary(t)
			if err := tc.v.(sr.TxSetup).BeforeTx(ctx, db); err != nil {
				t.Fatal(err)
			}
			if err := r.StopReceiving(ctx); err != nil {
				t.Fatal(err)
			}
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.ExecContext(ctx, "INSERT INTO t VALUES (2)"); err != nil {
				t.Fatal(err)
			}
			mark, err := tc.v.Mark(ctx, tx)
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- tx.Commit() }()
			cancelSyncWait(t, ctx, db)
			<-done
			if ok, err := tc.v.Committed(ctx, db, mark); ok {
				t.Errorf("Committed = true, %v for a transaction the synchronous standby does not have", err)
			}
		})
	}
}
