package sqlretry_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	sr "github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/internal/dbtest"
	"github.com/sqlretry/sqlretry/mysql"
)

// Issue 19 §1: what a MariaDB Galera cluster adds to MariaDB's failures, on
// a real three-node cluster (dbtest.StartGalera), and RunTx's outcomes under
// it. One cluster serves every subtest, in order, since starting one costs
// about 15 s, and a node is cut off once (NonPrimary) and killed once
// (NodeKilledUnderLoad), each about 10 s: the CI variant stays under a
// minute. SQLRETRY_LONG=1 runs more calls and kills every node in turn.
func TestGalera(t *testing.T) {
	e := openGalera(t)
	t.Run("BruteForceAbortOnStatement", e.testBFAbortStatement)
	t.Run("BruteForceAbortAtCommit", e.testBFAbortCommit)
	t.Run("CertificationFailureAtCommit", e.testCertificationFailure)
	t.Run("NonPrimary", e.testNonPrimary)
	t.Run("WritersOnEveryNode", e.testWriters)
	t.Run("NodeKilledUnderLoad", e.testKillUnderLoad)
}

// galeraEnv is the shared cluster: one plain database/sql pool per node.
type galeraEnv struct {
	g   *dbtest.Galera
	dbs []*sql.DB
}

// galeraSchema is what every subtest writes to: k, a few hot rows for
// conflicts; big, whose 50,000-row UPDATE keeps a node's applier busy.
var galeraSchema = []string{
	"CREATE TABLE k (id INT PRIMARY KEY, v INT NOT NULL)",
	"INSERT INTO k VALUES (1, 0), (2, 0), (3, 0), (4, 0)",
	"CREATE TABLE big (id INT PRIMARY KEY, v INT NOT NULL)",
	"INSERT INTO big SELECT seq, 0 FROM seq_1_to_50000",
	// One row per applied write: call is the caller's unique value, so a
	// write applied twice shows as two rows and a lost one as none.
	"CREATE TABLE ledger (seq BIGINT AUTO_INCREMENT PRIMARY KEY, call_id BIGINT NOT NULL, node INT NOT NULL, KEY (call_id))",
	// The load's hot rows: every call adds 1 to one of a run's slots, so
	// that writers on different nodes conflict, and the slots' sum must
	// equal the run's ledger rows.
	"CREATE TABLE hits (run INT NOT NULL, slot INT NOT NULL, n BIGINT NOT NULL, PRIMARY KEY (run, slot))",
}

// openGaleraNode opens a pool on one node through mysql.GaleraConnector,
// as the package tells Galera users to: with go-sql-driver's prepared
// statements, MariaDB 10.11 + galera-4 can roll a brute-force-aborted
// transaction back with no error and let the statements after it commit on
// their own (seen here: a ledger row without its hot-row update, COMMIT
// told OK; see mysql.TestGaleraRawClaimSilentRollback).
func openGaleraNode(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	c, err := mysql.GaleraConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(c)
	t.Cleanup(func() { db.Close() })
	return db
}

func openGalera(t *testing.T) *galeraEnv {
	e := &galeraEnv{g: dbtest.StartGalera(t)}
	for _, n := range e.g.Nodes {
		e.dbs = append(e.dbs, openGaleraNode(t, n.DSN()))
	}
	for _, q := range galeraSchema {
		mustExec(t, e.dbs[0], q)
	}
	for i := range e.dbs { // DDL and the load replicated everywhere
		e.syncRead(t, i, "SELECT COUNT(*) FROM big")
	}
	return e
}

// syncRead runs a one-value read on node i after the node has applied
// everything the cluster committed before it (wsrep_sync_wait=1: a causal
// read), and returns the value.
func (e *galeraEnv) syncRead(t *testing.T, i int, q string, args ...any) int64 {
	t.Helper()
	ctx := context.Background()
	c := e.conn(t, i)
	defer c.Close()
	if _, err := c.ExecContext(ctx, "SET SESSION wsrep_sync_wait = 1"); err != nil {
		t.Fatalf("node %d: %v", i, err)
	}
	var v sql.NullInt64
	if err := c.QueryRowContext(ctx, q, args...).Scan(&v); err != nil {
		t.Fatalf("node %d: %s: %v", i, q, err)
	}
	return v.Int64
}

func (e *galeraEnv) conn(t *testing.T, i int) *sql.Conn {
	t.Helper()
	c, err := e.dbs[i].Conn(context.Background())
	if err != nil {
		t.Fatalf("node %d: %v", i, err)
	}
	return c
}

