package sqltext

import "testing"

// readOnlyCase is a text and IsReadOnly's verdict on it. The comment after
// a false case says which engine runs it as a write.
type readOnlyCase struct {
	sql  string
	want bool
}

func checkReadOnly(t *testing.T, cases []readOnlyCase) {
	t.Helper()
	for _, c := range cases {
		if got := IsReadOnly(c.sql); got != c.want {
			t.Errorf("IsReadOnly(%q) = %v, want %v", c.sql, got, c.want)
		}
	}
}

// Issue 12 §4: EXPLAIN runs its statement when ANALYZE is among its options,
// and PostgreSQL accepts the option name quoted.
func TestReadOnlyExplainOptions(t *testing.T) {
	checkReadOnly(t, []readOnlyCase{
		{`EXPLAIN ("analyze") DELETE FROM t`, false},                       // PostgreSQL deletes
		{`EXPLAIN (FORMAT TABLE, ANALYZE) DELETE FROM t`, false},           // TABLE was taken for the statement
		{`EXPLAIN (SETTINGS, ANALYZE) DELETE FROM t`, false},               // ditto: SETTINGS is no verb, ANALYZE follows
		{`EXPLAIN (U&"analyze") DELETE FROM t`, false},                     // a Unicode-escaped identifier
		{`EXPLAIN (VERBOSE, "analyse") UPDATE t SET a = 1`, false},         // the British spelling, quoted
		{`EXPLAIN (ANALYZE) WITH x AS (SELECT 1) DELETE FROM t`, false},    // a CTE before the statement
		{`EXPLAIN ANALYZE (SELECT nextval('s'))`, false},                   // the statement runs
		{`EXPLAIN FORMAT=JSON INTO @v SELECT 1`, false},                    // MySQL 8.0.32 writes a variable
		{`EXPLAIN ANALYZE t`, false},                                       // no statement to judge
		{`EXPLAIN (FORMAT JSON, COSTS OFF) DELETE FROM t`, true},           // the plan only
		{`EXPLAIN (ANALYZE) SELECT 1`, true},                               // runs a read
		{`EXPLAIN QUERY PLAN SELECT * FROM t`, true},                       // SQLite
		{`EXPLAIN SELECT 1 DELETE FROM t`, false},                          // a second statement in a batch
		{`EXPLAIN SELECT nextval('s')`, false},                             // an engine may evaluate while planning
		{"EXPLAIN ANALYZE SELECT 1; DELETE FROM t", false},                 // a second statement
		{"DESCRIBE `t`", true},                                             // MySQL
		{"DESC t", true},                                                   // MySQL
		{"EXPLAIN FOR CONNECTION 4", true},                                 // MySQL
		{"EXPLAIN (ANALYZE, FORMAT JSON) INSERT INTO t VALUES (1)", false}, // PostgreSQL inserts
	})
}

// Issue 12 §4: brackets quote identifiers in SQL Server and SQLite only; in
// PostgreSQL a[1] is a subscript, and a "]" inside it is in a string.
func TestReadOnlyBrackets(t *testing.T) {
	checkReadOnly(t, []readOnlyCase{
		{"SELECT a[']'], ''; DELETE FROM t; SELECT 1 -- '", false}, // PostgreSQL deletes
		{"SELECT a['['], ''; DELETE FROM t; SELECT 1 -- ]'", false},
		{"SELECT [a;b] FROM t", false},                    // PostgreSQL and MySQL see two statements
		{"SELECT [x]]; DELETE FROM t; --] FROM t", false}, // SQLite: "]" ends […]; SQL Server: "]]" is a "]"
		{"SELECT a[1], a[2:3] FROM t", true},
		{"SELECT [a b], [c] FROM [t]", true},
	})
}

// Issue 12 §4: a PostgreSQL dollar-quote tag follows identifier rules, and
// every byte above 0x7F is a letter there.
func TestReadOnlyDollarTags(t *testing.T) {
	checkReadOnly(t, []readOnlyCase{
		{"SELECT $é$ '$é$; DELETE FROM t; --'", false}, // PostgreSQL deletes
		{"SELECT $_1$ '$_1$; DELETE FROM t; --'", false},
		{"SELECT $a$ x $a$", true},
		{"SELECT $é$ ; $é$", false}, // MySQL: $é$ is an identifier
		{"SELECT $1", true},
		{"SELECT $1$ ; $1$", false}, // $1 is a parameter, not a tag
		{"SELECT a$b$c FROM t", true},
	})
}

