package mssql_test

// Every number in the classification table travels the path a real server
// error takes: a TDS ERROR token from internal/tdstest (a protocol-level
// responder, not SQL Server) → the unmodified go-mssqldb driver →
// mssql.Error → Classify. Constructed error values prove the table; these
// tests prove the table is reached.

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	msdriver "github.com/microsoft/go-mssqldb"

	sr "github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/internal/tdstest"
	"github.com/sqlretry/sqlretry/mssql"
)

// catalogueSeverity is the severity SQL Server sends each number with, as
// sys.messages lists it in MicrosoftDocs/sql-docs
// (docs/relational-databases/errors-events/includes/database-engine-events-and-errors-*.md)
// or, for Azure SQL's numbers, in azure-sql/database/troubleshoot-common-errors-issues.md
// (4221, 10928, 10929, 10936, 40197, 40501, 40613, 49918-49920).
var catalogueSeverity = map[int32]uint8{
	102: 15, 106: 16, 121: 15, 130: 16, 137: 15, 156: 15, 201: 16, 203: 16, 206: 16, 207: 16,
	208: 16, 209: 16, 213: 16, 220: 16, 229: 14, 230: 14, 232: 16, 233: 16, 241: 16, 242: 16,
	245: 16, 262: 16, 267: 16, 515: 16, 539: 16, 544: 16, 547: 16, 565: 18, 601: 12, 615: 21,
	617: 20, 669: 22, 921: 14, 926: 14, 927: 14, 952: 16, 982: 14, 988: 14,
	1203: 20, 1204: 19, 1205: 13, 1221: 20, 1222: 16, 1404: 16, 1413: 16, 1421: 16, 1438: 16,
	1532: 20, 1533: 20, 1534: 20, 1535: 20, 1807: 17,
	2601: 14, 2627: 14, 2628: 16, 2812: 16,
	3429: 10, 3635: 16, 3902: 16, 3903: 16, 3935: 16, 3950: 16, 3953: 16, 3957: 16, 3960: 16,
	3966: 17, 3980: 16,
	4060: 11, 4117: 16, 4184: 16, 4221: 16, 4408: 19,
	6292: 16, 7951: 10, 8114: 16, 8115: 16, 8134: 16, 8152: 16, 8628: 17, 8645: 17, 8651: 17,
	9515: 16, 10053: 16, 10054: 16, 10922: 16, 10928: 20, 10929: 20, 10936: 20, 11001: 16,
	14355: 16, 17197: 16, 17889: 16, 18401: 14, 18456: 14, 20041: 16, 21503: 10,
	40197: 17, 40501: 20, 40613: 17, 49918: 16, 49919: 16, 49920: 16,
}

// severity is the class the responder sends e.Number with: its catalogue
// severity; class 20 for a number only SqlClient uses (its network errors
// have class 20: TdsParser.ProcessSNIError); and 16, the class of most
// errors, for the numbers the public catalogue pages do not list (Azure
// SQL's and recent ones, the user range).
func severity(e mssql.Entry) uint8 {
	if s, ok := catalogueSeverity[e.Number]; ok {
		return s
	}
	if e.Network.Code != "" && e.Class == e.Network {
		return 20
	}
	return 16
}

// fail is the responder's reply for number n at class: an error that ends
// the session at class 20 and above, as SQL Server ends it.
func fail(n int32, class uint8, msg string) tdstest.Reply {
	return tdstest.Reply{Error: &tdstest.Error{Number: n, Class: class, State: 1, Message: msg, Fatal: class >= 20}}
}

