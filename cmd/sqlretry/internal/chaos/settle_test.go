package chaos

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/sqlretry/sqlretry/cmd/sqlretry/internal/engine"
	"github.com/sqlretry/sqlretry/faults/proxy"
)

func TestDSNEngine(t *testing.T) {
	cases := []struct {
		dsn  string
		want engine.Engine // 0: cannot tell
	}{
		{"postgres://app@db:5432/x", engine.Postgres},
		{"PostgreSQL://app@db/x", engine.Postgres},
		{"host=db user=app dbname=x", engine.Postgres},
		{"sqlserver://sa@db?database=x", engine.SQLServer},
		{"server=db;user id=sa;database=x", engine.SQLServer},
		{"app:pw@tcp(127.0.0.1:3306)/x", engine.MySQL},
		{"root@tcp(db)/x?tls=false", engine.MySQL},
		{"app@unix(/run/mysqld.sock)/x", engine.MySQL},
		{"mysql://app@db/x", engine.MySQL},
		{"file:/tmp/x.db?_pragma=busy_timeout(500)", engine.SQLite},
		{"/tmp/run.db", engine.SQLite},
		{"./run.sqlite", engine.SQLite},
		{"run.db", engine.SQLite},
		{"", 0},
		{"something", 0},
	}
	for _, c := range cases {
		got, form, ok := DSNEngine(c.dsn)
		if got != c.want || ok != (c.want != 0) || (ok && form == "") {
			t.Errorf("DSNEngine(%q): got %v, %q, %t; want %v", c.dsn, got, form, ok, c.want)
		}
	}
}

// TestDSNOfAnotherEngine: --engine and a DSN that looks like another
// engine's are refused, saying which the DSN looks like and what --engine
// says (issue 18, finding 11).
func TestDSNOfAnotherEngine(t *testing.T) {
	cases := []struct {
		eng  engine.Engine
		dsn  string
		want string
	}{
		{engine.MySQL, "postgres://app@127.0.0.1:5432/x", "the DSN looks like PostgreSQL's (a postgres:// URL) and --engine says mysql"},
		{engine.Postgres, "root@tcp(127.0.0.1:3306)/x", "the DSN looks like MySQL/MariaDB's"},
		{engine.Postgres, "sqlserver://sa@db", "looks like SQL Server's"},
		{engine.MySQL, "/tmp/x.db", "looks like SQLite's (a file path) and --engine says mysql"},
		{engine.SQLite, "host=db dbname=x", "looks like PostgreSQL's"},
	}
	for _, c := range cases {
		err := Config{Engine: c.eng, DSN: c.dsn}.Validate()
		var ie *InputError
		if !errors.As(err, &ie) || ie.What != "--dsn" || !strings.Contains(err.Error(), c.want) {
			t.Errorf("--engine %s --dsn %s: got %v, want an --dsn error saying %q", c.eng, c.dsn, err, c.want)
		}
	}
	for _, ok := range []Config{{Engine: engine.Postgres, DSN: "postgres://x@db/y"}, {Engine: engine.MySQL, DSN: "x@tcp(db)/y"}, {DSN: "/tmp/new.db"}} {
		if err := ok.Validate(); err != nil {
			t.Errorf("%+v: got %v, want no error", ok, err)
		}
	}
}

// TestTLSRefusal: a run whose proxied connections are encrypted is bad
// input naming the DSN setting that turns TLS off; none encrypted, no
// error.
func TestTLSRefusal(t *testing.T) {
	if err := tlsRefusal(engine.Postgres, proxy.Counts{Connections: 5}); err != nil {
		t.Errorf("no TLS: got %v, want nil", err)
	}
	cases := []struct {
		eng  engine.Engine
		want string
	}{{engine.Postgres, "sslmode=disable"}, {engine.MySQL, "tls=false"}}
	for _, c := range cases {
		err := tlsRefusal(c.eng, proxy.Counts{Connections: 5, TLS: 3})
		var ie *InputError
		if !errors.As(err, &ie) || ie.What != "--dsn" || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "3 of 5 connections") {
			t.Errorf("%s with TLS: got %v, want an --dsn error with the count and %s", c.eng, err, c.want)
		}
	}
}

func TestVerifierChoice(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		ok   bool
		name string
	}{
		{Config{}, true, "marker table"},
		{Config{Verifier: VerifierNone}, true, "none"},
		{Config{Verifier: VerifierXact}, false, ""},
		{Config{Verifier: "psychic"}, false, ""},
		{Config{Engine: engine.Postgres, DSN: "postgres://x@db/y"}, true, "pg_xact_status, then the marker table"},
		{Config{Engine: engine.Postgres, DSN: "postgres://x@db/y", Verifier: VerifierXact}, true, "pg_xact_status"},
		{Config{Engine: engine.Postgres, DSN: "postgres://x@db/y", Verifier: VerifierMarker}, true, "marker table"},
		{Config{Engine: engine.MySQL, DSN: "x@tcp(db)/y", Verifier: VerifierXact}, false, ""},
	} {
		err := c.cfg.Validate()
		var ie *InputError
		if c.ok != (err == nil) || (err != nil && (!errors.As(err, &ie) || ie.What != "--verifier")) {
			t.Errorf("%+v: got %v, want ok %t or an error naming --verifier", c.cfg, err, c.ok)
			continue
		}
		if _, name := c.cfg.WithDefaults().commitVerifier(); c.ok && name != c.name {
			t.Errorf("%+v: verifier %q, want %q", c.cfg, name, c.name)
		}
	}
}

// scripted is a CommitVerifier whose verdict is set by the test.
type scripted struct {
	answer bool
	err    error
	n      int
}

func (s *scripted) Mark(context.Context, *sql.Tx) (string, error) {
	s.n++
	return "mark-" + string(rune('a'+s.n)), nil
}

func (s *scripted) Committed(context.Context, *sql.DB, string) (bool, error) { return s.answer, s.err }

// TestRecorderHoldsVerdictsAgainstRows: a verdict that the attempt's row
// contradicts counts as wrong, one it agrees with does not, a failed
// verify counts as still ambiguous, and verdicts about unknown attempts
// are not checked.
func TestRecorderHoldsVerdictsAgainstRows(t *testing.T) {
	s := &scripted{}
	r := newRecorder(s, "scripted")
	mark := func(call string, n int) string {
		m, _ := r.Mark(context.WithValue(context.Background(), attemptKey{}, &attemptID{call: call, n: n}), nil)
		return m
	}
	rows := map[attemptID]bool{{"a", 1}: true}
	ask := func(m string, answer bool, err error) {
		s.answer, s.err = answer, err
		_, _ = r.Committed(context.Background(), nil, m)
	}
	ask(mark("a", 1), true, nil)  // right: the row is there
	ask(mark("b", 1), false, nil) // right: no row
	ask(mark("c", 2), true, nil)  // wrong: no row
	ask(mark("a", 1), false, nil) // wrong: the row is there
	ask(mark("d", 1), false, errors.New("in flight"))
	ask("unknown-mark", true, nil) // not checked
	checked, wrong := r.check(rows)
	if checked != 4 || wrong != 2 {
		t.Errorf("check: got %d checked, %d wrong; want 4, 2", checked, wrong)
	}
	st := r.settlement(Config{}.WithDefaults(), "")
	if st.Applied != 3 || st.NotApplied != 2 || st.StillAmbiguous != 1 || st.Ambiguous != 6 {
		t.Errorf("settlement: got %+v, want 3 applied, 2 not, 1 still ambiguous of 6", st)
	}
}
