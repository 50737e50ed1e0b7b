package sqlretry_test

// The caller's context ends while a write or a COMMIT is in flight: the
// outcome is unknown, so it is settled under a context of its own
// (Config.SettleTimeout) and the caller is told the truth — success if the
// write landed, its own context's error if it provably did not, an error
// matching both ErrAmbiguous and the context's error if no one can say.

import (
	"context"
	"database/sql"
	"errors"
	"net/url"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	sr "github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/faults/proxy"
	"github.com/sqlretry/sqlretry/internal/dbtest"
	"github.com/sqlretry/sqlretry/mysql"
	"github.com/sqlretry/sqlretry/postgres"
)

// pgViaProxy returns a fresh PostgreSQL database's DSN, a handle on it that
// bypasses the proxy, and a fault proxy in front of it with the DSN that
// goes through it.
func pgViaProxy(t *testing.T) (raw *sql.DB, px *proxy.Proxy, viaDSN string) {
	t.Helper()
	dsn := dbtest.FreshPostgres(t)
	raw, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	px, err = proxy.New(proxy.Config{Target: u.Host, Protocol: proxy.ProtocolPostgres})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	u.Host = px.Addr()
	q := u.Query()
	q.Set("sslmode", "disable")
	u.RawQuery = q.Encode()
	return raw, px, u.String()
}

// cancelWhen cancels ctx's cancel as soon as cond holds (polled), or when
// the test's own bound passes; the returned func waits for it to return.
func cancelWhen(t *testing.T, cancel context.CancelFunc, cond func() bool) (wait func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		deadline := time.Now().Add(60 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Error("the state to cancel in was never reached")
				break
			}
			time.Sleep(2 * time.Millisecond)
		}
		cancel()
	}()
	return func() { <-done }
}

// TestCancelDuringCommitSettledPostgres: the server committed and its answer
// to COMMIT is held; the caller's context ends. Before, RunTx returned a
// plain "context canceled" for a row that is there (every run, both
// verifiers, plain handle and Connector); now the COMMIT is settled and the
// caller told success.
func TestCancelDuringCommitSettledPostgres(t *testing.T) {
	verifiers := []struct {
		name string
		v    sr.CommitVerifier
	}{
		{"pg_xact_status", postgres.CommitVerifier{}},
		{"marker", &postgres.MarkerVerifier{CreateTable: true}},
		{"both", sr.Verifiers(postgres.CommitVerifier{}, &postgres.MarkerVerifier{CreateTable: true})},
	}
	for _, viaConnector := range []bool{false, true} {
		for _, vc := range verifiers {
			name := vc.name + "/plain handle"
			if viaConnector {
				name = vc.name + "/Connector"
			}
			t.Run(name, func(t *testing.T) {
				raw, px, dsn := pgViaProxy(t)
				mustExec(t, raw, "CREATE TABLE pay (id int PRIMARY KEY)")
				p := newPolicy(t, sr.Config{Classifier: postgres.Classifier, CommitVerifier: vc.v})
				db := openPgx(t, dsn, p, viaConnector)
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				wait := cancelWhen(t, cancel, func() bool { return px.Counts().HoldAfterCommit > 0 })
				err := sr.RunTx(ctx, db, p, sr.Write("pay", nil), nil, func(ctx context.Context, tx *sql.Tx) error {
					if _, err := tx.ExecContext(ctx, "INSERT INTO pay VALUES (1)"); err != nil {
						return err
					}
					return px.SetFault(proxy.Fault{Mode: proxy.HoldAfterCommit}) // this COMMIT's answer is held
				})
				wait()
				_ = px.SetFault(proxy.Fault{Mode: proxy.Pass})
				rows := count(t, raw, "SELECT count(*) FROM pay")
				if rows != 1 {
					t.Fatalf("the server has %d rows; the test needs the held COMMIT to have landed", rows)
				}
				if err != nil {
					t.Errorf("RunTx = %v (ErrAmbiguous %v), want nil: the COMMIT landed and the verifier can say so",
						err, errors.Is(err, sr.ErrAmbiguous))
				}
			})
		}
	}
}

