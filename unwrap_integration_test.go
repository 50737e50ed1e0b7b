package sqlretry_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	sr "github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/internal/dbtest"
	"github.com/sqlretry/sqlretry/postgres"
)

// pgx's CopyFrom through sql.Conn.Raw on a handle from sqlretry.Open: the
// usual dc.(*stdlib.Conn) panicked, since Raw was handed the wrapper.
func TestUnwrapConnPgxCopyFrom(t *testing.T) {
	dsn := dbtest.FreshPostgres(t)
	p := newPolicy(t, sr.Config{Classifier: postgres.Classifier})
	db, err := sr.Open("pgx", dsn, p)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, "CREATE TABLE items (id int PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var copied int64
	err = conn.Raw(func(dc any) error {
		sc, ok := sr.UnwrapConn(dc).(*stdlib.Conn)
		if !ok {
			t.Fatalf("UnwrapConn(%T) = %T, want *stdlib.Conn", dc, sr.UnwrapConn(dc))
		}
		rows := [][]any{{1}, {2}, {3}}
		copied, err = sc.Conn().CopyFrom(ctx, pgx.Identifier{"items"}, []string{"id"}, pgx.CopyFromRows(rows))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	if err := conn.QueryRowContext(ctx, "SELECT count(*) FROM items").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if copied != 3 || n != 3 {
		t.Errorf("CopyFrom copied %d, table holds %d; want 3 and 3", copied, n)
	}
}
