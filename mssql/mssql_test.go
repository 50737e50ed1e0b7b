package mssql

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"strconv"
	"testing"
	"time"

	gomssql "github.com/microsoft/go-mssqldb"

	sr "github.com/sqlretry/sqlretry"
)

// efCore is EF Core's list as extracted in sql-errors.md §2.1 (203 included,
// -2 not: it is commented out there).
var efCore = []int32{49983, 49977, 49920, 49919, 49918, 49802, 49510, 47139, 47137, 47132, 45547, 45319, 45182, 45179, 45161, 45157, 45156, 45153, 42109, 42108, 42029, 41840, 41839, 41823, 41701, 41700, 41640, 41619, 41614, 41383, 41339, 41325, 41305, 41302, 41301, 40938, 40918, 40903, 40890, 40675, 40671, 40648, 40642, 40623, 40613, 40540, 40501, 40197, 40189, 40143, 40106, 39152, 39151, 39110, 39108, 39025, 37327, 37202, 35293, 35256, 35218, 35216, 33123, 30085, 30080, 25740, 25738, 25003, 22984, 22760, 22759, 22758, 22754, 22498, 22493, 22491, 22430, 22427, 22358, 22355, 22353, 22335, 22226, 22225, 21503, 20041, 19494, 19416, 19413, 18858, 18401, 17889, 17197, 17067, 17066, 17065, 16555, 16554, 16528, 14906, 14868, 14817, 14355, 11539, 11001, 10936, 10930, 10929, 10928, 10922, 10060, 10054, 10053, 9985, 9515, 9020, 8651, 8645, 8628, 7951, 6292, 5529, 5280, 4221, 3980, 4184, 4117, 4060, 3966, 3960, 3957, 3953, 3950, 3948, 3947, 3941, 3935, 3635, 3429, 2816, 2021, 1807, 1535, 1534, 1533, 1532, 1438, 1421, 1413, 1404, 1232, 1222, 1221, 1216, 1215, 1205, 1204, 1203, 997, 988, 982, 952, 941, 927, 926, 921, 669, 617, 615, 601, 539, 233, 203, 121, 64, 20}

// The other lists the issue names (sql-errors.md §2.2, §2.4; seeds 000, 003).
var (
	sqlClient = []int32{233, 997, 1204, 1205, 1222, 4060, 4221, 10060, 10928, 10929, 40143, 40197, 40501, 40540, 40613, 42108, 42109, 49918, 49919, 49920}
	jdbc      = []int32{64, 233, 4060, 4221, 10053, 10054, 10928, 10929, 40020, 40143, 40166, 40540, 40197, 40501, 40613, 42108, 42109, 49918, 49919, 49920}
	seed000   = []int32{1205, -2, 4060, 40197, 40501, 40613}
	permanent = []int32{102, 156, 207, 208, 229, 230, 515, 547, 2601, 2627, 8152, 18456, 137, 201, 206, 209, 213, 2812, 262, 544, 2628, 8114, 8115, 220, 232, 241, 242, 245, 8134, 3902, 3903}
)

func TestTableHoldsTheUnion(t *testing.T) {
	if len(efCore) != 176 {
		t.Fatalf("test data: EF Core list has %d numbers, want 176", len(efCore))
	}
	entries := map[int32]Entry{}
	for _, e := range Table() {
		entries[e.Number] = e
	}
	// Every number of every list is retryable as the list means it: a
	// server error, or SqlClient's client-side network error (at class 20).
	for name, list := range map[string][]int32{"EF Core": efCore, "SqlClient": sqlClient, "JDBC": jdbc, "seed 000": seed000} {
		for _, n := range list {
			e, ok := entries[n]
			if !ok || !(e.Class.Retryable || e.Network.Retryable) {
				t.Errorf("%s number %d: got (%+v, listed:%v), want retryable and listed", name, n, e, ok)
			}
		}
	}
	for _, n := range permanent {
		c, ok := Lookup(strconv.Itoa(int(n)))
		if !ok || c.Retryable {
			t.Errorf("permanent number %d: got (Retryable:%v, listed:%v), want not retryable and listed", n, c.Retryable, ok)
		}
	}
	retryable, network := 0, 0
	for _, e := range Table() {
		if e.Class.Retryable || e.Network.Retryable {
			retryable++
		}
		if e.Network.Code != "" {
			network++
		}
	}
	if retryable != 179 {
		t.Errorf("got %d retryable numbers, want 179 (EF Core 176 + 40020, 40166 + -2)", retryable)
	}
	if network != 10 {
		t.Errorf("got %d SqlClient network numbers, want 10 (20, 64, 121, 203, 233, 997, 10053, 10054, 10060, 11001)", network)
	}
}