// Issue 12 §4: MySQL and MariaDB run what /*! … */, /*!NNNNN … */ and
// /*M! … */ hold.
func TestReadOnlyExecutableComments(t *testing.T) {
	checkReadOnly(t, []readOnlyCase{
		{"SELECT 1 /*M!, NEXTVAL(s) */", false},        // MariaDB advances s
		{"SELECT 1 /*M!100000 , NEXTVAL(s) */", false}, // MariaDB 10.0.0 and later
		{"SELECT 1 /*!50000 , NEXTVAL(s) */", false},
		{"SELECT * FROM t /*! INTO OUTFILE '/tmp/x' */", false},
		{"SELECT 1 /*!, 2 */; DELETE FROM t", false},
		{"SELECT 1 /*M hint */", true}, // no "!": a comment
		{"SELECT 1 /*+ MAX_EXECUTION_TIME(1) */", true},
		{"SELECT 1 /* ! */", true},
	})
}

// Issue 12 §4: NEXT VALUE FOR advances a sequence (SQL Server, MariaDB), as
// nextval and setval do; lastval, currval and PREVIOUS VALUE FOR only read.
func TestReadOnlySequences(t *testing.T) {
	checkReadOnly(t, []readOnlyCase{
		{"SELECT NEXT VALUE FOR s", false},
		{"select next value for dbo.s", false},
		{"SELECT NEXT /* c */ VALUE FOR s", false},
		{"SELECT s.nextval FROM dual", false}, // MariaDB's Oracle mode
		{"SELECT NEXTVAL(s)", false},
		{"SELECT setval('s', 10)", false},
		{"SELECT pg_catalog.nextval('s')", false},
		{"VALUES (nextval('s'))", false},
		{"SHOW TABLES WHERE NEXTVAL(s) > 0", false}, // MariaDB evaluates it
		{"SELECT lastval()", true},
		{"SELECT currval('s')", true},
		{"SELECT PREVIOUS VALUE FOR s", true},
		{"SELECT LASTVAL(s)", true},
		{"SELECT next_due FROM t", true},
		{"SELECT next, value FROM t", true},
	})
}

// Functions that change state when a SELECT calls them.
func TestReadOnlyStateFunctions(t *testing.T) {
	checkReadOnly(t, []readOnlyCase{
		{"SELECT pg_advisory_lock(1)", false}, // held by the session until unlocked: twice needs two unlocks
		{"SELECT pg_try_advisory_lock(1)", false},
		{"SELECT GET_LOCK('x', 0)", false},
		{"SELECT RELEASE_LOCK('x')", false},
		{"SELECT pg_notify('c', 'x')", false}, // allowed in a read-only transaction, delivered twice
		{"SELECT * FROM dblink_exec('dbname=x', 'DELETE FROM t')", false},
		{"SELECT * FROM dblink('dbname=x', 'DELETE FROM t RETURNING 1') AS x(a int)", false},
		{"SELECT lo_unlink(1)", false},
		{"SELECT pg_terminate_backend(1)", false},
		{"SELECT pg_stat_reset()", false},
		{"SELECT * FROM pg_logical_slot_get_changes('s', NULL, NULL)", false}, // consumes the changes
		{"SELECT pg_logical_emit_message(true, 'p', 'x')", false},
		{"SELECT * FROM OPENQUERY(srv, 'DELETE FROM t')", false},
		{"SELECT load_extension('x')", false},
		{"SELECT @n := @n + 1", false},          // MySQL: a user variable, once per replay
		{"SELECT * FROM t WHERE a := 1", false}, // read two ways; say no
		{"SELECT pg_sleep(0), now(), random()", true},
		{"SELECT x::text FROM t", true},
	})
}

