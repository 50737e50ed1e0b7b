package sqlite

import (
	"github.com/sqlretry/sqlretry/internal/marker"
)

// MarkerTableDDL creates the default marker table of [MarkerVerifier] with
// its index, for a migration.
const MarkerTableDDL = `CREATE TABLE IF NOT EXISTS sqlretry_commit_marks (
    mark_key   TEXT    NOT NULL PRIMARY KEY, -- sqlretry.NewKey: 32 hex digits
    created_at INTEGER NOT NULL,             -- unix seconds, by the marking client's clock
    tombstone  INTEGER NOT NULL              -- 1: written by Committed, proving the marker never committed
);
CREATE INDEX IF NOT EXISTS sqlretry_commit_marks_created_at ON sqlretry_commit_marks (created_at);
`

// markerDialect is package marker's dialect for SQLite.
var markerDialect = marker.Dialect{
	Engine: "sqlite",
	Param:  func(int) string { return "?" },
	DDL: func(t marker.Name, index string) []string {
		if t.Schema != "" { // an attached database: the index name carries it
			index = t.Schema + "." + index
		}
		return []string{
			"CREATE TABLE IF NOT EXISTS " + t.String() + " (mark_key TEXT NOT NULL PRIMARY KEY, created_at INTEGER NOT NULL, tombstone INTEGER NOT NULL)",
			"CREATE INDEX IF NOT EXISTS " + index + " ON " + t.Table + " (created_at)",
		}
	},
	// DELETE ... LIMIT needs a compile-time option: a subquery instead.
	Prune: func(t, cutoff, limit string) string {
		return "DELETE FROM " + t + " WHERE mark_key IN (SELECT mark_key FROM " + t + " WHERE created_at < " + cutoff +
			" ORDER BY created_at LIMIT " + limit + ")"
	},
	Classify: Classify,
	// SQLITE_CONSTRAINT_PRIMARYKEY (1555), SQLITE_CONSTRAINT_UNIQUE (2067):
	// sqlite.org rescode.html.
	Duplicate: []string{"SQLITE_CONSTRAINT_PRIMARYKEY", "SQLITE_CONSTRAINT_UNIQUE"},
}

// MarkerVerifier is a sqlretry.CommitVerifier for SQLite that settles an
// ambiguous COMMIT with a row of its own in a marker table. Just before
// COMMIT, Mark inserts a random key (128 bits) into the table, inside the
// transaction; after a COMMIT whose outcome is unknown, Committed looks the
// key up on another connection of the pool:
//
//   - found: the transaction committed (and its data is on this server);
//   - not found: Committed inserts the key itself, as a tombstone, in
//     autocommit. The primary key makes that insert wait while the marked
//     transaction is still in flight (another connection of the process
//     still holds the write lock): a duplicate-key error then means it
//     committed; a tombstone that lands means it never can, and RunTx runs
//     the transaction again;
//   - still locked after MaxWait: [ErrMarkerInFlight], and the call ends in
//     sqlretry.ErrAmbiguous.
//
// SQLite runs in the process, so a COMMIT is ambiguous only when a layer
// between (a driver wrapper, a network file system) loses its result; the
// tombstone then waits for the write lock (SQLITE_BUSY is tried again until
// MaxWait). The same verifier exists for every engine (postgres, mysql,
// mssql).
//
// It costs one INSERT per transaction and a table: [MarkerTableDDL], or set
// CreateTable. Old rows are deleted every PruneEvery transactions, in
// autocommit, before the transaction opens (RunTx calls BeforeTx): at most
// 4×PruneEvery rows older than TTL at a time, so the table holds about an
// hour of transactions, and the delete takes no lock inside a user's
// transaction.
//
//	p, err := sqlretry.New(sqlretry.Config{Classifier: sqlite.Classifier, CommitVerifier: &sqlite.MarkerVerifier{}})
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