// serverClass is the class (severity) a test sends e.Number with so that
// e.Class applies: 16 for a server message, 20 for a number only SqlClient
// uses (its network errors have class 20).
func serverClass(e Entry) uint8 {
	if e.Network.Code != "" && e.Class == e.Network {
		return fatalClass
	}
	return 16
}

// TestNetworkNumbersDependOnClass: the numbers SqlClient stamps on its own
// network errors are, when the server sends them, permanent catalogue
// errors. Only at class 20 and above are they network errors.
func TestNetworkNumbersDependOnClass(t *testing.T) {
	for _, c := range []struct {
		n         int32
		class     uint8
		retryable bool
		phase     sr.Phase
	}{
		// The server's messages, at their severities (sys.messages).
		{121, 15, false, sr.NotApplied},   // select list of INSERT ... SELECT has more items than the insert list
		{203, 16, false, sr.NotApplied},   // not a valid identifier (EXEC @sql)
		{233, 16, false, sr.NotApplied},   // the column cannot be null
		{10053, 16, false, sr.NotApplied}, // OLE DB provider: could not convert the data value
		{10054, 16, false, sr.NotApplied}, // OLE DB provider: the data value overflowed
		{11001, 16, false, sr.NotApplied}, // OLE DB status: non-NULL value successfully returned
		// No server message has these: an unlisted number below class 20.
		{20, 16, false, sr.NotApplied},
		{64, 16, false, sr.NotApplied},
		{997, 16, false, sr.NotApplied},
		{10060, 16, false, sr.NotApplied},
		// SqlClient's network errors, class 20. Only a failure that can
		// only come before a connection exists is not sent.
		{20, 20, true, sr.NotSent},
		{11001, 20, true, sr.NotSent},
		{64, 20, true, sr.Unknown},
		{121, 20, true, sr.Unknown},
		{203, 20, true, sr.Unknown},
		{233, 20, true, sr.Unknown},
		{997, 20, true, sr.Unknown},
		{10053, 20, true, sr.Unknown},
		{10054, 20, true, sr.Unknown},
		{10060, 20, true, sr.Unknown},
		{10060, 24, true, sr.Unknown},
	} {
		for kind, err := range map[string]error{
			"bare": gomssql.Error{Number: c.n, Class: c.class},
			"all":  gomssql.Error{Number: 266, Class: 16, All: []gomssql.Error{{Number: c.n, Class: c.class}, {Number: 266, Class: 16}}},
		} {
			got := Classify(err)
			if got.Retryable != c.retryable || got.Phase != c.phase {
				t.Errorf("%d at class %d (%s): got %+v, want Retryable %v, Phase %v", c.n, c.class, kind, got, c.retryable, c.phase)
			}
			if kind == "bare" && got.Code != strconv.Itoa(int(c.n)) {
				t.Errorf("%d at class %d: got Code %q", c.n, c.class, got.Code)
			}
		}
	}
}

// TestClassifyEveryEntry classifies a real mssql.Error for every row, bare,
// wrapped, joined and as the driver's ServerError would carry it.
func TestClassifyEveryEntry(t *testing.T) {
	for _, e := range Table() {
		if e.Source == "" || e.Class.Reason == "" || e.Class.Code != e.Code {
			t.Errorf("%s: row has no source or reason, or a Class.Code %q", e.Code, e.Class.Code)
		}
		class := serverClass(e)
		msErr := gomssql.Error{Number: e.Number, Class: class, Message: "m"}
		errs := map[string]error{
			"bare":    msErr,
			"wrapped": fmt.Errorf("exec: %w", msErr),
			"joined":  errors.Join(errors.New("other"), msErr),
			"all":     gomssql.Error{Number: e.Number, Class: class, All: []gomssql.Error{msErr}},
		}
		for kind, err := range errs {
			if got := Classify(err); got != e.Class {
				t.Errorf("%s %s: got %+v, want %+v", e.Code, kind, got, e.Class)
			}
		}
		if e.Network.Code != "" {
			if got := Classify(fmt.Errorf("exec: %w", gomssql.Error{Number: e.Number, Class: 20})); got != e.Network {
				t.Errorf("%s at class 20: got %+v, want the network verdict %+v", e.Code, got, e.Network)
			}
		}
	}
}

