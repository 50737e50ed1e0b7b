package sqlretry_test

// Adversarial review of issue 12's changes, on the real servers (MariaDB
// 127.0.0.1:3306, PostgreSQL 127.0.0.1:5432 and a throwaway PostgreSQL).
// Each test fails on the code it was written against; see the review report.

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"testing"
	"time"

	sr "github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/internal/dbtest"
	"github.com/sqlretry/sqlretry/mysql"
	"github.com/sqlretry/sqlretry/postgres"
)

// Finding 2 on MariaDB (transaction openers the tracker missed) is in
// outcome_integration_test.go, TestSQLTextTransactionNotReplayedMariaDB.

// Finding 1 on MariaDB: CALL is transaction control, so it takes the
// pinned path, whose rows are returned unwrapped. The procedure's INSERT
// committed (autocommit, per statement); the connection is then lost while
// the caller reads the procedure's later result sets, and the caller gets a
// plain "invalid connection" for a write that is in the database.
func TestReviewMariaDBCallRowsLostIsAmbiguous(t *testing.T) {
	db, raw, _ := openMySQL(t, sr.Config{}, nil)
	mustExec(t, raw, "CREATE TABLE t (v INT)")
	mustExec(t, raw, "CREATE PROCEDURE p() BEGIN INSERT INTO t VALUES (1); SELECT 1 AS a; DO SLEEP(5); SELECT 2 AS b; END")
	go func() {
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			var id int64
			err := raw.QueryRow("SELECT ID FROM information_schema.PROCESSLIST WHERE DB = DATABASE() AND INFO LIKE 'DO SLEEP%' LIMIT 1").Scan(&id)
			if err == nil {
				_, _ = raw.Exec("KILL " + strconv.FormatInt(id, 10))
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	rows, err := db.QueryContext(context.Background(), "CALL p()")
	if err != nil {
		t.Fatalf("CALL: %v", err)
	}
	for rows.Next() {
	}
	for rows.NextResultSet() {
		for rows.Next() {
		}
	}
	err = rows.Err()
	rows.Close()
	if n := count(t, raw, "SELECT COUNT(*) FROM t"); n != 1 {
		t.Fatalf("%d rows in t, want 1 (the procedure's INSERT committed)", n)
	}
	if !errors.Is(err, sr.ErrAmbiguous) {
		t.Errorf("rows.Err() = %v, want ErrAmbiguous: the CALL's INSERT is in the database", err)
	}
}

type rvStubVerifier struct{}

func (rvStubVerifier) Mark(context.Context, *sql.Tx) (string, error) { return "mark", nil }
func (rvStubVerifier) Committed(context.Context, *sql.DB, string) (bool, error) {
	return false, errors.New("review: cannot tell")
}

// Finding 4 on MariaDB: a procedure called inside RunTx's transaction
// COMMITs (MySQL allows COMMIT in a procedure: it commits the caller's
// transaction) and then fails with a deadlock. RunTx takes any failure before
// its own COMMIT as a rollback: on a plain handle it replays the whole
// transaction (the INSERT lands twice, and more); through the Connector with
// Config.CommitVerifier the CALL's ErrAmbiguous becomes a plain
// ErrRetriesExhausted.
func TestReviewMariaDBRunTxCallThatCommits(t *testing.T) {
	// On a handle not opened through the Connector, RunTx cannot see the
	// statements its function runs: a CALL that commits inside is the
	// caller's to avoid (RunTx's doc says so). Through the Connector it is
	// seen, and the failure after it is not taken for a clean rollback.
	for _, tc := range []struct {
		name      string
		connector bool
	}{
		{"Connector with a CommitVerifier", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db, raw, _ := openMySQL(t, sr.Config{}, nil)
			mustExec(t, raw, "CREATE TABLE t (v INT)")
			mustExec(t, raw, "CREATE PROCEDURE p() BEGIN COMMIT; SIGNAL SQLSTATE '40001' SET MYSQL_ERRNO = 1213, MESSAGE_TEXT = 'Deadlock found when trying to get lock'; END")
			p := newPolicy(t, sr.Config{Classifier: mysql.Classifier, MaxRetries: 2, CommitVerifier: rvStubVerifier{}})
			h := raw
			if tc.connector {
				h = db
			}
			err := sr.RunTx(context.Background(), h, p, sr.Write("order", nil), nil, func(ctx context.Context, tx *sql.Tx) error {
				if _, err := tx.ExecContext(ctx, "INSERT INTO t VALUES (1)"); err != nil {
					return err
				}
				_, err := tx.ExecContext(ctx, "CALL p()")
				return err
			})
			n := count(t, raw, "SELECT COUNT(*) FROM t")
			if n != 1 || !errors.Is(err, sr.ErrAmbiguous) {
				t.Errorf("got %v with %d rows in t, want ErrAmbiguous with 1: the procedure committed the INSERT", err, n)
			}
		})
	}
}

// Finding 6 on MariaDB: a statement with an implicit commit (DDL, here
// CREATE TABLE IF NOT EXISTS) inside RunTx's transaction commits the INSERT
// before it; a lock wait timeout after it (1205, NotApplied) makes RunTx run
// the whole transaction again.
func TestReviewMariaDBRunTxImplicitCommitReplayed(t *testing.T) {
	db, raw, _ := openMySQL(t, sr.Config{}, nil)
	mustExec(t, raw, "CREATE TABLE t (v INT)")
	mustExec(t, raw, "CREATE TABLE u (id INT PRIMARY KEY, v INT)")
	mustExec(t, raw, "INSERT INTO u VALUES (1, 0)")
	lock, err := raw.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback()
	if _, err := lock.Exec("SELECT * FROM u WHERE id = 1 FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	p := newPolicy(t, sr.Config{Classifier: mysql.Classifier, MaxRetries: 1})
	err = sr.RunTx(context.Background(), db, p, sr.Write("order", nil), nil, func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, "INSERT INTO t VALUES (1)"); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS side (a INT)"); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, "UPDATE u SET v = v + 1 WHERE id = 1")
		return err
	})
	if n := count(t, raw, "SELECT COUNT(*) FROM t"); n != 1 {
		t.Errorf("%d rows in t (err %v), want 1: the transaction was replayed after an implicit commit", n, err)
	}
}

