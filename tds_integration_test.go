package sqlretry_test

// The database/sql wrapper end to end against a pretend SQL Server: the
// unmodified go-mssqldb driver talks TDS to internal/tdstest, which drops
// connections and loses replies on cue and counts what arrived, so each test
// can assert whether a statement or a transaction was replayed.

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	msdriver "github.com/microsoft/go-mssqldb"

	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/internal/tdstest"
	"github.com/sqlretry/sqlretry/mssql"
)

// tdsPolicy is a Policy with the SQL Server classifier and waits short
// enough not to matter.
func tdsPolicy(t *testing.T, c sqlretry.Config) *sqlretry.Policy {
	t.Helper()
	c.Classifier = mssql.Classifier
	if c.BaseDelay == 0 {
		c.BaseDelay = time.Millisecond
	}
	c.MaxDelay = c.BaseDelay
	c.Jitter = sqlretry.NoJitter
	if c.Budget == nil {
		c.Budget = sqlretry.NoBudget
	}
	p, err := sqlretry.New(c)
	if err != nil {
		t.Fatalf("sqlretry.New: %v", err)
	}
	return p
}

// tdsDB opens srv through go-mssqldb wrapped in sqlretry.Connector.
func tdsDB(t *testing.T, srv *tdstest.Server, p *sqlretry.Policy) *sql.DB {
	t.Helper()
	c, err := msdriver.NewConnector(srv.DSN())
	if err != nil {
		t.Fatalf("NewConnector: %v", err)
	}
	db := sql.OpenDB(sqlretry.Connector(c, p))
	t.Cleanup(func() { db.Close() })
	return db
}

func tdsCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestTDSStatementDroppedAfterSendIsNotReplayed(t *testing.T) {
	for _, f := range []tdstest.Fault{tdstest.Drop, tdstest.DropAfterApply, tdstest.Reset} {
		t.Run(f.String(), func(t *testing.T) {
			srv := tdstest.Start(t, tdstest.Script{Rules: []tdstest.Rule{
				{Match: "UPDATE", Times: 1, Reply: tdstest.Faulty(f)},
				{Match: "UPDATE", Reply: tdstest.Affected(1)},
			}})
			p := tdsPolicy(t, sqlretry.Config{})
			db := tdsDB(t, srv, p)
			_, err := db.ExecContext(tdsCtx(t), "UPDATE accounts SET balance = balance - 10 WHERE id = @p1", 7)
			if !errors.Is(err, sqlretry.ErrAmbiguous) {
				t.Fatalf("Exec: got %v, want an error matching ErrAmbiguous", err)
			}
			if got := srv.Count(tdstest.Statement, "UPDATE"); got != 1 {
				t.Errorf("UPDATEs received: got %d, want 1 (no replay)", got)
			}
			want := 0
			if f == tdstest.DropAfterApply {
				want = 1
			}
			if got := srv.Applied("UPDATE"); got != want {
				t.Errorf("UPDATEs applied: got %d, want %d", got, want)
			}
		})
	}
}

func TestTDSReadDroppedAfterSendIsReplayed(t *testing.T) {
	srv := tdstest.Start(t, tdstest.Script{Rules: []tdstest.Rule{
		{Match: "SELECT", Times: 1, Reply: tdstest.Faulty(tdstest.Drop)},
		{Match: "SELECT", Reply: tdstest.Scalar(42)},
	}})
	db := tdsDB(t, srv, tdsPolicy(t, sqlretry.Config{}))
	var n int
	if err := db.QueryRowContext(tdsCtx(t), "SELECT balance FROM accounts WHERE id = 7").Scan(&n); err != nil {
		t.Fatalf("QueryRow: %v", err)
	}
	if n != 42 {
		t.Errorf("value: got %d, want 42", n)
	}
	if got := srv.Count(tdstest.Statement, "SELECT"); got != 2 {
		t.Errorf("SELECTs received: got %d, want 2 (a read is replayed)", got)
	}
}

