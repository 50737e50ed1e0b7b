package postgres_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"net/url"
	"strconv"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib"
	_ "github.com/lib/pq"

	"github.com/sqlretry/sqlretry/internal/dbtest"
	"github.com/sqlretry/sqlretry/postgres"
)

// opaqueConn hides the driver's connection and offers no Unwrap.
type opaqueConn struct{ driver.Conn }

// unwrapping hides it behind Unwrap, as sqlretry's and faults' do.
type unwrapping struct{ c driver.Conn }

func (u unwrapping) Prepare(q string) (driver.Stmt, error) { return u.c.Prepare(q) }
func (u unwrapping) Close() error                          { return u.c.Close() }
func (u unwrapping) Begin() (driver.Tx, error)             { return u.c.Begin() } //nolint:staticcheck
func (u unwrapping) Unwrap() driver.Conn                   { return u.c }

// TestFencerNamesOnlyTheSessionItRunsOn: postgres.Fencer's SessionID
// accepts pg_backend_pid() only when it is the backend pid the driver
// learned at connect (pgx's stdlib and lib/pq, through an Unwrap), or the
// connection is inside a transaction block. Through pgbouncer the driver's
// pid is pgbouncer's own key: outside a transaction the id is refused
// (ErrPooler) in either pool mode; inside one it is the transaction's
// server session. Before, every id was accepted: through pgbouncer's
// transaction pooling the fence then ended whichever session the
// connection's first statement had met.
func TestFencerNamesOnlyTheSessionItRunsOn(t *testing.T) {
	dsn := dbtest.FreshPostgres(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	session := dbtest.StartPgBouncer(t, u.Host, dbtest.PgBouncerOptions{})
	transaction := dbtest.StartPgBouncer(t, u.Host, dbtest.PgBouncerOptions{Mode: dbtest.TransactionPooling})
	ctx := context.Background()
	for _, tc := range []struct {
		name, driver, dsn string
		wrap              func(driver.Conn) driver.Conn
		inTx              bool
		want              error // nil: the id is the server's pid on that connection
	}{
		{"pgx direct", "pgx", dsn, nil, false, nil},
		{"lib/pq direct", "postgres", dsn, nil, false, nil},
		{"pgx direct, behind Unwrap", "pgx", dsn, func(c driver.Conn) driver.Conn { return unwrapping{c} }, false, nil},
		{"pgx direct, opaque wrapper", "pgx", dsn, func(c driver.Conn) driver.Conn { return opaqueConn{c} }, false, errors.New("cannot be read")},
		{"pgx, session pooling", "pgx", session.DSN(dsn), nil, false, postgres.ErrPooler},
		{"lib/pq, session pooling", "postgres", session.DSN(dsn), nil, false, postgres.ErrPooler},
		{"pgx, transaction pooling", "pgx", transaction.DSN(dsn) + "&default_query_exec_mode=exec", nil, false, postgres.ErrPooler},
		{"lib/pq, transaction pooling", "postgres", transaction.DSN(dsn), nil, false, postgres.ErrPooler},
		{"pgx, transaction pooling, in a transaction", "pgx", transaction.DSN(dsn) + "&default_query_exec_mode=exec", nil, true, nil},
		{"lib/pq, transaction pooling, in a transaction", "postgres", transaction.DSN(dsn), nil, true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db, err := sql.Open(tc.driver, tc.dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			conn, err := db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if tc.inTx {
				if _, err := conn.ExecContext(ctx, "BEGIN"); err != nil {
					t.Fatal(err)
				}
				defer conn.ExecContext(ctx, "ROLLBACK")
			}
			var pid int
			if err := conn.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
				t.Fatal(err)
			}
			var id string
			err = conn.Raw(func(dc any) error {
				c := dc.(driver.Conn)
				if tc.wrap != nil {
					c = tc.wrap(c)
				}
				var err error
				id, err = postgres.Fencer.SessionID(ctx, c)
				return err
			})
			switch {
			case tc.want == nil && err != nil:
				t.Fatalf("SessionID: %v; want the pid %d", err, pid)
			case tc.want == nil && id != strconv.Itoa(pid):
				t.Fatalf("SessionID: %s; want the pid %d", id, pid)
			case tc.want == postgres.ErrPooler && !errors.Is(err, postgres.ErrPooler):
				t.Fatalf("SessionID: %q, %v; want ErrPooler", id, err)
			case tc.want != nil && tc.want != postgres.ErrPooler && (err == nil || id != ""):
				t.Fatalf("SessionID: %q, %v; want an error", id, err)
			}
		})
	}
}
