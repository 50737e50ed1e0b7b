package sqltext

import (
	"strings"
	"testing"
)

// A function qualified by a schema is a user's, whatever its last name:
// read as lower, replace, insert or log, these calls were replayed after a
// failure of unknown outcome, and the function's write landed twice. So
// was any function given an alias (FROM bump() AS b, read as a common
// table expression's columns), or called under EXPLAIN (which may run it
// while planning) or in SHOW … WHERE.
func TestReadOnlyQualifiedCall(t *testing.T) {
	checkReadOnly(t, []readOnlyCase{
		{`SELECT audit.log('user signed in')`, false},
		{`SELECT app.insert('a')`, false},
		{`SELECT jobs.replace(1)`, false},
		{`SELECT * FROM audit.log('x')`, false},
		{`SELECT 1 FROM t, audit.log('x') AS l`, false},
		{`SELECT audit . log ('x')`, false},   // spaces around the dot
		{`SELECT audit./**/log('x')`, false},  // a comment
		{`SELECT "audit".log('x')`, false},    // a quoted schema
		{`SELECT audit."log"('x')`, false},    // a quoted name
		{`SELECT db.audit.lower('x')`, false}, // three parts
		{`SELECT (t).lower(1) FROM t`, false}, // qualified by an expression
		{"SELECT `audit`.log('x')", false},    // MySQL
		{"SELECT [dbo].[lower]('x')", false},  // SQL Server
		{`SELECT dbo.lower('x')`, false},      // SQL Server: a scalar UDF needs its schema
		{`SELECT mysql.lower('x')`, false},    // MySQL: a database like any other
		{`SELECT information_schema.lower(1)`, false},
		{`SELECT main.lower('x')`, false},         // SQLite has no such syntax
		{`SELECT pg_catalog.nextval('s')`, false}, // the catalog's, and it writes
		{`SELECT pg_catalog.bump()`, false},       // not known to be pure
		{`SELECT pg_catalog.lower('A')`, true},    // PostgreSQL's own
		{`SELECT sys.lower('A')`, true},           // SQL Server's own (a user's schema elsewhere: see CalledNames)
		{`SELECT t.col, u.x.y FROM t`, true},      // columns
		{`SELECT data->'a', data->>'b' FROM t`, true},
		{`SELECT 'x'::regclass, x::pg_catalog.text FROM t`, true},
		{`SELECT * FROM t WHERE x.y IN (1, 2)`, true},
		{`SELECT COUNT(t.x), max(u.y) FROM t JOIN u ON u.id = t.id`, true},
		{`SELECT CAST(x AS pg_catalog.varchar(20)) FROM t`, true},
		{`SELECT x::public.mytype(10) FROM t`, true}, // a type's modifier
		{`SELECT t.* FROM t`, true},
		{`SELECT 1.5, .5, t.a FROM t`, true},
		{`EXPLAIN SELECT audit.log('x')`, false}, // planning may fold an IMMUTABLE function
		{`EXPLAIN SELECT bump()`, false},
		{`EXPLAIN INSERT INTO t (a) VALUES (1)`, true},
		{`EXPLAIN INSERT INTO s.t (a) VALUES (1)`, true},
		{`EXPLAIN INSERT INTO t(a) VALUES(1)`, true},
		{`SHOW TABLES WHERE audit.log('x') > 0`, false}, // MySQL evaluates it
		{`SHOW TABLES WHERE bump() > 0`, false},
		{`SHOW CREATE TABLE t`, true},
		{`SHOW COUNT(*) WARNINGS`, true},
		{`SELECT t.U&"a" FROM t`, false}, // a name spelled by escapes
		// A call given an alias is a call, not a CTE's column list: bump()
		// AS b was a read.
		{`SELECT * FROM bump() AS b`, false},
		{`SELECT n FROM bump() AS b(n)`, false},
		{`SELECT * FROM generate_series(1, 3) AS g`, true},
		{`WITH c(n) AS (SELECT 1) SELECT n FROM c`, true},
		{`WITH c(n) AS MATERIALIZED (SELECT 1) SELECT n FROM c`, true},
		{`WITH c(n) AS NOT MATERIALIZED (SELECT 1) SELECT n FROM c`, true},
		// A GBK connection reads \x99^ as one character: the call is of
		// \x99^lower, a user's function, not of lower (FuzzAnalyze).
		{"SELECT \x99^lower(1)", false},
		{"SELECT \x99\x99lower(1)", false},
	})
}

