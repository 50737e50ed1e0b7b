package crl

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func secs(ns ...int) []time.Duration {
	out := make([]time.Duration, len(ns))
	for i, n := range ns {
		out[i] = time.Duration(n) * time.Second
	}
	return out
}

// The seed's table of timing strings.
func TestTimings(t *testing.T) {
	tests := []struct {
		timings string
		waits   []time.Duration
	}{
		{"3", secs(0, 2, 4)},
		{"3,5", secs(5, 7, 9)},
		{"3,5+5", secs(5, 10, 15)},
		{"3,2*2", secs(2, 4, 8)},
		{"4,1*", secs(1, 1, 1, 1)},
		{"3,5+0", secs(5, 5, 5)},
		{"3,5+", secs(5, 7, 9)},
		{"3,2*", secs(2, 4, 8)},
		{"3,0*", secs(0, 0, 0)},
		{"2,1+1", secs(1, 2)},
		{"4,2*2", secs(2, 4, 8, 16)},
		{"0", secs()},
		{" 3 , 2 * 2 ", secs(2, 4, 8)},
	}
	for _, tt := range tests {
		x, err := ParseExec("1205:" + tt.timings)
		if err != nil {
			t.Errorf("ParseExec(1205:%s): %v", tt.timings, err)
			continue
		}
		e, ok := x.Lookup("1205")
		if !ok {
			t.Errorf("ParseExec(1205:%s): no entry for 1205", tt.timings)
			continue
		}
		if !slices.Equal(e.Waits, tt.waits) || e.Retries != len(tt.waits) {
			t.Errorf("ParseExec(1205:%s): waits %v, retries %d; want %v, %d", tt.timings, e.Waits, e.Retries, tt.waits, len(tt.waits))
		}
	}
}

// The seed's statement-rule examples.
func TestParseExecExamples(t *testing.T) {
	tests := []struct {
		rules string
		want  []Entry
	}{
		{"{1205:3}", []Entry{{Error: "1205", Retries: 3, Waits: secs(0, 2, 4)}}},
		{"{1205,1222:3,5+5}", []Entry{
			{Error: "1205", Retries: 3, Waits: secs(5, 10, 15)},
			{Error: "1222", Retries: 3, Waits: secs(5, 10, 15)},
		}},
		{"{2714:2,1*2}", []Entry{{Error: "2714", Retries: 2, Waits: secs(1, 2)}}},
		{"{1205:4,2+2:select,update}", []Entry{{Error: "1205", Retries: 4, Waits: secs(2, 4, 6, 8), Filter: []string{"select", "update"}}}},
		{"{1205:3,5+5};{1222:2,2}", []Entry{
			{Error: "1205", Retries: 3, Waits: secs(5, 10, 15)},
			{Error: "1222", Retries: 2, Waits: secs(2, 4)},
		}},
		{"1205,1222:3,2*2:select,update", []Entry{
			{Error: "1205", Retries: 3, Waits: secs(2, 4, 8), Filter: []string{"select", "update"}},
			{Error: "1222", Retries: 3, Waits: secs(2, 4, 8), Filter: []string{"select", "update"}},
		}},
		{"{1205,1222:4,2*2:insert,update,delete,merge}", []Entry{
			{Error: "1205", Retries: 4, Waits: secs(2, 4, 8, 16), Filter: []string{"insert", "update", "delete", "merge"}},
			{Error: "1222", Retries: 4, Waits: secs(2, 4, 8, 16), Filter: []string{"insert", "update", "delete", "merge"}},
		}},
		{"{2714:2,1+1};{3702:2,1+1}", []Entry{
			{Error: "2714", Retries: 2, Waits: secs(1, 2)},
			{Error: "3702", Retries: 2, Waits: secs(1, 2)},
		}},
		{"1205:3,5+5;1222:2,2", []Entry{
			{Error: "1205", Retries: 3, Waits: secs(5, 10, 15)},
			{Error: "1222", Retries: 2, Waits: secs(2, 4)},
		}},
		// The whole list wrapped, and each rule too.
		{"{{1205:1};{1222:1}}", []Entry{{Error: "1205", Retries: 1, Waits: secs(0)}, {Error: "1222", Retries: 1, Waits: secs(0)}}},
		{"{1205:1;1222:1}", []Entry{{Error: "1205", Retries: 1, Waits: secs(0)}, {Error: "1222", Retries: 1, Waits: secs(0)}}},
		// Filters are lower-cased; an empty filter section or "0" is none.
		{"1205:1:SELECT,Update", []Entry{{Error: "1205", Retries: 1, Waits: secs(0), Filter: []string{"select", "update"}}}},
		{"1205:1:", []Entry{{Error: "1205", Retries: 1, Waits: secs(0)}}},
		{"1205:1:0", []Entry{{Error: "1205", Retries: 1, Waits: secs(0)}}},
		// A later rule for the same error replaces the earlier one.
		{"1205:3;1205:1,7", []Entry{{Error: "1205", Retries: 1, Waits: secs(7)}}},
		{"01205:1", []Entry{{Error: "1205", Retries: 1, Waits: secs(0)}}},
		{"", []Entry{}},
		{"  ;  ", []Entry{}},
	}
	for _, tt := range tests {
		x, err := ParseExec(tt.rules)
		if err != nil {
			t.Errorf("ParseExec(%q): %v", tt.rules, err)
			continue
		}
		if got := x.Entries(); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseExec(%q).Entries() =\n  %+v\nwant\n  %+v", tt.rules, got, tt.want)
		}
	}
}