// A number ends where a letter begins in SQL Server and PostgreSQL:
// "1DELETE" is 1 and DELETE, and in a T-SQL batch the DELETE is a statement.
func TestReadOnlyNumberThenWord(t *testing.T) {
	checkReadOnly(t, []readOnlyCase{
		{"SELECT 1DELETE FROM t", false},
		{"SELECT 0x1INSERT INTO t VALUES (1)", false},
		{"SELECT 1e5UPDATE t SET a = 1", false},
		{"SELECT 1.5e3, 0xFF, 1e, 2.", true},
	})
}

// SQL Server may read a non-ASCII space as white space where PostgreSQL
// reads a letter of an identifier.
func TestReadOnlyNonASCIISpace(t *testing.T) {
	checkReadOnly(t, []readOnlyCase{
		{"SELECT x\u00a0DELETE FROM t", false},
		{"SELECT 1\u3000DELETE FROM t", false},
		{"SELECT café FROM t", true},
	})
}

// A T-SQL batch needs no ";" between statements: whatever follows a SELECT
// that can start a statement is one, and the writes among them are writes.
func TestReadOnlyTSQLBatch(t *testing.T) {
	checkReadOnly(t, []readOnlyCase{
		{"SELECT 1 SHUTDOWN", false},
		{"SELECT 1 RECONFIGURE", false},
		{"SELECT 1 RECEIVE * FROM q", false},                // takes the messages off the queue
		{"SELECT 1 END CONVERSATION @h", false},             // Service Broker
		{"SELECT 1 SEND ON CONVERSATION @h ('x')", false},   // Service Broker
		{"SELECT 1 MOVE CONVERSATION @h TO @g", false},      // Service Broker
		{"SELECT 1 ENABLE TRIGGER tr ON t", false},          // DDL
		{"SELECT 1 SAVE TRAN x", false},                     // a savepoint
		{"SELECT 1 UPDATETEXT t.c @p 0 NULL 'x'", false},    // a write
		{"SELECT 1 WRITETEXT t.c @p 'x'", false},            // a write
		{"SELECT 1 SELECT 2", false},                        // two statements; as with ";"
		{"SELECT CASE WHEN a THEN 1 END FROM t", true},      // END of a CASE
		{"SELECT open, close, high, low FROM prices", true}, // words that start statements, as names
		{"SELECT p.open, p.close FROM prices p ORDER BY close", true},
		{"SELECT * FROM t ORDER BY a OFFSET 10 ROWS FETCH NEXT 10 ROWS ONLY", true},
		{"SELECT * FROM t FETCH FIRST 1 ROW ONLY", true},
		{"SELECT * FROM t WITH (NOLOCK) WHERE a IN (SELECT b FROM u)", true},
		{"SELECT * FROM a INNER MERGE JOIN b ON a.x = b.x OPTION (MERGE UNION)", true},
		{"SELECT * FROM t USE INDEX (i)", true},
		{"SELECT IF(a, 1, 2), INSERT(s, 1, 2, 'x'), TRUNCATE(1.5, 0) FROM t", true},
		{"SELECT CAST(a AS CHAR CHARACTER SET utf8mb4) FROM t", true},
	})
}

// A PostgreSQL recursive CTE's SEARCH and CYCLE clauses hold SET.
func TestReadOnlySearchCycle(t *testing.T) {
	checkReadOnly(t, []readOnlyCase{
		{"WITH RECURSIVE t(n) AS (SELECT 1 UNION ALL SELECT n+1 FROM t WHERE n < 3) SEARCH DEPTH FIRST BY n SET ord SELECT * FROM t", true},
		{"WITH RECURSIVE t(n) AS (SELECT 1) CYCLE n SET is_cycle USING path SELECT * FROM t", true},
		{"WITH RECURSIVE t(n) AS (SELECT 1) SEARCH BREADTH FIRST BY n SET o CYCLE n SET c USING p SELECT * FROM t", true},
		{"WITH RECURSIVE t(n) AS (SELECT 1) SEARCH DEPTH FIRST BY n SET ord SELECT * FROM t SET x = 1", false},
		{"WITH t(n) AS (SELECT 1) SELECT * FROM (SELECT 1) search SET x = 1", false},
	})
}

