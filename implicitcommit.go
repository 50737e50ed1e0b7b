package sqlretry

import "github.com/sqlretry/sqlretry/internal/sqltext"

// commitsImplicitly reports whether text, run inside a transaction on MySQL
// or MariaDB, may commit that transaction on its own: a statement that
// causes an implicit commit. Such a statement commits before it executes,
// so it commits even when it fails (a CREATE TABLE of a table that exists,
// a CHANGE MASTER TO the server refuses); a failure later in the
// transaction then rolls back only what came after it.
//
// The lists are those of
//   - the MySQL 8.0 and 8.4 Reference Manual, "Statements That Cause an
//     Implicit Commit" (https://dev.mysql.com/doc/refman/8.0/en/implicit-commit.html,
//     https://dev.mysql.com/doc/refman/8.4/en/implicit-commit.html);
//   - the MariaDB Knowledge Base, "SQL statements That Cause an Implicit
//     Commit" (https://mariadb.com/kb/en/sql-statements-that-cause-an-implicit-commit/);
//   - the servers' own tables, where the manuals leave statements out: the
//     commands flagged CF_AUTO_COMMIT_TRANS in init_sql_command_flags of
//     sql/sql_parse.cc (mysql-server 8.0: CLONE, IMPORT TABLE, RESTART,
//     ALTER INSTANCE, INSTALL/UNINSTALL COMPONENT, CREATE/ALTER/DROP
//     RESOURCE GROUP, CHANGE REPLICATION FILTER, SET DEFAULT ROLE; MariaDB
//     server: the same DDL, FLUSH, RESET, the account statements);
//   - and MariaDB 10.11 itself, which TestImplicitCommitMatchesServer asks
//     about every statement here that it can run: SET DEFAULT ROLE, SET
//     STATEMENT … FOR CHECK TABLE …, CREATE TEMPORARY SEQUENCE, BACKUP
//     STAGE and BACKUP LOCK commit, though no manual says so; START/STOP
//     SLAVE, CHANGE MASTER TO, CACHE INDEX, LOAD INDEX INTO CACHE and
//     SHUTDOWN do not, though the manuals say so (MySQL's do: they are
//     kept).
//
// It reads the verb and, for the few verbs where that is not enough, the
// words after it, and where it cannot tell it says yes: a transaction
// wrongly taken as partly committed ends in ErrAmbiguous instead of being
// run again, while one wrongly taken as whole would be run again over its
// committed part. So a verb it does not know commits, and so does
// a text of several statements (the text analysis names only the first
// verb; MySQL's executable comments count as several).
func commitsImplicitly(text string, in sqltext.Info) bool {
	if in.Multi {
		return true
	}
	rule, known := implicitCommitVerbs[in.Verb]
	if !known {
		// A verb this table does not name, or none the text analysis
		// could read ("# comment" first: a comment only MySQL reads).
		return true
	}
	switch rule {
	case commitsNever:
		return false
	case unlessTemporaryCreate:
		// CREATE TEMPORARY TABLE commits nothing (both manuals; MariaDB's
		// CREATE TEMPORARY SEQUENCE does commit, measured).
		return !leads(text, "create", "temporary", "table") &&
			!leads(text, "create", "or", "replace", "temporary", "table")
	case unlessTemporaryDrop:
		// DROP TEMPORARY TABLE (both manuals), MariaDB's DROP TEMPORARY
		// SEQUENCE and DROP PREPARE, DEALLOCATE PREPARE's synonym
		// (measured), commit nothing. DROP TABLE of a temporary table,
		// without the word, commits.
		return !leads(text, "drop", "temporary", "table") &&
			!leads(text, "drop", "temporary", "sequence") &&
			!leads(text, "drop", "prepare")
	case unlessStatementAnalyzed:
		// ANALYZE TABLE commits; MariaDB's ANALYZE [FORMAT=JSON] SELECT,
		// INSERT, UPDATE, DELETE, REPLACE runs the statement and reports
		// on it, and commits nothing (measured).
		for _, w := range [...]string{"select", "insert", "update", "delete", "replace", "format"} {
			if leads(text, "analyze", w) {
				return false
			}
		}
		return true
	case ifSetCommits:
		// SET PASSWORD (both manuals), SET DEFAULT ROLE (MySQL's
		// sql_parse.cc; MariaDB, measured), SET autocommit = 1 when it
		// was 0 (both manuals: whether it was is the session's state, not
		// the text's), MariaDB's SET STATEMENT … FOR a statement that
		// commits. The words are looked for anywhere in the text, in
		// strings and comments too: a SET @v = 'password' is taken to
		// commit, which is safe, and no spelling of the keywords the
		// server reads can hide from the search.
		for _, w := range [...]string{"password", "role", "autocommit", "statement"} {
			if containsFold(text, w) {
				return true
			}
		}
		return false
	}
	return true
}

