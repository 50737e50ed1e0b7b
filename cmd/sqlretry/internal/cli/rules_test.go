package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func runCLI(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = Main(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestRulesExplainExecJSON(t *testing.T) {
	code, out, errs := runCLI("rules", "explain", "{1205,1222:3,2*2:select,update}", "--json")
	if code != ExitOK {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	var got struct {
		Kind  string `json:"kind"`
		Rules []struct {
			Error   string   `json:"error"`
			Retries int      `json:"retries"`
			Waits   []int64  `json:"waits_seconds"`
			Filter  []string `json:"filter"`
		} `json:"rules"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("output %q: %v", out, err)
	}
	if got.Kind != "exec" || len(got.Rules) != 2 || got.Rules[0].Error != "1205" || got.Rules[1].Error != "1222" ||
		got.Rules[0].Retries != 3 || !reflect.DeepEqual(got.Rules[0].Waits, []int64{2, 4, 8}) ||
		!reflect.DeepEqual(got.Rules[1].Filter, []string{"select", "update"}) {
		t.Errorf("explain JSON = %+v", got)
	}
}

func TestRulesExplainConnJSON(t *testing.T) {
	code, out, errs := runCLI("rules", "explain", "--conn", "{+4060};{40143}", "--json")
	if code != ExitOK {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	var got struct {
		Kind, Mode        string
		Errors, Effective []string
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	want := []string{"4060", "40143"}
	if got.Kind != "conn" || got.Mode != "replace" || !reflect.DeepEqual(got.Errors, want) || !reflect.DeepEqual(got.Effective, want) {
		t.Errorf("explain --conn JSON = %+v, want conn/replace/%v/%v", got, want, want)
	}
	code, out, _ = runCLI("rules", "explain", "--conn", "+50000", "--json")
	if code != ExitOK || !strings.Contains(out, `"mode": "append"`) || !strings.Contains(out, `"40613"`) || !strings.Contains(out, `"50000"`) {
		t.Errorf("explain --conn +50000: exit %d, %s", code, out)
	}
}

func TestRulesBadInput(t *testing.T) {
	tests := []struct {
		args []string
		want string // prefix of the one stderr line
		has  string // and what else it must say
	}{
		{[]string{"rules", "explain", "1205:3,2,2"}, `error: rules explain: RULES rule 1, token "3,2,2"`, "more than one comma"},
		{[]string{"rules", "explain", "1205:3;1222:3:a:b"}, `error: rules explain: RULES rule 2`, "at most 3"},
		{[]string{"rules", "explain", "1205:3", "--query-timeout", "0"}, `error: rules explain: RULES rule 1, token "3"`, "queryTimeout"},
		{[]string{"rules", "explain", "--conn", "4060:3"}, `error: rules explain: RULES rule 1`, "; RULES parse without --conn"},
		// retryConn's + in a statement rule (issue 18).
		{[]string{"rules", "explain", "{+4060,4070:1,5}"}, `error: rules explain: RULES rule 1, token "+4060" at offset 1: `,
			"a leading + (add to the built-in list) belongs to retryConn rules (--conn)"},
		// SQLSTATEs under the default engine, which names error numbers.
		{[]string{"rules", "explain", "40001,40P01:3,1*2"}, `error: rules explain: RULES rule 1, token "40P01"`, "; RULES parse with --engine postgres or cockroach"},
		{[]string{"rules", "explain", "40P01"}, `error: rules explain: RULES rule 1`, "; RULES parse with --engine postgres or cockroach (rules that name SQLSTATEs, such as 40P01) and with --conn"},
		{[]string{"rules", "explain", "--engine", "postgres", "1205:3"}, `error: rules explain: RULES rule 1, token "1205"`, "; RULES parse with --engine sqlserver or mysql"},
		{[]string{"rules", "explain"}, "error: rules explain: want one RULES argument", ""},
		{[]string{"rules", "explain", "1205:3", "--filter-mode", "regex"}, "error: rules explain: --filter-mode", ""},
		{[]string{"rules", "test", "1205:3", "--sql", "select 1"}, "error: rules test: --error CODE is required", ""},
		{[]string{"rules", "test", "1205:x", "--error", "1205", "--sql", "select 1"}, `error: rules test: RULES rule 1, token "x"`, "retryCount"},
		// A garbage code is bad input, as in classify, not a "defer".
		{[]string{"rules", "test", "1205:3", "--error", "abc", "--sql", "select 1"}, `error: rules test: --error: SQL Server error number "abc"`, "conn-reset"},
		{[]string{"rules", "test", "--conn", "4060", "--error", "abc"}, `error: rules test: --error: SQL Server error number "abc"`, ""},
		{[]string{"rules", "test", "1205:3", "--error", "40P01", "--sql", "select 1"}, "error: rules test: --error: ", "; 40P01 is a SQLSTATE: pass --engine postgres or cockroach"},
		{[]string{"rules", "test", "--engine", "postgres", "40001:3", "--error", "1205", "--sql", "select 1"}, "error: rules test: --error: ", "; 1205 is an error number: pass --engine sqlserver or mysql"},
		{[]string{"rules"}, "error: rules: want a subcommand", ""},
		{[]string{"rules", "frob"}, `error: rules: unknown subcommand "frob"`, ""},
	}
	for _, tt := range tests {
		code, out, errs := runCLI(tt.args...)
		if code != ExitBadInput || !strings.HasPrefix(errs, tt.want) || !strings.Contains(errs, tt.has) || strings.Count(errs, "\n") != 1 || out != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 2 and one line starting %q, with %q", tt.args, code, out, errs, tt.want, tt.has)
		}
		// The JDBC driver's resource keys mean nothing to a user.
		if strings.Contains(errs, "R_") {
			t.Errorf("%v: stderr %q names a resource key", tt.args, errs)
		}
	}
}

func TestRulesTest(t *testing.T) {
	tests := []struct {
		args  []string
		code  int
		retry bool
		wait  float64
		dec   string
	}{
		{[]string{"1205:4,2+2:select,update", "--error", "1205", "--sql", "SELECT 1", "--attempt", "2"}, ExitOK, true, 4, "retry"},
		{[]string{"1205:4,2+2:select,update", "--error", "1205", "--sql", "SELECT 1", "--attempt", "5"}, ExitFailed, false, 0, "stop"},
		{[]string{"1205:4,2+2:select,update", "--error", "1205", "--sql", "/* c */ SELECT 1"}, ExitFailed, false, 0, "stop"},
		{[]string{"1205:4,2+2:select,update", "--error", "1205", "--sql", "/* c */ SELECT 1", "--filter-mode", "verb"}, ExitOK, true, 2, "retry"},
		{[]string{"1205:4,2+2:select,update", "--error", "01205", "--sql", "select 1"}, ExitOK, true, 2, "retry"},
		{[]string{"1205:4", "--error", "1222", "--sql", "select 1"}, ExitFailed, false, 0, "defer"},
		{[]string{"40001,40P01:3,1*2", "--engine", "postgres", "--error", "40p01", "--sql", "update t set x = 1", "--attempt", "3"}, ExitOK, true, 4, "retry"},
		{[]string{"--conn", "{+4060};{40143}", "--error", "40143"}, ExitOK, true, 0, "retry"},
		{[]string{"--conn", "{+4060};{40143}", "--error", "40613"}, ExitFailed, false, 0, "stop"},
		{[]string{"--conn", "", "--error", "40613", "--attempt", "2", "--connect-retry-count", "3", "--connect-retry-interval", "5"}, ExitOK, true, 5, "retry"},
		{[]string{"--conn", "", "--error", "40613", "--attempt", "2", "--connect-retry-count", "3", "--elapsed", "26"}, ExitFailed, false, 0, "stop"},
		{[]string{"--conn", "+18456", "--error", "18456"}, ExitFailed, false, 0, "stop"},
		{[]string{"--conn", "4060", "--error", "dial", "--retryable"}, ExitOK, true, 0, "retry"},
	}
	for _, tt := range tests {
		args := append([]string{"rules", "test"}, tt.args...)
		args = append(args, "--json")
		code, out, errs := runCLI(args...)
		var got testJSON
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Errorf("%v: exit %d, output %q, stderr %q: %v", tt.args, code, out, errs, err)
			continue
		}
		if code != tt.code || got.Retry != tt.retry || got.WaitSeconds != tt.wait || got.Decision != tt.dec || got.Reason == "" {
			t.Errorf("%v: exit %d, %+v; want exit %d, retry %v, wait %v, %s", tt.args, code, got, tt.code, tt.retry, tt.wait, tt.dec)
		}
	}
}

func TestRulesHumanOutput(t *testing.T) {
	code, out, _ := runCLI("rules", "explain", "1205:3,5+5;1222:2,2:select")
	want := "error 1205: up to 3 retries, waits 5s 10s 15s\nerror 1222: up to 2 retries, waits 2s 4s, only when the statement's first token is select\n"
	if code != ExitOK || out != want {
		t.Errorf("explain: exit %d, output %q, want %q", code, out, want)
	}
}

// TestOneEngineVocabulary: every subcommand that takes --engine reads it with
// the one parser (aliases included), prints the canonical name, and lists
// the names in its --help.
func TestOneEngineVocabulary(t *testing.T) {
	for _, c := range []struct {
		alias, canonical string
		classify         []string
		rules            []string
	}{
		{"mssql", "sqlserver", []string{"1205"}, []string{"1205:3,1*2"}},
		{"postgresql", "postgres", []string{"40P01"}, []string{"40P01:3,1*2"}},
		{"crdb", "cockroach", []string{"40003"}, []string{"40001:3,1*2"}},
		{"mariadb", "mysql", []string{"1213"}, []string{"1213:3,1*2"}},
		{"sqlite3", "sqlite", []string{"5"}, []string{"5:3,1*2"}},
	} {
		code, out, errs := runCLI(append([]string{"classify", "--engine", c.alias, "--json"}, c.classify...)...)
		if code != ExitOK || !strings.Contains(out, `"engine": "`+c.canonical+`"`) {
			t.Errorf("classify --engine %s: exit %d, %s%s; want engine %q", c.alias, code, out, errs, c.canonical)
		}
		code, out, errs = runCLI(append([]string{"rules", "explain", "--engine", c.alias, "--json"}, c.rules...)...)
		if code != ExitOK || !strings.Contains(out, `"engine": "`+c.canonical+`"`) {
			t.Errorf("rules explain --engine %s: exit %d, %s%s; want engine %q", c.alias, code, out, errs, c.canonical)
		}
	}
	// chaos drives three of them, and names the others it refuses.
	code, _, errs := runCLI("chaos", "--engine", "mssql")
	if code != ExitBadInput || !strings.Contains(errs, "--engine") || !strings.Contains(errs, "sqlserver is not supported here") {
		t.Errorf("chaos --engine mssql: exit %d, stderr %q", code, errs)
	}
	for _, args := range [][]string{{"classify", "--help"}, {"rules", "help"}, {"chaos", "--help-all"}} {
		_, out, _ := runCLI(args...)
		for _, name := range []string{"postgres (postgresql, pg)", "mysql (mariadb)", "sqlite (sqlite3)"} {
			if !strings.Contains(out, name) {
				t.Errorf("%v: the help lacks %q", args, name)
			}
		}
	}
	_, out, _ := runCLI("rules", "explain", "--engine", "cockroachdb", "40001:1,1", "--json")
	if !strings.Contains(out, `"syntax": "sqlstate"`) {
		t.Errorf("rules explain --engine cockroachdb: want syntax sqlstate, got %s", out)
	}
}