// begin opens a transaction on a session of its own on node i. Cleanup
// rolls it back and closes the session, in that order: closing a session
// whose transaction is still open would wait for it forever.
func (e *galeraEnv) begin(t *testing.T, i int) (*sql.Conn, *sql.Tx) {
	t.Helper()
	c := e.conn(t, i)
	tx, err := c.BeginTx(context.Background(), nil)
	if err != nil {
		c.Close()
		t.Fatalf("node %d: BEGIN: %v", i, err)
	}
	t.Cleanup(func() {
		tx.Rollback()
		c.Close()
	})
	return c, tx
}

// status returns a numeric wsrep status variable of node i.
func (e *galeraEnv) status(t *testing.T, i int, name string) int64 {
	t.Helper()
	st, err := e.g.Status(context.Background(), i)
	if err != nil {
		t.Fatalf("node %d: %v", i, err)
	}
	n, err := strconv.ParseInt(st[name], 10, 64)
	if err != nil {
		t.Fatalf("node %d: %s = %q", i, name, st[name])
	}
	return n
}

// waitStatus polls node i until its status variable name has a value that
// ok accepts, for at most 30 s.
func (e *galeraEnv) waitStatus(t *testing.T, i int, name string, ok func(string) bool) {
	t.Helper()
	var last string
	for try := 0; try < 600; try++ {
		st, err := e.g.Status(context.Background(), i)
		if err == nil && ok(st[name]) {
			return
		}
		last = fmt.Sprint(st[name], err)
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("node %d: %s still %s after 30 s", i, name, last)
}

// waitAbove waits until node i's numeric status variable name exceeds n.
func (e *galeraEnv) waitAbove(t *testing.T, i int, name string, n int64) {
	t.Helper()
	e.waitStatus(t, i, name, func(v string) bool {
		got, err := strconv.ParseInt(v, 10, 64)
		return err == nil && got > n
	})
}

// want is the verdict a Galera failure must get.
type want struct {
	code      string
	retryable bool
	phase     sr.Phase
	kind      sr.Kind
}

var (
	wantDeadlock = want{"1213", true, sr.NotApplied, sr.Contention}
	// 1047 while non-primary: the server refused the statement before
	// running it; the node serves again once it rejoins a primary
	// component, so a retry has a chance.
	wantNotReady = want{"1047", true, sr.NotApplied, sr.Unavailable}
	// 1180 at COMMIT: the write set's replication failed as the node lost
	// the primary component; it may have been ordered by the others.
	wantCommitFailed = want{"1180", true, sr.Unknown, sr.Unavailable}
	wantConnLost     = want{"invalid-conn", true, sr.Unknown, sr.Unavailable}
	wantDialRefused  = want{"dial", true, sr.NotSent, sr.Unavailable}
)

// checkClass fails the test unless err is a MySQL error numbered w.code (for
// a numeric code) whose verdict by mysql.Classifier is w.
func checkClass(t *testing.T, what string, err error, w want) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: no error, want %s", what, w.code)
		return
	}
	c := mysql.Classify(err)
	var me *gomysql.MySQLError
	if _, numeric := strconv.Atoi(w.code); numeric == nil && (!errors.As(err, &me) || strconv.Itoa(int(me.Number)) != w.code) {
		t.Errorf("%s: %v, want error %s", what, err, w.code)
		return
	}
	got := want{c.Code, c.Retryable, c.Phase, c.Kind}
	if got != w {
		t.Errorf("%s: %v\n  classified %+v (%s)\n  want       %+v", what, err, got, c.Reason, w)
		return
	}
	t.Logf("%s: %v -> retryable=%v phase=%v kind=%v", what, err, c.Retryable, c.Phase, c.Kind)
}

// A transaction on node 1 holds row 1 when node 0 commits a change to it:
// node 1's applier, replicating node 0's write, aborts the local transaction
// (a brute-force abort), and the local session learns it at its next
// statement as 1213. The whole transaction was rolled back: not applied,
// retry it whole, as for an InnoDB deadlock.
func (e *galeraEnv) testBFAbortStatement(t *testing.T) {
	ctx := context.Background()
	tx, before := e.holdRow(t, 1)
	e.waitAbove(t, 1, "wsrep_local_bf_aborts", before)
	_, err := tx.ExecContext(ctx, "UPDATE k SET v = v + 1 WHERE id = 2")
	checkClass(t, "the next statement of a brute-force-aborted transaction", err, wantDeadlock)
	tx.Rollback()
	e.checkOnlyNode0Wrote(t)
}

