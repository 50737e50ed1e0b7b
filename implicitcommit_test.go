package sqlretry

import (
	"testing"

	"github.com/sqlretry/sqlretry/internal/sqltext"
)

// TestTaintsReadsImplicitCommits: the tracker's verdict on texts the server
// cannot judge here (MySQL-only statements) and on texts written to mislead
// a reader of the first word: a comment only MySQL reads, a word of
// transaction control inside DDL, a statement after the first, keywords in
// strings and comments. Where it cannot read the words it must say "taints".
// TestImplicitCommitMatchesServer holds the rest against MariaDB.
func TestTaintsReadsImplicitCommits(t *testing.T) {
	for _, tc := range []struct {
		text string
		want bool
	}{
		// MySQL 8.0/8.4 statements MariaDB does not have.
		{"CHANGE REPLICATION SOURCE TO SOURCE_HOST = 'h'", true},
		{"CHANGE REPLICATION FILTER REPLICATE_DO_DB = (d)", true},
		{"START REPLICA", true},
		{"STOP GROUP_REPLICATION", true},
		{"RESET BINARY LOGS AND GTIDS", true},
		{"RESET PERSIST", true}, // does not commit (MySQL manual), but RESET is read by its verb
		{"CREATE SPATIAL REFERENCE SYSTEM 4120 NAME 'x' DEFINITION 'y'", true},
		{"CREATE RESOURCE GROUP g TYPE = USER", true},
		{"ALTER INSTANCE ROTATE INNODB MASTER KEY", true},
		{"INSTALL COMPONENT 'file://component_validate_password'", true},
		{"IMPORT TABLE FROM '/tmp/t.sdi'", true},
		{"CLONE LOCAL DATA DIRECTORY = '/tmp/c'", true},
		{"RESTART", true},
		{"LOAD DATA INFILE '/tmp/x' INTO TABLE ndb_t", true}, // commits for NDB tables
		{"SET PASSWORD FOR u = 'x'", true},
		{"SET DEFAULT ROLE ALL TO u", true},
		{"SET RESOURCE GROUP g", false},
		{"SET @x = 1", false},
		{"SET NAMES utf8mb4", false},
		{"SET SESSION sql_mode = 'ANSI'", false},
		{"SET autocommit = 1", true}, // commits if autocommit was 0
		// The first word read past a comment, and a comment only MySQL reads.
		{"/* maintenance */ CHECK TABLE t", true},
		{"-- maintenance\nCHECK TABLE t", true},
		{"# maintenance\nCHECK TABLE t", true},
		{"/*!40101 CHECK TABLE t */", true},
		{"/*M!100100 CHECK TABLE t */", true},
		{"  check\ttable t", true},
		// Words inside DDL that the transaction-control reading stops at.
		{"CREATE TABLE t (begin DATETIME, `commit` INT, transaction INT)", true},
		{"ALTER TABLE t ADD COLUMN autocommit INT", true},
		{"CREATE PROCEDURE p() BEGIN INSERT INTO t VALUES (1); END", true},
		{"CREATE TRIGGER tr BEFORE INSERT ON t FOR EACH ROW BEGIN SET NEW.a = 1; END", true},
		// Temporary tables: not committing only when written plainly.
		{"CREATE TEMPORARY TABLE x (a INT)", false},
		{"create  temporary\ttable x (a INT)", false},
		{"CREATE OR REPLACE TEMPORARY TABLE x (begin INT)", false},
		{"CREATE TEMPORARY TABLE x AS SELECT * FROM t", false},
		// Safe but imprecise: the text analysis's Multi reads "x SELECT" as
		// a T-SQL batch of two statements, and a second statement may
		// commit. It may become false once Multi can be asked of MySQL.
		{"CREATE TEMPORARY TABLE x SELECT * FROM t", true},
		{"DROP TEMPORARY TABLE IF EXISTS x", false},
		{"DROP TEMPORARY SEQUENCE s", false},
		{"CREATE TEMPORARY SEQUENCE s", true}, // commits on MariaDB 10.11, measured
		{"/* x */ CREATE TEMPORARY TABLE x (a INT)", true},
		{"CREATE /* x */ TEMPORARY TABLE x (a INT)", true},
		{"CREATE TEMPORARY TABLES x (a INT)", true},
		{"CREATE TEMPORARY TABLE x (a INT); DROP TABLE t", true},
		{"CREATE TEMPORARY TABLE x (a INT) /*!; DROP TABLE t */", true},
		{"CREATE TABLE temporary_x (a INT)", true},
		{"DROP TABLE x", true},
		// ANALYZE TABLE commits, MariaDB's ANALYZE of a statement does not.
		{"ANALYZE TABLE t", true},
		{"ANALYZE NO_WRITE_TO_BINLOG TABLE t", true},
		{"ANALYZE SELECT * FROM t", false},
		{"ANALYZE FORMAT=JSON UPDATE t SET a = 1", false},
		{"ANALYZE selected", true},
		// A statement after the first.
		{"INSERT INTO t VALUES (1); CHECK TABLE t", true},
		{"SELECT 1; SELECT 2", true},
		{"INSERT INTO t VALUES ('; CHECK TABLE t')", false},
		// Keywords in strings and comments of statements that never commit.
		{"SELECT 'CREATE TABLE x' FROM t", false},
		{"INSERT INTO t VALUES ('DROP TABLE t') -- CHECK TABLE t", false},
		{"UPDATE t SET note = 'LOCK TABLES' WHERE id = 1", false},
		{"WITH x AS (SELECT 1) SELECT * FROM x", false},
		{"SELECT * FROM t FOR UPDATE", false},
		// ... and in a SET, where the search is for words anywhere: safe.
		{"SET @note = 'password reset'", true},
		// A verb the table does not know is taken to commit.
		{"FROBNICATE t", true},
	} {
		if got := taints(sqltext.MySQL, tc.text, sqltext.Analyze(tc.text)); got != tc.want {
			t.Errorf("taints(MySQL, %q) = %v, want %v", tc.text, got, tc.want)
		}
		if got := taints(sqltext.AnyEngine, tc.text, sqltext.Analyze(tc.text)); !got && tc.want {
			t.Errorf("taints(AnyEngine, %q) = false, want true: an unknown engine may be MySQL", tc.text)
		}
	}
}