func TestClassifyNamedNumbers(t *testing.T) {
	cases := []struct {
		n         int32
		retryable bool
		phase     sr.Phase
		minDelay  time.Duration
	}{
		{1205, true, sr.NotApplied, 0},
		{1222, true, sr.NotApplied, 0},
		{-2, true, sr.Unknown, 0},
		{40501, true, sr.NotApplied, 10 * time.Second},
		{4060, true, sr.NotSent, 0},
		{40613, true, sr.NotSent, 0},
		{4221, true, sr.NotSent, 0},
		{42108, true, sr.NotSent, 0},
		{42109, true, sr.NotSent, 0},
		{233, false, sr.NotApplied, 0}, // the server's 233; SqlClient's is class 20 (TestNetworkNumbersDependOnClass)
		{121, false, sr.NotApplied, 0},
		{40197, true, sr.Unknown, 0},
		{40020, true, sr.Unknown, 0},
		{40166, true, sr.Unknown, 0},
		{10928, true, sr.NotApplied, 0},
		{10929, true, sr.NotApplied, 0},
		{49918, true, sr.NotApplied, 0},
		{3960, true, sr.NotApplied, 0},
		{41302, true, sr.NotApplied, 0},
		{102, false, sr.NotApplied, 0},
		{2627, false, sr.NotApplied, 0},
		{18456, false, sr.NotSent, 0},
		{0, false, sr.NotApplied, 0},
		{50000, false, sr.NotApplied, 0},
		{51234, false, sr.NotApplied, 0},
	}
	for _, c := range cases {
		got := Classify(gomssql.Error{Number: c.n, Class: 16})
		if got.Retryable != c.retryable || got.Phase != c.phase || got.MinDelay != c.minDelay || got.Code != strconv.Itoa(int(c.n)) {
			t.Errorf("%d: got {Retryable:%v Phase:%v MinDelay:%v Code:%q}, want {Retryable:%v Phase:%v MinDelay:%v Code:%q}",
				c.n, got.Retryable, got.Phase, got.MinDelay, got.Code, c.retryable, c.phase, c.minDelay, strconv.Itoa(int(c.n)))
		}
	}
}

func TestClassifyBySeverity(t *testing.T) {
	cases := []struct {
		sev       uint8
		retryable bool
		phase     sr.Phase
	}{
		{0, false, sr.NotApplied},
		{11, false, sr.NotApplied},
		{13, true, sr.NotApplied},
		{16, false, sr.NotApplied},
		{17, false, sr.NotApplied},
		{20, false, sr.Unknown},
		{24, false, sr.Unknown},
	}
	for _, c := range cases {
		got := Classify(gomssql.Error{Number: 30999, Class: c.sev})
		if got.Retryable != c.retryable || got.Phase != c.phase || got.Code != "30999" {
			t.Errorf("unlisted number, severity %d: got {Retryable:%v Phase:%v Code:%q}, want {Retryable:%v Phase:%v Code:\"30999\"}",
				c.sev, got.Retryable, got.Phase, got.Code, c.retryable, c.phase)
		}
	}
	// A listed number wins over its severity.
	if got := Classify(gomssql.Error{Number: 2627, Class: 13}); got.Retryable {
		t.Errorf("2627 at severity 13: got retryable, want the table's permanent verdict")
	}
}

// TestClassifyAll: the last error decides unless it is not retryable and an
// earlier one is (a deadlock inside a procedure ends with 266).
func TestClassifyAll(t *testing.T) {
	deadlock := gomssql.Error{Number: 1205, Class: 13, Message: "deadlock victim"}
	mismatch := gomssql.Error{Number: 266, Class: 16, Message: "Transaction count after EXECUTE ..."}
	err := mismatch
	err.All = []gomssql.Error{deadlock, mismatch}
	if got := Classify(fmt.Errorf("exec proc: %w", err)); !got.Retryable || got.Code != "1205" || got.Phase != sr.NotApplied {
		t.Errorf("1205 then 266: got {Retryable:%v Phase:%v Code:%q}, want the 1205 verdict", got.Retryable, got.Phase, got.Code)
	}
	pk := gomssql.Error{Number: 2627, Class: 14}
	err = pk
	err.All = []gomssql.Error{{Number: 3621, Class: 0}, pk}
	if got := Classify(err); got.Retryable || got.Code != "2627" {
		t.Errorf("2627 with no retryable earlier error: got {Retryable:%v Code:%q}, want not retryable 2627", got.Retryable, got.Code)
	}
}