func TestParseExecSQLState(t *testing.T) {
	x, err := SQLState.ParseExec("40001,40p01:3,1*2")
	if err != nil {
		t.Fatal(err)
	}
	want := []Entry{{Error: "40001", Retries: 3, Waits: secs(1, 2, 4)}, {Error: "40P01", Retries: 3, Waits: secs(1, 2, 4)}}
	if got := x.Entries(); !reflect.DeepEqual(got, want) {
		t.Errorf("Entries() = %+v, want %+v", got, want)
	}
	if got, want := x.String(), "40001,40P01:3,1*2"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if _, err := ParseExec("40P01:3"); err == nil {
		t.Errorf("SQL Server ParseExec(40P01:3): no error, want R_invalidParameterNumber")
	}
	if _, err := SQLState.ParseExec("1205:3"); err == nil {
		t.Errorf("SQLState.ParseExec(1205:3): no error, want R_invalidParameterNumber")
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		conn  bool
		rules string
		key   string
		rule  int
		token string
		pos   int
	}{
		{false, "1205:3,2,2", KeyInvalidParameterNumber, 1, "3,2,2", 5},
		{false, "1205:3:select:x", KeyInvalidRuleFormat, 1, "1205:3:select:x", 0},
		{false, "1205:x", KeyInvalidParameterNumber, 1, "x", 5},
		{false, "12a5:3", KeyInvalidParameterNumber, 1, "12a5", 0},
		{false, ":1,2*2:CREATE", KeyInvalidParameterNumber, 1, "", 0},
		{false, "2714,2716:-1,2+2:CREATE", KeyInvalidParameterNumber, 1, "-1", 10},
		{false, "2714,2716:4,-1+1:CREATE", KeyInvalidParameterNumber, 1, "-1", 12},
		{false, "2714,2716:1,2AND2:CREATE", KeyInvalidParameterNumber, 1, "2AND2", 12},
		{false, "1205:3,5+5+5", KeyInvalidParameterNumber, 1, "5+5", 9},
		{false, "1205:3,+5", KeyInvalidParameterNumber, 1, "", 7},
		{false, "1205:3,", KeyInvalidParameterNumber, 1, "", 7},
		{false, "1205:", KeyInvalidParameterNumber, 1, "", 5},
		{false, "1205:3;1222", KeyInvalidRuleFormat, 2, "1222", 7},
		{false, "{1205:3};{1222:x}", KeyInvalidParameterNumber, 2, "x", 15},
		{false, "+1205:3", KeyInvalidParameterNumber, 1, "+1205", 0},
		{false, "1205:256", KeyInvalidParameterNumber, 1, "256", 5},
		{false, "1205:3,9999999999", KeyInvalidParameterNumber, 1, "9999999999", 7},
		{false, "1205:40,2*2", KeyInvalidRetryInterval, 1, "40,2*2", 5},
		{false, "1205:3:sel ect", KeyInvalidRuleFormat, 1, "sel ect", 7},
		{false, "{1205:3", KeyInvalidRuleFormat, 0, "{", 0},
		{false, "1205:3}", KeyInvalidRuleFormat, 1, "}", 6},
		{false, "1205{:3}", KeyInvalidRuleFormat, 1, "{", 4},
		{true, "4060:3", KeyInvalidRuleFormat, 1, "4060:3", 0},
		{true, "+4060,x", KeyInvalidParameterNumber, 1, "x", 6},
		{true, "4060,+40143", KeyInvalidParameterNumber, 1, "+40143", 5},
		{true, "4060;;abc", KeyInvalidParameterNumber, 3, "abc", 6},
		{true, "a:b:c:d", KeyInvalidRuleFormat, 1, "a:b:c:d", 0},
	}
	for _, tt := range tests {
		var err error
		if tt.conn {
			_, err = ParseConn(tt.rules)
		} else {
			_, err = ParseExec(tt.rules)
		}
		var ce *Error
		if !errors.As(err, &ce) {
			t.Errorf("parse(%q, conn=%v) error = %v, want an *Error %s", tt.rules, tt.conn, err, tt.key)
			continue
		}
		if ce.Key != tt.key || ce.Rule != tt.rule || ce.Token != tt.token || ce.Pos != tt.pos {
			t.Errorf("parse(%q, conn=%v) = %s/rule %d/token %q/pos %d, want %s/rule %d/token %q/pos %d",
				tt.rules, tt.conn, ce.Key, ce.Rule, ce.Token, ce.Pos, tt.key, tt.rule, tt.token, tt.pos)
		}
		if !strings.HasPrefix(ce.Error(), tt.key+": ") {
			t.Errorf("Error() = %q, want it to start with %q", ce.Error(), tt.key)
		}
	}
}

