package mysql

import (
	"context"
	"database/sql"
	"strings"

	"github.com/sqlretry/sqlretry/internal/marker"
)

// MarkerTableDDL creates the default marker table of [MarkerVerifier] with
// its index, for a migration. It must be InnoDB (a table that does not roll
// back would keep a rolled-back transaction's marker) and replicated, so
// that a replica promoted in a failover has its rows.
const MarkerTableDDL = `CREATE TABLE IF NOT EXISTS sqlretry_commit_marks (
    mark_key   CHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY, -- sqlretry.NewKey: 32 hex digits
    created_at BIGINT   NOT NULL, -- unix seconds, by the marking client's clock
    tombstone  SMALLINT NOT NULL, -- 1: written by Committed, proving the marker never committed
    INDEX sqlretry_commit_marks_created_at (created_at)
) ENGINE=InnoDB;
`

// markerDialect is package marker's dialect for MySQL and MariaDB (InnoDB).
var markerDialect = marker.Dialect{
	Engine: "mysql",
	Param:  func(int) string { return "?" },
	DDL: func(t marker.Name, index string) []string {
		return []string{"CREATE TABLE IF NOT EXISTS " + t.String() + " (mark_key CHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY, " +
			"created_at BIGINT NOT NULL, tombstone SMALLINT NOT NULL, INDEX " + index + " (created_at)) ENGINE=InnoDB"}
	},
	// In autocommit, on the created_at index, oldest first, with a LIMIT:
	// its next-key locks last one short statement and cover only old rows
	// (and, when fewer than the limit are old, the gap before the oldest
	// young one), never a user transaction's.
	Prune: func(t, cutoff, limit string) string {
		return "DELETE FROM " + t + " WHERE created_at < " + cutoff + " ORDER BY created_at LIMIT " + limit
	},
	Classify:  Classify,
	Duplicate: []string{"1062"}, // ER_DUP_ENTRY (MySQL server error reference)
	ReadOnly:  []string{"1792"}, // ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION (the same)
	Schema:    markerSchema,
	Quote:     func(s string) string { return "`" + strings.ReplaceAll(s, "`", "``") + "`" },
}

// markerSchema is the database an unqualified marker table resolves to
// through db: DATABASE(), the pool's (a transaction that runs USE another
// database would otherwise insert its marker there).
func markerSchema(ctx context.Context, db *sql.DB, _ marker.Name) (string, error) {
	var schema sql.NullString
	err := db.QueryRowContext(ctx, "SELECT DATABASE()").Scan(&schema)
	return schema.String, err
}

// MarkerVerifier is a sqlretry.CommitVerifier for MySQL and MariaDB (InnoDB)
// that settles an ambiguous COMMIT with a row of its own in a marker table,
// so that its verdict survives a failover. Just before COMMIT, Mark inserts
// a random key (128 bits) into the table, inside the transaction; after a
// COMMIT whose outcome is unknown, Committed looks the key up through the
// pool, on whichever server is primary now:
//
//   - found: the transaction committed (and its data is on this server);
//   - not found: Committed inserts the key itself, as a tombstone, in
//     autocommit. The primary key makes that insert wait while the marked
//     transaction is still in flight (its connection thread has not noticed
//     the lost connection, or its COMMIT waits on a semi-synchronous
//     replica): a duplicate-key error then means it committed; a tombstone
//     that lands means it never can, and RunTx runs the transaction again;
//   - still locked after MaxWait: [ErrMarkerInFlight], and the call ends in
//     sqlretry.ErrAmbiguous.
//
// Without it, an ambiguous COMMIT on MySQL can be settled only by an Op's
// own Verify. Its verdict is about the server the pool reaches now: after a
// failover, about the promoted replica's data, which is what a replay must
// be judged by. The same verifier exists for every engine (postgres, sqlite,
// mssql).
//
// It costs one INSERT per transaction and a table: [MarkerTableDDL], or set
// CreateTable. Old rows are deleted every PruneEvery transactions, in
// autocommit, before the transaction opens (RunTx calls BeforeTx): at most
// 4×PruneEvery rows older than TTL at a time, so the table holds about an
// hour of transactions, and the delete takes no lock inside a user's
// transaction.
//
//	p, err := sqlretry.New(sqlretry.Config{Classifier: mysql.Classifier, CommitVerifier: &mysql.MarkerVerifier{}})
//	err = sqlretry.RunTx(ctx, db, p, sqlretry.Write("transfer", nil), nil, fn)
//
// Its fields, all optional (the zero value is ready to use):
//
//   - Table string: the marker table, optionally schema-qualified; if "",
//     sqlretry_commit_marks, which must exist ([MarkerTableDDL]). An
//     unqualified name is qualified once, before the first transaction,
//     with its database (DATABASE()) through the pool the verifier is
//     first used with, so that a transaction that changes its
//     database (USE) still marks the table the settle reads: use
//     one verifier per database.
//   - CreateTable bool: create the table and its index (IF NOT EXISTS) on
//     first use on each *sql.DB, before the first transaction opens.
//   - MaxWait time.Duration: how long Committed waits for a key another
//     transaction holds, and a prune may take; if 0, 5 s.
//   - TTL time.Duration: the age after which a marker is pruned, at least
//     a minute and 10×MaxWait; if 0, 1 h.
//   - PruneEvery int: transactions between two prunes; if 0, 100; if
//     negative, never.
//
// Its methods are Mark, Committed and BeforeTx (sqlretry.CommitVerifier,
// sqlretry.TxSetup). A MarkerVerifier is safe for concurrent use; its fields
// must not change after its first use, which reads them (an invalid one
// makes every call fail with an error naming it).
type MarkerVerifier = marker.MarkerVerifier[markerEngine]

// ErrMarkerInFlight is the error of [MarkerVerifier.Committed] when the
// marker's key stayed locked for MaxWait: the transaction may still be
// committing. sqlretry.RunTx then returns an error matching
// sqlretry.ErrAmbiguous.
var ErrMarkerInFlight = marker.ErrInFlight

// markerEngine is MarkerVerifier's type argument: it hands package marker
// this package's dialect.
type markerEngine struct{}

func (markerEngine) Dialect() *marker.Dialect { return &markerDialect }
