package crl

import (
	"testing"
	"time"

	"github.com/sqlretry/sqlretry"
)

func failure(code, stmt string, retry int) sqlretry.Failure {
	return sqlretry.Failure{Op: "op", Statement: stmt, Class: sqlretry.Class{Code: code, Phase: sqlretry.NotApplied}, Retry: retry}
}

func TestExecScheduleDecide(t *testing.T) {
	x, err := ParseExec("{1205,1222:3,2*2:select,update};{2714:2,1+1};{3960:0}")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		mode     FilterMode
		code     string
		stmt     string
		retry    int
		decision sqlretry.Decision
		wait     time.Duration
	}{
		{FilterJDBC, "1205", "select 1", 1, sqlretry.Retry, 2 * time.Second},
		{FilterJDBC, "1205", "SELECT 1", 2, sqlretry.Retry, 4 * time.Second},
		{FilterJDBC, "1222", "  Update t set x=1", 3, sqlretry.Retry, 8 * time.Second},
		{FilterJDBC, "1205", "select 1", 4, sqlretry.Stop, 0},                              // count exhausted
		{FilterJDBC, "1205", "delete from t", 1, sqlretry.Stop, 0},                         // filter mismatch
		{FilterJDBC, "1205", "", 1, sqlretry.Defer, 0},                                     // no statement (RunTx): the Policy decides
		{FilterJDBC, "1205", "/* c */ select 1", 1, sqlretry.Stop, 0},                      // JDBC sees "/*"
		{FilterJDBC, "1205", "WITH x AS (SELECT 1) UPDATE t SET a=1", 1, sqlretry.Stop, 0}, // JDBC sees "with"
		{FilterJDBC, "1205", "sel", 1, sqlretry.Stop, 0},                                   // no substring match
		{FilterVerb, "1205", "/* c */ select 1", 1, sqlretry.Retry, 2 * time.Second},
		{FilterVerb, "1205", "WITH x AS (SELECT 1) UPDATE t SET a=1", 1, sqlretry.Retry, 2 * time.Second},
		{FilterVerb, "1205", "WITH x AS (SELECT 1) DELETE FROM t", 1, sqlretry.Stop, 0},
		{FilterJDBC, "2714", "create table t (x int)", 1, sqlretry.Retry, 1 * time.Second},
		{FilterJDBC, "2714", "anything", 2, sqlretry.Retry, 2 * time.Second},
		{FilterJDBC, "2714", "anything", 3, sqlretry.Stop, 0},
		{FilterJDBC, "3960", "select 1", 1, sqlretry.Stop, 0}, // retryCount 0 disables
		{FilterJDBC, "40613", "select 1", 1, sqlretry.Defer, 0},
		{FilterJDBC, "", "select 1", 1, sqlretry.Defer, 0},
	}
	for _, tt := range tests {
		d, w := x.Schedule(tt.mode).Decide(failure(tt.code, tt.stmt, tt.retry))
		if d != tt.decision || w != tt.wait {
			t.Errorf("Decide(%s, %s, %q, retry %d) = %v, %v; want %v, %v", tt.mode, tt.code, tt.stmt, tt.retry, d, w, tt.decision, tt.wait)
		}
	}
	var zero Exec
	if d, _ := zero.Schedule(FilterJDBC).Decide(failure("1205", "select 1", 1)); d != sqlretry.Defer {
		t.Errorf("zero Exec: Decide = %v, want defer", d)
	}
}

func TestConsentsToReplay(t *testing.T) {
	x, err := ParseExec("1205:3:insert,update;1222:3;2714:0:delete")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		mode FilterMode
		stmt string
		code string
		want bool
	}{
		{FilterJDBC, "INSERT INTO t VALUES (1)", "1205", true},
		{FilterJDBC, "update t set x = 1", "1205", true},
		{FilterJDBC, "update t set x = 1", "conn-reset", false}, // no rule for that code: no consent
		{FilterJDBC, "update t set x = 1", "1222", false},       // 1222's rule has no filter: no consent
		{FilterJDBC, "delete from t", "2714", false},            // named only by a rule with 0 retries
		{FilterJDBC, "/* c */ insert into t values (1)", "1205", false},
		{FilterVerb, "/* c */ insert into t values (1)", "1205", true},
		{FilterVerb, "WITH x AS (SELECT 1) UPDATE t SET a = 1", "1205", true},
		{FilterVerb, "", "1205", false},
	}
	for _, tt := range tests {
		var sc sqlretry.StatementConsent = x.Schedule(tt.mode)
		if got := sc.ConsentsToReplay(tt.stmt, tt.code); got != tt.want {
			t.Errorf("ConsentsToReplay(%s, %q, %s) = %v, want %v", tt.mode, tt.stmt, tt.code, got, tt.want)
		}
	}
}

