package sqltext

import "testing"

func TestVerb(t *testing.T) {
	tests := []struct {
		sql, want string
	}{
		{"", ""},
		{"   \n\t", ""},
		{"SELECT 1", "select"},
		{"select 1", "select"},
		{"  \n\tUpdate t SET x = 1", "update"},
		{"-- a comment\nDELETE FROM t", "delete"},
		{"/* c */ insert into t values (1)", "insert"},
		{"/* outer /* nested */ still comment */ MERGE INTO t", "merge"},
		{"/* unterminated", ""},
		{"((SELECT 1)) UNION (SELECT 2)", "select"},
		{";WITH x AS (SELECT 1) SELECT * FROM x", "select"},
		{"WITH x AS (SELECT 1) UPDATE t SET a = 1", "update"},
		{"with recursive r(n) as (select 1 union all select n+1 from r where n < 3) delete from t", "delete"},
		{"WITH a AS (SELECT ')' AS p), b (c, d) AS NOT MATERIALIZED (SELECT \"(\" FROM [x(]) INSERT INTO t SELECT 1", "insert"},
		{"WITH a AS MATERIALIZED (SELECT `)` FROM t -- )\n) DELETE FROM t", "delete"},
		{"WITH a AS (SELECT $$)$$, $tag$ ) $tag$) UPDATE t SET x = 1", "update"},
		{"WITH a AS (SELECT /* ) */ 1) SELECT 1", "select"},
		{"WITH a AS (SELECT 'it''s )') MERGE INTO t", "merge"},
		{"WITH RECURSIVE t(n) AS (SELECT 1) SEARCH DEPTH FIRST BY n SET ord SELECT * FROM t", "select"},
		{"WITH RECURSIVE t(n) AS (SELECT 1) CYCLE n SET is_cycle USING path DELETE FROM x", "delete"},
		{"WITH x AS (DELETE FROM t RETURNING *) SELECT * FROM x", "select"},
		{"WITH x AS (SELECT 1) (SELECT * FROM x)", "select"},
		{"WITH x AS (SELECT 1", "with"},
		{"WITH XMLNAMESPACES ('uri' AS ns) SELECT 1", "with"},
		{"WITH x AS (SELECT 1) ", ""},
		{"EXEC sp_who", "exec"},
		{"sp_who", ""},
		{"_x", ""},
		{"1", ""},
		{"\"select\" 1", ""},
		{"SeLeCt 1", "select"},
		{"FROBNICATE x", "frobnicate"},
		{"select1", ""},
		{"é", ""},
	}
	for _, tt := range tests {
		if got := Verb(tt.sql); got != tt.want {
			t.Errorf("Verb(%q) = %q, want %q", tt.sql, got, tt.want)
		}
	}
}