// R_InvalidRetryInterval: JDBC semantics at parse time.
func TestCheckQueryTimeout(t *testing.T) {
	tests := []struct {
		rules        string
		queryTimeout int
		ok           bool
	}{
		{"1205:3,2*2", -1, true},
		{"1205:3,2*2", 8, true},
		{"1205:3,2*2", 7, false},
		{"1205:3", 0, false}, // waits 0, 2, 4: queryTimeout 0 rejects every positive wait
		{"1205:1", 0, true},  // wait 0 only
		{"1205:3,5+0", 0, false},
		{"2714,2716:11,2+2:CREATE", 10, false},
		{"2714,2716:4,100+1:CREATE", 3, false},
		{"1205:1;1222:2,5", 5, false},
	}
	for _, tt := range tests {
		x, err := ParseExec(tt.rules)
		if err != nil {
			t.Fatalf("ParseExec(%q): %v", tt.rules, err)
		}
		err = x.CheckQueryTimeout(tt.queryTimeout)
		if (err == nil) != tt.ok {
			t.Errorf("CheckQueryTimeout(%q, %d) = %v, want ok=%v", tt.rules, tt.queryTimeout, err, tt.ok)
		}
		var ce *Error
		if err != nil && (!errors.As(err, &ce) || ce.Key != KeyInvalidRetryInterval || ce.Rule == 0) {
			t.Errorf("CheckQueryTimeout(%q, %d) = %v, want an R_InvalidRetryInterval *Error naming the rule", tt.rules, tt.queryTimeout, err)
		}
	}
	var ce *Error
	if err := (Config{Exec: "1205:1;1222:3,2*2", QueryTimeout: 5}).Validate(); !errors.As(err, &ce) || ce.Rule != 2 || ce.Token != "3,2*2" || ce.Pos != 12 {
		t.Errorf("Config.Validate() = %v, want R_InvalidRetryInterval rule 2 token \"3,2*2\" pos 12", err)
	}
}