// Analyze reports a read that names a function a user's may answer to.
func TestAnalyzeCalls(t *testing.T) {
	for _, c := range []struct {
		sql   string
		calls bool
	}{
		{"SELECT 1", false},
		{"SELECT a, b FROM t WHERE id = $1", false},
		{`SELECT "a" FROM "t"`, false},
		{"SELECT count(*) FROM t", true},
		{"SELECT lower(b) FROM t", true},
		{"SELECT t.a FROM t", true}, // PostgreSQL: a(t) if t has no column a
		{`SELECT "t"."a" FROM "t"`, true},
		{"SELECT pg_catalog.lower('A')", true},
		{"SELECT log('msg')", true},
		{"SELECT * FROM t WHERE a IN (1, 2)", true}, // IN ( reads as a call of a keyword
		{"EXPLAIN SELECT lower('A')", true},
		{"SELECT audit.log('x')", false}, // no read at all
		{"DELETE FROM t", false},
	} {
		in := Analyze(c.sql)
		if in.Calls != c.calls {
			t.Errorf("Analyze(%q).Calls = %v, want %v (%+v)", c.sql, in.Calls, c.calls, in)
		}
		if in.Calls && !in.ReadOnly {
			t.Errorf("Analyze(%q): Calls without ReadOnly", c.sql)
		}
	}
}

// Analyze allocates nothing for a read that calls functions: the names are
// read again, by CalledNames, only after a failure.
func TestAnalyzeCallsAllocs(t *testing.T) {
	for _, sql := range []string{
		"SELECT count(*), lower(b), t.a, pg_catalog.upper(b) FROM t",
		`SELECT "t"."a" FROM "t" WHERE x IN (SELECT max(y) FROM u)`,
	} {
		if n := testing.AllocsPerRun(100, func() { Analyze(sql) }); n != 0 {
			t.Errorf("Analyze(%q): %v allocations, want 0", sql, n)
		}
	}
}

// CalledNames lists, per engine, the names a user's function may answer:
// every one on PostgreSQL (search_path, overloads, attribute notation) and
// SQLite (an application's function replaces a built-in), on MySQL those
// that are not its built-ins called with "(" right after the name, none on
// SQL Server.
func TestCalledNames(t *testing.T) {
	for _, c := range []struct {
		e     Engine
		sql   string
		names string // comma-separated; "!" for ok false
	}{
		{Postgres, "SELECT 1", ""},
		{Postgres, "SELECT log('msg')", "log"},
		{Postgres, "SELECT LOG('msg'), Lower(b) FROM t", "log,lower"},
		{Postgres, "SELECT count(*) FROM t WHERE a IN (1)", "count,in"},
		{Postgres, "SELECT t.audit FROM t", "audit"},
		{Postgres, `SELECT "t"."Audit", t."a""b" FROM t`, `Audit,a"b`},
		{Postgres, "SELECT pg_catalog.lower('A')", "lower"},
		{Postgres, "SELECT sys.lower('A')", "!"}, // sys is a user's schema on PostgreSQL
		{Postgres, "EXPLAIN SELECT format(1)", "format"},
		{Postgres, "EXPLAIN ANALYZE SELECT format(1)", "format"},
		{Postgres, "SELECT audit.log('x')", "!"},
		{Postgres, "SELECT t." + strings.Repeat("a", 70) + " FROM t", strings.Repeat("a", 70) + "," + strings.Repeat("a", 63)},
		{MySQL, "SELECT count(*), lower(b) FROM t WHERE a IN (1) AND EXISTS (SELECT 1)", ""},
		{MySQL, "SELECT count (*) FROM t", "count"},    // IGNORE_SPACE off: a stored function
		{MySQL, "SELECT count/**/(*) FROM t", "count"}, // a comment is a space
		{MySQL, "SELECT lower (b) FROM t", "lower"},    // asked: only adjacent is proved
		{MySQL, "SELECT initcap(b), to_char(a) FROM t", "initcap,to_char"},
		{MySQL, "SELECT string_agg(b, ',') FROM t", "string_agg"},
		{MySQL, "SELECT t.audit FROM t", ""},
		{MySQL, "SELECT pg_catalog.lower('A')", "!"}, // a database named pg_catalog
		{MySQL, "SELECT row_number() OVER (ORDER BY a) FROM t", ""},
		{SQLServer, "SELECT lower(b), initcap(b), t.a FROM t", ""},
		{SQLServer, "SELECT sys.lower('A')", ""},
		{SQLServer, "SELECT pg_catalog.lower('A')", "!"},
		{SQLite, "SELECT lower(b), t.a FROM t", "lower"},
		{SQLite, "SELECT pg_catalog.lower('A')", "!"},
		{AnyEngine, "SELECT 1", ""},
		{AnyEngine, "SELECT count(*) FROM t", "!"},
		{AnyEngine, "SELECT t.a FROM t", "!"},
		{Postgres, "DELETE FROM t", "!"},
		{Postgres, `SELECT lower(b), 'it\'s' FROM t`, "!"}, // not read-only under MySQL's rules
		{MySQL, "SELECT lower(b), `x` FROM t", ""},         // divergent, read by MySQL's rules
		{MySQL, "SELECT count (b), `x` FROM t", "count"},
	} {
		names, ok := CalledNames(c.e, c.sql)
		got := strings.Join(names, ",")
		if !ok {
			got = "!"
		}
		if got != c.names {
			t.Errorf("CalledNames(%v, %q) = %q, want %q", c.e, c.sql, got, c.names)
		}
	}
}
