package engine

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/sqlretry/sqlretry"

	"github.com/sqlretry/sqlretry/crl"
)

func TestParse(t *testing.T) {
	cases := map[string]Engine{
		"sqlserver": SQLServer, "mssql": SQLServer, "MSSQL": SQLServer, "azuresql": SQLServer,
		"postgres": Postgres, "postgresql": Postgres, "pg": Postgres, " Postgres ": Postgres,
		"cockroach": Cockroach, "cockroachdb": Cockroach, "crdb": Cockroach,
		"mysql": MySQL, "mariadb": MySQL, "MariaDB": MySQL,
		"sqlite": SQLite, "sqlite3": SQLite,
	}
	for in, want := range cases {
		if got, err := Parse(in); err != nil || got != want {
			t.Errorf("Parse(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "oracle", "sql server", "postgres9"} {
		if _, err := Parse(in); err == nil || !strings.Contains(err.Error(), "sqlserver, postgres, cockroach, mysql or sqlite") {
			t.Errorf("Parse(%q): got %v, want an error listing every engine", in, err)
		}
	}
	if _, err := Parse("mssql", SQLite, Postgres, MySQL); err == nil || !strings.Contains(err.Error(), "sqlserver is not supported here (want sqlite, postgres or mysql)") {
		t.Errorf("Parse(mssql, SQLite, Postgres, MySQL): got %v, want it refused by its canonical name", err)
	}
	if got, err := Parse("mariadb", SQLite, Postgres, MySQL); err != nil || got != MySQL {
		t.Errorf("Parse(mariadb, …MySQL) = %v, %v", got, err)
	}
}

// Every engine has a canonical name that parses back, a classifier, a
// table whose codes its own lookup finds, and the code syntax crl needs.
func TestEveryEngine(t *testing.T) {
	for _, e := range All {
		if got, err := Parse(e.String()); err != nil || got != e {
			t.Errorf("%v: Parse(String()) = %v, %v", e, got, err)
		}
		if e.Classifier() == nil {
			t.Errorf("%v: no classifier", e)
		}
		rows := e.Table()
		if len(rows) < 5 {
			t.Errorf("%v: table has %d rows", e, len(rows))
		}
		for _, r := range rows {
			if r.Source == "" {
				t.Errorf("%v: row %s has no source", e, r.Code)
			}
		}
		want := crl.Numbers
		if e == Postgres || e == Cockroach {
			want = crl.SQLState
		}
		if e.Syntax() != want {
			t.Errorf("%v: syntax %v, want %v", e, e.Syntax(), want)
		}
		if !strings.Contains(Help(), e.String()) {
			t.Errorf("Help() = %q lacks %v", Help(), e)
		}
	}
	if got := Engine(0).String(); got != "Engine(0)" {
		t.Errorf("Engine(0).String() = %q", got)
	}
}

// TestNeutralCodes checks NeutralCodes against the library: one error of
// each kind ClassifyNeutral knows, in its order of precedence.
func TestNeutralCodes(t *testing.T) {
	errs := []error{
		sql.ErrConnDone,
		driver.ErrSkip,
		context.Canceled,
		driver.ErrBadConn,
		&net.DNSError{Err: "no such host", Name: "db.invalid"},
		&net.OpError{Op: "dial", Net: "tcp", Err: errors.New("no route to host")},
		os.NewSyscallError("connect", syscall.ECONNREFUSED),
		&net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded},
		io.ErrUnexpectedEOF,
		&net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)},
	}
	if len(errs) != len(NeutralCodes) {
		t.Fatalf("%d errors for %d codes", len(errs), len(NeutralCodes))
	}
	for i, err := range errs {
		if got := sqlretry.ClassifyNeutral(err).Code; got != NeutralCodes[i] {
			t.Errorf("ClassifyNeutral(%v).Code = %q, want %q", err, got, NeutralCodes[i])
		}
	}
}

func TestRuleError(t *testing.T) {
	_, err := crl.ParseExec("{1205:3;+4060,4070:1,5}")
	got := RuleError(err)
	const want = `rule 2, token "+4060" at offset 8: `
	if got == nil || !strings.HasPrefix(got.Error(), want) || strings.Contains(got.Error(), "R_") {
		t.Errorf("RuleError(%v) = %v, want it to start %q and name no resource key", err, got, want)
	}
	var ce *crl.Error
	if !errors.As(got, &ce) || ce.Key != crl.KeyInvalidParameterNumber {
		t.Errorf("errors.As(%v, *crl.Error): got %v, want the crl error", got, ce)
	}
	other := errors.New("not a rule")
	if RuleError(other) != other || RuleError(nil) != nil {
		t.Error("RuleError changed an error that is not crl's")
	}
}
