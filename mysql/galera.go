package mysql

import (
	"database/sql/driver"

	gomysql "github.com/go-sql-driver/mysql"
)

// GaleraConnector returns a go-sql-driver/mysql connector for cfg, a
// MariaDB Galera node, that sends every statement with arguments as text
// (cfg's InterpolateParams set, on a clone) instead of as a prepared
// statement. Use it, underneath [github.com/sqlretry/sqlretry.Connector]
// or with sql.OpenDB, for every node a multi-primary cluster is written
// through. It is safe for concurrent use, as go-sql-driver's connector is.
//
// Why: on MariaDB 10.11 (10.11.19 measured) with galera-4, a transaction
// that another node's write set brute-force aborts while go-sql-driver runs
// the COM_STMT_PREPARE of a SELECT sent after the transaction's writes (the
// driver prepares every statement with arguments by default) can be rolled
// back with no error reaching the client: the SELECT returns its rows,
// @@in_transaction then reads 0, what follows runs in autocommit, and COMMIT
// says OK. (The root package's TestGalera, with prepared statements, once
// saw a transaction applied in part so: its INSERT committed after its
// UPDATE had been rolled back.) With the raw driver, no sqlretry in the
// path, claim-shaped transactions from two clients per node of a three-node
// cluster (TestGaleraRawClaimSilentRollback) lost 44-182 per 10-15 s so, of
// 2,400-5,000; with that SELECT sent as text, or everything, none of about
// 33,000. MDEV-35446 reports the same symptom under the prepared-statement
// protocol; its fix (merged December 2024) predates 10.11.19, which still
// shows it. No client-side check stands in for sending text: reading
// @@in_transaction before COMMIT caught most losses but not all (34-42 per
// 15 s still lost with the check in the driver's Commit, none without the
// check once statements went as text).
//
// A statement whose arguments the driver cannot write as text (an argument
// type it does not know, a statement larger than max_allowed_packet) still
// goes prepared, and the DSN must not name a character set the driver
// refuses to interpolate (BIG5, CP932, GB2312, GBK, SJIS: NewConnector
// fails). The text path costs no extra round trip: it saves the PREPARE
// round trip and the CLOSE packet of each statement with arguments.
func GaleraConnector(cfg *gomysql.Config) (driver.Connector, error) {
	cfg = cfg.Clone()
	cfg.InterpolateParams = true
	return gomysql.NewConnector(cfg)
}