func TestClassifyDriverErrors(t *testing.T) {
	cases := []struct {
		name      string
		err       error
		retryable bool
		phase     sr.Phase
		code      string
	}{
		// RetryableError's field is unexported: the zero value is what the
		// driver lets a test build; it matches driver.ErrBadConn like any.
		{"RetryableError", gomssql.RetryableError{}, true, sr.NotSent, "bad-conn"},
		{"RetryableError wrapped", fmt.Errorf("commit: %w", gomssql.RetryableError{}), true, sr.NotSent, "bad-conn"},
		{"ErrBadConn", driver.ErrBadConn, true, sr.NotSent, "bad-conn"},
		{"StreamError", gomssql.StreamError{InnerError: io.ErrUnexpectedEOF}, false, sr.Unknown, ""},
		{"io.EOF", fmt.Errorf("read: %w", io.EOF), true, sr.Unknown, "eof"},
		{"ServerError", gomssql.ServerError{}, false, sr.NotApplied, "0"},
	}
	for _, c := range cases {
		got := Classify(c.err)
		if got.Retryable != c.retryable || got.Phase != c.phase || got.Code != c.code {
			t.Errorf("%s: got {Retryable:%v Phase:%v Code:%q}, want {Retryable:%v Phase:%v Code:%q}",
				c.name, got.Retryable, got.Phase, got.Code, c.retryable, c.phase, c.code)
		}
	}
}

func TestClassifyNeverPanics(t *testing.T) {
	var nilErr *gomssql.Error
	errs := []error{
		nil,
		errors.New("foreign"),
		errors.Join(),
		errors.Join(nil, errors.New("x")),
		fmt.Errorf("wrap nil: %w", nil),
		gomssql.Error{},
		gomssql.RetryableError{},
		gomssql.ServerError{},
		nilErr, // *Error has the value methods too: calling them on nil panics
		gomssql.Error{Number: 266, All: []gomssql.Error{{}, {}}},
	}
	for i, err := range errs {
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("case %d (%T): panicked: %v", i, err, r)
				}
			}()
			Classify(err)
		}()
	}
	if got := Classify(nilErr); got.Code != "panic" || got.Retryable {
		t.Errorf("typed nil *mssql.Error: got %+v, want the not-retryable panic verdict", got)
	}
}

func TestClassifyFallsBackToNeutral(t *testing.T) {
	errs := []error{nil, errors.New("foreign"), io.EOF, context.DeadlineExceeded}
	for _, err := range errs {
		if got, want := Classify(err), sr.ClassifyNeutral(err); got != want {
			t.Errorf("Classify(%v): got %+v, want the neutral %+v", err, got, want)
		}
	}
}

func TestLookupAndValidCode(t *testing.T) {
	cases := []struct {
		code     string
		valid    bool
		ok       bool
		wantCode string
	}{
		{"1205", true, true, "1205"},
		{"-2", true, true, "-2"},
		{"01205", true, true, "1205"},
		{"0", true, true, "0"},
		{"60000", true, true, "60000"},
		{"266", true, false, "266"},
		{"-1", true, false, "-1"},
		{"", false, false, ""},
		{"-", false, false, "-"},
		{"12a", false, false, "12a"},
		{"+5", false, false, "+5"},
		{" 5", false, false, " 5"},
		{"1.5", false, false, "1.5"},
		{"99999999999", false, false, "99999999999"},
	}
	for _, c := range cases {
		err := ValidCode(c.code)
		if (err == nil) != c.valid {
			t.Errorf("ValidCode(%q): got %v, want valid=%v", c.code, err, c.valid)
		}
		got, ok := Lookup(c.code)
		if ok != c.ok || got.Code != c.wantCode {
			t.Errorf("Lookup(%q): got (Code:%q, %v), want (Code:%q, %v)", c.code, got.Code, ok, c.wantCode, c.ok)
		}
		if !c.ok && got.Retryable {
			t.Errorf("Lookup(%q): unlisted or malformed code is retryable", c.code)
		}
	}
}

func TestTableSortedAndFresh(t *testing.T) {
	rows := Table()
	for i := 1; i < len(rows); i++ {
		if rows[i-1].Number >= rows[i].Number {
			t.Errorf("rows %d and %d out of order or duplicated", rows[i-1].Number, rows[i].Number)
		}
	}
	rows[0].Code = "mutated"
	if Table()[0].Code == "mutated" {
		t.Error("Table returned the package's own slice; want a fresh copy")
	}
}

var sink sr.Class

func BenchmarkClassify(b *testing.B) {
	cases := []struct {
		name     string
		classify func(error) sr.Class
		err      error
	}{
		{"transient/1205", Classify, gomssql.Error{Number: 1205, Class: 13, Message: "deadlock victim"}},
		{"transient/40501-wrapped", Classify, fmt.Errorf("exec: %w", gomssql.Error{Number: 40501, Class: 20})},
		{"permanent/2627", Classify, gomssql.Error{Number: 2627, Class: 14}},
		{"foreign", Classify, errors.New("boom")},
		{"neutral-baseline/foreign", sr.ClassifyNeutral, errors.New("boom")},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				sink = c.classify(c.err)
			}
		})
	}
}
