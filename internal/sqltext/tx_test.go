package sqltext

import "testing"

// state names a Session for the table below.
func state(s Session) string {
	switch {
	case s.Unsure():
		return "unsure"
	case s.open && s.manual:
		return "open+manual"
	case s.open:
		return "open"
	case s.manual:
		return "manual"
	}
	return "idle"
}

func TestSessionAfter(t *testing.T) {
	open := Session{open: true}
	manual := Session{manual: true}
	sp := Session{open: true, savepoint: true}
	tests := []struct {
		before Session
		text   string
		failed bool
		want   string
	}{
		{Session{}, "SELECT 1", false, "idle"},
		{Session{}, "BEGIN TRAN", false, "open"},
		{Session{}, "-- c\nsavepoint a", false, "open"},
		{Session{}, "beginning", false, "idle"},
		{Session{}, "", false, "idle"},
		{Session{}, "/* unterminated", false, "idle"},
		{Session{}, "UPDATE t SET autocommit = 0", false, "idle"},
		{open, "rollback work", false, "idle"},
		{Session{}, "INSERT INTO t VALUES (1)", true, "idle"},
		{Session{}, "BEGIN", false, "open"},
		{Session{}, "begin transaction isolation level serializable", false, "open"},
		{Session{}, "BEGIN IMMEDIATE", false, "open"},
		{Session{}, "START TRANSACTION READ ONLY", false, "open"},
		{Session{}, "/* c */ START TRANSACTION", false, "open"},
		{Session{}, "SAVEPOINT a", false, "open"},
		{Session{}, "XA START 'x'", false, "open"},
		{open, "XA END 'x'", false, "open"},
		{open, "XA COMMIT 'x'", false, "idle"},
		{open, "COMMIT", false, "idle"},
		// A failed COMMIT may have been refused before it was sent (the
		// transaction goes on) or have committed in flight: unsure.
		{open, "COMMIT", true, "unsure"},
		{open, "ROLLBACK", true, "unsure"},
		{Session{}, "SET autocommit = 1", true, "unsure"},
		{manual, "SET autocommit = 1", true, "unsure"},
		{open, "END", false, "idle"},
		{open, "commit work", false, "idle"},
		{open, "COMMIT AND CHAIN", false, "open"},
		{open, "COMMIT AND NO CHAIN", false, "idle"},
		{Session{}, "COMMIT AND CHAIN", false, "open"},
		{open, "ROLLBACK AND CHAIN", false, "open"},
		{open, "ROLLBACK TO SAVEPOINT a", false, "open"},
		{open, "ROLLBACK TO a", false, "open"},
		{open, "ROLLBACK WORK TO SAVEPOINT a", false, "open"},
		{open, "ROLLBACK", false, "idle"},
		{open, "ABORT", false, "idle"},
		{open, "ROLLBACK TRAN sp1", false, "unsure"},
		{open, "RELEASE SAVEPOINT a", false, "open"},
		{sp, "RELEASE SAVEPOINT a", false, "unsure"},
		{open, "PREPARE TRANSACTION 'x'", false, "idle"},
		{open, "COMMIT PREPARED 'x'", false, "open"},
		{open, "BEGIN", false, "unsure"},
		{Session{}, "SET autocommit = 0", false, "manual"},
		{Session{}, "SET `autocommit` = 0", false, "manual"},
		{Session{}, "SET autocommit := 0", false, "manual"},
		{Session{}, "set autocommit=off", false, "manual"},
		{Session{}, "SET sql_mode='', autocommit=0", false, "manual"},
		{Session{}, "SET @@local.autocommit=0", false, "manual"},
		{Session{}, "SET @@session.autocommit = 0", false, "manual"},
		{Session{}, "SET SESSION autocommit = 0", false, "manual"},
		{Session{}, "SET autocommit = ?", false, "unsure"},
		{Session{}, "SET autocommit = @x", false, "unsure"},
		{Session{}, "SET GLOBAL autocommit = 0", false, "unsure"},
		{Session{}, "SET @@global.autocommit = 1", false, "unsure"},
		{Session{}, "SET IMPLICIT_TRANSACTIONS ON", false, "manual"},
		{Session{}, "SET ANSI_DEFAULTS ON", false, "manual"},
		// Turning implicit transactions off commits nothing: the one
		// they began may still be open.
		{manual, "SET IMPLICIT_TRANSACTIONS OFF", false, "unsure"},
		{Session{}, "SET IMPLICIT_TRANSACTIONS OFF", false, "idle"},
		// SET autocommit=1 when it is already 1 changes nothing: a
		// transaction opened with START TRANSACTION goes on.
		{open, "SET autocommit=1", false, "open"},
		{Session{}, "SET STATEMENT max_statement_time=1 FOR START TRANSACTION", false, "open"},
		{Session{}, "SET STATEMENT max_statement_time=1 FOR SELECT 1", false, "idle"},
		{Session{}, "SET completion_type = CHAIN", false, "idle"},
		{Session{chain: true, open: true}, "COMMIT", false, "open"},
		{Session{chain: true, open: true}, "COMMIT AND NO CHAIN", false, "idle"},
		{Session{}, "SET completion_type = @x", false, "unsure"},
		{Session{engine: Postgres}, "CALL p()", false, "idle"},
		{Session{engine: SQLServer}, "EXEC p", false, "idle"},
		{Session{engine: SQLServer}, "EXEC p", true, "unsure"},
		{Session{engine: MySQL}, "CALL p()", false, "unsure"},
		{Session{engine: Postgres}, "DO $$BEGIN COMMIT; END$$", false, "idle"},
		{Session{}, "/*!START TRANSACTION*/", false, "unsure"},
		{Session{engine: MySQL}, "/*!40101 SET autocommit=0 */", false, "unsure"},
		{Session{engine: Postgres}, "SELECT 1 /*!x*/", false, "idle"},
		{manual, "SET autocommit = 1", false, "idle"},
		{manual, "COMMIT", false, "manual"},
		{Session{open: true, manual: true}, "SET autocommit=1", false, "idle"},
		{Session{}, "SET search_path = a, b", false, "idle"},
		{Session{}, "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE", false, "idle"},
		{Session{}, "BEGIN; INSERT INTO t VALUES (1); COMMIT", false, "idle"},
		{Session{}, "BEGIN; INSERT INTO t VALUES (1); COMMIT", true, "unsure"},
		{Session{}, "INSERT INTO t VALUES (1); BEGIN", false, "open"},
		{Session{}, "INSERT INTO t VALUES (1) BEGIN TRAN", false, "unsure"},
		{Session{}, "SELECT 1 EXEC p", false, "unsure"},
		{Session{}, "CALL p()", false, "unsure"},
		{Session{}, "EXEC p", false, "unsure"},
		{Session{}, "BEGIN TRY INSERT INTO t VALUES (1) END TRY BEGIN CATCH END CATCH", false, "unsure"},
		{Session{}, "IF 1=1 BEGIN TRAN", false, "unsure"},
		{Session{}, "INSERT OR ROLLBACK INTO t VALUES (1)", false, "unsure"},
		{Session{}, "SELECT 'BEGIN' AS x, \"commit\" FROM t -- rollback", false, "idle"},
		{Session{}, "SELECT @@autocommit", false, "idle"},
		{Session{txUnsure: true}, "ROLLBACK", false, "idle"},
		{Session{txUnsure: true}, "COMMIT", false, "unsure"},
		{Session{modeOff: true}, "SET autocommit = 1", false, "idle"},
	}
	for _, tt := range tests {
		if got := state(tt.before.After(tt.text, tt.failed)); got != tt.want {
			t.Errorf("%s.After(%q, failed=%v) = %s, want %s", state(tt.before), tt.text, tt.failed, got, tt.want)
		}
	}
}

