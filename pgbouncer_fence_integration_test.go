package sqlretry_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"net/url"
	"testing"
	"time"

	sr "github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/faults/proxy"
	"github.com/sqlretry/sqlretry/internal/dbtest"
	"github.com/sqlretry/sqlretry/postgres"
)

// Unwrap returns the pgx connection faultConn wraps, so that
// postgres.Fencer reads the backend pid pgx learned at connect (it fences
// only a session it can name).
func (c *faultConn) Unwrap() driver.Conn { return c.pgxConn }

// holdTx opens a transaction on a connection of its own through dsn and
// returns the backend it runs on; the transaction holds that server
// session (behind a transaction pooler) until end is called.
func holdTx(t *testing.T, ctx context.Context, dsn string) (pid int, end func(commit bool)) {
	t.Helper()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	return pid, func(commit bool) {
		if commit {
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			return
		}
		_ = tx.Rollback()
	}
}

// waitingInserts lists the backends whose INSERT INTO locked waits on a
// lock, as the server itself reports them.
func waitingInserts(t *testing.T, ctx context.Context, raw *sql.DB) []int {
	t.Helper()
	rows, err := raw.QueryContext(ctx, "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "+
		"AND wait_event_type = 'Lock' AND query LIKE 'INSERT INTO locked%' ORDER BY pid")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var pids []int
	for rows.Next() {
		var pid int
		if err := rows.Scan(&pid); err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pid)
	}
	return pids
}

// TestFencerBehindTransactionPooler: postgres.Fencer learns a connection's
// backend pid when the Connector opens it. Behind pgbouncer in transaction
// pooling, the connection's statements then run on whichever server
// session is free: here (a pool of two server sessions, each held in turn
// by another client's transaction) the pid learned is one session's, the
// INSERT runs on the other and waits on a SHARE lock, and the client's
// connection is cut. The fence ended the session named at connect (another
// client's), the verify found no row, the INSERT ran again, and both landed
// when the lock went: nil, 2 rows, every time. Now the Fencer sees that
// pg_backend_pid() is not the pid pgx learned at connect, names no session,
// and the call ends in ErrAmbiguous; the first INSERT lands: one row.
// Directly, the pid is the session's own: fenced, nil, one row.
func TestFencerBehindTransactionPooler(t *testing.T) {
	for _, pooled := range []bool{false, true} {
		t.Run(map[bool]string{false: "direct", true: "pgbouncer-transaction"}[pooled], func(t *testing.T) {
			dsn := dbtest.FreshPostgres(t)
			u, err := url.Parse(dsn)
			if err != nil {
				t.Fatal(err)
			}
			target, other := u.Host, dsn // other: the DSN of the other clients
			if pooled {
				b := dbtest.StartPgBouncer(t, u.Host, dbtest.PgBouncerOptions{Mode: dbtest.TransactionPooling,
					Settings: map[string]string{"default_pool_size": "2"}})
				target, other = b.Addr(), b.DSN(dsn)
			}
			px, err := proxy.New(proxy.Config{Target: target, Protocol: proxy.ProtocolPostgres})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { px.Close() })
			u.Host = px.Addr()
			q := u.Query()
			q.Set("default_query_exec_mode", "exec")
			u.RawQuery = q.Encode()
			other += "&default_query_exec_mode=exec"

			raw, err := sql.Open("pgx", dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer raw.Close()
			mustExec(t, raw, "CREATE TABLE locked (v int NOT NULL)")
			p := newPolicy(t, sr.Config{Classifier: postgres.Classifier, Fencer: postgres.Fencer, Budget: sr.NoBudget})
			db, err := sr.Open("pgx", u.String(), p)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			db.SetMaxOpenConns(1)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()

			// X holds one server session while the Connector opens its
			// connection and learns the other's pid; then Y holds that one
			// and X lets its own go, where the INSERT will run.
			_, endX := holdTx(t, ctx, other)
			if err := db.PingContext(ctx); err != nil {
				t.Fatal(err)
			}
			_, endY := holdTx(t, ctx, other)
			defer endY(false)
			endX(true)

			lockTx, err := raw.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer lockTx.Rollback()
			if _, err := lockTx.ExecContext(ctx, "LOCK TABLE locked IN SHARE MODE"); err != nil {
				t.Fatal(err)
			}
			exists := func(ctx context.Context) (bool, error) {
				var ok bool
				err := raw.QueryRowContext(ctx, "SELECT EXISTS (SELECT 1 FROM locked WHERE v = 1)").Scan(&ok)
				return ok, err
			}
			done := make(chan error, 1)
			go func() {
				_, err := db.ExecContext(sr.WithOp(ctx, sr.Write("insert", exists)), "INSERT INTO locked VALUES (1)")
				done <- err
			}()
			var first []int
			for first = waitingInserts(t, ctx, raw); len(first) == 0; first = waitingInserts(t, ctx, raw) {
				time.Sleep(2 * time.Millisecond)
			}
			cutAll(t, px)
			// The lock goes once the call has ended, or once an INSERT
			// other than the first waits (a replay).
			var callErr error
			ended := false
		wait:
			for {
				select {
				case callErr = <-done:
					ended = true
					break wait
				default:
				}
				for _, pid := range waitingInserts(t, ctx, raw) {
					if pid != first[0] {
						break wait
					}
				}
				time.Sleep(2 * time.Millisecond)
			}
			if err := lockTx.Rollback(); err != nil {
				t.Fatal(err)
			}
			if !ended {
				callErr = <-done
			}
			for n := 1; n > 0; {
				if err := raw.QueryRowContext(ctx, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "+
					"AND query LIKE 'INSERT INTO locked%' AND state = 'active'").Scan(&n); err != nil {
					t.Fatal(err)
				}
			}
			var rows int
			if err := raw.QueryRowContext(ctx, "SELECT count(*) FROM locked").Scan(&rows); err != nil {
				t.Fatal(err)
			}
			ambiguous := errors.Is(callErr, sr.ErrAmbiguous)
			switch {
			case callErr == nil && rows != 1:
				t.Errorf("told nil, %d rows: the fence ended another session, and the verify's \"not applied\" was believed while the INSERT still waited", rows)
			case callErr != nil && !ambiguous:
				t.Errorf("told %v (not ErrAmbiguous), %d rows", callErr, rows)
			case ambiguous && rows > 1:
				t.Errorf("ErrAmbiguous, %d rows: the INSERT was replayed", rows)
			case !pooled && callErr != nil:
				t.Errorf("direct: %v; want nil (the fence ends the backend it names)", callErr)
			}
			t.Logf("%d rows, %v", rows, callErr)
		})
	}
}

// cutAll resets every connection open through px at once, as a network
// that drops them; connections opened afterwards pass.
func cutAll(t *testing.T, px *proxy.Proxy) {
	t.Helper()
	for _, c := range px.Conns() {
		_ = px.SetConnFault(c.ID, proxy.Fault{Mode: proxy.Reset}) // an error: it closed meanwhile
	}
}