// commitRule says which statements that begin with a verb commit
// implicitly.
type commitRule uint8

const (
	commitsAlways           commitRule = iota
	commitsNever                       // none of them
	unlessTemporaryCreate              // all but CREATE [OR REPLACE] TEMPORARY TABLE
	unlessTemporaryDrop                // all but DROP TEMPORARY TABLE/SEQUENCE, DROP PREPARE
	unlessStatementAnalyzed            // ANALYZE TABLE, not MariaDB's ANALYZE SELECT …
	ifSetCommits                       // SET PASSWORD, SET DEFAULT ROLE, SET autocommit …
)

// implicitCommitVerbs names every verb of a MySQL or MariaDB statement and
// whether statements that begin with it commit implicitly (see
// commitsImplicitly for the sources).
var implicitCommitVerbs = map[string]commitRule{
	// DDL: ALTER (of anything: a temporary table's ALTER TABLE commits
	// too, MySQL's manual and MariaDB measured; ALTER USER, ALTER
	// INSTANCE, ALTER SEQUENCE), CREATE and DROP (DATABASE, EVENT,
	// FUNCTION — a loadable function's too on MariaDB 10.11, measured,
	// though its KB says not —, INDEX — on a temporary table too —,
	// PROCEDURE, ROLE, SEQUENCE, SERVER, SPATIAL REFERENCE SYSTEM, TABLE,
	// TABLESPACE, TRIGGER, USER, VIEW, RESOURCE GROUP, PACKAGE), RENAME
	// TABLE/USER, TRUNCATE TABLE (a temporary table's too).
	"alter":    commitsAlways,
	"create":   unlessTemporaryCreate,
	"drop":     unlessTemporaryDrop,
	"rename":   commitsAlways,
	"truncate": commitsAlways,
	// Accounts: GRANT, REVOKE (of privileges and of roles).
	"grant":  commitsAlways,
	"revoke": commitsAlways,
	// Transaction control and locking: BEGIN and START TRANSACTION commit
	// the open transaction (Session.After reads them too); LOCK TABLES;
	// UNLOCK TABLES commits only if LOCK TABLES locked tables, which
	// inside a transaction has already committed it, but both manuals
	// list it.
	"begin":  commitsAlways,
	"lock":   commitsAlways,
	"unlock": commitsAlways,
	// Administration: ANALYZE TABLE, CHECK TABLE (and MariaDB's CHECK
	// VIEW), OPTIMIZE TABLE, REPAIR TABLE, CACHE INDEX and LOAD INDEX INTO
	// CACHE (MySQL's sql_parse.cc commits for them; MariaDB 10.11 does
	// not, measured), FLUSH, RESET (RESET PERSIST does not, but RESET
	// MASTER, SLAVE, REPLICA, QUERY CACHE do), INSTALL and UNINSTALL
	// (PLUGIN, SONAME, COMPONENT), SHUTDOWN, RESTART, CLONE, IMPORT TABLE.
	// LOAD DATA and LOAD XML commit only for NDB tables (MySQL's manual):
	// the text does not name the engine, so LOAD is taken to commit.
	"analyze":   unlessStatementAnalyzed,
	"check":     commitsAlways,
	"optimize":  commitsAlways,
	"repair":    commitsAlways,
	"cache":     commitsAlways,
	"load":      commitsAlways,
	"flush":     commitsAlways,
	"reset":     commitsAlways,
	"install":   commitsAlways,
	"uninstall": commitsAlways,
	"shutdown":  commitsAlways,
	"restart":   commitsAlways,
	"clone":     commitsAlways,
	"import":    commitsAlways,
	// Replication: START/STOP SLAVE, REPLICA, ALL SLAVES, GROUP_REPLICATION
	// (STOP GROUP_REPLICATION commits after it runs, MySQL's
	// sql_parse.cc), CHANGE MASTER TO, CHANGE REPLICATION SOURCE TO,
	// CHANGE REPLICATION FILTER: MySQL commits for all of them; MariaDB
	// 10.11, measured, for none but RESET SLAVE (STOP SLAVE refuses to run
	// inside a transaction), though its KB lists them. BINLOG replays
	// binary log events, which may hold DDL or a COMMIT. MariaDB's BACKUP
	// STAGE and BACKUP LOCK commit (measured; in no manual).
	"start":  commitsAlways,
	"stop":   commitsAlways,
	"change": commitsAlways,
	"binlog": commitsAlways,
	"backup": commitsAlways,
	"set":    ifSetCommits,

	// Statements that commit nothing: reads and writes of rows (a
	// stored function they call cannot commit: MySQL refuses COMMIT, and
	// every statement that commits implicitly, inside one), statements
	// about the session and its statements, CHECKSUM TABLE (in neither
	// manual; MariaDB measured), PURGE BINARY LOGS (in neither manual, nor
	// flagged in sql_parse.cc; MariaDB measured). COMMIT, ROLLBACK, SAVEPOINT, RELEASE
	// and XA are transaction control, which Session.After reads; CALL,
	// DO, EXECUTE are opaque, and taint on their own.
	"select": commitsNever, "insert": commitsNever, "update": commitsNever, "delete": commitsNever, "replace": commitsNever,
	"values": commitsNever, "table": commitsNever, "with": commitsNever, "handler": commitsNever,
	"show": commitsNever, "explain": commitsNever, "describe": commitsNever, "desc": commitsNever, "help": commitsNever,
	"use": commitsNever, "kill": commitsNever, "prepare": commitsNever, "deallocate": commitsNever,
	"get": commitsNever, "signal": commitsNever, "resignal": commitsNever, "checksum": commitsNever, "purge": commitsNever,
	"commit": commitsNever, "rollback": commitsNever, "savepoint": commitsNever, "release": commitsNever,
	"xa": commitsNever, "call": commitsNever, "do": commitsNever, "execute": commitsNever,
}

