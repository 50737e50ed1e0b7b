package faults

import (
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
	mssql "github.com/microsoft/go-mssqldb"

	"github.com/sqlretry/sqlretry"
)

// fires feeds calls to p and returns, per call, the kind that fired or "-".
func fires(p *Plan, calls []call) string {
	var out []string
	for _, c := range calls {
		if r, ok := p.decide(c); ok {
			out = append(out, string(r.Kind))
		} else {
			out = append(out, "-")
		}
	}
	return strings.Join(out, " ")
}

func execs(stmts ...string) []call {
	var cs []call
	for _, s := range stmts {
		cs = append(cs, call{op: OpExec, stmt: s})
	}
	return cs
}

func TestPlanMatching(t *testing.T) {
	ins, upd := "INSERT INTO t VALUES (1)", "update t set v = 1"
	tests := []struct {
		name  string
		rules []Rule
		calls []call
		want  string
	}{
		{"once by default", []Rule{{Kind: BeforeSend}}, execs(ins, ins), "before_send -"},
		{"nth and count", []Rule{{Kind: BeforeSend, Nth: 2, Count: 2}}, execs(ins, ins, ins, ins), "- before_send before_send -"},
		{"unlimited", []Rule{{Kind: BeforeSend, Count: Unlimited}}, execs(ins, ins, ins), "before_send before_send before_send"},
		{"verb", []Rule{{Kind: BeforeSend, Verb: "update", Count: Unlimited}}, execs(ins, upd, "/* x */ UPDATE t"), "- before_send before_send"},
		{"verb past a CTE", []Rule{{Kind: BeforeSend, Verb: "UPDATE"}}, execs("WITH x AS (SELECT 1) UPDATE t SET v = 2"), "before_send"},
		{"match is case-insensitive", []Rule{{Kind: BeforeSend, Match: "insert into t", Count: Unlimited}}, execs(upd, ins), "- before_send"},
		{"op", []Rule{{Kind: BeforeSend, Op: OpQuery}}, []call{{op: OpExec, stmt: ins}, {op: OpQuery, stmt: "select 1"}}, "- before_send"},
		{"nth counts matching calls only", []Rule{{Kind: BeforeSend, Verb: "INSERT", Nth: 2}}, execs(ins, upd, upd, ins), "- - - before_send"},
		{"first firing rule wins; the others still count", []Rule{{Kind: Latency, Delay: time.Millisecond, Verb: "INSERT"}, {Kind: BeforeSend, Count: Unlimited}}, execs(ins, ins, upd), "latency before_send before_send"},
		{"after_exec only in a transaction", []Rule{{Kind: AfterExec, Count: Unlimited}}, []call{{op: OpExec, stmt: ins}, {op: OpExec, stmt: ins, inTx: true}}, "- after_exec"},
		{"applied_reply_lost only outside one", []Rule{{Kind: AppliedReplyLost, Count: Unlimited}}, []call{{op: OpExec, stmt: ins, inTx: true}, {op: OpExec, stmt: ins}}, "- applied_reply_lost"},
		{"commit kinds only on commit", []Rule{{Kind: CommitNotApplied}}, []call{{op: OpExec, stmt: ins, inTx: true}, {op: OpCommit, inTx: true}}, "- commit_not_applied"},
		{"match never matches a call without a statement", []Rule{{Kind: BeforeSend, Match: "x"}}, []call{{op: OpBegin}}, "-"},
	}
	for _, tt := range tests {
		p := MustPlan(Config{Rules: tt.rules})
		if got := fires(p, tt.calls); got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestPlanWindow(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0
	p := MustPlan(Config{Now: func() time.Time { return now }, Rules: []Rule{
		{Kind: Outage, From: t0.Add(time.Second), Until: t0.Add(2 * time.Second), Count: Unlimited},
	}})
	var got []string
	for _, at := range []time.Duration{0, time.Second, 1500 * time.Millisecond, 2 * time.Second} {
		now = t0.Add(at)
		got = append(got, fires(p, []call{{op: OpConnect}}))
	}
	if g, want := strings.Join(got, " "), "- outage outage -"; g != want {
		t.Errorf("got %q, want %q ([From, Until) on the injected clock)", g, want)
	}
}

func TestPlanRateIsDeterministic(t *testing.T) {
	run := func(seed uint64) string {
		p := MustPlan(Config{Seed: seed, Rules: []Rule{{Kind: BeforeSend, Rate: 0.3, Count: Unlimited}}})
		var calls []call
		for i := 0; i < 200; i++ {
			calls = append(calls, call{op: OpExec, stmt: fmt.Sprint("insert ", i)})
		}
		return fires(p, calls)
	}
	a, b, c := run(7), run(7), run(8)
	if a != b {
		t.Error("same seed, same calls: got different faults")
	}
	if a == c {
		t.Error("different seeds: got identical faults")
	}
	if n := strings.Count(a, "before_send"); n < 30 || n > 90 {
		t.Errorf("got %d faults in 200 calls at rate 0.3, want about 60", n)
	}
}

func TestPlanCountsConcurrentCalls(t *testing.T) {
	p := MustPlan(Config{Rules: []Rule{{Kind: BeforeSend, Verb: "INSERT", Count: 50}}})
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 25; i++ {
				p.decide(call{op: OpExec, stmt: "INSERT INTO t"})
			}
		}()
	}
	wg.Wait()
	c := p.Counts()
	if c.Faults[BeforeSend] != 50 || c.Calls[OpExec] != 200 || c.Statements["INSERT INTO t"][BeforeSend] != 50 || c.Total() != 50 {
		t.Errorf("got counts %+v, want 50 faults out of 200 calls", c)
	}
}