// Text whose strings or comments end in different places under different
// engines' rules: read-only only if read-only under all of them.
func TestReadOnlyDialects(t *testing.T) {
	checkReadOnly(t, []readOnlyCase{
		{`SELECT 'a\'; DELETE FROM t; --'`, false},    // PostgreSQL deletes
		{`SELECT E'\''; DELETE FROM t; --'`, false},   // MySQL, SQL Server, SQLite delete
		{`SELECT "a\"; DELETE FROM t; --"`, false},    // PostgreSQL deletes; MySQL does not
		{`SELECT '\\', "\\" FROM t`, true},            // a backslash, under every rule
		{`SELECT 'C:\path', E'\n' FROM t`, true},      // a string everywhere
		{`SELECT U&'\0041' FROM t`, true},             //
		{`SELECT U&'\'; DELETE FROM t; --'`, false},   // U&'' has no backslash escapes; MySQL's '' has
		{`SELECT B'\'; DELETE FROM t; --'`, false},    // ditto
		{"SELECT 1 --x; DELETE FROM t", false},        // MySQL: minus minus x
		{"SELECT 1 -- c\r; DELETE FROM t", false},     // PostgreSQL ends the comment at \r
		{"SELECT 1 -- c\r\n", true},                   //
		{"SELECT `a`; DELETE FROM t; -- `", false},    // PostgreSQL, SQL Server: "`" is no quote
		{"SELECT 1\x00; DELETE FROM t", false},        // PostgreSQL stops at NUL, MySQL does not
		{"SELECT '\x00' FROM t", true},                // PostgreSQL and SQLite stop reading at NUL: an error
		{"SELECT 1 /* unterminated", true},            // a comment to the end in SQLite, an error elsewhere
		{"SELECT 1 /* /* */ DELETE FROM t */", false}, // MySQL, SQLite: DELETE is outside
		{"SELECT 1; -- done\n/* and */", true},
		{"SELECT 1;;", true},
		{"SELECT 1; x", false},
		{"SELECT 1; #\n", false}, // "#" is no comment in PostgreSQL
	})
}