func TestTDSStatementDroppedBeforeSendIsReplayed(t *testing.T) {
	srv := tdstest.Start(t, tdstest.Script{Rules: []tdstest.Rule{
		{Match: "UPDATE", Reply: tdstest.Affected(1)},
	}})
	p := tdsPolicy(t, sqlretry.Config{})
	db := tdsDB(t, srv, p)
	db.SetMaxOpenConns(1)
	ctx := tdsCtx(t)
	if err := db.PingContext(ctx); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	if got := srv.DropIdle(); got != 1 {
		t.Fatalf("DropIdle: got %d, want 1", got)
	}
	res, err := db.ExecContext(ctx, "UPDATE accounts SET balance = balance - 10 WHERE id = @p1", 7)
	if err != nil {
		t.Fatalf("Exec: got %v, want success on a new connection", err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		t.Errorf("RowsAffected: got %d, want 1", n)
	}
	if got := srv.Count(tdstest.Statement, "UPDATE"); got != 1 {
		t.Errorf("UPDATEs received: got %d, want 1", got)
	}
	if got := srv.Connections(); got != 2 {
		t.Errorf("connections: got %d, want 2 (the dropped one and its replacement)", got)
	}
	if st := p.Stats(); st.Retries != 1 {
		t.Errorf("Policy retries: got %d, want 1", st.Retries)
	}
}

func TestTDSDeadlockedStatementIsReplayed(t *testing.T) {
	srv := tdstest.Start(t, tdstest.Script{Rules: []tdstest.Rule{
		{Match: "UPDATE", Times: 2, Reply: tdstest.Deadlock()},
		{Match: "UPDATE", Reply: tdstest.Affected(1)},
	}})
	db := tdsDB(t, srv, tdsPolicy(t, sqlretry.Config{}))
	if _, err := db.ExecContext(tdsCtx(t), "UPDATE accounts SET balance = 0"); err != nil {
		t.Fatalf("Exec: %v", err)
	}
	if got, want := srv.Count(tdstest.Statement, "UPDATE"), 3; got != want {
		t.Errorf("UPDATEs received: got %d, want %d", got, want)
	}
	if got := srv.Applied("UPDATE"); got != 1 {
		t.Errorf("UPDATEs applied: got %d, want 1", got)
	}
}

func TestTDSPermanentErrorIsNotReplayed(t *testing.T) {
	srv := tdstest.Start(t, tdstest.Script{Rules: []tdstest.Rule{
		{Match: "INSERT", Reply: tdstest.Fail(2627, 14, "Violation of PRIMARY KEY constraint 'pk_t'.")},
	}})
	db := tdsDB(t, srv, tdsPolicy(t, sqlretry.Config{}))
	_, err := db.ExecContext(tdsCtx(t), "INSERT INTO t VALUES (1)")
	var me msdriver.Error
	if !errors.As(err, &me) || me.Number != 2627 {
		t.Fatalf("Exec: got %v, want mssql.Error 2627", err)
	}
	if got := srv.Count(tdstest.Statement, "INSERT"); got != 1 {
		t.Errorf("INSERTs received: got %d, want 1", got)
	}
}

// TestTDSServerErrorsWithNetworkNumbersAreNotRetried: SQL Server's own
// messages 121 (INSERT ... SELECT with more columns than the insert list),
// 203 (not a valid identifier), 233 (column cannot be null), 10053, 10054
// and 11001 (OLE DB provider errors) are permanent. Their numbers are also
// ones SqlClient stamps on its client-side network errors, at class 20;
// sent by the server at their real severity, a write fails once with the
// plain error: neither ErrAmbiguous nor retried.
func TestTDSServerErrorsWithNetworkNumbersAreNotRetried(t *testing.T) {
	for _, tc := range []struct {
		number int32
		class  uint8
		msg    string
	}{
		{121, 15, "The select list for the INSERT statement contains more items than the insert list. The number of SELECT values must match the number of INSERT columns."},
		{203, 16, "The name 'INSERT INTO t VALUES (1)' is not a valid identifier."},
		{233, 16, "The column 'id' in table 't' cannot be null."},
		{10053, 16, "Could not convert the data value due to reasons other than sign mismatch or overflow."},
		{10054, 16, "The data value for one or more columns overflowed the type used by the provider."},
		{11001, 16, "Non-NULL value successfully returned."},
	} {
		for _, op := range []sqlretry.Op{sqlretry.Write("insert", nil), sqlretry.Idempotent("insert-idempotent")} {
			srv := tdstest.Start(t, tdstest.Script{Rules: []tdstest.Rule{
				{Match: "INSERT", Reply: tdstest.Fail(tc.number, tc.class, tc.msg)},
			}})
			p := tdsPolicy(t, sqlretry.Config{})
			db, err := sql.Open("sqlserver", srv.DSN())
			if err != nil {
				t.Fatal(err)
			}
			err = p.Do(tdsCtx(t), op, func(ctx context.Context) error {
				_, err := db.ExecContext(ctx, "INSERT INTO t SELECT a, b FROM s")
				return err
			})
			db.Close()
			var me msdriver.Error
			switch {
			case !errors.As(err, &me) || me.Number != tc.number:
				t.Errorf("%d (%s): got %v, want the mssql.Error", tc.number, op.Name, err)
			case errors.Is(err, sqlretry.ErrAmbiguous), errors.Is(err, sqlretry.ErrRetriesExhausted):
				t.Errorf("%d (%s): got %v, want the plain permanent error", tc.number, op.Name, err)
			}
			if got := srv.Count(tdstest.Statement, "INSERT"); got != 1 {
				t.Errorf("%d (%s): INSERTs received: got %d, want 1 (not retried)", tc.number, op.Name, got)
			}
		}
	}
}

// insertTx is a transaction function that inserts one row.
func insertTx(ctx context.Context, tx *sql.Tx) error {
	_, err := tx.ExecContext(ctx, "INSERT INTO orders (id) VALUES (@p1)", 1)
	return err
}

func TestTDSCommitReplyLostIsAmbiguousWithoutVerify(t *testing.T) {
	for _, f := range []tdstest.Fault{tdstest.Drop, tdstest.DropAfterApply} {
		t.Run(f.String(), func(t *testing.T) {
			srv := tdstest.Start(t, tdstest.Script{Rules: []tdstest.Rule{
				{Kind: tdstest.Commit, Times: 1, Reply: tdstest.Faulty(f)},
			}})
			p := tdsPolicy(t, sqlretry.Config{})
			db := tdsDB(t, srv, p)
			err := sqlretry.RunTx(tdsCtx(t), db, p, sqlretry.Write("place-order", nil), nil, insertTx)
			if !errors.Is(err, sqlretry.ErrAmbiguous) {
				t.Fatalf("RunTx: got %v, want an error matching ErrAmbiguous", err)
			}
			if got := srv.Count(tdstest.Commit, ""); got != 1 {
				t.Errorf("COMMITs received: got %d, want 1 (never replayed)", got)
			}
			if got := srv.Count(tdstest.Statement, "INSERT"); got != 1 {
				t.Errorf("INSERTs received: got %d, want 1", got)
			}
		})
	}
}

// TestTDSCommitReplyLostIsVerified: a lost COMMIT reply is settled by the
// Op's Verify. "Applied" ends the call with success. "Not applied" is not
// trusted without a Fencer (the package mssql has none: a server may still
// be running the attempt), so the call ends with ErrAmbiguous instead of
// running the transaction again.
func TestTDSCommitReplyLostIsVerified(t *testing.T) {
	for _, tc := range []struct {
		fault         tdstest.Fault
		wantAmbiguous bool
		wantCommitted int
	}{
		{tdstest.DropAfterApply, false, 1},
		{tdstest.Drop, true, 0},
	} {
		t.Run(tc.fault.String(), func(t *testing.T) {
			srv := tdstest.Start(t, tdstest.Script{
				Rules: []tdstest.Rule{{Kind: tdstest.Commit, Times: 1, Reply: tdstest.Faulty(tc.fault)}},
				Func: func(r tdstest.Request) tdstest.Reply {
					if matchPrefix(r.SQL, "SELECT COUNT") {
						return tdstest.Scalar(r.Server().Applied("INSERT INTO orders"))
					}
					return tdstest.Affected(1)
				},
			})
			p := tdsPolicy(t, sqlretry.Config{})
			db := tdsDB(t, srv, p)
			var verifies atomic.Int32
			verify := func(ctx context.Context) (bool, error) {
				verifies.Add(1)
				var n int
				err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM orders WHERE id = 1").Scan(&n)
				return n > 0, err
			}
			err := sqlretry.RunTx(tdsCtx(t), db, p, sqlretry.Write("place-order", verify), nil, insertTx)
			if tc.wantAmbiguous != errors.Is(err, sqlretry.ErrAmbiguous) || (!tc.wantAmbiguous && err != nil) {
				t.Fatalf("RunTx: got %v, want ambiguous %v", err, tc.wantAmbiguous)
			}
			if got := verifies.Load(); got != 1 {
				t.Errorf("verify calls: got %d, want 1", got)
			}
			if got := srv.Count(tdstest.Statement, "INSERT"); got != 1 {
				t.Errorf("INSERTs received: got %d, want 1 (never replayed)", got)
			}
			if got := srv.Committed(); got != tc.wantCommitted {
				t.Errorf("transactions committed: got %d, want %d", got, tc.wantCommitted)
			}
			if got := srv.Applied("INSERT"); got != tc.wantCommitted {
				t.Errorf("INSERTs applied: got %d, want %d", got, tc.wantCommitted)
			}
		})
	}
}

func TestTDSCommitNotSentIsNotCommitted(t *testing.T) {
	srv := tdstest.Start(t, tdstest.Script{})
	p := tdsPolicy(t, sqlretry.Config{})
	db := tdsDB(t, srv, p)
	var attempts atomic.Int32
	err := sqlretry.RunTx(tdsCtx(t), db, p, sqlretry.Write("place-order", nil), nil, func(ctx context.Context, tx *sql.Tx) error {
		if err := insertTx(ctx, tx); err != nil {
			return err
		}
		if attempts.Add(1) == 1 {
			// The connection dies while idle, before COMMIT: go-mssqldb
			// fails to send it and returns an mssql.RetryableError.
			if got := srv.DropIdle(); got != 1 {
				t.Errorf("DropIdle: got %d, want 1", got)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("RunTx: got %v, want success: a COMMIT that was never sent means not committed, so the transaction runs again", err)
	}
	if got := attempts.Load(); got != 2 {
		t.Errorf("transaction attempts: got %d, want 2", got)
	}
	if got := srv.Count(tdstest.Commit, ""); got != 1 {
		t.Errorf("COMMITs received: got %d, want 1 (the first never left the client)", got)
	}
	txs := srv.Transactions()
	if len(txs) != 2 || txs[0].Outcome != tdstest.TxRolledBack || txs[0].CommitSeen || txs[1].Outcome != tdstest.TxCommitted {
		t.Errorf("transactions: got %+v, want the first rolled back without a COMMIT, the second committed", txs)
	}
}

func TestTDSDeadlockInTransactionRetriesTheWholeTransaction(t *testing.T) {
	srv := tdstest.Start(t, tdstest.Script{Rules: []tdstest.Rule{
		{Match: "UPDATE", Times: 1, Reply: tdstest.Deadlock()},
	}})
	p := tdsPolicy(t, sqlretry.Config{})
	db := tdsDB(t, srv, p)
	err := sqlretry.RunTx(tdsCtx(t), db, p, sqlretry.Write("transfer", nil), nil, func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, "INSERT INTO ledger VALUES (1)"); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, "UPDATE accounts SET balance = 0")
		return err
	})
	if err != nil {
		t.Fatalf("RunTx: %v", err)
	}
	if got := srv.Count(tdstest.Statement, "INSERT"); got != 2 {
		t.Errorf("INSERTs received: got %d, want 2 (the whole transaction ran again)", got)
	}
	txs := srv.Transactions()
	if len(txs) != 2 || txs[0].Reason != "error 1205" || txs[1].Outcome != tdstest.TxCommitted || len(txs[1].Statements) != 2 {
		t.Errorf("transactions: got %+v, want one rolled back by 1205 and one committed with 2 statements", txs)
	}
	if got := srv.Applied("INSERT"); got != 1 {
		t.Errorf("INSERTs applied: got %d, want 1", got)
	}
}

func TestTDSConnectRetriesTransientLoginErrors(t *testing.T) {
	for _, tc := range []struct {
		number     int32
		class      uint8
		wantLogins int
		wantErr    bool
	}{
		{4060, 11, 2, false},
		{40613, 17, 2, false},
		{18456, 14, 1, true},
	} {
		srv := tdstest.Start(t, tdstest.Script{Rules: []tdstest.Rule{
			{Kind: tdstest.Login, Times: 1, Reply: tdstest.Fail(tc.number, tc.class, "login refused")},
		}})
		db := tdsDB(t, srv, tdsPolicy(t, sqlretry.Config{}))
		err := db.PingContext(tdsCtx(t))
		if (err != nil) != tc.wantErr {
			t.Errorf("login error %d: Ping got %v, want error %v", tc.number, err, tc.wantErr)
		}
		if got := srv.Count(tdstest.Login, ""); got != tc.wantLogins {
			t.Errorf("login error %d: logins got %d, want %d", tc.number, got, tc.wantLogins)
		}
	}
}

func TestTDSConnectionDroppedDuringLoginIsRetried(t *testing.T) {
	for _, kind := range []tdstest.Kind{tdstest.Prelogin, tdstest.Login} {
		srv := tdstest.Start(t, tdstest.Script{Rules: []tdstest.Rule{
			{Kind: kind, Times: 1, Reply: tdstest.Faulty(tdstest.Drop)},
		}})
		db := tdsDB(t, srv, tdsPolicy(t, sqlretry.Config{}))
		if _, err := db.ExecContext(tdsCtx(t), "INSERT INTO t VALUES (1)"); err != nil {
			t.Errorf("drop at %v: Exec: %v", kind, err)
		}
		if got := srv.Count(tdstest.Statement, "INSERT"); got != 1 {
			t.Errorf("drop at %v: INSERTs received: got %d, want 1", kind, got)
		}
		if got := srv.Connections(); got != 2 {
			t.Errorf("drop at %v: connections: got %d, want 2", kind, got)
		}
	}
}

func TestTDSCommandTimeoutOnWriteIsAmbiguous(t *testing.T) {
	srv := tdstest.Start(t, tdstest.Script{Rules: []tdstest.Rule{
		{Match: "UPDATE", Times: 1, Reply: tdstest.Faulty(tdstest.Hang)},
	}})
	db := tdsDB(t, srv, tdsPolicy(t, sqlretry.Config{CommandTimeout: 100 * time.Millisecond}))
	_, err := db.ExecContext(tdsCtx(t), "UPDATE t SET x = 1")
	if !errors.Is(err, sqlretry.ErrAmbiguous) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Exec: got %v, want ErrAmbiguous wrapping the command timeout (the command may have run)", err)
	}
	if got := srv.Count(tdstest.Statement, "UPDATE"); got != 1 {
		t.Errorf("UPDATEs received: got %d, want 1", got)
	}
	if got := srv.Count(tdstest.Attention, ""); got != 1 {
		t.Errorf("attentions received: got %d, want 1 (go-mssqldb cancels the command)", got)
	}
}