// Finding 1 on PostgreSQL: a CALL leaves the pooled connection "possibly in
// a transaction" until a plain ROLLBACK, so every later statement on it is
// pinned; INSERT … RETURNING on it whose COMMIT is durable locally and whose
// reply is lost (the sync-standby wait of the point 5) comes back as
// a plain error again.
func TestReviewPostgresReturningAfterCallIsAmbiguous(t *testing.T) {
	srv := dbtest.StartPostgresWith(t, dbtest.Options{Settings: map[string]string{"synchronous_standby_names": "nostandby"}})
	admin, err := sql.Open("pgx", srv.DSN()+"&synchronous_commit=local")
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	mustExec(t, admin, "CREATE TABLE t (id serial PRIMARY KEY, v int)")
	mustExec(t, admin, "CREATE PROCEDURE noop() LANGUAGE sql AS $$ SELECT 1 $$")
	p := newPolicy(t, sr.Config{Classifier: postgres.Classifier})
	db, err := sr.Open("pgx", srv.DSN()+"&synchronous_commit=local", p)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "CALL noop()"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "SET synchronous_commit = on"); err != nil {
		t.Fatal(err)
	}
	go func() {
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			var pid int
			if admin.QueryRow("SELECT pid FROM pg_stat_activity WHERE wait_event = 'SyncRep' LIMIT 1").Scan(&pid) == nil {
				_, _ = admin.Exec("SELECT pg_terminate_backend($1)", pid)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	var id int
	err = conn.QueryRowContext(ctx, "INSERT INTO t (v) VALUES (1) RETURNING id").Scan(&id)
	if n := count(t, admin, "SELECT count(*) FROM t"); n != 1 {
		t.Fatalf("%d rows, want 1 (committed locally)", n)
	}
	if !errors.Is(err, sr.ErrAmbiguous) {
		t.Errorf("got %v, want ErrAmbiguous: the row is committed", err)
	}
}

// Finding 7 on PostgreSQL: SELECT of a function that writes is judged
// read-only, so its rows are returned unwrapped (and, had the failure come
// before QueryContext returned, it would have been replayed). The COMMIT is
// durable locally and then waits for a synchronous standby that does not
// exist; the backend is terminated in that wait. The order is committed and
// the caller gets a bare "unexpected EOF".
func TestReviewPostgresSelectOfWritingFunctionIsAmbiguous(t *testing.T) {
	srv := dbtest.StartPostgresWith(t, dbtest.Options{Settings: map[string]string{"synchronous_standby_names": "nostandby"}})
	admin, err := sql.Open("pgx", srv.DSN()+"&synchronous_commit=local")
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	mustExec(t, admin, "CREATE TABLE orders (id serial PRIMARY KEY)")
	mustExec(t, admin, "CREATE FUNCTION create_order() RETURNS int LANGUAGE sql AS $$ INSERT INTO orders DEFAULT VALUES RETURNING id $$")
	p := newPolicy(t, sr.Config{Classifier: postgres.Classifier, MaxRetries: 2})
	db, err := sr.Open("pgx", srv.DSN(), p)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
			_, _ = admin.Exec("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE wait_event = 'SyncRep'")
		}
	}()
	var id int
	err = db.QueryRow("SELECT create_order()").Scan(&id)
	n := count(t, admin, "SELECT count(*) FROM orders")
	if n != 1 || !errors.Is(err, sr.ErrAmbiguous) {
		t.Errorf("got %v with %d orders committed, want ErrAmbiguous with 1: a write judged a read", err, n)
	}
}
