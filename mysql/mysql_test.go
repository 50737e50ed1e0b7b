package mysql

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"

	sr "github.com/sqlretry/sqlretry"
)

// TestClassifyEveryEntry classifies a real *mysql.MySQLError for every row,
// bare, wrapped and joined.
func TestClassifyEveryEntry(t *testing.T) {
	rows := Table()
	if len(rows) < 50 {
		t.Fatalf("table has %d rows, want at least 50", len(rows))
	}
	for _, e := range rows {
		if e.Source == "" || e.Class.Reason == "" || e.Class.Code != e.Code {
			t.Errorf("%s: row has no source or reason, or Class.Code %q", e.Code, e.Class.Code)
		}
		msg := "m"
		if e.Number == 4031 { // the row is MySQL's 4031, told apart by its text
			msg = mysqlIdleTimeout
		}
		myErr := &gomysql.MySQLError{Number: e.Number, SQLState: [5]byte{'H', 'Y', '0', '0', '0'}, Message: msg}
		errs := map[string]error{
			"bare":    myErr,
			"wrapped": fmt.Errorf("exec: %w", myErr),
			"joined":  errors.Join(errors.New("other"), myErr),
		}
		for kind, err := range errs {
			if got := Classify(err); got != e.Class {
				t.Errorf("%s %s: got %+v, want %+v", e.Code, kind, got, e.Class)
			}
		}
	}
}

// The texts of 4031 on MySQL 8.0.24+ and on MariaDB 10.2+.
const (
	mysqlIdleTimeout = "The client was disconnected by the server because of inactivity. See wait_timeout and interactive_timeout for configuring this behavior."
	mariaDBTrigger   = "Referenced trigger 'no_such_trigger' for the given action time and event type does not exist"
)

// Test4031MySQLAndMariaDB: the same number is MySQL's idle disconnect
// (the command never ran: retry) and MariaDB's refused CREATE TRIGGER
// (permanent).
func Test4031MySQLAndMariaDB(t *testing.T) {
	for _, c := range []struct {
		msg       string
		retryable bool
		phase     sr.Phase
	}{
		{mysqlIdleTimeout, true, sr.NotSent},
		{mariaDBTrigger, false, sr.NotApplied},
		{"", false, sr.NotApplied},
	} {
		got := Classify(fmt.Errorf("exec: %w", &gomysql.MySQLError{Number: 4031, SQLState: [5]byte{'H', 'Y', '0', '0', '0'}, Message: c.msg}))
		if got.Retryable != c.retryable || got.Phase != c.phase || got.Code != "4031" {
			t.Errorf("4031 %q: got %+v, want Retryable %v, Phase %v", c.msg, got, c.retryable, c.phase)
		}
	}
}

// Test1047GaleraAndMySQL: Galera's "WSREP has not yet prepared node for
// application use" (a node out of the primary component refused the
// statement: retry) against MySQL's unknown command (permanent); and 1180,
// a COMMIT that failed in Galera's replication, which may have committed.
func Test1047GaleraAndMySQL(t *testing.T) {
	for _, c := range []struct {
		n         uint16
		msg       string
		retryable bool
		phase     sr.Phase
		kind      sr.Kind
	}{
		{1047, "WSREP has not yet prepared node for application use", true, sr.NotApplied, sr.Unavailable},
		{1047, "Unknown command", false, sr.NotApplied, sr.KindUnknown},
		{1180, "Error while appending streaming replication fragment(provider status: Not connected to Primary Component)", true, sr.Unknown, sr.Unavailable},
	} {
		got := Classify(fmt.Errorf("commit: %w", &gomysql.MySQLError{Number: c.n, SQLState: [5]byte{'0', '8', 'S', '0', '1'}, Message: c.msg}))
		if got.Retryable != c.retryable || got.Phase != c.phase || got.Kind != c.kind {
			t.Errorf("%d %q: got %+v, want Retryable %v, Phase %v, Kind %v", c.n, c.msg, got, c.retryable, c.phase, c.kind)
		}
	}
}