// leads reports whether text begins with words, in any case: past ASCII
// white space only, each word followed by white space and the last by a
// byte that cannot continue a word. A text written otherwise (a comment
// before or between the words, a quoted name) is not recognised, which the
// callers take to mean that it commits: the safe reading.
func leads(text string, words ...string) bool {
	i := skipSpace(text, 0)
	for k, w := range words {
		if len(text)-i < len(w) || !sqltext.EqualFold(text[i:i+len(w)], w) {
			return false
		}
		i += len(w)
		if k == len(words)-1 {
			break
		}
		j := skipSpace(text, i)
		if j == i {
			return false
		}
		i = j
	}
	return i == len(text) || !wordByte(text[i])
}

// skipSpace returns the index of the first byte at or after i in s that is
// not ASCII white space.
func skipSpace(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r' || s[i] == '\f' || s[i] == '\v') {
		i++
	}
	return i
}

// wordByte reports whether c may stand in an unquoted MySQL name.
func wordByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '$' || c >= 0x80
}

// containsFold reports whether s contains word (lower-case ASCII), ignoring
// ASCII case.
func containsFold(s, word string) bool {
	for i := 0; i+len(word) <= len(s); i++ {
		if sqltext.EqualFold(s[i:i+len(word)], word) {
			return true
		}
	}
	return false
}