func TestAnalyzeShape(t *testing.T) {
	tests := []struct {
		text                   string
		multi, opaque, control bool
	}{
		{"SELECT 1", false, false, false},
		{"SELECT 1;", false, false, false},
		{"SELECT 1; ", false, false, false},
		{"INSERT INTO t VALUES (1); UPDATE t SET x = 1", true, false, false},
		{"INSERT INTO t VALUES (';')", false, false, false},
		{"CALL p()", false, true, true},
		// MySQL reads "$$" otherwise, and sees BEGIN and COMMIT: the text is
		// transaction control for a session whose engine may be MySQL.
		{"DO $$BEGIN COMMIT; END$$", false, true, true},
		{"EXEC sp_x", false, true, true},
		{"BEGIN", false, false, true},
		{"BEGIN TRY SELECT 1 END TRY BEGIN CATCH END CATCH", false, true, true},
		{"SET autocommit=0", false, false, true},
		{"SELECT @@autocommit", false, false, true},
	}
	for _, tt := range tests {
		in := Analyze(tt.text)
		if in.Multi != tt.multi || in.Opaque != tt.opaque || in.TxControl != tt.control {
			t.Errorf("Analyze(%q) = multi %v opaque %v txControl %v, want %v %v %v", tt.text, in.Multi, in.Opaque, in.TxControl, tt.multi, tt.opaque, tt.control)
		}
	}
}