// Issue 12 §2, the lexer's half: a text that some engine splits into several
// statements must be Multi, so that a NotApplied failure of a later one does
// not replay the earlier ones. Each text below was one statement to the old
// lexer.
func TestAnalyzeMultiDialects(t *testing.T) {
	for _, q := range []string{
		`INSERT INTO t VALUES ('\', '; DELETE FROM u; -- ')`,                                    // MySQL: two
		`INSERT INTO t VALUES ("\", "; DELETE FROM u; -- ")`,                                    // MySQL: two
		`INSERT INTO t VALUES (E'\', '; DELETE FROM u; -- ')`,                                   // PostgreSQL: two
		"INSERT INTO t SELECT a[']'] FROM u; DELETE FROM v; SELECT 1 -- '",                      // PostgreSQL: three
		"INSERT INTO t VALUES (1) # '\n; DELETE FROM u; -- '",                                   // MySQL: two
		"INSERT INTO t VALUES (1 --1); DELETE FROM u WHERE a IN (SELECT 1\n)",                   // MySQL: two
		"INSERT INTO t VALUES (1) /* /* */ ; DELETE FROM u; /* */",                              // MySQL, SQLite: two
		"INSERT INTO t VALUES ($é$ '$é$); DELETE FROM u; -- ')",                                 // PostgreSQL: two
		"INSERT INTO t VALUES (1) -- c\r; DELETE FROM u",                                        // PostgreSQL: two
		"INSERT INTO t VALUES (1) /*!; DELETE FROM u */",                                        // MySQL reads it two ways
		"INSERT INTO t VALUES (1) /*M! , (2) */",                                                // ditto
		"INSERT INTO t VALUES (1)\x00; DELETE FROM u",                                           // MySQL: two
		"INSERT INTO t VALUES (1) INSERT INTO t VALUES (2)",                                     // SQL Server: two
		"UPDATE t SET a = 1 DELETE FROM u",                                                      // SQL Server: two
		"UPDATE t SET a = 1 SET @x = 2",                                                         // SQL Server: two
		"INSERT INTO t VALUES (1) SELECT * FROM u",                                              // SQL Server: two
		"INSERT INTO t SELECT 1 UPDATE u SET a = 1",                                             // SQL Server: two
		"INSERT INTO t DEFAULT VALUES DELETE FROM u",                                            // SQL Server: two
		"SET NOCOUNT ON INSERT INTO t VALUES (1)",                                               // SQL Server: two
		"DELETE FROM t WHERE id = ? DELETE FROM u",                                              // SQL Server: two
		"CREATE TABLE a (x int) INSERT INTO a VALUES (1)",                                       // SQL Server: two
		"TRUNCATE TABLE t INSERT INTO t VALUES (1)",                                             // SQL Server: two
		"BEGIN TRAN INSERT INTO t VALUES (1) COMMIT",                                            // SQL Server: three
		"MERGE INTO t USING s ON t.id = s.id WHEN MATCHED THEN DELETE INSERT INTO u VALUES (1)", // two
		"INSERT INTO t VALUES (1) SAVE TRAN x",                                                  // SQL Server: two
		"INSERT INTO t VALUES (1)\u3000DELETE FROM u",                                           // SQL Server may split at U+3000
		"WITH x AS (SELECT 1 AS a) INSERT INTO t SELECT a FROM x DELETE FROM u",                 // SQL Server: two
		"UPDATE t SET x = type INSERT INTO u VALUES (1)",                                        // TYPE is no reserved word in SQL Server
		"UPDATE t SET x = offset DELETE FROM u",                                                 // nor OFFSET
		"DELETE FROM t WHERE a = receive UPDATE u SET a = 1",                                    // nor RECEIVE
		"INSERT INTO t SELECT a FROM u AS do UPDATE v SET a = 1",
		"INSERT INTO t VALUES (1) lbl: DELETE FROM u", // a label, then a statement
	} {
		if in := Analyze(q); !in.Multi {
			t.Errorf("Analyze(%q).Multi = false, want true", q)
		}
	}
}