func TestClassifyNamedNumbers(t *testing.T) {
	cases := []struct {
		n         uint16
		retryable bool
		phase     sr.Phase
	}{
		{1213, true, sr.NotApplied},
		{1205, true, sr.NotApplied},
		{1040, true, sr.NotSent},
		{1203, true, sr.NotSent},
		{1042, true, sr.NotSent},
		{2006, true, sr.Unknown},
		{2013, true, sr.Unknown},
		{1053, true, sr.Unknown},
		{1927, true, sr.Unknown},
		{1184, true, sr.NotSent},
		{1064, false, sr.NotApplied},
		{1054, false, sr.NotApplied},
		{1146, false, sr.NotApplied},
		{1044, false, sr.NotApplied},
		{1045, false, sr.NotSent},
		{1142, false, sr.NotApplied},
		{1062, false, sr.NotApplied},
		{1451, false, sr.NotApplied},
		{1452, false, sr.NotApplied},
		{1048, false, sr.NotApplied},
		{1406, false, sr.NotApplied},
		{1264, false, sr.NotApplied},
		{3819, false, sr.NotApplied},
		{9999, false, sr.NotApplied}, // unlisted
	}
	for _, c := range cases {
		got := Classify(&gomysql.MySQLError{Number: c.n})
		if got.Retryable != c.retryable || got.Phase != c.phase || got.Code != itoa(c.n) {
			t.Errorf("%d: got {Retryable:%v Phase:%v Code:%q}, want {Retryable:%v Phase:%v Code:%q}",
				c.n, got.Retryable, got.Phase, got.Code, c.retryable, c.phase, itoa(c.n))
		}
	}
	if r := Classify(&gomysql.MySQLError{Number: 1205}).Reason; !strings.Contains(r, "innodb_rollback_on_timeout") || !strings.Contains(r, "survives") {
		t.Errorf("1205 reason %q: want it to say the transaction survives unless innodb_rollback_on_timeout", r)
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
		{"ErrInvalidConn", gomysql.ErrInvalidConn, true, sr.Unknown, "invalid-conn"},
		{"ErrInvalidConn wrapped", fmt.Errorf("commit: %w", gomysql.ErrInvalidConn), true, sr.Unknown, "invalid-conn"},
		{"ErrInvalidConn joined", errors.Join(io.ErrUnexpectedEOF, gomysql.ErrInvalidConn), true, sr.Unknown, "invalid-conn"},
		{"ErrBadConn", driver.ErrBadConn, true, sr.NotSent, "bad-conn"},
		{"ErrMalformPkt", gomysql.ErrMalformPkt, false, sr.Unknown, ""},
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
	var nilErr *gomysql.MySQLError
	errs := []error{
		nil, nilErr, errors.New("foreign"), errors.Join(), errors.Join(nil, errors.New("x")),
		fmt.Errorf("wrap nil: %w", nil), &gomysql.MySQLError{},
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
}

func TestClassifyFallsBackToNeutral(t *testing.T) {
	for _, err := range []error{nil, errors.New("foreign"), io.EOF, context.Canceled} {
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
		{"1213", true, true, "1213"},
		{"01213", true, true, "1213"},
		{"2013", true, true, "2013"},
		{"9999", true, false, "9999"},
		{"65535", true, false, "65535"},
		{"65536", false, false, "65536"},
		{"0", false, false, "0"},
		{"", false, false, ""},
		{"-1", false, false, "-1"},
		{"12x", false, false, "12x"},
		{"HY000", false, false, "HY000"},
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
		if !ok && got.Retryable {
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
		{"transient/1213", Classify, &gomysql.MySQLError{Number: 1213, Message: "Deadlock found"}},
		{"transient/ErrInvalidConn", Classify, gomysql.ErrInvalidConn},
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