// Every text whose After can differ from its start state must be TxControl,
// or the database/sql layer would skip After for it.
func FuzzSessionAfter(f *testing.F) {
	for _, s := range []string{"BEGIN", "SET autocommit=0", "COMMIT AND CHAIN", "SELECT 1 BEGIN TRAN", "CALL p()"} {
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, s string, failed bool) {
		in := Analyze(s)
		for _, before := range []Session{{}, {open: true}, {manual: true}, {open: true, savepoint: true}} {
			after := before.After(s, failed)
			if after != before && !in.TxControl {
				t.Fatalf("After(%q) changed %s to %s but Analyze says no transaction control", s, state(before), state(after))
			}
		}
	})
}

func TestAnalyzeSetIsNotTxControl(t *testing.T) {
	for _, q := range []string{"SET search_path = a", "SET k 1", "SET NAMES utf8mb4"} {
		if Analyze(q).TxControl {
			t.Errorf("Analyze(%q).TxControl = true: a SET of another variable pins nothing", q)
		}
	}
}

// A word of transaction control inside a PostgreSQL or MySQL statement acts
// on nothing (a statement starts only after a ";"), and a session on an
// engine without an autocommit mode is never taken as "autocommit may be
// off": both pinned the connection, without retries, until it closed (ON
// COMMIT DROP on PostgreSQL, a column named begin). On SQL Server and
// SQLite the words still make the session Unsure, and a plain ROLLBACK
// settles a SQLite one.
func TestStrayWordsByEngine(t *testing.T) {
	tests := []struct {
		engine Engine
		text   string
		pinned bool // after the text
		after  bool // after the text, then ROLLBACK
	}{
		{Postgres, "CREATE TEMP TABLE t (a int) ON COMMIT DROP", false, false},
		{Postgres, "SELECT 1 AS begin", false, false},
		{MySQL, "SELECT 1 AS `x`, 2 AS begin", false, false},
		{SQLServer, "UPDATE t SET a = 1 COMMIT", true, true},
		{SQLite, "INSERT OR ROLLBACK INTO t VALUES (1)", true, false},
		{AnyEngine, "CREATE TEMP TABLE t (a int) ON COMMIT DROP", true, true},
		// EXECUTE that calls nothing.
		{Postgres, "CREATE TRIGGER g BEFORE INSERT ON t FOR EACH ROW EXECUTE FUNCTION f()", false, false},
		{SQLServer, "GRANT EXECUTE ON dbo.p TO bob", false, false},
		{SQLServer, "GRANT SELECT, EXECUTE ON SCHEMA::dbo TO bob", false, false},
		{SQLServer, "INSERT INTO t VALUES (1) EXEC p", true, true},
	}
	for _, tt := range tests {
		s := NewSession(tt.engine, true).After(tt.text, false)
		if s.Pinned() != tt.pinned {
			t.Errorf("%v: After(%q).Pinned() = %v, want %v", tt.engine, tt.text, s.Pinned(), tt.pinned)
		}
		if got := s.After("ROLLBACK", false).Pinned(); got != tt.after {
			t.Errorf("%v: After(%q), ROLLBACK: Pinned() = %v, want %v", tt.engine, tt.text, got, tt.after)
		}
	}
}

// EXECUTE in a trigger's definition or a grant runs no code: the text is a
// single statement with a visible effect, not an opaque call, so its
// failure is returned as it is and its success is not transaction control.
func TestExecuteThatCallsNothing(t *testing.T) {
	for _, q := range []string{
		"CREATE TRIGGER g BEFORE INSERT ON t FOR EACH ROW EXECUTE FUNCTION f()",
		"CREATE TRIGGER g AFTER UPDATE ON t FOR EACH ROW EXECUTE PROCEDURE f()",
		"CREATE EVENT TRIGGER e ON ddl_command_start EXECUTE FUNCTION f()",
		"GRANT EXECUTE ON FUNCTION f() TO bob",
		"REVOKE EXECUTE ON FUNCTION f() FROM bob",
		"ALTER DEFAULT PRIVILEGES GRANT EXECUTE ON FUNCTIONS TO bob",
		"GRANT SELECT, EXECUTE ON SCHEMA::dbo TO bob",
	} {
		if in := Analyze(q); in.Opaque || in.TxControl {
			t.Errorf("Analyze(%q) = opaque %v, txControl %v; want neither", q, in.Opaque, in.TxControl)
		}
	}
	for _, q := range []string{"EXEC p", "INSERT INTO t VALUES (1) EXEC p", "SELECT 1 EXECUTE p"} {
		if in := Analyze(q); !in.Opaque || !in.TxControl {
			t.Errorf("Analyze(%q) = opaque %v, txControl %v; want both (a T-SQL call)", q, in.Opaque, in.TxControl)
		}
	}
}