func TestIsReadOnly(t *testing.T) {
	tests := []struct {
		sql  string
		want bool
	}{
		{"SELECT 1", true},
		{"  select * from t where id = $1", true},
		{"SELECT * FROM t FOR UPDATE", true},
		{"SELECT * FROM t FOR NO KEY UPDATE SKIP LOCKED", true},
		{"SELECT * FROM t LOCK IN SHARE MODE", true},
		{"SELECT replace(a, 'x', 'y'), insert(a, 1, 2, 'z') FROM t", true},
		{"SELECT 1;", true},
		{"SELECT 1; -- done\n", true},
		{"VALUES (1), (2)", true},
		{"TABLE t", true},
		{"SHOW search_path", true},
		{"SHOW CREATE TABLE t", true},
		{"EXPLAIN SELECT 1", true},
		{"EXPLAIN DELETE FROM t", true},
		{"EXPLAIN ANALYZE SELECT 1", true},
		{"EXPLAIN ANALYZE DELETE FROM t", false},
		{"EXPLAIN (ANALYZE, BUFFERS) UPDATE t SET x = 1", false},
		{"EXPLAIN (ANALYZE) SELECT 1", true},
		{"DESCRIBE t", true},
		{"DESC t", true},
		{"EXPLAIN SELECT 1; DELETE FROM t", false},
		{"WITH x AS (SELECT 1) SELECT * FROM x", true},
		{"WITH x AS (DELETE FROM t RETURNING *) SELECT * FROM x", false},
		{"WITH x AS (SELECT 1) UPDATE t SET a = 1", false},
		{"WITH x AS (SELECT 1", false},
		{"SELECT * INTO t2 FROM t", false},
		{"SELECT 1; DELETE FROM t", false},
		{"SELECT 1 DELETE FROM t", false},
		{"SELECT nextval('s')", false},
		{"SELECT 'a\\'b'; DELETE FROM t WHERE c = 'z'", false},
		{"SELECT 1 # x", true},                         // a comment in MySQL, an operator in PostgreSQL, a name in SQL Server
		{"SELECT 1 # '\n; DELETE FROM t; -- '", false}, // MySQL ends the comment at the newline
		{"SELECT 1 --1; DELETE FROM t\n", false},
		{"SELECT 1 -- ok\n", true},
		{"SELECT /* a /* b */ c */ 1", true}, // read either way
		{"SELECT /* /* */ ; DELETE FROM t; /* */ 1", false},
		{"SELECT /*!50000 1 */", false},
		{"SELECT 'unterminated", false},
		{"INSERT INTO t VALUES (1)", false},
		{"UPDATE t SET x = 1", false},
		{"DELETE FROM t", false},
		{"PRAGMA table_info(t)", false},
		{"CALL p()", false},
		{"", false},
		{"SELECT \"update\", \"delete\" FROM t", true},
		{"SELECT [order], `key` FROM t", true},
		{"SELECT [delete] FROM t", false}, // brackets quote only in SQL Server and SQLite
		{"SELECT 'DELETE FROM t' AS s", true},
		{"SELECT insert_date FROM t", true},
		{"SELECT $$ ; DELETE $$", false}, // $$ is an identifier in MySQL
		{"SELECT $$ ; DROP $$, $a$ ; INSERT $a$", false},
		{"SELECT $$ it''s $$", true},
		{"SELECT $$ it's $$", false}, // an unterminated string in MySQL
	}
	for _, tt := range tests {
		if got := IsReadOnly(tt.sql); got != tt.want {
			t.Errorf("IsReadOnly(%q) = %v, want %v", tt.sql, got, tt.want)
		}
	}
}

func TestVerbAllocs(t *testing.T) {
	for _, sql := range []string{
		"SELECT 1",
		"/* c */ WITH x AS (SELECT ')' FROM t) UPDATE t SET a = 1",
		"  insert into t values (1)",
		"SELECT a[1], 'it\\'s' FROM t WHERE b = $1 -- x\n",
		"SELECT $tag$ ; $tag$, `x`, [y] FROM t /*! x */ # c",
		"INSERT INTO t VALUES (1) ON DUPLICATE KEY UPDATE a = VALUES(a)",
		"SELECT x\u00a0DELETE FROM t",
	} {
		if n := testing.AllocsPerRun(100, func() { Verb(sql); IsReadOnly(sql); Analyze(sql) }); n != 0 {
			t.Errorf("Verb/IsReadOnly(%q): %v allocations, want 0", sql, n)
		}
	}
}

func BenchmarkVerb(b *testing.B) {
	for _, bm := range []struct{ name, sql string }{
		{"select", "SELECT id, name FROM tasks WHERE id = $1"},
		{"comment", "/* app:42 */ -- trace\n UPDATE tasks SET state = 'done' WHERE id = $1"},
		{"cte", "WITH due AS (SELECT id FROM tasks WHERE run_at < now() AND note <> ')' LIMIT 10) UPDATE tasks SET state = 'running' FROM due WHERE tasks.id = due.id"},
	} {
		b.Run(bm.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				Verb(bm.sql)
			}
		})
	}
}

func BenchmarkIsReadOnly(b *testing.B) {
	sql := "WITH due AS (SELECT id FROM tasks WHERE run_at < now() LIMIT 10) SELECT * FROM due FOR UPDATE"
	b.ReportAllocs()
	for b.Loop() {
		IsReadOnly(sql)
	}
}

func FuzzVerb(f *testing.F) {
	for _, s := range []string{"SELECT 1", "WITH x AS (SELECT ')') UPDATE t", "/* /* */ */ delete", "$a$ $a$", "[x", "'", "--", "(((", "WITH RECURSIVE a(b) AS (SELECT 1) SEARCH BREADTH FIRST BY b SET c SELECT"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v := Verb(s)
		for i := 0; i < len(v); i++ {
			if v[i] < 'a' || v[i] > 'z' {
				t.Fatalf("Verb(%q) = %q, want lower-case ASCII letters", s, v)
			}
		}
		if IsReadOnly(s) {
			switch v {
			case "select", "values", "table", "show", "explain", "describe", "desc":
			default:
				t.Fatalf("IsReadOnly(%q) = true with verb %q", s, v)
			}
		}
	})
}