func matchPrefix(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// BenchmarkTDSExec measures one autocommit UPDATE through go-mssqldb over
// loopback TCP to the responder, bare and under sqlretry.Connector: the
// wrapper's cost on the success path, next to a real network round trip.
func BenchmarkTDSExec(b *testing.B) {
	srv, err := tdstest.New(tdstest.Script{Rules: []tdstest.Rule{{Reply: tdstest.Affected(1)}}})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	c, err := msdriver.NewConnector(srv.DSN())
	if err != nil {
		b.Fatal(err)
	}
	p, err := sqlretry.New(sqlretry.Config{Classifier: mssql.Classifier})
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		conn driver.Connector
	}{
		{"bare", c},
		{"connector", sqlretry.Connector(c, p)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			db := sql.OpenDB(bc.conn)
			defer db.Close()
			ctx := context.Background()
			for b.Loop() {
				if _, err := db.ExecContext(ctx, "UPDATE t SET x = @p1", 1); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// A T-SQL batch is several statements, with or without ";" between them: a
// deadlock reported for it describes the statement that failed, and the
// ones before it may have committed. It is not replayed.
func TestTDSBatchNotReplayedAfterDeadlock(t *testing.T) {
	for _, batch := range []string{
		"INSERT INTO orders (id) VALUES (1); UPDATE stock SET n = n - 1 WHERE id = 1",
		"INSERT INTO orders (id) VALUES (1) UPDATE stock SET n = n - 1 WHERE id = 1",
		"EXEC place_order 1",
	} {
		t.Run(batch, func(t *testing.T) {
			srv := tdstest.Start(t, tdstest.Script{Rules: []tdstest.Rule{
				{Match: batch[:6], Reply: tdstest.Deadlock()},
			}})
			p := tdsPolicy(t, sqlretry.Config{})
			db := tdsDB(t, srv, p)
			_, err := db.ExecContext(tdsCtx(t), batch)
			if !errors.Is(err, sqlretry.ErrAmbiguous) {
				t.Errorf("got %v, want ErrAmbiguous", err)
			}
			if got := srv.Count(tdstest.Statement, batch[:6]); got != 1 {
				t.Errorf("batches received: got %d, want 1 (never replayed)", got)
			}
		})
	}
}

// With mssql.Fencer, a COMMIT whose reply was lost and that the Op's Verify
// finds absent is replayed — after the session was killed and the server
// no longer lists it, so the Verify's answer is final. The fence's own
// requests travel through go-mssqldb: @@SPID at connect, KILL, then
// sys.dm_exec_sessions.
func TestTDSCommitReplyLostFencedAndVerified(t *testing.T) {
	srv := tdstest.Start(t, tdstest.Script{
		Rules: []tdstest.Rule{{Kind: tdstest.Commit, Times: 1, Reply: tdstest.Faulty(tdstest.Drop)}},
		Func: func(r tdstest.Request) tdstest.Reply {
			switch {
			case matchPrefix(r.SQL, "SELECT @@SPID"):
				return tdstest.Scalar(int32(57))
			case matchPrefix(r.SQL, "SELECT COUNT(*) FROM sys.dm_exec_sessions"):
				return tdstest.Scalar(int32(0))
			case matchPrefix(r.SQL, "SELECT COUNT"):
				return tdstest.Scalar(r.Server().Applied("INSERT INTO orders"))
			}
			return tdstest.Affected(1)
		},
	})
	p := tdsPolicy(t, sqlretry.Config{Fencer: mssql.Fencer})
	db := tdsDB(t, srv, p)
	verify := func(ctx context.Context) (bool, error) {
		var n int
		err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM orders WHERE id = 1").Scan(&n)
		return n > 0, err
	}
	if err := sqlretry.RunTx(tdsCtx(t), db, p, sqlretry.Write("place-order", verify), nil, insertTx); err != nil {
		t.Fatalf("RunTx: %v", err)
	}
	if got := srv.Count(tdstest.Statement, "KILL 57"); got != 1 {
		t.Errorf("KILL 57 received %d times, want 1", got)
	}
	if got := srv.Count(tdstest.Statement, "INSERT"); got != 2 {
		t.Errorf("INSERTs received: got %d, want 2 (replayed once the session was fenced)", got)
	}
	if got := srv.Committed(); got != 1 {
		t.Errorf("transactions committed: got %d, want exactly 1", got)
	}
}