func TestPlanDisableAndAdd(t *testing.T) {
	p := MustPlan(Config{})
	if err := p.Add(Rule{Kind: BeforeSend, Count: Unlimited}); err != nil {
		t.Fatal(err)
	}
	p.Disable()
	if got := fires(p, execs("x", "y")); got != "- -" {
		t.Errorf("disabled: got %q, want no faults", got)
	}
	p.Enable()
	if got := fires(p, execs("x")); got != "before_send" {
		t.Errorf("enabled again: got %q, want before_send", got)
	}
	if got := p.Counts().Calls[OpExec]; got != 3 {
		t.Errorf("got %d exec calls counted, want 3 (disabled calls count too)", got)
	}
	snap := p.Counts()
	snap.Faults[BeforeSend] = 100
	if p.Counts().Faults[BeforeSend] != 1 {
		t.Error("Counts returned a map shared with the plan, want a snapshot")
	}
}

func TestRuleValidation(t *testing.T) {
	bad := []Rule{
		{Kind: "explode"},
		{Kind: BeforeSend, Op: "fetch"},
		{Kind: BeforeSend, Nth: -1},
		{Kind: BeforeSend, Count: -2},
		{Kind: BeforeSend, Rate: 1.5},
		{Kind: Latency},
		{Kind: Outage, From: time.Unix(10, 0), Until: time.Unix(5, 0)},
		{Kind: CommitNotApplied, Op: OpExec},
		{Kind: ServerError, Engine: "oracle"},
		{Kind: ServerError, Engine: Postgres, Code: "123"},
		{Kind: ServerError, Engine: MySQL, Code: "deadlock"},
	}
	for i, r := range bad {
		if _, err := NewPlan(Config{Rules: []Rule{r}}); err == nil || !strings.Contains(err.Error(), "Rules[0]") {
			t.Errorf("bad rule %d %+v: got %v, want an error naming Rules[0]", i, r, err)
		}
	}
	if err := MustPlan(Config{}).Add(Rule{Kind: "explode"}); err == nil {
		t.Error("Add of a bad rule: got nil, want an error")
	}
}

func TestEngineError(t *testing.T) {
	tests := []struct {
		engine Engine
		code   string
		check  func(error) bool
	}{
		{Postgres, "", func(err error) bool {
			var e *pgconn.PgError
			return errors.As(err, &e) && e.Code == "40P01" && e.SQLState() == "40P01"
		}},
		{Postgres, "40001", func(err error) bool { var e *pgconn.PgError; return errors.As(err, &e) && e.Code == "40001" }},
		{MySQL, "", func(err error) bool { return errors.Is(err, &mysql.MySQLError{Number: 1213}) }},
		{MySQL, "1205", func(err error) bool { var e *mysql.MySQLError; return errors.As(err, &e) && e.Number == 1205 }},
		{SQLServer, "", func(err error) bool { var e mssql.Error; return errors.As(err, &e) && e.SQLErrorNumber() == 1205 }},
		{SQLite, "517", func(err error) bool {
			var e interface{ Code() int }
			return errors.As(err, &e) && e.Code() == 517 && strings.Contains(err.Error(), "SQLITE_BUSY_SNAPSHOT")
		}},
	}
	for _, tt := range tests {
		err, bad := EngineError(tt.engine, tt.code)
		if bad != nil || !tt.check(err) {
			t.Errorf("EngineError(%s, %q) = %v (%T), %v; want the engine's own error type and code", tt.engine, tt.code, err, err, bad)
		}
	}
}

