package pgxretry_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/faults/proxy"
)

// TestMarkerNotifyOnly: a transaction whose only effect is a NOTIFY has no
// transaction id until its COMMIT (PostgreSQL assigns one there, to queue
// the notification), and may run READ ONLY (NOTIFY is allowed there). It
// applies something all the same: a lost reply of a COMMIT that ran must
// not be settled "not applied" and run again, which would notify the
// listeners twice (a job queue's workers woken for one job twice, a cache
// invalidated twice). Exactly one notification, and RunTx told nil (or an
// honest sqlretry.ErrAmbiguous, never a second delivery).
func TestMarkerNotifyOnly(t *testing.T) {
	for _, mode := range []pgx.TxAccessMode{pgx.ReadWrite, pgx.ReadOnly} {
		t.Run(string(mode), func(t *testing.T) {
			f, px := markerFixture(t, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			l, err := pgx.Connect(ctx, f.dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close(context.Background())
			if _, err := l.Exec(ctx, "LISTEN jobs"); err != nil {
				t.Fatal(err)
			}
			attempts := 0
			err = f.w.RunTx(ctx, sqlretry.Write("wake", nil), pgx.TxOptions{AccessMode: mode}, func(ctx context.Context, tx pgx.Tx) error {
				attempts++
				if _, err := tx.Exec(ctx, "SELECT pg_notify('jobs', 'job-1')"); err != nil {
					return err
				}
				if attempts > 1 {
					return px.SetFault(proxy.Fault{Mode: proxy.Pass})
				}
				return px.SetFault(proxy.Fault{Mode: proxy.CutAfterCommit})
			})
			_ = px.SetFault(proxy.Fault{Mode: proxy.Pass})
			got := 0
			for {
				wctx, wcancel := context.WithTimeout(ctx, 500*time.Millisecond)
				_, werr := l.WaitForNotification(wctx)
				wcancel()
				if werr != nil {
					break
				}
				got++
			}
			if got != 1 {
				t.Errorf("%d notifications after %d attempts (RunTx: %v); want exactly 1", got, attempts, err)
			}
			if err != nil && !errors.Is(err, sqlretry.ErrAmbiguous) {
				t.Errorf("RunTx: %v; want nil or ErrAmbiguous", err)
			}
		})
	}
}
