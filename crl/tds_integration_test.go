package crl_test

// The rule language end to end: retryExec and retryConn rules drive the
// database/sql wrapper over the unmodified go-mssqldb driver, against
// internal/tdstest, a protocol-level TDS responder (not SQL Server) that
// fails statements and logins by script and counts what arrived.

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	msdriver "github.com/microsoft/go-mssqldb"

	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/crl"
	"github.com/sqlretry/sqlretry/internal/tdstest"
	"github.com/sqlretry/sqlretry/mssql"
)

// crlDB opens srv through go-mssqldb under a Policy with the SQL Server
// classifier and the rules of rc. Waits outside the rules are 1 ms.
func crlDB(t *testing.T, srv *tdstest.Server, rc crl.Config) (*sql.DB, *sqlretry.Policy) {
	t.Helper()
	pc := sqlretry.Config{
		Classifier: mssql.Classifier,
		BaseDelay:  time.Millisecond,
		MaxDelay:   time.Millisecond,
		Jitter:     sqlretry.NoJitter,
		Budget:     sqlretry.NoBudget,
	}
	if err := rc.Apply(&pc); err != nil {
		t.Fatalf("crl.Config.Apply: %v", err)
	}
	p, err := sqlretry.New(pc)
	if err != nil {
		t.Fatalf("sqlretry.New: %v", err)
	}
	c, err := msdriver.NewConnector(srv.DSN())
	if err != nil {
		t.Fatalf("NewConnector: %v", err)
	}
	db := sql.OpenDB(sqlretry.Connector(c, p))
	t.Cleanup(func() { db.Close() })
	return db, p
}

func crlCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// number returns the SQL Server error number err carries, 0 if none.
func number(err error) int32 {
	var me msdriver.Error
	if errors.As(err, &me) {
		return me.Number
	}
	return 0
}

func TestTDSRetryExec(t *testing.T) {
	const rules = "{1205,1222:3,0+0:select,update}"
	for _, tc := range []struct {
		name      string
		mode      crl.FilterMode
		stmt      string
		fail      tdstest.Reply
		failTimes int
		wantSent  int   // statements the server received
		wantErr   int32 // the error number returned; 0 for success
	}{
		{"deadlocked UPDATE is retried", crl.FilterJDBC, "UPDATE accounts SET balance = 0", tdstest.Deadlock(), 2, 3, 0},
		{"deadlocked INSERT is not", crl.FilterJDBC, "INSERT INTO ledger VALUES (1)", tdstest.Deadlock(), 1, 1, 1205},
		{"lock timeout on SELECT: 3 retries, then the error", crl.FilterJDBC, "select balance from accounts", tdstest.Fail(1222, 16, "Lock request time out period exceeded."), 4, 4, 1222},
		{"lock timeout on SELECT: success on the last retry", crl.FilterJDBC, "SELECT 1", tdstest.Fail(1222, 16, "Lock request time out period exceeded."), 3, 4, 0},
		// The JDBC driver matches the first token: a comment hides the verb.
		{"commented UPDATE, jdbc filter", crl.FilterJDBC, "/* batch 7 */ UPDATE accounts SET balance = 0", tdstest.Deadlock(), 1, 1, 1205},
		{"commented UPDATE, verb filter", crl.FilterVerb, "/* batch 7 */ UPDATE accounts SET balance = 0", tdstest.Deadlock(), 1, 2, 0},
		{"CTE UPDATE, verb filter", crl.FilterVerb, "WITH x AS (SELECT 1 AS id) UPDATE accounts SET balance = 0", tdstest.Deadlock(), 1, 2, 0},
		// A number no rule names falls to the classifier: 2627 is permanent.
		{"unnamed permanent error", crl.FilterJDBC, "UPDATE accounts SET id = 1", tdstest.Fail(2627, 14, "Violation of PRIMARY KEY constraint."), 1, 1, 2627},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := tdstest.Start(t, tdstest.Script{Rules: []tdstest.Rule{
				{Times: tc.failTimes, Reply: tc.fail},
				{Reply: tdstest.Affected(1)},
			}})
			db, _ := crlDB(t, srv, crl.Config{Exec: rules, FilterMode: tc.mode})
			_, err := db.ExecContext(crlCtx(t), tc.stmt)
			if got := number(err); got != tc.wantErr || (tc.wantErr == 0) != (err == nil) {
				t.Errorf("Exec: got %v (number %d), want number %d", err, got, tc.wantErr)
			}
			if got := srv.Count(tdstest.Statement, ""); got != tc.wantSent {
				t.Errorf("statements received: got %d, want %d", got, tc.wantSent)
			}
		})
	}
}

func TestTDSRetryExecOutsideRulesDefersToTheClassifier(t *testing.T) {
	// 41302 (In-Memory OLTP update conflict) has no rule: the Policy's own
	// rules retry it, as the classifier marks it transient.
	srv := tdstest.Start(t, tdstest.Script{Rules: []tdstest.Rule{
		{Times: 1, Reply: tdstest.Fail(41302, 16, "The current transaction attempted to update a record that has been updated since the transaction started.")},
	}})
	db, p := crlDB(t, srv, crl.Config{Exec: "1205:3,0+0:update"})
	if _, err := db.ExecContext(crlCtx(t), "INSERT INTO t VALUES (1)"); err != nil {
		t.Fatalf("Exec: %v", err)
	}
	if got := srv.Count(tdstest.Statement, "INSERT"); got != 2 {
		t.Errorf("INSERTs received: got %d, want 2", got)
	}
	if got := p.Stats().Retries; got != 1 {
		t.Errorf("retries: got %d, want 1", got)
	}
}