// The same abort, met at COMMIT.
func (e *galeraEnv) testBFAbortCommit(t *testing.T) {
	tx, before := e.holdRow(t, 1)
	e.waitAbove(t, 1, "wsrep_local_bf_aborts", before)
	checkClass(t, "COMMIT of a brute-force-aborted transaction", tx.Commit(), wantDeadlock)
	e.checkOnlyNode0Wrote(t)
}

// holdRow opens a transaction on node 1 that updates row 2 and row id, then
// commits a conflicting change to row id on node 0. It returns the open
// transaction and node 1's brute-force abort count from before.
func (e *galeraEnv) holdRow(t *testing.T, id int) (*sql.Tx, int64) {
	t.Helper()
	ctx := context.Background()
	before := e.status(t, 1, "wsrep_local_bf_aborts")
	_, tx := e.begin(t, 1)
	for _, q := range []string{"UPDATE k SET v = v + 1 WHERE id = 2", "UPDATE k SET v = v + 1 WHERE id = " + strconv.Itoa(id)} {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	mustExec(t, e.dbs[0], "UPDATE k SET v = v + 1000000 WHERE id = ?", id)
	return tx, before
}

// checkOnlyNode0Wrote: row 2, which only the aborted transaction touched,
// is unchanged on every node.
func (e *galeraEnv) checkOnlyNode0Wrote(t *testing.T) {
	t.Helper()
	for i := range e.dbs {
		if v := e.syncRead(t, i, "SELECT v FROM k WHERE id = 2"); v != 0 {
			t.Errorf("node %d: row 2 = %d after the aborted transaction, want 0 (not applied)", i, v)
		}
	}
}

// A certification failure: node 1's transaction writes row 3 and sends
// COMMIT after node 0's conflicting commit was ordered but before node 1
// applied it (node 1's applier is busy with a 50,000-row UPDATE ordered just
// before). Certification rejects node 1's write set everywhere: 1213 at
// COMMIT, not applied. Either a certification failure or a brute-force abort
// may win the race on a given try; both must be 1213 with the deadlock's
// verdict, and a few tries must show at least one certification failure.
func (e *galeraEnv) testCertificationFailure(t *testing.T) {
	ctx := context.Background()
	certBefore := e.status(t, 1, "wsrep_local_cert_failures")
	for try := 1; try <= 10 && e.status(t, 1, "wsrep_local_cert_failures") == certBefore; try++ {
		_, tx := e.begin(t, 1)
		if _, err := tx.ExecContext(ctx, "UPDATE k SET v = v + 1 WHERE id = 3"); err != nil {
			t.Fatal(err)
		}
		mustExec(t, e.dbs[0], "UPDATE big SET v = v + 1")
		mustExec(t, e.dbs[0], "UPDATE k SET v = v + 1000 WHERE id = 3")
		checkClass(t, fmt.Sprintf("try %d: COMMIT of a write set that fails certification", try), tx.Commit(), wantDeadlock)
	}
	if n := e.status(t, 1, "wsrep_local_cert_failures") - certBefore; n == 0 {
		t.Errorf("no certification failure in 10 tries (every conflict was a brute-force abort)")
	}
	// Only node 0's writes to row 3 landed: 1000 per try, no +1.
	if v := e.syncRead(t, 2, "SELECT v FROM k WHERE id = 3"); v%1000 != 0 {
		t.Errorf("row 3 = %d: a failed COMMIT's +1 was applied", v)
	}
}

// pool opens a pool of at most conns sessions on node i, with a Policy of
// small waits.
func (e *galeraEnv) pool(t *testing.T, i, conns int) (*sql.DB, *sr.Policy) {
	t.Helper()
	db := openGaleraNode(t, e.g.Nodes[i].DSN())
	db.SetMaxOpenConns(conns)
	p, err := sr.New(sr.Config{Classifier: mysql.Classifier, BaseDelay: 5 * time.Millisecond, MaxDelay: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return db, p
}

// outcome is what a caller was told.
type outcome uint8

const (
	applied    outcome = iota // nil: applied once
	notApplied                // any other error but ErrAmbiguous
	ambiguous                 // ErrAmbiguous: either
)

func outcomeOf(err error) outcome {
	switch {
	case err == nil:
		return applied
	case errors.Is(err, sr.ErrAmbiguous):
		return ambiguous
	}
	return notApplied
}

func (o outcome) String() string { return [...]string{"applied", "not applied", "ambiguous"}[o] }

// agrees reports whether the cluster holding the write n times agrees with
// what the caller was told.
func (o outcome) agrees(n int64) bool {
	switch o {
	case applied:
		return n == 1
	case notApplied:
		return n == 0
	}
	return n <= 1
}
