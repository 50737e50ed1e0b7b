package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
)

func runClassifyCLI(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = Main(context.Background(), append([]string{"classify"}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

func TestClassifyJSON(t *testing.T) {
	cases := []struct {
		args       []string
		code       string
		listed     bool
		retryable  bool
		phase      string
		minDelayMS int64
	}{
		{[]string{"--engine", "mssql", "1205", "--json"}, "1205", true, true, "not-applied", 0},
		{[]string{"--engine", "mssql", "40501", "--json"}, "40501", true, true, "not-applied", 10000},
		{[]string{"--json", "--engine", "mssql", "-2"}, "-2", true, true, "unknown", 0},
		{[]string{"--engine", "mssql", "--json", "--", "-2"}, "-2", true, true, "unknown", 0},
		{[]string{"--engine", "mssql", "4060", "--json"}, "4060", true, true, "not-sent", 0},
		{[]string{"--engine", "mssql", "2627", "--json"}, "2627", true, false, "not-applied", 0},
		{[]string{"--engine", "mssql", "266", "--json"}, "266", false, false, "not-applied", 0},
		{[]string{"--engine", "postgres", "40P01", "--json"}, "40P01", true, true, "not-applied", 0},
		{[]string{"--engine", "postgres", "40p01", "--json"}, "40P01", true, true, "not-applied", 0},
		{[]string{"--engine", "postgres", "53200", "--json"}, "53200", true, true, "not-applied", 0},
		{[]string{"--engine", "postgres", "42P01", "--json"}, "42P01", true, false, "not-applied", 0},
		{[]string{"--engine", "postgres", "CR000", "--json"}, "CR000", false, false, "not-applied", 0},
		{[]string{"--engine", "cockroach", "CR000", "--json"}, "CR000", true, true, "not-applied", 0},
		{[]string{"--engine", "cockroach", "40003", "--json"}, "40003", true, true, "unknown", 0},
		{[]string{"--engine", "mysql", "1213", "--json"}, "1213", true, true, "not-applied", 0},
		{[]string{"--engine", "mysql", "2013", "--json"}, "2013", true, true, "unknown", 0},
		{[]string{"--engine", "mysql", "9999", "--json"}, "9999", false, false, "not-applied", 0},
		{[]string{"--engine", "sqlite", "517", "--json"}, "517", true, true, "not-applied", 0},
		{[]string{"--engine", "sqlite", "SQLITE_BUSY", "--json"}, "SQLITE_BUSY", true, true, "not-applied", 0},
		{[]string{"--engine", "SQLite", "2067", "--json"}, "2067", true, false, "not-applied", 0},
	}
	for _, c := range cases {
		exit, out, errs := runClassifyCLI(c.args...)
		if exit != ExitOK || errs != "" {
			t.Errorf("%v: got exit %d, stderr %q; want exit 0, no stderr", c.args, exit, errs)
			continue
		}
		var got struct {
			Engine     *string `json:"engine"`
			Code       *string `json:"code"`
			Listed     *bool   `json:"listed"`
			Retryable  *bool   `json:"retryable"`
			Phase      *string `json:"phase"`
			Reason     *string `json:"reason"`
			MinDelayMS *int64  `json:"min_delay_ms"`
		}
		dec := json.NewDecoder(strings.NewReader(out))
		if err := dec.Decode(&got); err != nil || dec.More() {
			t.Errorf("%v: output %q is not one JSON document: %v", c.args, out, err)
			continue
		}
		if got.Engine == nil || got.Code == nil || got.Listed == nil || got.Retryable == nil || got.Phase == nil || got.Reason == nil || got.MinDelayMS == nil {
			t.Errorf("%v: output %s lacks a field", c.args, out)
			continue
		}
		if *got.Code != c.code || *got.Listed != c.listed || *got.Retryable != c.retryable || *got.Phase != c.phase || *got.MinDelayMS != c.minDelayMS || *got.Reason == "" {
			t.Errorf("%v: got code %q listed %v retryable %v phase %q min_delay_ms %d reason %q; want code %q listed %v retryable %v phase %q min_delay_ms %d",
				c.args, *got.Code, *got.Listed, *got.Retryable, *got.Phase, *got.MinDelayMS, *got.Reason, c.code, c.listed, c.retryable, c.phase, c.minDelayMS)
		}
	}
}

func TestClassifyText(t *testing.T) {
	exit, out, errs := runClassifyCLI("--engine", "mssql", "40501")
	if exit != ExitOK || errs != "" {
		t.Fatalf("got exit %d, stderr %q; want 0 and none", exit, errs)
	}
	for _, want := range []string{"retryable:", "yes", "phase:", "not-applied", "reason:", "min delay:", "10000ms"} {
		if !strings.Contains(out, want) {
			t.Errorf("output %q lacks %q", out, want)
		}
	}
}

func TestClassifyBadInput(t *testing.T) {
	cases := []struct {
		args []string
		want string // what the error line must name
	}{
		{[]string{"1205"}, "--engine"},
		{[]string{"--engine", "oracle", "1"}, "oracle"},
		{[]string{"--engine", "mssql", "12a"}, "12a"},
		{[]string{"--engine", "mssql", "99999999999"}, "99999999999"},
		{[]string{"--engine", "postgres", "4000"}, "4000"},
		{[]string{"--engine", "postgres", "40-01", "--json"}, "40-01"},
		{[]string{"--engine", "mysql", "0"}, "\"0\""},
		{[]string{"--engine", "mysql", "HY000"}, "HY000"},
		{[]string{"--engine", "sqlite", "SQLITE_NOPE"}, "SQLITE_NOPE"},
		{[]string{"--engine", "mssql"}, "CODE"},
		{[]string{"--engine", "mssql", "1205", "1222"}, "1205 1222"},
		{[]string{"--engine", "mssql", "--list", "1205"}, "--list"},
		{[]string{"--engine", "mssql", "--bogus", "1205"}, "bogus"},
	}
	for _, c := range cases {
		exit, out, errs := runClassifyCLI(c.args...)
		if exit != ExitBadInput {
			t.Errorf("%v: got exit %d, want %d", c.args, exit, ExitBadInput)
		}
		if out != "" {
			t.Errorf("%v: got stdout %q, want none", c.args, out)
		}
		if !strings.HasPrefix(errs, "error: ") || strings.Count(errs, "\n") != 1 || !strings.Contains(errs, c.want) {
			t.Errorf("%v: got stderr %q, want one line \"error: ...\" naming %q", c.args, errs, c.want)
		}
	}
}

func TestClassifyList(t *testing.T) {
	for _, eng := range []string{"sqlserver", "postgres", "cockroach", "mysql", "sqlite"} {
		exit, out, errs := runClassifyCLI("--engine", eng, "--list", "--json")
		if exit != ExitOK || errs != "" {
			t.Errorf("%s: got exit %d, stderr %q", eng, exit, errs)
			continue
		}
		var got struct {
			Engine string `json:"engine"`
			Codes  []struct {
				Code      string `json:"code"`
				Retryable bool   `json:"retryable"`
				Phase     string `json:"phase"`
				Reason    string `json:"reason"`
				Source    string `json:"source"`
			} `json:"codes"`
		}
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Errorf("%s: output is not JSON: %v", eng, err)
			continue
		}
		if got.Engine != eng || len(got.Codes) < 10 {
			t.Errorf("%s: got engine %q with %d codes, want %q with at least 10", eng, got.Engine, len(got.Codes), eng)
		}
		for _, c := range got.Codes {
			if c.Code == "" || c.Phase == "" || c.Reason == "" || c.Source == "" {
				t.Errorf("%s: code row %+v lacks a field", eng, c)
				break
			}
		}
		exit, text, _ := runClassifyCLI("--engine", eng, "--list")
		if exit != ExitOK || strings.Count(text, "\n") != len(got.Codes)+1 {
			t.Errorf("%s --list: got exit %d and %d lines, want 0 and %d", eng, exit, strings.Count(text, "\n"), len(got.Codes)+1)
		}
	}
	_, out, _ := runClassifyCLI("--engine", "mssql", "--list", "--json")
	if !strings.Contains(out, `"code": "1205"`) || !strings.Contains(out, `"code": "-2"`) {
		t.Error("mssql --list lacks 1205 or -2")
	}
}

func TestClassifyHelp(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"-h"}} {
		exit, out, _ := runClassifyCLI(args...)
		if exit != ExitOK || !strings.Contains(out, "--engine") {
			t.Errorf("%v: got exit %d, output %q; want 0 and the usage", args, exit, out)
		}
	}
}

// TestClassifyCitesPublicSources reads every source classify --list prints:
// each must be one a user can open (vendor docs, error catalogues, public
// code), not the project's notes or seeds.
func TestClassifyCitesPublicSources(t *testing.T) {
	for _, eng := range []string{"sqlserver", "postgres", "cockroach", "mysql", "sqlite"} {
		_, stdout, _ := runMain("classify", "--engine", eng, "--list", "--json")
		var doc listJSON
		if err := json.Unmarshal([]byte(stdout), &doc); err != nil {
			t.Fatalf("%s: %v", eng, err)
		}
		for _, c := range doc.Codes {
			if m := privateCitation.FindString(c.Source); m != "" {
				t.Errorf("classify --engine %s %s cites %q: %s", eng, c.Code, m, c.Source)
			}
		}
	}
}
