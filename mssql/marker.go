package mssql

import (
	"strconv"

	"github.com/sqlretry/sqlretry/internal/marker"
)

// MarkerTableDDL creates the default marker table of [MarkerVerifier] with
// its index, if it does not exist, for a migration (one batch).
const MarkerTableDDL = `IF OBJECT_ID(N'sqlretry_commit_marks', N'U') IS NULL
CREATE TABLE sqlretry_commit_marks (
    mark_key   CHAR(32) NOT NULL PRIMARY KEY, -- sqlretry.NewKey: 32 hex digits
    created_at BIGINT   NOT NULL,             -- unix seconds, by the marking client's clock
    tombstone  SMALLINT NOT NULL,             -- 1: written by Committed, proving the marker never committed
    INDEX sqlretry_commit_marks_created_at (created_at)
);
`

// markerDialect is package marker's dialect for SQL Server and Azure SQL.
var markerDialect = marker.Dialect{
	Engine: "mssql",
	Param:  func(n int) string { return "@p" + strconv.Itoa(n) },
	DDL: func(t marker.Name, index string) []string {
		return []string{"IF OBJECT_ID(N'" + t.String() + "', N'U') IS NULL CREATE TABLE " + t.String() +
			" (mark_key CHAR(32) NOT NULL PRIMARY KEY, created_at BIGINT NOT NULL, tombstone SMALLINT NOT NULL, INDEX " + index + " (created_at))"}
	},
	Prune: func(t, cutoff, limit string) string {
		return "DELETE TOP (" + limit + ") FROM " + t + " WHERE created_at < " + cutoff
	},
	Classify: Classify,
	// 2627: violation of a PRIMARY KEY or UNIQUE constraint; 2601: duplicate
	// key row in a unique index (SQL Server database engine errors).
	Duplicate: []string{"2627", "2601"},
}

// MarkerVerifier is a sqlretry.CommitVerifier for SQL Server and Azure SQL that
// settles an ambiguous COMMIT with a row of its own in a marker table, so
// that its verdict survives a failover. Just before COMMIT, Mark inserts a
// random key (128 bits) into the table, inside the transaction; after a
// COMMIT whose outcome is unknown, Committed looks the key up through the
// pool, on whichever server is primary now:
//
//   - found: the transaction committed (and its data is on this server);
//   - not found: Committed inserts the key itself, as a tombstone, in
//     autocommit. The primary key makes that insert wait while the marked
//     transaction is still in flight (its session has not noticed the lost
//     connection, or its COMMIT waits on a synchronous availability-group
//     replica): a duplicate-key error then means it committed; a tombstone
//     that lands means it never can, and RunTx runs the transaction again;
//   - still locked after MaxWait: [ErrMarkerInFlight], and the call ends in
//     sqlretry.ErrAmbiguous.
//
// It is package mssql's only CommitVerifier: without it, an ambiguous
// COMMIT can be settled only by an Op's own Verify. Its verdict is about the
// server the pool reaches now: after an availability-group failover, about
// the new primary's data, which is what a replay must be judged by. The same verifier exists for every engine
// (postgres, mysql, sqlite).
//
// It costs one INSERT per transaction and a table: [MarkerTableDDL], or set
// CreateTable. Old rows are deleted every PruneEvery transactions, in
// autocommit, before the transaction opens (RunTx calls BeforeTx): at most
// 4×PruneEvery rows older than TTL at a time, so the table holds about an
// hour of transactions, and the delete takes no lock inside a user's
// transaction.
//
//	p, err := sqlretry.New(sqlretry.Config{Classifier: mssql.Classifier, CommitVerifier: &mssql.MarkerVerifier{}})
//	err = sqlretry.RunTx(ctx, db, p, sqlretry.Write("transfer", nil), nil, fn)
//
// Its fields, all optional (the zero value is ready to use):
//
//   - Table string: the marker table, optionally schema-qualified; if "",
//     sqlretry_commit_marks, which must exist ([MarkerTableDDL]).
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