func TestTDSRetryExecFilterIsNoConsentForOtherFailures(t *testing.T) {
	// ExecSchedule.ConsentsToReplay: a rule whose filter names a verb is the
	// operator's consent to replaying that verb after its own error code only.
	// Here the connection drops after the statement was sent: a rule for
	// deadlocks does not make that drop safe to replay, for any verb.
	for _, tc := range []struct {
		stmt     string
		wantSent int
		wantAmb  bool
	}{
		{"UPDATE accounts SET balance = 0", 1, true},
		{"INSERT INTO ledger VALUES (1)", 1, true},
	} {
		srv := tdstest.Start(t, tdstest.Script{Rules: []tdstest.Rule{
			{Times: 1, Reply: tdstest.Faulty(tdstest.Drop)},
		}})
		db, _ := crlDB(t, srv, crl.Config{Exec: "{1205,1222:3,0+0:select,update}"})
		_, err := db.ExecContext(crlCtx(t), tc.stmt)
		if errors.Is(err, sqlretry.ErrAmbiguous) != tc.wantAmb || (err == nil) == tc.wantAmb {
			t.Errorf("%s: Exec got %v, want ErrAmbiguous %v", tc.stmt, err, tc.wantAmb)
		}
		if got := srv.Count(tdstest.Statement, ""); got != tc.wantSent {
			t.Errorf("%s: statements received: got %d, want %d", tc.stmt, got, tc.wantSent)
		}
	}
}

func TestTDSRetryConn(t *testing.T) {
	for _, tc := range []struct {
		name       string
		cfg        crl.Config
		number     int32 // the login error
		failTimes  int
		wantLogins int
		wantErr    bool
	}{
		// connectRetryCount defaults to 1: one immediate retry of the built-in list.
		{"built-in 4060", crl.Config{}, 4060, 1, 2, false},
		{"built-in 40613", crl.Config{}, 40613, 1, 2, false},
		{"built-in list, count spent", crl.Config{}, 4060, 2, 2, true},
		{"auth failure never", crl.Config{}, 18456, 1, 1, true},
		{"unlisted number", crl.Config{}, 50001, 1, 1, true},
		// retryConn with "+" adds to the built-in list.
		{"+50001 adds", crl.Config{Conn: "{+50001}"}, 50001, 1, 2, false},
		{"+50001 keeps the built-in list", crl.Config{Conn: "{+50001}"}, 40613, 1, 2, false},
		// Without "+", the rules replace it.
		{"4060 replaces: 4060", crl.Config{Conn: "{4060}"}, 4060, 1, 2, false},
		{"4060 replaces: 40613 no longer", crl.Config{Conn: "{4060}"}, 40613, 1, 1, true},
		{"one rule without + replaces all", crl.Config{Conn: "{+4060};{40143}"}, 40613, 1, 1, true},
		{"naming 18456 does not retry it", crl.Config{Conn: "{+18456}"}, 18456, 1, 1, true},
		// connectRetryCount=0 in the driver: no connect retries, rules or not.
		{"no connect retries", crl.Config{ConnectRetryCount: crl.NoConnectRetries, Conn: "{+4060}"}, 4060, 1, 1, true},
		// The first retry is immediate; the next would wait connectRetryInterval
		// (1 s), which reaches loginTimeout (1 s): it is not started.
		{"loginTimeout cuts the loop", crl.Config{ConnectRetryCount: 5, ConnectRetryInterval: 1, LoginTimeout: 1}, 4060, 5, 2, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := tdstest.Start(t, tdstest.Script{Rules: []tdstest.Rule{
				{Kind: tdstest.Login, Times: tc.failTimes, Reply: tdstest.Fail(tc.number, 14, "scripted login error")},
			}})
			db, _ := crlDB(t, srv, tc.cfg)
			err := db.PingContext(crlCtx(t))
			if (err != nil) != tc.wantErr {
				t.Errorf("Ping: got %v, want error %v", err, tc.wantErr)
			}
			if err != nil && number(err) != tc.number {
				t.Errorf("Ping: got %v, want the login error %d", err, tc.number)
			}
			if got := srv.Count(tdstest.Login, ""); got != tc.wantLogins {
				t.Errorf("logins: got %d, want %d", got, tc.wantLogins)
			}
		})
	}
}

func TestTDSRetryConnTransportFailure(t *testing.T) {
	// A connection dropped during the login has no error number a rule could
	// name: the classifier's verdict (retryable) decides, under the count.
	for _, tc := range []struct {
		cfg       crl.Config
		wantConns int
		wantErr   bool
	}{
		{crl.Config{}, 2, false},
		{crl.Config{ConnectRetryCount: crl.NoConnectRetries}, 1, true},
		{crl.Config{Conn: "{4060}"}, 2, false}, // replace mode governs numbers only
	} {
		srv := tdstest.Start(t, tdstest.Script{Rules: []tdstest.Rule{
			{Kind: tdstest.Login, Times: 1, Reply: tdstest.Faulty(tdstest.Drop)},
		}})
		db, _ := crlDB(t, srv, tc.cfg)
		err := db.PingContext(crlCtx(t))
		if (err != nil) != tc.wantErr {
			t.Errorf("%+v: Ping got %v, want error %v", tc.cfg, err, tc.wantErr)
		}
		if got := srv.Connections(); got != tc.wantConns {
			t.Errorf("%+v: connections: got %d, want %d", tc.cfg, got, tc.wantConns)
		}
	}
}
