package tdstest_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	mssql "github.com/microsoft/go-mssqldb"

	"github.com/sqlretry/sqlretry/internal/tdstest"
)

// open returns a database/sql handle on srv through the unmodified driver.
func open(t *testing.T, srv *tdstest.Server, extra string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlserver", srv.DSN()+extra)
	if err != nil {
		t.Fatalf("sql.Open: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestLoginAndQuery(t *testing.T) {
	srv := tdstest.Start(t, tdstest.Script{Rules: []tdstest.Rule{
		{Match: "SELECT id", Reply: tdstest.Rows(
			[]tdstest.Column{{Name: "id", Type: tdstest.Int}, {Name: "name", Type: tdstest.NVarChar}, {Name: "big", Type: tdstest.BigInt}, {Name: "ok", Type: tdstest.Bit}},
			[]any{1, "ünïcode ☃", int64(1) << 40, true},
			[]any{2, nil, nil, false},
		)},
	}})
	db := open(t, srv, "")
	ctx := ctxT(t)
	if err := db.PingContext(ctx); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	rows, err := db.QueryContext(ctx, "SELECT id, name, big, ok FROM t")
	if err != nil {
		t.Fatalf("Query: %v", err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	if got, want := strings.Join(cols, ","), "id,name,big,ok"; got != want {
		t.Errorf("columns: got %q, want %q", got, want)
	}
	type row struct {
		id   int
		name sql.NullString
		big  sql.NullInt64
		ok   bool
	}
	var got []row
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.id, &r.name, &r.big, &r.ok); err != nil {
			t.Fatalf("Scan: %v", err)
		}
		got = append(got, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("rows.Err: %v", err)
	}
	want := []row{{1, sql.NullString{String: "ünïcode ☃", Valid: true}, sql.NullInt64{Int64: 1 << 40, Valid: true}, true}, {2, sql.NullString{}, sql.NullInt64{}, false}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("rows: got %+v, want %+v", got, want)
	}
	reqs := srv.Requests()
	if len(reqs) < 3 || reqs[0].Kind != tdstest.Prelogin || reqs[1].Kind != tdstest.Login {
		t.Fatalf("first requests: got %+v, want prelogin, login, ...", reqs)
	}
	if l := reqs[1]; l.User != "sa" || l.Password != "pw" || l.Database != "test" {
		t.Errorf("login: got user %q password %q database %q, want sa, pw, test", l.User, l.Password, l.Database)
	}
}

func TestRPCArgumentsAndRowsAffected(t *testing.T) {
	srv := tdstest.Start(t, tdstest.Script{Rules: []tdstest.Rule{
		{Match: "update", Reply: tdstest.Affected(3)},
	}})
	db := open(t, srv, "")
	res, err := db.ExecContext(ctxT(t), "  UPDATE t SET name = @p2 WHERE id = @p1", int64(7), "x")
	if err != nil {
		t.Fatalf("Exec: %v", err)
	}
	if n, _ := res.RowsAffected(); n != 3 {
		t.Errorf("RowsAffected: got %d, want 3", n)
	}
	var rpc *tdstest.Request
	for _, r := range srv.Requests() {
		if r.Kind == tdstest.RPC {
			rpc = &r
		}
	}
	if rpc == nil {
		t.Fatalf("no RPC request among %+v", srv.Requests())
	}
	if rpc.Proc != "sp_executesql" || rpc.SQL != "  UPDATE t SET name = @p2 WHERE id = @p1" {
		t.Errorf("RPC: got proc %q sql %q, want sp_executesql and the statement", rpc.Proc, rpc.SQL)
	}
	if len(rpc.Args) != 2 || rpc.Args[0] != int64(7) || rpc.Args[1] != "x" {
		t.Errorf("RPC args: got %#v, want [7 \"x\"]", rpc.Args)
	}
	if got := srv.Count(tdstest.Statement, "update t"); got != 1 {
		t.Errorf("Count(Statement, update t): got %d, want 1", got)
	}
	if got := srv.Count(tdstest.Batch, "update"); got != 0 {
		t.Errorf("Count(Batch, update): got %d, want 0 (it came as an RPC)", got)
	}
}

func TestLongStatementSpansPackets(t *testing.T) {
	long := "SELECT '" + strings.Repeat("x", 9000) + "'"
	big := strings.Repeat("é", 3000)
	srv := tdstest.Start(t, tdstest.Script{Func: func(r tdstest.Request) tdstest.Reply {
		if r.Kind == tdstest.Batch && r.SQL == long {
			rows := make([][]any, 20)
			for i := range rows {
				rows[i] = []any{i, big}
			}
			return tdstest.Rows([]tdstest.Column{{Name: "i", Type: tdstest.Int}, {Name: "s"}}, rows...)
		}
		return tdstest.Reply{}
	}})
	db := open(t, srv, "")
	rows, err := db.QueryContext(ctxT(t), long)
	if err != nil {
		t.Fatalf("Query: %v", err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var i int
		var s string
		if err := rows.Scan(&i, &s); err != nil {
			t.Fatalf("Scan: %v", err)
		}
		if i != n || s != big {
			t.Fatalf("row %d: got (%d, %d chars), want (%d, %d chars)", n, i, len(s), n, len(big))
		}
		n++
	}
	if err := rows.Err(); err != nil || n != 20 {
		t.Errorf("rows: got %d rows, err %v; want 20, nil", n, err)
	}
}

func TestErrorTokenBecomesMssqlError(t *testing.T) {
	srv := tdstest.Start(t, tdstest.Script{Rules: []tdstest.Rule{
		{Match: "INSERT", Reply: tdstest.Reply{Error: &tdstest.Error{Number: 2627, Class: 14, State: 1, Message: "Violation of PRIMARY KEY constraint 'pk'.", Procedure: "p", Line: 3}}},
	}})
	db := open(t, srv, "")
	_, err := db.ExecContext(ctxT(t), "INSERT INTO t VALUES (1)")
	var me mssql.Error
	if !errors.As(err, &me) {
		t.Fatalf("Exec: got %v (%T), want an mssql.Error", err, err)
	}
	if me.Number != 2627 || me.Class != 14 || me.State != 1 || me.Message != "Violation of PRIMARY KEY constraint 'pk'." || me.ServerName != tdstest.ServerName || me.ProcName != "p" || me.LineNo != 3 {
		t.Errorf("mssql.Error: got %+v, want number 2627 class 14 state 1, the message, server, procedure and line", me)
	}
	if got := srv.Applied("INSERT"); got != 0 {
		t.Errorf("Applied(INSERT): got %d, want 0", got)
	}
	// The connection survives a statement error.
	if err := db.PingContext(ctxT(t)); err != nil {
		t.Errorf("Ping after the error: %v", err)
	}
	if got := srv.Connections(); got != 1 {
		t.Errorf("Connections: got %d, want 1", got)
	}
}

func TestRulesCountAndSpend(t *testing.T) {
	srv := tdstest.Start(t, tdstest.Script{Rules: []tdstest.Rule{
		{Match: "UPDATE", Times: 2, Reply: tdstest.Deadlock()},
		{Match: "UPDATE", Reply: tdstest.Affected(1)},
	}})
	db := open(t, srv, "")
	ctx := ctxT(t)
	var numbers []int32
	for range 3 {
		_, err := db.ExecContext(ctx, "UPDATE t SET x = 1")
		var me mssql.Error
		switch {
		case err == nil:
			numbers = append(numbers, 0)
		case errors.As(err, &me):
			numbers = append(numbers, me.Number)
		default:
			t.Fatalf("Exec: %v", err)
		}
	}
	if len(numbers) != 3 || numbers[0] != 1205 || numbers[1] != 1205 || numbers[2] != 0 {
		t.Errorf("outcomes: got %v, want [1205 1205 0]", numbers)
	}
	if got := srv.Count(tdstest.Statement, "UPDATE"); got != 3 {
		t.Errorf("Count(UPDATE): got %d, want 3", got)
	}
	if got := srv.Applied("UPDATE"); got != 1 {
		t.Errorf("Applied(UPDATE): got %d, want 1", got)
	}
	reqs := srv.Requests()
	if last := reqs[len(reqs)-1]; last.N != 3 {
		t.Errorf("N of the third UPDATE: got %d, want 3", last.N)
	}
}

func TestLoginErrors(t *testing.T) {
	for _, tc := range []struct {
		number int32
		class  uint8
	}{{4060, 11}, {40613, 17}, {18456, 14}, {233, 20}} {
		srv := tdstest.Start(t, tdstest.Script{Rules: []tdstest.Rule{
			{Kind: tdstest.Login, Reply: tdstest.Fail(tc.number, tc.class, "login refused")},
		}})
		db := open(t, srv, "")
		err := db.PingContext(ctxT(t))
		var me mssql.Error
		if !errors.As(err, &me) || me.Number != tc.number || me.Class != tc.class {
			t.Errorf("login %d: got %v (%T), want an mssql.Error number %d class %d", tc.number, err, err, tc.number, tc.class)
		}
		if got := srv.Count(tdstest.Statement, ""); got != 0 {
			t.Errorf("login %d: %d statements arrived, want 0", tc.number, got)
		}
	}
}

func TestLoginFailsOnceThenSucceeds(t *testing.T) {
	srv := tdstest.Start(t, tdstest.Script{Rules: []tdstest.Rule{
		{Kind: tdstest.Login, Times: 1, Reply: tdstest.Fail(4060, 11, "Cannot open database \"test\" requested by the login. The login failed.")},
	}})
	db := open(t, srv, "")
	if err := db.PingContext(ctxT(t)); err == nil {
		t.Fatalf("first Ping: got nil, want the 4060 login error")
	}
	if err := db.PingContext(ctxT(t)); err != nil {
		t.Fatalf("second Ping: %v", err)
	}
	if got := srv.Count(tdstest.Login, ""); got != 2 {
		t.Errorf("logins: got %d, want 2", got)
	}
}

func TestConnectionFaults(t *testing.T) {
	for _, tc := range []struct {
		name        string
		rule        tdstest.Rule
		wantApplied int
	}{
		{"drop at prelogin", tdstest.Rule{Kind: tdstest.Prelogin, Reply: tdstest.Faulty(tdstest.Drop)}, 0},
		{"drop at login", tdstest.Rule{Kind: tdstest.Login, Reply: tdstest.Faulty(tdstest.Drop)}, 0},
		{"reset at login", tdstest.Rule{Kind: tdstest.Login, Reply: tdstest.Faulty(tdstest.Reset)}, 0},
		{"drop after request", tdstest.Rule{Match: "UPDATE", Reply: tdstest.Faulty(tdstest.Drop)}, 0},
		{"reset after request", tdstest.Rule{Match: "UPDATE", Reply: tdstest.Faulty(tdstest.Reset)}, 0},
		{"drop after apply", tdstest.Rule{Match: "UPDATE", Reply: tdstest.Faulty(tdstest.DropAfterApply)}, 1},
		{"drop mid reply", tdstest.Rule{Match: "UPDATE", Reply: tdstest.Reply{Fault: tdstest.DropMidReply, Result: &tdstest.Result{Columns: []tdstest.Column{{Name: "s"}}, Rows: [][]any{{strings.Repeat("y", 3000)}, {strings.Repeat("z", 3000)}}}}}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := tdstest.Start(t, tdstest.Script{Rules: []tdstest.Rule{tc.rule}})
			db := open(t, srv, "")
			db.SetMaxOpenConns(1)
			_, err := db.ExecContext(ctxT(t), "UPDATE t SET x = 1")
			if err == nil {
				t.Fatalf("Exec: got nil, want an error")
			}
			if tc.rule.Kind == tdstest.Statement {
				// Lost after the send: never a RetryableError, so database/sql
				// does not replay it.
				var re mssql.RetryableError
				if errors.As(err, &re) || errors.Is(err, driver.ErrBadConn) {
					t.Errorf("Exec: got %v, want an error that is not ErrBadConn", err)
				}
				if got := srv.Count(tdstest.Statement, "UPDATE"); got != 1 {
					t.Errorf("UPDATEs received: got %d, want 1", got)
				}
			} else if got := srv.Count(tdstest.Statement, ""); got != 0 {
				t.Errorf("statements received: got %d, want 0", got)
			}
			if got := srv.Applied("UPDATE"); got != tc.wantApplied {
				t.Errorf("Applied: got %d, want %d", got, tc.wantApplied)
			}
		})
	}
}

func TestDropIdleMakesTheNextSendFail(t *testing.T) {
	srv := tdstest.Start(t, tdstest.Script{})
	db := open(t, srv, "")
	db.SetMaxOpenConns(1)
	ctx := ctxT(t)
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatalf("Conn: %v", err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "SELECT 1"); err != nil {
		t.Fatalf("first Exec: %v", err)
	}
	if got := srv.DropIdle(); got != 1 {
		t.Fatalf("DropIdle: got %d, want 1", got)
	}
	// On a pinned connection database/sql cannot retry: the driver's
	// verdict is visible. The UPDATE never left the client.
	_, err = conn.ExecContext(ctx, "UPDATE t SET x = 1")
	var re mssql.RetryableError
	if !errors.As(err, &re) || !errors.Is(err, driver.ErrBadConn) {
		t.Fatalf("Exec after DropIdle: got %v (%T), want an mssql.RetryableError", err, err)
	}
	if got := srv.Count(tdstest.Statement, "UPDATE"); got != 0 {
		t.Errorf("UPDATEs received: got %d, want 0", got)
	}
	// Through the pool, database/sql replays it on a new connection.
	conn.Close()
	if _, err := db.ExecContext(ctx, "UPDATE t SET x = 1"); err != nil {
		t.Fatalf("Exec through the pool: %v", err)
	}
	if got := srv.Count(tdstest.Statement, "UPDATE"); got != 1 {
		t.Errorf("UPDATEs received: got %d, want 1", got)
	}
}

func TestTransactions(t *testing.T) {
	srv := tdstest.Start(t, tdstest.Script{Rules: []tdstest.Rule{
		{Match: "UPDATE dead", Reply: tdstest.Deadlock()},
	}})
	db := open(t, srv, "")
	db.SetMaxOpenConns(1)
	ctx := ctxT(t)

	// commit
	tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		t.Fatalf("BeginTx: %v", err)
	}
	if _, err := tx.ExecContext(ctx, "UPDATE a SET x = 1"); err != nil {
		t.Fatalf("Exec in tx: %v", err)
	}
	if _, err := tx.ExecContext(ctx, "UPDATE b SET x = @p1", 2); err != nil {
		t.Fatalf("Exec in tx: %v", err)
	}
	if got := srv.Applied(""); got != 0 {
		t.Errorf("Applied before COMMIT: got %d, want 0", got)
	}
	if err := tx.Commit(); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	// rollback
	tx, err = db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatalf("BeginTx: %v", err)
	}
	if _, err := tx.ExecContext(ctx, "UPDATE c SET x = 1"); err != nil {
		t.Fatalf("Exec in tx: %v", err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatalf("Rollback: %v", err)
	}
	// deadlock victim: the server rolls back, the driver learns it
	tx, err = db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatalf("BeginTx: %v", err)
	}
	if _, err := tx.ExecContext(ctx, "UPDATE d SET x = 1"); err != nil {
		t.Fatalf("Exec in tx: %v", err)
	}
	_, err = tx.ExecContext(ctx, "UPDATE dead SET x = 1")
	var me mssql.Error
	if !errors.As(err, &me) || me.Number != 1205 {
		t.Fatalf("deadlock: got %v, want mssql.Error 1205", err)
	}
	if err := tx.Commit(); err == nil {
		t.Errorf("Commit after the deadlock: got nil, want an error (the transaction was rolled back)")
	}

	txs := srv.Transactions()
	want := []struct {
		outcome tdstest.TxOutcome
		reason  string
		stmts   int
	}{{tdstest.TxCommitted, "commit", 2}, {tdstest.TxRolledBack, "rollback", 1}, {tdstest.TxRolledBack, "error 1205", 1}}
	if len(txs) != len(want) {
		t.Fatalf("transactions: got %d (%+v), want %d", len(txs), txs, len(want))
	}
	for i, w := range want {
		if txs[i].Outcome != w.outcome || txs[i].Reason != w.reason || len(txs[i].Statements) != w.stmts {
			t.Errorf("transaction %d: got %+v, want %v %q with %d statements", i, txs[i], w.outcome, w.reason, w.stmts)
		}
	}
	if got := srv.Applied("UPDATE"); got != 2 {
		t.Errorf("Applied(UPDATE): got %d, want 2 (the committed transaction's)", got)
	}
	if got := srv.Count(tdstest.Commit, ""); got != 1 {
		t.Errorf("COMMITs received: got %d, want 1 (go-mssqldb sends none after the server rolled back)", got)
	}
}

func TestCommitFaults(t *testing.T) {
	for _, tc := range []struct {
		name          string
		reply         tdstest.Reply
		wantOutcome   tdstest.TxOutcome
		wantReplyLost bool
		wantRetryable bool // the error is a RetryableError (COMMIT not sent)
	}{
		{"ok", tdstest.Reply{}, tdstest.TxCommitted, false, false},
		{"lost before commit", tdstest.Faulty(tdstest.Drop), tdstest.TxRolledBack, true, false},
		{"lost after commit", tdstest.Faulty(tdstest.DropAfterApply), tdstest.TxCommitted, true, false},
		{"refused", tdstest.Fail(3960, 16, "Snapshot isolation transaction aborted due to update conflict."), tdstest.TxRolledBack, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := tdstest.Start(t, tdstest.Script{Rules: []tdstest.Rule{{Kind: tdstest.Commit, Reply: tc.reply}}})
			db := open(t, srv, "")
			ctx := ctxT(t)
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatalf("BeginTx: %v", err)
			}
			if _, err := tx.ExecContext(ctx, "INSERT INTO t VALUES (1)"); err != nil {
				t.Fatalf("Exec: %v", err)
			}
			err = tx.Commit()
			if (err == nil) != (tc.reply.Fault == tdstest.NoFault && tc.reply.Error == nil) {
				t.Errorf("Commit: got %v", err)
			}
			var re mssql.RetryableError
			if errors.As(err, &re) != tc.wantRetryable {
				t.Errorf("Commit error %v: RetryableError got %v, want %v", err, !tc.wantRetryable, tc.wantRetryable)
			}
			db.Close() // ends the connection, so an open transaction is rolled back
			srv.Close()
			txs := srv.Transactions()
			if len(txs) != 1 || txs[0].Outcome != tc.wantOutcome || txs[0].ReplyLost != tc.wantReplyLost || !txs[0].CommitSeen {
				t.Errorf("transaction: got %+v, want outcome %v, reply lost %v, commit seen", txs, tc.wantOutcome, tc.wantReplyLost)
			}
		})
	}
}

