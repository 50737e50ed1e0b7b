package postgres

import (
	"context"
	"database/sql"
	"testing"
	"time"

	sr "github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/internal/dbtest"
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
			r := dbtest.StartPostgresReplica(t, dbtest.ReplicaOptions{Sync: true})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			db, err := sql.Open("pgx", r.Primary.DSN())
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if _, err := db.ExecContext(ctx, "CREATE TABLE t (v int)"); err != nil {
				t.Fatal(err)
			}
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
