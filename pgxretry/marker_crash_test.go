package pgxretry_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/internal/dbtest"
	"github.com/sqlretry/sqlretry/pgxretry"
	"github.com/sqlretry/sqlretry/postgres"
)

// TestMarkerServerCrash: the server crashes (every process killed) after
// the marker INSERT's reply was sent and before COMMIT committed (COMMIT
// sleeps in a deferred trigger). The client cannot know; after the
// restart, the marker's tombstone lands (the marker never committed), and
// RunTx runs the transaction again: one row, one tombstone.
func TestMarkerServerCrash(t *testing.T) {
	srv := dbtest.StartPostgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	f := &fixture{dsn: srv.DSN()}
	f.raw = openPool(t, srv.DSN(), "pgxretry_checks", nil)
	f.exec(t, itemsTable)
	f.exec(t, postgres.MarkerTableDDL)
	f.slowCommits(t)
	f.pool = openPool(t, srv.DSN(), appName, func(c *pgxpool.Config) { c.MaxConns = 2 })
	// The verify is retried while the server restarts: up to ~10 s.
	p, err := sqlretry.New(sqlretry.Config{Classifier: postgres.Classifier, MaxRetries: 50, BaseDelay: 10 * time.Millisecond,
		MaxDelay: 200 * time.Millisecond, Budget: sqlretry.NoBudget})
	if err != nil {
		t.Fatal(err)
	}
	f.p = p
	f.w = pgxretry.New(f.pool, p, pgxretry.WithMarker(&postgres.MarkerVerifier{}))
	t.Cleanup(f.w.Close)

	crashed := make(chan error, 1)
	attempts := 0
	err = f.w.RunTx(ctx, sqlretry.Write("crash", nil), pgx.TxOptions{}, func(ctx context.Context, tx pgx.Tx) error {
		attempts++
		note := "slow" // slows COMMIT down (slowCommits)
		if attempts > 1 {
			note = "again"
		}
		if _, err := tx.Exec(ctx, insertItem, 1, note); err != nil || attempts > 1 {
			return err
		}
		f.whenCommitSleeps(ctx, tx.Conn().PgConn().PID(), func(err error) {
			if err == nil {
				if err = srv.Kill(); err == nil {
					err = srv.Start()
				}
			}
			crashed <- err
		})
		return nil
	})
	if cerr := <-crashed; cerr != nil {
		t.Fatalf("crash and restart: %v", cerr)
	}
	if err != nil || attempts != 2 {
		t.Fatalf("RunTx: %v after %d attempts; want nil after 2", err, attempts)
	}
	st := p.Stats()
	if st.VerifiedNotApplied != 1 || st.VerifiedApplied != 0 {
		t.Errorf("verifications: %d applied, %d not; want 0, 1", st.VerifiedApplied, st.VerifiedNotApplied)
	}
	check, err := pgx.Connect(ctx, srv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer check.Close(ctx)
	var rows, live, tombs int
	if err := check.QueryRow(ctx, "SELECT (SELECT count(*) FROM items WHERE call_id = 1), "+
		"(SELECT count(*) FROM sqlretry_commit_marks WHERE tombstone = 0), (SELECT count(*) FROM sqlretry_commit_marks WHERE tombstone = 1)").
		Scan(&rows, &live, &tombs); err != nil {
		t.Fatal(err)
	}
	if rows != 1 || live != 1 || tombs != 1 {
		t.Errorf("after the crash: %d rows, %d live markers, %d tombstones; want 1, 1, 1", rows, live, tombs)
	}
}