func TestParseConn(t *testing.T) {
	builtin := Builtin(Numbers)
	tests := []struct {
		rules     string
		mode      ConnMode
		errs      []string
		effective []string
	}{
		{"", Append, nil, builtin},
		{"{+4060}", Append, []string{"4060"}, builtin},
		{"+18456", Append, []string{"18456"}, append(Builtin(Numbers), "18456")},
		{"{+50000,50001}", Append, []string{"50000", "50001"}, append(Builtin(Numbers), "50000", "50001")},
		{"{4060}", Replace, []string{"4060"}, []string{"4060"}},
		{"{+4060};{40143}", Replace, []string{"4060", "40143"}, []string{"4060", "40143"}},
		{"{+4060};{+40143}", Append, []string{"4060", "40143"}, builtin},
		{"+4060,40143", Append, []string{"4060", "40143"}, builtin},
	}
	for _, tt := range tests {
		c, err := ParseConn(tt.rules)
		if err != nil {
			t.Errorf("ParseConn(%q): %v", tt.rules, err)
			continue
		}
		if c.Mode() != tt.mode || !slices.Equal(c.Errors(), tt.errs) || !slices.Equal(c.Effective(), tt.effective) {
			t.Errorf("ParseConn(%q) = %v %v %v, want %v %v %v", tt.rules, c.Mode(), c.Errors(), c.Effective(), tt.mode, tt.errs, tt.effective)
		}
		for _, code := range tt.effective {
			if !c.Retries(code) {
				t.Errorf("ParseConn(%q).Retries(%s) = false, want true", tt.rules, code)
			}
		}
	}
	if len(builtin) != 20 {
		t.Errorf("len(Builtin(Numbers)) = %d, want the JDBC driver's 20", len(builtin))
	}
	var zero Conn
	if !zero.Retries("40613") || zero.Retries("1205") {
		t.Errorf("zero Conn: Retries(40613), Retries(1205) = %v, %v; want true, false", zero.Retries("40613"), zero.Retries("1205"))
	}
}

// The seed's mssql-jdbc.properties examples, and its literal prefix rule.
func TestParseProperties(t *testing.T) {
	tests := []struct {
		text, exec, conn string
	}{
		{"retryExec=1205:3,5+5;1222:2,2\nretryConn=+4060,40143\n", "1205:3,5+5;1222:2,2", "+4060,40143"},
		{"retryExec=1205:3,5+5:select,update\nretryConn=+50000\n", "1205:3,5+5:select,update", "+50000"},
		{"# retryExec=1:1\n retryExec=2:2\nfoo=bar\r\nretryExec=1205:1\r\n", "1205:1", ""},
		{"retryExec2=1205:1\nretryExec=1222:2\n", "1205:1;1222:2", ""},
		{"", "", ""},
	}
	for _, tt := range tests {
		exec, conn, err := ParseProperties(tt.text)
		if err != nil || exec != tt.exec || conn != tt.conn {
			t.Errorf("ParseProperties(%q) = %q, %q, %v; want %q, %q", tt.text, exec, conn, err, tt.exec, tt.conn)
		}
	}
	if _, _, err := ParseProperties("retryExec\n"); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("ParseProperties(retryExec without =) error = %v, want one naming line 1", err)
	}
}

func TestFormatRoundTrip(t *testing.T) {
	tests := []struct{ in, out string }{
		{"{1205,1222:3,2*2:SELECT,update}", "1205,1222:3,2*2:select,update"},
		{"1205:3", "1205:3"},
		{"1205:3,0", "1205:3"},
		{"1205:3,5", "1205:3,5"},
		{"1205:3,5+2", "1205:3,5"},
		{"1205:3,5+5", "1205:3,5+5"},
		{"1205:4,1*", "1205:4,1*1"},
		{"{1205:3,5+5};{1222:2,2}", "1205:3,5+5;1222:2,2"},
		{"1205:1:0", "1205:1"},
	}
	for _, tt := range tests {
		x, err := ParseExec(tt.in)
		if err != nil {
			t.Fatalf("ParseExec(%q): %v", tt.in, err)
		}
		if got := x.String(); got != tt.out {
			t.Errorf("ParseExec(%q).String() = %q, want %q", tt.in, got, tt.out)
		}
		y, err := ParseExec(x.String())
		if err != nil || !reflect.DeepEqual(y.Entries(), x.Entries()) {
			t.Errorf("ParseExec(%q) round trip: %v, entries %+v, want %+v", tt.in, err, y.Entries(), x.Entries())
		}
	}
	for _, in := range []string{"{+4060};{40143}", "+4060,40143", "{4060}", ""} {
		c, err := ParseConn(in)
		if err != nil {
			t.Fatal(err)
		}
		d, err := ParseConn(c.String())
		if err != nil || d.Mode() != c.Mode() || !slices.Equal(d.Effective(), c.Effective()) || d.String() != c.String() {
			t.Errorf("ParseConn(%q) round trip via %q: %v %v %v", in, c.String(), err, d.Mode(), d.Effective())
		}
	}
}