func TestCommitAfterDropIdleIsRetryable(t *testing.T) {
	srv := tdstest.Start(t, tdstest.Script{})
	db := open(t, srv, "")
	ctx := ctxT(t)
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatalf("BeginTx: %v", err)
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO t VALUES (1)"); err != nil {
		t.Fatalf("Exec: %v", err)
	}
	if got := srv.DropIdle(); got != 1 {
		t.Fatalf("DropIdle: got %d, want 1", got)
	}
	err = tx.Commit()
	var re mssql.RetryableError
	if !errors.As(err, &re) {
		t.Fatalf("Commit: got %v (%T), want an mssql.RetryableError (COMMIT never sent)", err, err)
	}
	if got := srv.Count(tdstest.Commit, ""); got != 0 {
		t.Errorf("COMMITs received: got %d, want 0", got)
	}
	if txs := srv.Transactions(); len(txs) != 1 || txs[0].Outcome != tdstest.TxRolledBack || txs[0].Reason != "connection closed" {
		t.Errorf("transaction: got %+v, want rolled back by the closed connection", txs)
	}
}

func TestHangUntilCancel(t *testing.T) {
	srv := tdstest.Start(t, tdstest.Script{Rules: []tdstest.Rule{
		{Match: "WAITFOR", Reply: tdstest.Faulty(tdstest.Hang)},
	}})
	db := open(t, srv, "")
	db.SetMaxOpenConns(1)
	ctx, cancel := context.WithTimeout(ctxT(t), 200*time.Millisecond)
	defer cancel()
	_, err := db.ExecContext(ctx, "WAITFOR DELAY '00:01'")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Exec: got %v, want context.DeadlineExceeded", err)
	}
	if got := srv.Count(tdstest.Attention, ""); got != 1 {
		t.Errorf("attentions: got %d, want 1", got)
	}
	// Had the attention gone unacknowledged, go-mssqldb would have waited
	// 5 s and returned a StreamError instead of the context's error. (It
	// discards the connection anyway: context.DeadlineExceeded is a
	// net.Error to its checkBadConn.)
	if _, err := db.ExecContext(ctxT(t), "SELECT 1"); err != nil {
		t.Fatalf("Exec after the cancel: %v", err)
	}
}