func TestInjectedErrorsClassify(t *testing.T) {
	tests := []struct {
		r     Rule
		c     call
		phase sqlretry.Phase
	}{
		{Rule{Kind: BeforeSend}, call{op: OpExec, stmt: "x"}, sqlretry.NotSent},
		{Rule{Kind: BeforeSend}, call{op: OpConnect}, sqlretry.NotSent},
		{Rule{Kind: AfterExec}, call{op: OpExec, stmt: "x", inTx: true}, sqlretry.Unknown},
		{Rule{Kind: AppliedReplyLost}, call{op: OpExec, stmt: "x"}, sqlretry.Unknown},
		{Rule{Kind: CommitNotApplied}, call{op: OpCommit}, sqlretry.NotSent},
		{Rule{Kind: CommitAppliedReplyLost}, call{op: OpCommit}, sqlretry.Unknown},
		{Rule{Kind: Outage, Phase: sqlretry.NotSent}, call{op: OpConnect}, sqlretry.NotSent},
		{Rule{Kind: Outage, Phase: sqlretry.NotSent}, call{op: OpExec}, sqlretry.NotSent},
		{Rule{Kind: Outage}, call{op: OpExec}, sqlretry.Unknown},
	}
	for _, tt := range tests {
		err := errFor(tt.r, tt.c)
		c := sqlretry.ClassifyNeutral(err)
		if !c.Retryable || c.Phase != tt.phase {
			t.Errorf("%s on %s: ClassifyNeutral(%v) = %+v, want retryable, phase %v", tt.r.Kind, tt.c.op, err, c, tt.phase)
		}
		var fe *Error
		if !errors.As(err, &fe) || fe.Kind != tt.r.Kind {
			t.Errorf("%s: got %v, want a *faults.Error of that kind", tt.r.Kind, err)
		}
	}
	custom := errors.New("custom")
	if err := errFor(Rule{Kind: BeforeSend, Err: custom}, call{op: OpExec}); !errors.Is(err, custom) || errors.Is(err, driver.ErrBadConn) {
		t.Errorf("Rule.Err: got %v, want the custom error only", err)
	}
}

func TestPlanLeavesPreparesToExplicitRules(t *testing.T) {
	ins := "INSERT INTO t VALUES (?)"
	calls := []call{{op: OpPrepare, stmt: ins}, {op: OpExec, stmt: ins}, {op: OpPrepare, stmt: ins}}
	tests := []struct {
		rule Rule
		want string
	}{
		{Rule{Kind: BeforeSend, Verb: "INSERT", Count: Unlimited}, "- before_send -"},
		{Rule{Kind: BeforeSend, Op: OpPrepare, Count: Unlimited}, "before_send - before_send"},
		{Rule{Kind: Outage, Count: Unlimited}, "outage outage outage"},
	}
	for _, tt := range tests {
		if got := fires(MustPlan(Config{Rules: []Rule{tt.rule}}), calls); got != tt.want {
			t.Errorf("rule %+v: got %q, want %q", tt.rule, got, tt.want)
		}
	}
}

func TestRandomRules(t *testing.T) {
	rules := RandomRules(map[Kind]float64{ServerError: 0.1, BeforeSend: 0.2, Hang: 0.5, Latency: 0.3, AfterExec: 0}, MySQL, time.Millisecond)
	var got []string
	for _, r := range rules {
		got = append(got, fmt.Sprintf("%s@%v", r.Kind, r.Rate))
	}
	if g, want := strings.Join(got, " "), "before_send@0.2 server_error@0.1 latency@0.3"; g != want {
		t.Errorf("got rules %q, want %q", g, want)
	}
	p, err := NewPlan(Config{Seed: 1, Rules: rules})
	if err != nil {
		t.Fatalf("RandomRules gave invalid rules: %v", err)
	}
	for i := 0; i < 300; i++ {
		p.decide(call{op: OpExec, stmt: "update t"})
	}
	c := p.Counts()
	for _, k := range []Kind{BeforeSend, ServerError, Latency} {
		if c.Faults[k] == 0 {
			t.Errorf("got no %s faults in 300 calls, want some", k)
		}
	}
}
