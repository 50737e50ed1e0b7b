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
	"strconv"
	"strings"
	"testing"
	"time"

	msdriver "github.com/microsoft/go-mssqldb"

	sr "github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/internal/tdstest"
	"github.com/sqlretry/sqlretry/mssql"
)

// severity is the class the responder sends a number with: the one SQL
// Server uses where it is well known, else 16. Listed numbers are
// classified by number, so the class must not matter; TestTDSSeverity checks
// the fallback for unlisted ones.
func severity(n int32) uint8 {
	switch n {
	case 1205:
		return 13
	case 4060:
		return 11
	case 18456, 2627, 2601:
		return 14
	case 40613, 40501, 40197:
		return 17
	}
	return 16
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

// raise answers "RAISE <number>" with that server error.
func raise(r tdstest.Request) tdstest.Reply {
	if n, ok := strings.CutPrefix(r.SQL, "RAISE "); ok {
		num, err := strconv.ParseInt(n, 10, 32)
		if err == nil {
			return tdstest.Fail(int32(num), severity(int32(num)), "scripted error "+n)
		}
	}
	return tdstest.Reply{}
}

func TestTDSEveryTableNumberTravels(t *testing.T) {
	table := mssql.Table()
	if len(table) < 100 {
		t.Fatalf("Table: got %d entries, want the whole table", len(table))
	}
	srv := tdstest.Start(t, tdstest.Script{Func: raise})
	db := openTDS(t, srv)
	db.SetMaxOpenConns(1)
	ctx := tdsContext(t)
	for _, e := range table {
		_, err := db.ExecContext(ctx, "RAISE "+strconv.Itoa(int(e.Number)))
		var me msdriver.Error
		if !errors.As(err, &me) || me.Number != e.Number {
			t.Errorf("%d: Exec got %v (%T), want an mssql.Error with that number", e.Number, err, err)
			continue
		}
		if got := mssql.Classify(err); got != e.Class {
			t.Errorf("%d: Classify got %+v, want %+v (%s)", e.Number, got, e.Class, e.Source)
		}
	}
	// One connection served them all: a server error leaves it usable.
	if got := srv.Connections(); got != 1 {
		t.Errorf("connections: got %d, want 1", got)
	}
	if got := srv.Count(tdstest.Statement, "RAISE"); got != len(table) {
		t.Errorf("requests: got %d, want %d", got, len(table))
	}
}

// loginNumbers are the numbers a server sends in answer to a login: the
// table's not-sent entries, and seed 003's built-in connection list.
func loginNumbers(table []mssql.Entry) []mssql.Entry {
	seed003 := map[int32]bool{64: true, 233: true, 4060: true, 4221: true, 10053: true, 10054: true, 10060: true,
		10928: true, 10929: true, 40020: true, 40143: true, 40166: true, 40540: true, 40197: true, 40501: true,
		40613: true, 42108: true, 42109: true, 49918: true, 49919: true, 49920: true}
	var out []mssql.Entry
	for _, e := range table {
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
			{Kind: tdstest.Login, Reply: tdstest.Fail(e.Number, severity(e.Number), "scripted login error")},
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
		{40197, want40197}, // Azure SQL failover, reported at severity 20
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