// TestTaintsImplicitCommitIsMySQLOnly: the list is MySQL's and MariaDB's.
// On PostgreSQL, SQL Server and SQLite DDL, RESET of a setting, LOCK TABLE
// and ANALYZE run inside the transaction and roll back with it.
func TestTaintsImplicitCommitIsMySQLOnly(t *testing.T) {
	for _, e := range []sqltext.Engine{sqltext.Postgres, sqltext.SQLServer, sqltext.SQLite} {
		for _, text := range []string{
			"CREATE TABLE t (a int)", "DROP TABLE t", "ALTER TABLE t ADD COLUMN b int", "TRUNCATE t",
			"RESET search_path", "LOCK TABLE t IN EXCLUSIVE MODE", "ANALYZE t", "CHECKPOINT",
			"SET search_path = app", "CREATE TABLE t (begin int)", "INSERT INTO t VALUES (1); INSERT INTO t VALUES (2)",
		} {
			if taints(e, text, sqltext.Analyze(text)) {
				t.Errorf("taints(%d, %q) = true, want false: it does not commit implicitly there", e, text)
			}
		}
	}
}

// TestImplicitCommitVerbsAreVerbs: every verb of the table is one
// sqltext.Verb can return (lower-case ASCII letters), so none is dead.
func TestImplicitCommitVerbsAreVerbs(t *testing.T) {
	for v := range implicitCommitVerbs {
		if got := sqltext.Verb(v + " x"); got != v {
			t.Errorf("Verb(%q) = %q: the table's key %q can never match", v+" x", got, v)
		}
	}
}