func TestHangAtLoginTimesOut(t *testing.T) {
	srv := tdstest.Start(t, tdstest.Script{Rules: []tdstest.Rule{
		{Kind: tdstest.Login, Reply: tdstest.Faulty(tdstest.Hang)},
	}})
	db := open(t, srv, "")
	ctx, cancel := context.WithTimeout(ctxT(t), 200*time.Millisecond)
	defer cancel()
	err := db.PingContext(ctx)
	if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, io.EOF) {
		t.Fatalf("Ping: got %v, want the context deadline", err)
	}
	if got := srv.Count(tdstest.Statement, ""); got != 0 {
		t.Errorf("statements: got %d, want 0", got)
	}
}

func TestSetScriptAndFunc(t *testing.T) {
	srv := tdstest.Start(t, tdstest.Script{})
	srv.SetScript(tdstest.Script{Func: func(r tdstest.Request) tdstest.Reply {
		if r.Kind == tdstest.Batch && strings.HasPrefix(r.SQL, "SELECT COUNT") {
			return tdstest.Scalar(r.Server().Applied("UPDATE"))
		}
		return tdstest.Affected(1)
	}})
	db := open(t, srv, "")
	ctx := ctxT(t)
	for range 2 {
		if _, err := db.ExecContext(ctx, "UPDATE t SET x = 1"); err != nil {
			t.Fatalf("Exec: %v", err)
		}
	}
	var n int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM t").Scan(&n); err != nil {
		t.Fatalf("QueryRow: %v", err)
	}
	if n != 2 {
		t.Errorf("count: got %d, want 2", n)
	}
}

