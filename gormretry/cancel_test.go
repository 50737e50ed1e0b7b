package gormretry_test

import (
	"context"
	"database/sql"
	"net/url"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/faults/proxy"
	"github.com/sqlretry/sqlretry/gormretry"
	"github.com/sqlretry/sqlretry/postgres"
)

// TestTransactionCancelDuringCommitSettled: the caller's context ends while
// the COMMIT of a gormretry.Transaction is in flight (the server committed,
// its answer is held): the COMMIT is settled by the CommitVerifier and the
// caller told success, not a plain "context canceled" for a row that is
// there.
func TestTransactionCancelDuringCommitSettled(t *testing.T) {
	e := engines(t)[0] // PostgreSQL
	schema(t, e)
	u, err := url.Parse(e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	px, err := proxy.New(proxy.Config{Target: u.Host, Protocol: proxy.ProtocolPostgres})
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	u.Host = px.Addr()
	q := u.Query()
	q.Set("sslmode", "disable")
	u.RawQuery = q.Encode()
	via := *e
	via.dsn = u.String()
	p, err := sqlretry.New(sqlretry.Config{Classifier: postgres.Classifier, CommitVerifier: postgres.CommitVerifier{}})
	if err != nil {
		t.Fatal(err)
	}
	gdb, _ := openGorm(t, &via, p, gorm.Config{})
	raw, err := sql.Open(e.driver, e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for px.Counts().HoldAfterCommit == 0 && ctx.Err() == nil {
			time.Sleep(2 * time.Millisecond)
		}
		cancel()
	}()
	err = gormretry.Transaction(ctx, gdb, p, sqlretry.Write("ledger", nil), func(tx *gorm.DB) error {
		if err := tx.Create(&Ledger{V: 7, Grp: "held"}).Error; err != nil {
			return err
		}
		return px.SetFault(proxy.Fault{Mode: proxy.HoldAfterCommit})
	})
	_ = px.SetFault(proxy.Fault{Mode: proxy.Pass})
	var n int
	if err := raw.QueryRow("SELECT count(*) FROM ledger WHERE grp = 'held'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("%d rows; the test needs the held COMMIT to have landed", n)
	}
	if err != nil {
		t.Errorf("Transaction = %v, want nil: the COMMIT landed and pg_xact_status says so", err)
	}
}
