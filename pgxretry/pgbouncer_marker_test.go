package pgxretry_test

import (
	"context"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/faults/proxy"
	"github.com/sqlretry/sqlretry/internal/dbtest"
	"github.com/sqlretry/sqlretry/pgxretry"
	"github.com/sqlretry/sqlretry/postgres"
)

// TestMarkerBehindTransactionPooler: behind pgbouncer in transaction
// pooling, pgx needs an exec mode that prepares no named statement
// (QueryExecModeExec, QueryExecModeSimpleProtocol; CacheDescribe too, whose
// unnamed statements live within one message): WithMarker then sends its
// INSERT and COMMIT as one simple query, which the pooler runs on the
// transaction's server session. Concurrent transactions commit, and one
// whose COMMIT reply is cut (the proxy in front of pgbouncer) is settled by
// its marker: nil, one row.
func TestMarkerBehindTransactionPooler(t *testing.T) {
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheDescribe} {
		t.Run(mode.String(), func(t *testing.T) {
			f := newFixture(t, nil)
			f.exec(t, itemsTable)
			f.exec(t, postgres.MarkerTableDDL)
			u, err := url.Parse(f.dsn)
			if err != nil {
				t.Fatal(err)
			}
			b := dbtest.StartPgBouncer(t, u.Host, dbtest.PgBouncerOptions{Mode: dbtest.TransactionPooling, Settings: map[string]string{"default_pool_size": "3"}})
			px, err := proxy.New(proxy.Config{Target: b.Addr(), Protocol: proxy.ProtocolPostgres})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { px.Close() })
			u.Host = px.Addr()
			pool := openPool(t, u.String(), appName, func(c *pgxpool.Config) {
				c.MaxConns = 6
				c.ConnConfig.DefaultQueryExecMode = mode
			})
			w := pgxretry.New(pool, f.p, pgxretry.WithMarker(&postgres.MarkerVerifier{}))
			t.Cleanup(w.Close)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			insert := func(id int64) error {
				return w.RunTx(ctx, sqlretry.Write("marked", nil), pgx.TxOptions{}, func(ctx context.Context, tx pgx.Tx) error {
					_, err := tx.Exec(ctx, insertItem, id, "pooled")
					return err
				})
			}
			var wg sync.WaitGroup
			errs := make(chan error, 40)
			for g := 0; g < 4; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < 10; i++ {
						if err := insert(int64(1000 + g*10 + i)); err != nil {
							errs <- err
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Errorf("RunTx: %v", err)
			}
			cuts := px.Counts().CutAfterCommit
			if err := px.SetFault(proxy.Fault{Mode: proxy.CutAfterCommit}); err != nil {
				t.Fatal(err)
			}
			err = insert(1)
			_ = px.SetFault(proxy.Fault{Mode: proxy.Pass})
			if got := px.Counts().CutAfterCommit - cuts; got != 1 {
				t.Fatalf("%d cuts after COMMIT, want 1", got)
			}
			if n := f.count(t, "SELECT count(*) FROM items WHERE call_id = 1"); err != nil || n != 1 {
				t.Errorf("cut COMMIT: %v, %d rows; want nil and 1", err, n)
			}
			if n := f.count(t, "SELECT count(*) FROM items WHERE call_id >= 1000"); n != 40 {
				t.Errorf("%d rows of 40 transactions", n)
			}
		})
	}
}