// Texts an engine reads otherwise than the shared reading, and blocks whose
// END is no COMMIT: the tracker must not believe a transaction ended (or
// autocommit came on) when the engine may have run nothing of the kind.
func TestSessionAfterReadsAsTheEngine(t *testing.T) {
	tests := []struct {
		engine Engine
		text   string
	}{
		{MySQL, "SELECT 1 # note; COMMIT"},
		{MySQL, `SELECT 'it\'; COMMIT; -- '`},
		{Postgres, `SELECT E'it\'; COMMIT; -- '`},
		{Postgres, "CREATE FUNCTION f() RETURNS int LANGUAGE sql BEGIN ATOMIC SELECT 1; END"},
		{Postgres, "CREATE FUNCTION f(x int) RETURNS int LANGUAGE sql BEGIN ATOMIC SELECT CASE WHEN x > 0 THEN 1 ELSE 0 END; END"},
		{MySQL, "BEGIN NOT ATOMIC START TRANSACTION; INSERT INTO t VALUES (1); END"},
		{MySQL, "SET autocommit = DEFAULT"},
	}
	for _, tt := range tests {
		open := Session{engine: tt.engine, open: true}
		if s := open.After(tt.text, false); !s.Pinned() {
			t.Errorf("%v: open.After(%q) is not pinned: a statement after it would be replayed outside the transaction", tt.engine, tt.text)
		}
	}
	// A function body's END is no COMMIT, and what follows the body is read.
	s := Session{engine: Postgres, open: true}.After("CREATE FUNCTION f() RETURNS int LANGUAGE sql BEGIN ATOMIC SELECT 1; END; COMMIT", false)
	if s.Pinned() {
		t.Errorf("the COMMIT after a BEGIN ATOMIC body was not read: %s", state(s))
	}
}

// A CREATE statement's body (MySQL's BEGIN … END of a procedure, trigger,
// function or event) runs later, not now: its COMMIT and SET autocommit
// must not be read as run. The tracker believed a session with autocommit
// off had turned it on, and would have replayed its statements outside
// their implicit transaction.
func TestCreateBodyRunsNothingNow(t *testing.T) {
	for _, q := range []string{
		"CREATE PROCEDURE p() BEGIN DECLARE x INT; SET autocommit = 1; END",
		"CREATE DEFINER=`root`@`%` PROCEDURE p() BEGIN IF 1 THEN SELECT 1; END IF; SET autocommit = 1; END",
		"CREATE TRIGGER g BEFORE INSERT ON t FOR EACH ROW BEGIN SET @x = 1; SET autocommit = 1; END",
		"CREATE PROCEDURE p() BEGIN WHILE 1 DO SELECT 1; END WHILE; COMMIT; SET autocommit = 1; END",
	} {
		if s := NewSession(MySQL, false).After(q, false); !s.Pinned() {
			t.Errorf("manual.After(%q) = %s: the body's SET autocommit was read as run", q, state(s))
		}
	}
	// What follows the body is read.
	s := NewSession(MySQL, true).After("CREATE PROCEDURE p() BEGIN SELECT 1; END; START TRANSACTION", false)
	if !s.Pinned() {
		t.Errorf("the START TRANSACTION after a procedure body was not read: %s", state(s))
	}
}

// A T-SQL CREATE PROCEDURE runs nothing of its body: its BEGIN, COMMIT and
// EXEC are no strays, and the session keeps its retries. A word of
// transaction control outside any body still is one.
func TestCreateProcedureKeepsSQLServerSession(t *testing.T) {
	for _, q := range []string{
		"CREATE PROCEDURE p AS BEGIN UPDATE t SET a = 1; COMMIT; END",
		"CREATE PROCEDURE p AS BEGIN BEGIN TRAN; EXEC q; COMMIT TRAN END",
	} {
		if s := NewSession(SQLServer, true).After(q, false); s.Pinned() {
			t.Errorf("After(%q) = %s: creating a procedure ran nothing", q, state(s))
		}
	}
	if s := NewSession(SQLServer, true).After("UPDATE t SET a = 1 COMMIT", false); !s.Pinned() {
		t.Errorf("a T-SQL batch's stray COMMIT no longer makes the session unsure")
	}
}