// TestCancelDuringCommitUnsettledIsAmbiguous: with nothing to settle the
// cut-off COMMIT, the caller hears both that its context ended and that the
// outcome is unknown — never a plain context error for a COMMIT that landed.
func TestCancelDuringCommitUnsettledIsAmbiguous(t *testing.T) {
	for _, viaConnector := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain handle", true: "Connector"}[viaConnector], func(t *testing.T) {
			raw, px, dsn := pgViaProxy(t)
			mustExec(t, raw, "CREATE TABLE pay (id int PRIMARY KEY)")
			p := newPolicy(t, sr.Config{Classifier: postgres.Classifier})
			db := openPgx(t, dsn, p, viaConnector)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			wait := cancelWhen(t, cancel, func() bool { return px.Counts().HoldAfterCommit > 0 })
			err := sr.RunTx(ctx, db, p, sr.Write("pay", nil), nil, func(ctx context.Context, tx *sql.Tx) error {
				if _, err := tx.ExecContext(ctx, "INSERT INTO pay VALUES (1)"); err != nil {
					return err
				}
				return px.SetFault(proxy.Fault{Mode: proxy.HoldAfterCommit})
			})
			wait()
			_ = px.SetFault(proxy.Fault{Mode: proxy.Pass})
			if !errors.Is(err, sr.ErrAmbiguous) || !errors.Is(err, context.Canceled) {
				t.Errorf("RunTx = %v; want an error matching ErrAmbiguous and context.Canceled (the server has %d rows)",
					err, count(t, raw, "SELECT count(*) FROM pay"))
			}
		})
	}
}

// TestCancelBeforeCommitIsPlain: a context that ended before COMMIT was sent
// (database/sql refuses to send it) leaves nothing applied: the caller gets
// its own context's error, not ErrAmbiguous, and the row is absent. So does
// a write the Connector never sent.
func TestCancelBeforeCommitIsPlain(t *testing.T) {
	for _, viaConnector := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain handle", true: "Connector"}[viaConnector], func(t *testing.T) {
			raw, _, dsn := pgViaProxy(t)
			mustExec(t, raw, "CREATE TABLE pay (id int PRIMARY KEY)")
			p := newPolicy(t, sr.Config{Classifier: postgres.Classifier, CommitVerifier: postgres.CommitVerifier{}})
			db := openPgx(t, dsn, p, viaConnector)
			ctx, cancel := context.WithCancel(context.Background())
			err := sr.RunTx(ctx, db, p, sr.Write("pay", nil), nil, func(ctx context.Context, tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, "INSERT INTO pay VALUES (1)")
				cancel()
				return err
			})
			if !errors.Is(err, context.Canceled) || errors.Is(err, sr.ErrAmbiguous) {
				t.Errorf("RunTx = %v; want context.Canceled and not ErrAmbiguous", err)
			}
			if n := count(t, raw, "SELECT count(*) FROM pay"); n != 0 {
				t.Errorf("the server has %d rows of a transaction never committed", n)
			}
			_, err = db.ExecContext(ctx, "INSERT INTO pay VALUES (2)")
			if !errors.Is(err, context.Canceled) || errors.Is(err, sr.ErrAmbiguous) {
				t.Errorf("an Exec with a done context = %v; want context.Canceled and not ErrAmbiguous", err)
			}
		})
	}
}

