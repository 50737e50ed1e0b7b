package postgres

import (
	"context"
	"database/sql"
	"strconv"
	"strings"

	"github.com/sqlretry/sqlretry/internal/marker"
)

// MarkerTableDDL creates the default marker table of [MarkerVerifier] and
// its index, for a migration. The table must be an ordinary (logged) table,
// so that a standby promoted in a failover has its rows.
const MarkerTableDDL = `CREATE TABLE IF NOT EXISTS sqlretry_commit_marks (
    mark_key   char(32) PRIMARY KEY,  -- sqlretry.NewKey: 32 hex digits
    created_at bigint   NOT NULL,     -- unix seconds, by the marking client's clock
    tombstone  smallint NOT NULL      -- 1: written by Committed, proving the marker never committed
);
CREATE INDEX IF NOT EXISTS sqlretry_commit_marks_created_at ON sqlretry_commit_marks (created_at);
`

// markerDialect is PostgreSQL's for package marker.
var markerDialect = marker.Dialect{
	Engine: "postgres",
	Param:  func(n int) string { return "$" + strconv.Itoa(n) },
	DDL: func(t marker.Name, index string) []string {
		return []string{
			"CREATE TABLE IF NOT EXISTS " + t.String() + " (mark_key char(32) PRIMARY KEY, created_at bigint NOT NULL, tombstone smallint NOT NULL)",
			"CREATE INDEX IF NOT EXISTS " + index + " ON " + t.String() + " (created_at)",
		}
	},
	// SKIP LOCKED: two pruners at once delete different rows rather than
	// wait for each other.
	Prune: func(t, cutoff, limit string) string {
		return "DELETE FROM " + t + " WHERE mark_key IN (SELECT mark_key FROM " + t + " WHERE created_at < " + cutoff +
			" ORDER BY created_at LIMIT " + limit + " FOR UPDATE SKIP LOCKED)"
	},
	Classify:  Classify,
	Duplicate: []string{"23505"}, // unique_violation (PostgreSQL manual, Appendix A)
	ReadOnly:  []string{"25006"}, // read_only_sql_transaction (the same)
	Confirm:   confirmReplicated,
	Schema:    markerSchema,
	Quote:     func(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` },
}

// markerSchema is the schema an unqualified marker table resolves to
// through db: the table's own if it exists, else current_schema() (where
// CREATE TABLE would put it).
func markerSchema(ctx context.Context, db *sql.DB, t marker.Name) (string, error) {
	var schema sql.NullString
	err := db.QueryRowContext(ctx, "SELECT coalesce((SELECT n.nspname FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "+
		"WHERE c.oid = pg_catalog.to_regclass($1)), pg_catalog.current_schema())", t.String()).Scan(&schema)
	return schema.String, err
}

// MarkerVerifier is a sqlretry.CommitVerifier that settles an ambiguous COMMIT
// with a row of its own in a marker table, so that its verdict survives a
// failover. Just before COMMIT, Mark inserts a random key (128 bits) into
// the table, inside the transaction; after a COMMIT whose outcome is
// unknown, Committed looks the key up through the pool, on whichever server
// is primary now:
//
//   - found: the transaction committed (and its data is on this server);
//   - not found: Committed inserts the key itself, as a tombstone, in
//     autocommit. The primary key makes that insert wait while the marked
//     transaction is still in flight (its backend has not noticed the lost
//     connection, or its COMMIT waits on a synchronous standby): a
//     duplicate-key error then means it committed; a tombstone that lands
//     means it never can, and RunTx runs the transaction again;
//   - still locked after MaxWait: [ErrMarkerInFlight], and the call ends in
//     sqlretry.ErrAmbiguous.
//
// Use [CommitVerifier] (pg_xact_status) when the pool always reaches the
// server the transaction ran on: it needs no table and is the cheapest.
// Use MarkerVerifier where a failover can move the pool to a promoted
// standby, on which pg_xact_status cannot answer ([ErrHistoryChanged]), or
// combine the two with sqlretry.Verifiers(CommitVerifier{},
// &MarkerVerifier{}): the first answers while it can, the marker after a
// failover. The same verifier exists for every engine (mysql, sqlite,
// mssql).
//
// It costs one INSERT per transaction and a table: [MarkerTableDDL], or set
// CreateTable. Old rows are deleted every PruneEvery transactions, in
// autocommit, before the transaction opens (RunTx calls BeforeTx): at most
// 4×PruneEvery rows older than TTL at a time, so the table holds about an
// hour of transactions, and the delete takes no lock inside a user's
// transaction.
//
//	p, err := sqlretry.New(sqlretry.Config{Classifier: postgres.Classifier, CommitVerifier: &postgres.MarkerVerifier{}})
//	err = sqlretry.RunTx(ctx, db, p, sqlretry.Write("transfer", nil), nil, fn)
//
// Its fields, all optional (the zero value is ready to use):
//
//   - Table string: the marker table, optionally schema-qualified; if "",
//     sqlretry_commit_marks, which must exist ([MarkerTableDDL]). An
//     unqualified name is qualified once, before the first transaction,
//     with its schema (the table's, else current_schema()) through the pool the verifier is
//     first used with, so that a transaction that changes its
//     search_path still marks the table the settle reads: use
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