func openTDS(t *testing.T, srv *tdstest.Server) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlserver", srv.DSN())
	if err != nil {
		t.Fatalf("sql.Open: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func tdsContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// raise answers "RAISE <number> <class>" with that server error.
func raise(r tdstest.Request) tdstest.Reply {
	if rest, ok := strings.CutPrefix(r.SQL, "RAISE "); ok {
		n, c, _ := strings.Cut(rest, " ")
		num, err1 := strconv.ParseInt(n, 10, 32)
		class, err2 := strconv.ParseUint(c, 10, 8)
		if err1 == nil && err2 == nil {
			return fail(int32(num), uint8(class), "scripted error "+n)
		}
	}
	return tdstest.Reply{}
}

// TestTDSEveryTableNumberTravels sends every number of the table at the
// severity SQL Server sends it with, through go-mssqldb, and checks the
// table's verdict is what Classify gives. A number that is both a server
// message and one of SqlClient's network numbers is sent at class 20 too,
// where the network verdict applies.
func TestTDSEveryTableNumberTravels(t *testing.T) {
	table := mssql.Table()
	if len(table) < 100 {
		t.Fatalf("Table: got %d entries, want the whole table", len(table))
	}
	srv := tdstest.Start(t, tdstest.Script{Func: raise})
	db := openTDS(t, srv)
	db.SetMaxOpenConns(1)
	ctx := tdsContext(t)
	send := func(e mssql.Entry, class uint8, want sr.Class) {
		t.Helper()
		_, err := db.ExecContext(ctx, "RAISE "+strconv.Itoa(int(e.Number))+" "+strconv.Itoa(int(class)))
		var me msdriver.Error
		if !errors.As(err, &me) || me.Number != e.Number || me.Class != class {
			t.Errorf("%d at class %d: Exec got %v (%T), want an mssql.Error with that number and class", e.Number, class, err, err)
			return
		}
		if class >= 20 {
			var se msdriver.ServerError
			if !errors.As(err, &se) {
				t.Errorf("%d at class %d: got %T, want the mssql.ServerError of an error that ends the session", e.Number, class, err)
			}
		}
		if got := mssql.Classify(err); got != want {
			t.Errorf("%d at class %d: Classify got %+v, want %+v (%s)", e.Number, class, got, want, e.Source)
		}
	}
	sent, fatal := 0, 0
	for _, e := range table {
		class := severity(e)
		if class <= 10 {
			continue // informational: sent as INFO, never an error (TestTDSInformationalNumbers)
		}
		send(e, class, e.Class)
		sent++
		if class >= 20 {
			fatal++
		}
		if e.Network.Code != "" && e.Class != e.Network {
			send(e, 20, e.Network)
			sent++
			fatal++
		}
	}
	// An error below class 20 leaves the connection usable; one at 20 and
	// above ends it, and the next request opens another.
	if got := srv.Connections(); got != 1+fatal {
		t.Errorf("connections: got %d, want %d (1 + one per session-ending error)", got, 1+fatal)
	}
	if got := srv.Count(tdstest.Statement, "RAISE"); got != sent {
		t.Errorf("requests: got %d, want %d", got, sent)
	}
}

// TestTDSInformationalNumbers: three numbers of the table have severity 10
// in sys.messages. SQL Server sends such a message as an INFO token, which
// fails nothing; they are kept for EF Core's list, but never reach a client
// as an error.
func TestTDSInformationalNumbers(t *testing.T) {
	var got []int32
	for _, e := range mssql.Table() {
		if severity(e) <= 10 {
			got = append(got, e.Number)
		}
	}
	if want := []int32{3429, 7951, 21503}; !slices.Equal(got, want) {
		t.Errorf("severity-10 numbers: got %v, want %v", got, want)
	}
}

// TestTDSNetworkNumbersAtServerSeverity: the server's own messages with the
// numbers SqlClient stamps on its network errors, at their real severity,
// through go-mssqldb: permanent, not applied. (121: INSERT ... SELECT with
// more columns than the insert list; 203: EXEC @sql without parentheses;
// 233: a column that cannot be null.)
func TestTDSNetworkNumbersAtServerSeverity(t *testing.T) {
	for _, tc := range []struct {
		number int32
		class  uint8
		msg    string
	}{
		{121, 15, "The select list for the INSERT statement contains more items than the insert list. The number of SELECT values must match the number of INSERT columns."},
		{203, 16, "The name 'SELECT 1' is not a valid identifier."},
		{233, 16, "The column 'c' in table 't' cannot be null."},
		{10053, 16, "Could not convert the data value due to reasons other than sign mismatch or overflow."},
		{10054, 16, "The data value for one or more columns overflowed the type used by the provider."},
		{11001, 16, "Non-NULL value successfully returned."},
	} {
		srv := tdstest.Start(t, tdstest.Script{Rules: []tdstest.Rule{{Match: "INSERT", Reply: tdstest.Fail(tc.number, tc.class, tc.msg)}}})
		_, err := openTDS(t, srv).ExecContext(tdsContext(t), "INSERT INTO t SELECT a, b FROM s")
		c := mssql.Classify(err)
		if c.Retryable || c.Phase != sr.NotApplied || c.Code != strconv.Itoa(int(tc.number)) {
			t.Errorf("server error %d at severity %d: Classify got %+v, want not retryable, not applied", tc.number, tc.class, c)
		}
	}
}

// loginNumbers are the numbers a server sends in answer to a login: the
// table's not-sent server numbers, and seed 003's built-in connection
// list without SqlClient's client-side network numbers (64, 233, 10053,
// 10054, 10060), which no server sends.
func loginNumbers(table []mssql.Entry) []mssql.Entry {
	seed003 := map[int32]bool{4060: true, 4221: true, 10928: true, 10929: true, 40020: true, 40143: true, 40166: true,
		40540: true, 40197: true, 40501: true, 40613: true, 42108: true, 42109: true, 49918: true, 49919: true, 49920: true}
	var out []mssql.Entry
	for _, e := range table {
		if e.Network.Code != "" {
			continue
		}
		if e.Class.Phase == sr.NotSent || seed003[e.Number] {
			out = append(out, e)
		}
	}
	return out
}

func TestTDSLoginErrorsTravel(t *testing.T) {
	table := loginNumbers(mssql.Table())
	if len(table) < 20 {
		t.Fatalf("login numbers: got %d, want the not-sent entries and seed 003's list", len(table))
	}
	for _, e := range table {
		srv := tdstest.Start(t, tdstest.Script{Rules: []tdstest.Rule{
			{Kind: tdstest.Login, Reply: tdstest.Fail(e.Number, severity(e), "scripted login error")},
		}})
		err := openTDS(t, srv).PingContext(tdsContext(t))
		var me msdriver.Error
		if !errors.As(err, &me) || me.Number != e.Number {
			t.Errorf("login %d: Ping got %v (%T), want an mssql.Error with that number", e.Number, err, err)
			continue
		}
		if got := mssql.Classify(err); got != e.Class {
			t.Errorf("login %d: Classify got %+v, want %+v", e.Number, got, e.Class)
		}
		if got := srv.Count(tdstest.Statement, ""); got != 0 {
			t.Errorf("login %d: %d statements reached the server, want 0", e.Number, got)
		}
		srv.Close()
	}
}

func TestTDSLoginAuthFailureIsPermanentAndNotSent(t *testing.T) {
	srv := tdstest.Start(t, tdstest.Script{Func: func(r tdstest.Request) tdstest.Reply {
		if r.Kind == tdstest.Login && r.Password != "right" {
			return tdstest.Fail(18456, 14, "Login failed for user '"+r.User+"'.")
		}
		return tdstest.Reply{}
	}})
	err := openTDS(t, srv).PingContext(tdsContext(t))
	c := mssql.Classify(err)
	if c.Retryable || c.Phase != sr.NotSent || c.Code != "18456" {
		t.Errorf("Classify(%v): got %+v, want not retryable, not-sent, code 18456", err, c)
	}
}

func TestTDSSeverityFallback(t *testing.T) {
	// Numbers the table does not list are judged by the class they came with.
	for _, tc := range []struct {
		number    int32
		class     uint8
		retryable bool
		phase     sr.Phase
	}{
		{31313, 13, true, sr.NotApplied}, // deadlock severity
		{31314, 16, false, sr.NotApplied},
		{31315, 20, false, sr.Unknown}, // fatal: the connection is severed
	} {
		if _, listed := mssql.Lookup(strconv.Itoa(int(tc.number))); listed {
			t.Fatalf("%d is listed; pick an unlisted number", tc.number)
		}
		srv := tdstest.Start(t, tdstest.Script{Rules: []tdstest.Rule{
			{Reply: tdstest.Fail(tc.number, tc.class, "unlisted")},
		}})
		_, err := openTDS(t, srv).ExecContext(tdsContext(t), "UPDATE t SET x = 1")
		if c := mssql.Classify(err); c.Retryable != tc.retryable || c.Phase != tc.phase {
			t.Errorf("%d class %d: Classify got %+v, want retryable %v phase %v", tc.number, tc.class, c, tc.retryable, tc.phase)
		}
	}
}

func TestTDSTransportFailures(t *testing.T) {
	// What go-mssqldb returns for a lost connection, as Classify reads it.
	t.Run("lost after send", func(t *testing.T) {
		srv := tdstest.Start(t, tdstest.Script{Rules: []tdstest.Rule{{Reply: tdstest.Faulty(tdstest.Drop)}}})
		_, err := openTDS(t, srv).ExecContext(tdsContext(t), "UPDATE t SET x = 1")
		if c := mssql.Classify(err); !c.Retryable || c.Phase != sr.Unknown {
			t.Errorf("Classify(%v): got %+v, want retryable, unknown", err, c)
		}
	})
	t.Run("not sent", func(t *testing.T) {
		srv := tdstest.Start(t, tdstest.Script{})
		db := openTDS(t, srv)
		ctx := tdsContext(t)
		conn, err := db.Conn(ctx)
		if err != nil {
			t.Fatalf("Conn: %v", err)
		}
		defer conn.Close()
		if err := conn.PingContext(ctx); err != nil {
			t.Fatalf("Ping: %v", err)
		}
		srv.DropIdle()
		_, err = conn.ExecContext(ctx, "UPDATE t SET x = 1")
		var re msdriver.RetryableError
		if !errors.As(err, &re) {
			t.Fatalf("Exec: got %v (%T), want an mssql.RetryableError", err, err)
		}
		if c := mssql.Classify(err); !c.Retryable || c.Phase != sr.NotSent {
			t.Errorf("Classify(%v): got %+v, want retryable, not-sent", err, c)
		}
	})
}

func TestTDSFatalErrors(t *testing.T) {
	// Severity 20 and above ends the session: go-mssqldb returns an
	// mssql.ServerError wrapping the mssql.Error. Classify reads through it.
	want40197, _ := mssql.Lookup("40197")
	for _, tc := range []struct {
		number int32
		want   sr.Class
	}{
		{40197, want40197}, // Azure SQL failover (listed at severity 17): the class does not change its verdict
		{31315, sr.Class{Phase: sr.Unknown}},
	} {
		srv := tdstest.Start(t, tdstest.Script{Rules: []tdstest.Rule{
			{Reply: tdstest.Reply{Error: &tdstest.Error{Number: tc.number, Class: 20, Message: "fatal", Fatal: true}}},
		}})
		_, err := openTDS(t, srv).ExecContext(tdsContext(t), "UPDATE t SET x = 1")
		var se msdriver.ServerError
		if !errors.As(err, &se) {
			t.Fatalf("%d: Exec got %v (%T), want an mssql.ServerError", tc.number, err, err)
		}
		c := mssql.Classify(err)
		if c.Retryable != tc.want.Retryable || c.Phase != tc.want.Phase || c.Code != strconv.Itoa(int(tc.number)) {
			t.Errorf("%d: Classify got %+v, want retryable %v phase %v", tc.number, c, tc.want.Retryable, tc.want.Phase)
		}
	}
}