// TestCancelDuringWriteSettledPostgres: an autocommit INSERT waits on a lock
// when the caller's context ends. PostgreSQL does not notice the client is
// gone: the INSERT would land once the lock is free. With a verify and a
// Fencer, the settlement ends the backend (the INSERT rolls back) and then
// finds no row: the caller's context error, and no row ever lands. Without
// a Fencer the verify's "no row" proves nothing: ErrAmbiguous. Before,
// both were told a plain "context canceled", and the row landed.
func TestCancelDuringWriteSettledPostgres(t *testing.T) {
	for _, fenced := range []bool{true, false} {
		t.Run(map[bool]string{true: "Fencer", false: "no Fencer"}[fenced], func(t *testing.T) {
			raw, _, dsn := pgViaProxy(t)
			mustExec(t, raw, "CREATE TABLE pay (id int PRIMARY KEY, key text)")
			c := sr.Config{Classifier: postgres.Classifier}
			if fenced {
				c.Fencer = postgres.Fencer
			}
			p := newPolicy(t, c)
			db := openPgx(t, dsn, p, true)
			if err := db.Ping(); err != nil {
				t.Fatal(err)
			}
			lock, err := raw.Begin()
			if err != nil {
				t.Fatal(err)
			}
			defer lock.Rollback()
			if _, err := lock.Exec("LOCK TABLE pay IN SHARE MODE"); err != nil {
				t.Fatal(err)
			}
			key := sr.NewKey()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			wait := cancelWhen(t, cancel, func() bool {
				return count(t, raw, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'INSERT INTO pay%'") > 0
			})
			ctx = sr.WithOp(ctx, sr.Write("pay", sr.Exists(raw, "SELECT 1 FROM pay WHERE key = $1", key)))
			_, err = db.ExecContext(ctx, "INSERT INTO pay VALUES (1, $1)", key)
			wait()
			if err := lock.Rollback(); err != nil {
				t.Fatal(err)
			}
			// The INSERT, if its backend lives, takes the lock now and
			// commits: wait until no backend runs it.
			for count(t, raw, "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'INSERT INTO pay%' AND state = 'active'") > 0 {
				time.Sleep(2 * time.Millisecond)
			}
			rows := count(t, raw, "SELECT count(*) FROM pay")
			switch {
			case err == nil && rows != 1:
				t.Errorf("Exec = nil, and the server has %d rows", rows)
			case err != nil && rows == 0 && !(errors.Is(err, context.Canceled) || errors.Is(err, sr.ErrAmbiguous)):
				t.Errorf("Exec = %v with no row; want the context's error", err)
			case err != nil && rows == 1 && !errors.Is(err, sr.ErrAmbiguous):
				t.Errorf("Exec = %v, and the server has the row: want nil or ErrAmbiguous", err)
			case fenced && (err == nil || errors.Is(err, sr.ErrAmbiguous)):
				t.Errorf("Exec = %v (%d rows); with a Fencer the settlement should prove the write not applied", err, rows)
			case !fenced && !(errors.Is(err, sr.ErrAmbiguous) && errors.Is(err, context.Canceled)):
				t.Errorf("Exec = %v (%d rows); without a Fencer want ErrAmbiguous and context.Canceled", err, rows)
			}
		})
	}
}

// openPgx opens dsn with the pgx driver, through a Connector of p or not.
func openPgx(t *testing.T, dsn string, p *sr.Policy, viaConnector bool) *sql.DB {
	t.Helper()
	var db *sql.DB
	var err error
	if viaConnector {
		db, err = sr.Open("pgx", dsn, p)
	} else {
		db, err = sql.Open("pgx", dsn)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// TestCancelDuringWriteSettledMariaDB: go-sql-driver closes the connection
// of a statement whose context ends, and MariaDB runs the statement on: an
// UPDATE waiting on a row lock lands once the lock is free. Before, the
// caller was told a plain "context canceled" for it, and the row changed.
// Now: ErrAmbiguous and the context's error without a verify; with WithOp's
// verify and mysql.Fencer the session is killed first, the verify finds
// nothing, and the caller hears its context's error with nothing applied.
func TestCancelDuringWriteSettledMariaDB(t *testing.T) {
	for _, fenced := range []bool{false, true} {
		t.Run(map[bool]string{true: "Fencer", false: "no Fencer"}[fenced], func(t *testing.T) {
			c := sr.Config{}
			if fenced {
				c.Fencer = mysql.Fencer
			}
			db, raw, _ := openMySQL(t, c, func(cfg *gomysql.Config) { cfg.Params["innodb_lock_wait_timeout"] = "30" })
			mustExec(t, raw, "CREATE TABLE pay (id int PRIMARY KEY, v int NOT NULL)")
			mustExec(t, raw, "INSERT INTO pay VALUES (1, 0)")
			if err := db.Ping(); err != nil {
				t.Fatal(err)
			}
			lock, err := raw.Begin()
			if err != nil {
				t.Fatal(err)
			}
			defer lock.Rollback()
			if _, err := lock.Exec("SELECT v FROM pay WHERE id = 1 FOR UPDATE"); err != nil {
				t.Fatal(err)
			}
			waiting := "SELECT count(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE 'UPDATE pay%'"
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			wait := cancelWhen(t, cancel, func() bool { return count(t, raw, waiting) > 0 })
			if fenced {
				ctx = sr.WithOp(ctx, sr.Write("pay", sr.Exists(raw, "SELECT 1 FROM pay WHERE id = 1 AND v = 1")))
			}
			_, err = db.ExecContext(ctx, "UPDATE pay SET v = v + 1 WHERE id = 1")
			wait()
			if err := lock.Rollback(); err != nil {
				t.Fatal(err)
			}
			for count(t, raw, waiting) > 0 { // a live UPDATE takes the lock now and commits
				time.Sleep(2 * time.Millisecond)
			}
			v := count(t, raw, "SELECT v FROM pay WHERE id = 1")
			switch {
			case err == nil && v != 1:
				t.Errorf("Exec = nil, and v = %d", v)
			case err != nil && v == 1 && !errors.Is(err, sr.ErrAmbiguous):
				t.Errorf("Exec = %v, and the UPDATE landed (v = 1): want nil or ErrAmbiguous", err)
			case !errors.Is(err, context.Canceled):
				t.Errorf("Exec = %v (v = %d); want it to match context.Canceled", err, v)
			case fenced && (v != 0 || errors.Is(err, sr.ErrAmbiguous)):
				t.Errorf("Exec = %v, v = %d; with a Fencer the session is killed before the verify: want v = 0 and the context's error alone", err, v)
			case !fenced && !errors.Is(err, sr.ErrAmbiguous):
				t.Errorf("Exec = %v (v = %d); without a verify want ErrAmbiguous", err, v)
			}
		})
	}
}

// TestCancelDuringCommitIdempotentIsAmbiguous: an Idempotent RunTx consents
// to a replay of its transaction, which the caller's ended context forbids:
// its cut-off COMMIT, which landed, is ErrAmbiguous and the context's error,
// not the context's error alone (before: "context canceled", the row there).
func TestCancelDuringCommitIdempotentIsAmbiguous(t *testing.T) {
	for _, viaConnector := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain handle", true: "Connector"}[viaConnector], func(t *testing.T) {
			raw, px, dsn := pgViaProxy(t)
			mustExec(t, raw, "CREATE TABLE pay (id int PRIMARY KEY)")
			p := newPolicy(t, sr.Config{Classifier: postgres.Classifier, CommitVerifier: postgres.CommitVerifier{}})
			db := openPgx(t, dsn, p, viaConnector)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			wait := cancelWhen(t, cancel, func() bool { return px.Counts().HoldAfterCommit > 0 })
			err := sr.RunTx(ctx, db, p, sr.Idempotent("pay"), nil, func(ctx context.Context, tx *sql.Tx) error {
				if _, err := tx.ExecContext(ctx, "INSERT INTO pay VALUES (1) ON CONFLICT DO NOTHING"); err != nil {
					return err
				}
				return px.SetFault(proxy.Fault{Mode: proxy.HoldAfterCommit})
			})
			wait()
			_ = px.SetFault(proxy.Fault{Mode: proxy.Pass})
			if n := count(t, raw, "SELECT count(*) FROM pay"); n != 1 {
				t.Fatalf("%d rows; the test needs the held COMMIT to have landed", n)
			}
			if !errors.Is(err, sr.ErrAmbiguous) || !errors.Is(err, context.Canceled) {
				t.Errorf("RunTx = %v; want ErrAmbiguous and context.Canceled", err)
			}
		})
	}
}

