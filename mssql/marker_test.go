package mssql

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	sr "github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/internal/marker"
	"github.com/sqlretry/sqlretry/internal/tdstest"
)

// TestMarkerSettlesThroughGoMSSQLDB: the marker's look-up and tombstone
// travel through go-mssqldb to the TDS responder, which answers as SQL
// Server would with the marker key held by another transaction: the
// tombstone INSERT fails with 2627 once the holder commits (→ true),
// succeeds once it rolls back (→ false), fails with 1222 when a lock
// timeout shorter than MaxWait fires (tried again), or hangs past MaxWait
// (→ ErrMarkerInFlight, after an attention).
func TestMarkerSettlesThroughGoMSSQLDB(t *testing.T) {
	notFound := tdstest.Rows([]tdstest.Column{{Name: "tombstone", Type: tdstest.Int}})
	found := tdstest.Rows([]tdstest.Column{{Name: "tombstone", Type: tdstest.Int}}, []any{0})
	dup := tdstest.Fail(2627, 14, "Violation of PRIMARY KEY constraint 'PK_sqlretry_commit_marks'. Cannot insert duplicate key in object 'dbo.sqlretry_commit_marks'.")
	lockTimeout := tdstest.Fail(1222, 16, "Lock request time out period exceeded.")
	const lookup, insert = "SELECT tombstone", "INSERT INTO sqlretry_commit_marks"
	for _, tc := range []struct {
		name        string
		rules       []tdstest.Rule
		want        bool
		wantErr     error
		wantInserts int
	}{
		{"holder commits: duplicate key", []tdstest.Rule{
			{Match: lookup, Times: 1, Reply: notFound}, {Match: insert, Reply: dup}, {Match: lookup, Reply: found},
		}, true, nil, 1},
		{"holder rolls back: the tombstone lands", []tdstest.Rule{
			{Match: lookup, Reply: notFound}, {Match: insert, Reply: tdstest.Affected(1)},
		}, false, nil, 1},
		{"lock timeout, then the holder rolls back", []tdstest.Rule{
			{Match: lookup, Reply: notFound}, {Match: insert, Times: 1, Reply: lockTimeout}, {Match: insert, Reply: tdstest.Affected(1)},
		}, false, nil, 2},
		{"holder hangs past MaxWait", []tdstest.Rule{
			{Match: lookup, Reply: notFound}, {Match: insert, Reply: tdstest.Faulty(tdstest.Hang)},
		}, false, ErrMarkerInFlight, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := tdstest.Start(t, tdstest.Script{Rules: tc.rules})
			db, err := sql.Open("sqlserver", srv.DSN())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			v := &MarkerVerifier{MaxWait: 500 * time.Millisecond}
			marker.Seams(v).Sleep = func(ctx context.Context, d time.Duration) error { return ctx.Err() }
			got, err := v.Committed(ctx, db, sr.NewKey())
			if got != tc.want || !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("got %v, %v; want %v, %v", got, err, tc.want, tc.wantErr)
			}
			if n := srv.Count(tdstest.RPC, insert); n != tc.wantInserts {
				t.Errorf("tombstone INSERTs through go-mssqldb: got %d, want %d", n, tc.wantInserts)
			}
		})
	}
}