func TestConnScheduleDecide(t *testing.T) {
	replace, _ := ParseConn("{+4060};{40143}")
	appendRules, _ := ParseConn("+18456,50000")
	none := Conn{}
	neutral := func(code string, retryable bool) sqlretry.Class {
		return sqlretry.Class{Code: code, Retryable: retryable, Phase: sqlretry.NotSent}
	}
	tests := []struct {
		name     string
		conn     Conn
		p        Connect
		class    sqlretry.Class
		retry    int
		elapsed  time.Duration
		decision sqlretry.Decision
		wait     time.Duration
	}{
		{"builtin first retry immediate", none, Connect{}, neutral("40613", false), 1, time.Second, sqlretry.Retry, 0},
		{"default count 1", none, Connect{}, neutral("40613", false), 2, time.Second, sqlretry.Stop, 0},
		{"interval after the first", none, Connect{RetryCount: 3, RetryInterval: 5}, neutral("40613", false), 2, time.Second, sqlretry.Retry, 5 * time.Second},
		{"default interval 10", none, Connect{RetryCount: 3}, neutral("40613", false), 3, time.Second, sqlretry.Retry, 10 * time.Second},
		{"past count", none, Connect{RetryCount: 3}, neutral("40613", false), 4, 0, sqlretry.Stop, 0},
		{"disabled", none, Connect{RetryCount: NoConnectRetries}, neutral("40613", false), 1, 0, sqlretry.Stop, 0},
		{"not in builtin", none, Connect{}, neutral("1205", true), 1, 0, sqlretry.Stop, 0},
		{"replace keeps 40143", replace, Connect{}, neutral("40143", false), 1, 0, sqlretry.Retry, 0},
		{"replace drops 40613", replace, Connect{}, neutral("40613", true), 1, 0, sqlretry.Stop, 0},
		{"append adds 50000", appendRules, Connect{}, neutral("50000", false), 1, 0, sqlretry.Retry, 0},
		{"append keeps builtin", appendRules, Connect{}, neutral("4060", false), 1, 0, sqlretry.Retry, 0},
		{"auth never, even when named", appendRules, Connect{}, neutral("18456", true), 1, 0, sqlretry.Stop, 0},
		{"neutral retryable", replace, Connect{}, neutral("dial", true), 1, 0, sqlretry.Retry, 0},
		{"neutral not retryable", replace, Connect{}, neutral("", false), 1, 0, sqlretry.Stop, 0},
		{"login timeout reached by the next interval", none, Connect{RetryCount: 3, RetryInterval: 10, LoginTimeout: 15}, neutral("40613", false), 2, 6 * time.Second, sqlretry.Stop, 0},
		{"login timeout leaves room", none, Connect{RetryCount: 3, RetryInterval: 10, LoginTimeout: 15}, neutral("40613", false), 2, 4 * time.Second, sqlretry.Retry, 10 * time.Second},
		{"default login timeout 30", none, Connect{RetryCount: 3}, neutral("40613", false), 1, 30 * time.Second, sqlretry.Stop, 0},
		{"no login timeout", none, Connect{RetryCount: 3, LoginTimeout: NoLoginTimeout}, neutral("40613", false), 2, time.Hour, sqlretry.Retry, 10 * time.Second},
	}
	for _, tt := range tests {
		s, err := tt.conn.Schedule(tt.p)
		if err != nil {
			t.Fatalf("%s: Schedule: %v", tt.name, err)
		}
		d, w := s.Decide(sqlretry.Failure{Class: tt.class, Retry: tt.retry, Elapsed: tt.elapsed})
		if d != tt.decision || w != tt.wait {
			t.Errorf("%s: Decide = %v, %v; want %v, %v", tt.name, d, w, tt.decision, tt.wait)
		}
	}
}

func TestConnSchedulePostgres(t *testing.T) {
	c, err := SQLState.ParseConn("+55P03")
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.Schedule(Connect{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		code string
		want sqlretry.Decision
	}{{"57P03", sqlretry.Retry}, {"55P03", sqlretry.Retry}, {"28P01", sqlretry.Stop}, {"42P01", sqlretry.Stop}} {
		if d, _ := s.Decide(sqlretry.Failure{Class: sqlretry.Class{Code: tt.code}, Retry: 1}); d != tt.want {
			t.Errorf("Decide(%s) = %v, want %v", tt.code, d, tt.want)
		}
	}
}

func TestConnectValidation(t *testing.T) {
	for _, p := range []Connect{{RetryCount: 256}, {RetryInterval: 61}, {RetryInterval: -1}, {LoginTimeout: 65536}} {
		if _, err := (Conn{}).Schedule(p); err == nil {
			t.Errorf("Schedule(%+v): no error, want one naming the property", p)
		}
	}
	if err := (Config{ConnectRetryInterval: 61}).Validate(); err == nil {
		t.Errorf("Config{ConnectRetryInterval: 61}.Validate(): no error")
	}
	if err := (Config{}).Validate(); err != nil {
		t.Errorf("Config{}.Validate() = %v, want nil", err)
	}
}