func TestFatalErrorEndsTheSession(t *testing.T) {
	srv := tdstest.Start(t, tdstest.Script{Rules: []tdstest.Rule{
		{Match: "UPDATE", Times: 1, Reply: tdstest.Reply{Error: &tdstest.Error{Number: 4014, Class: 20, Message: "A fatal error occurred while reading the input stream from the network.", Fatal: true}}},
	}})
	db := open(t, srv, "")
	db.SetMaxOpenConns(1)
	ctx := ctxT(t)
	_, err := db.ExecContext(ctx, "UPDATE t SET x = 1")
	var se mssql.ServerError
	var me mssql.Error
	if !errors.As(err, &se) || !errors.As(err, &me) || me.Number != 4014 || me.Class != 20 {
		t.Fatalf("Exec: got %v (%T), want an mssql.ServerError wrapping mssql.Error 4014 class 20", err, err)
	}
	if _, err := db.ExecContext(ctx, "UPDATE t SET x = 1"); err != nil {
		t.Fatalf("second Exec: %v", err)
	}
	if got := srv.Connections(); got != 2 {
		t.Errorf("connections: got %d, want 2 (the session ended with the fatal error)", got)
	}
}

// TestAppliedRequests: statements that took effect keep their arguments,
// in the order they took effect: autocommit ones at once, a transaction's
// at its COMMIT, a rolled-back transaction's never.
func TestAppliedRequests(t *testing.T) {
	srv := tdstest.Start(t, tdstest.Script{})
	db := open(t, srv, "")
	ctx := ctxT(t)
	exec := func(q sqlExecer, key string) {
		t.Helper()
		if _, err := q.ExecContext(ctx, "INSERT INTO marks VALUES (@p1, @p2)", key, int64(7)); err != nil {
			t.Fatal(err)
		}
	}
	exec(db, "auto")
	for _, commit := range []bool{false, true} {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		exec(tx, fmt.Sprint("tx-", commit))
		end := tx.Rollback
		if commit {
			end = tx.Commit
		}
		if err := end(); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	for _, r := range srv.AppliedRequests("INSERT INTO marks") {
		got = append(got, fmt.Sprint(r.Args))
	}
	if want := []string{"[auto 7]", "[tx-true 7]"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("applied: got %v, want %v", got, want)
	}
	if n := len(srv.AppliedRequests("UPDATE")); n != 0 {
		t.Errorf("applied UPDATEs: got %d, want 0", n)
	}
}

type sqlExecer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}