// The single statements that a statement verb in a clause must not split.
func TestAnalyzeOneStatement(t *testing.T) {
	for _, q := range []string{
		"INSERT INTO t (a, b) VALUES (1, 2) ON CONFLICT (a) DO UPDATE SET b = excluded.b WHERE t.b <> excluded.b RETURNING id",
		"INSERT INTO t (a) VALUES (1) ON CONFLICT ON CONSTRAINT t_pkey DO NOTHING",
		"INSERT INTO t (a, b) VALUES (1, 2) ON DUPLICATE KEY UPDATE b = VALUES(b)",
		"INSERT INTO t (a, b) VALUES (1, 2) AS new ON DUPLICATE KEY UPDATE b = new.b",
		"INSERT INTO t SELECT * FROM u WHERE NOT EXISTS (SELECT 1 FROM t)",
		"INSERT INTO t (a) SELECT 1 UNION ALL SELECT 2",
		"INSERT INTO t WITH x AS (SELECT 1) SELECT * FROM x",
		"INSERT INTO t SET a = 1, b = 2",
		"INSERT INTO t DEFAULT VALUES",
		"INSERT INTO t (a) OUTPUT inserted.id VALUES (1)",
		"INSERT INTO t OUTPUT inserted.id INTO @ids (id) SELECT a FROM u",
		"INSERT INTO t WITH (TABLOCK) SELECT * FROM u",
		"INSERT OR REPLACE INTO t VALUES (1)",
		"INSERT OR ROLLBACK INTO t VALUES (1)",
		"INSERT IGNORE INTO t VALUES (1)",
		"REPLACE INTO t SELECT * FROM u",
		"UPDATE t SET a = 1 WHERE id = 1",
		"UPDATE t SET a = (SELECT max(b) FROM u) FROM v WHERE t.id = v.id RETURNING *",
		"UPDATE t1 JOIN t2 ON t1.id = t2.id SET t1.a = t2.b",
		"UPDATE TOP (10) t WITH (ROWLOCK) SET a = 1 OUTPUT inserted.a",
		"UPDATE t SET a = IF(b, 1, 2), c = CASE WHEN d THEN 1 ELSE 2 END",
		"UPDATE OR REPLACE t SET a = 1",
		"DELETE FROM t WHERE id IN (SELECT id FROM u) RETURNING *",
		"DELETE t FROM t JOIN u ON t.id = u.id",
		"DELETE FROM t USING u WHERE t.id = u.id",
		"DELETE TOP (5) FROM t OUTPUT deleted.*",
		"MERGE INTO t USING s ON t.id = s.id WHEN MATCHED AND s.x = 1 THEN DELETE WHEN MATCHED THEN UPDATE SET a = s.a WHEN NOT MATCHED THEN INSERT (id) VALUES (s.id)",
		"MERGE t USING (SELECT 1 AS id) s ON t.id = s.id WHEN NOT MATCHED BY SOURCE THEN DELETE OUTPUT $action;",
		"WITH x AS (DELETE FROM t RETURNING *) INSERT INTO log SELECT * FROM x",
		"WITH x AS (SELECT 1) UPDATE t SET a = 1 FROM x",
		"SELECT * FROM t WHERE a = 1 FOR UPDATE",
		"SELECT * FROM t FOR NO KEY UPDATE SKIP LOCKED",
		"SELECT * FROM t ORDER BY a OFFSET 5 ROWS FETCH NEXT 5 ROWS ONLY",
		"SELECT open, close FROM prices",
		"CREATE TABLE t AS SELECT * FROM u",
		"CREATE TEMP TABLE x (a int) ON COMMIT DROP",
		"CREATE TABLE t (a int REFERENCES u ON DELETE SET NULL ON UPDATE CASCADE)",
		"ALTER TABLE t ADD CONSTRAINT f FOREIGN KEY (a) REFERENCES u (a) ON DELETE SET NULL",
		"ALTER TABLE t ALTER COLUMN c SET DEFAULT 1",
		"ALTER TABLE t DROP COLUMN c",
		"CREATE PROCEDURE p AS BEGIN INSERT INTO t VALUES (1) DELETE FROM u END",
		"CREATE TRIGGER tr AFTER INSERT ON t FOR EACH ROW INSERT INTO log VALUES (1)",
		"CREATE OR ALTER VIEW v AS SELECT 1 AS a",
		"GRANT SELECT, INSERT, UPDATE, DELETE ON t TO u",
		"DROP TABLE IF EXISTS t",
		"CREATE TABLE IF NOT EXISTS t (a int)",
		"SET autocommit = 0",
		"BEGIN TRANSACTION ISOLATION LEVEL SERIALIZABLE",
		"SELECT * FROM t WHERE id = ?",
		"EXPLAIN ANALYZE UPDATE t SET a = 1",
	} {
		if in := Analyze(q); !in.OneStatement() {
			t.Errorf("Analyze(%q) = multi %v opaque %v, want one statement", q, in.Multi, in.Opaque)
		}
	}
}

// Session.After reads the text with the shared lexer only. Where an engine
// reads a transaction opener that the shared lexer does not see (the old
// lexer held "[" for a quote everywhere), After keeps the session idle
// although that engine holds a transaction open. Session.After belongs to
// the transaction-state code: this test documents the gap (issue 12 §3) and
// passes once After takes every dialect into account, for instance through
// hiddenTxControl.
func TestSessionAfterDialects(t *testing.T) {
	for _, q := range []string{"SELECT 1", "BEGIN", "SELECT '[' FROM t", "SELECT $$ x $$"} {
		if hiddenTxControl(q) {
			t.Errorf("hiddenTxControl(%q) = true", q)
		}
	}
	for _, q := range []string{
		"SELECT a[']'], ''; BEGIN; SELECT 1 -- '", // PostgreSQL opens a transaction
		"SELECT 1 # '\n; BEGIN; -- '",             // MySQL opens a transaction
		`SELECT '\'; BEGIN; -- '`,                 // PostgreSQL opens a transaction
	} {
		if !Analyze(q).TxControl {
			t.Errorf("Analyze(%q).TxControl = false", q)
		}
		if after := (Session{}).After(q, false); !after.Pinned() {
			t.Errorf("After(%q) = %s; an engine holds a transaction open", q, state(after))
		}
	}
}