// TestCancelDuringPinnedTextIsAmbiguousLibPQ: a text that commits part of
// itself and runs on (BEGIN; INSERT; COMMIT; SELECT pg_sleep) is cut off by
// the caller during its tail; lib/pq sends a cancel request and the server
// answers 57014 for the last part. That part's verdict says nothing of the
// committed INSERT before it: ErrAmbiguous (before: the context's error).
func TestCancelDuringPinnedTextIsAmbiguousLibPQ(t *testing.T) {
	raw, _, dsn := pgViaProxy(t)
	mustExec(t, raw, "CREATE TABLE pay (id int PRIMARY KEY)")
	p := newPolicy(t, sr.Config{Classifier: postgres.Classifier})
	db, err := sr.Open("postgres", dsn, p)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wait := cancelWhen(t, cancel, func() bool {
		return count(t, raw, "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep' AND query LIKE 'BEGIN; INSERT INTO pay%'") > 0
	})
	_, err = db.ExecContext(ctx, "BEGIN; INSERT INTO pay VALUES (1); COMMIT; SELECT pg_sleep(30)")
	wait()
	if n := count(t, raw, "SELECT count(*) FROM pay"); n != 1 {
		t.Fatalf("%d rows; the test needs the INSERT committed before the cancel", n)
	}
	if !errors.Is(err, sr.ErrAmbiguous) || !errors.Is(err, context.Canceled) {
		t.Errorf("Exec = %v with the INSERT committed: want ErrAmbiguous and context.Canceled", err)
	}
}