// The examples of the issue, replayed through Analyze as the database/sql
// layer reads them: none may be ReadOnly.
func TestAnalyzeIssueExamples(t *testing.T) {
	for _, q := range []string{
		`EXPLAIN ("analyze") DELETE FROM t`,
		"SELECT a[']'], ''; DELETE FROM t; SELECT 1 -- '",
		"SELECT $é$ '$é$; DELETE FROM t; --'",
		"SELECT 1 /*M!, NEXTVAL(s) */",
		"SELECT 1 /*!50000 , NEXTVAL(s) */",
		"SELECT NEXT VALUE FOR s",
	} {
		if in := Analyze(q); in.ReadOnly {
			t.Errorf("Analyze(%q).ReadOnly = true", q)
		}
	}
}

func TestDivergent(t *testing.T) {
	// A text with none of the bytes divergent looks for must read the same
	// in every dialect.
	for _, q := range []string{
		"SELECT 1", "/* c */ SELECT 'a' FROM t -- x\n", "INSERT INTO t VALUES (1) -- done",
		"SELECT \"x\", 'y''z' FROM t WHERE a = -1",
	} {
		if divergent(q) {
			t.Errorf("divergent(%q) = true", q)
		}
		for d := dlPostgres; d < numDialects; d++ {
			a, b := lexer{s: q, d: dlPostgres}, lexer{s: q, d: d}
			for {
				x, y := a.next(), b.next()
				if x.start != y.start || x.end != y.end || (x.kind == tokEOF) != (y.kind == tokEOF) {
					t.Errorf("%q: dialect %d reads %q where PostgreSQL reads %q", q, d, q[y.start:y.end], q[x.start:x.end])
					break
				}
				if x.kind == tokEOF {
					break
				}
			}
		}
	}
	for _, q := range []string{"a\\b", "a#b", "a[b", "a`b", "a$b", "a\x00", "a\rb", "--x", "/* /* */", "/*!", "/*M!", "a\x99^b", "\x81@", "\xfe}"} {
		if !divergent(q) {
			t.Errorf("divergent(%q) = false", q)
		}
	}
}

// Review 3: a function called by a quoted name is the same function as the
// bare name (PostgreSQL folds a bare name to lower case; MySQL's backticks
// and SQL Server's brackets quote any name), so a quoted call of a function
// that writes is a write: read as a read, SELECT "bump"() was replayed after
// its connection was lost and its write landed twice. A quoted name before
// "(" is an unknown call, whatever the name.
func TestReadOnlyQuotedFunctionCall(t *testing.T) {
	checkReadOnly(t, []readOnlyCase{
		{`SELECT "bump"()`, false},                            // PostgreSQL runs bump()
		{`SELECT "nextval"('s')`, false},                      // advances the sequence
		{`SELECT x."f"()`, false},                             // a schema-qualified call
		{`SELECT * FROM "f"()`, false},                        // a set-returning function
		{`SELECT "pg_advisory_lock"(1)`, false},               // takes a session lock
		{"SELECT `f`()", false},                               // MySQL
		{"SELECT [f]()", false},                               // SQL Server
		{`SELECT "BUMP"()`, false},                            // another function, still unknown
		{`SELECT "lower"('A')`, false},                        // pure, but read as unknown: only a replayed read
		{`SELECT * FROM "t" AS "x"("a", "b")`, true},          // an alias's column list
		{`WITH "c"("n") AS (SELECT 1) SELECT * FROM c`, true}, // a CTE's columns
		{`SELECT "a" FROM "t" WHERE "b" = 1`, true},           // quoted columns and tables
		{`SELECT "f" ()`, false},                              // a space before the parenthesis
		{`EXPLAIN SELECT "nextval"('s')`, false},              // as EXPLAIN SELECT nextval('s')
		{`EXPLAIN SELECT "f"()`, false},                       // planning may run it (an IMMUTABLE f is folded)
	})
}
