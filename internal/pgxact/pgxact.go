// Package pgxact holds the SQL that settles a PostgreSQL COMMIT by its
// transaction id, for package postgres (database/sql) and pgxretry (pgx):
// one home, so that the two never read the server's history differently.
package pgxact

// HistoryExpr names the server history a transaction id belongs to. Ids
// are handed out again when a history forks, so a status is only believed
// from the history that gave the id out. It joins three values, each read
// from the server, none of them depending on the session's settings:
//
//   - the timeline, as the first 8 hex digits of the name of the WAL file
//     being written: a promotion (or a point-in-time restore) moves every
//     later write to a new timeline, and the new primary hands the ids of
//     transactions it never received out again;
//   - pg_postmaster_start_time(), in microseconds: a restart after a crash
//     (pg_ctl stop -m immediate, a power loss) recovers only the WAL that was
//     written out, and hands out again the ids that only the lost WAL named
//     (a transaction whose COMMIT was in flight), on the same timeline. It
//     also tells apart two servers on the same timeline number (another
//     cluster, a standby);
//   - the statistics reset time of pg_stat_bgwriter, in microseconds: when
//     a backend crashes the postmaster ends every session and runs crash
//     recovery without restarting itself (its start time stays), and crash
//     recovery discards the statistics and resets this time. An
//     administrator's pg_stat_reset_shared('bgwriter') resets it too, which
//     only makes an unknown COMMIT of that moment ambiguous. Reading it
//     costs microseconds, except in a session that set
//     stats_fetch_consistency = snapshot (not the default), where the
//     first read of a transaction copies every statistics entry.
//
// Not in it: the system identifier, which pg_control_system() reads from
// the pg_control file on every call, a read that can catch the file being
// rewritten by a checkpoint on servers before PostgreSQL 16 (a CRC error
// that would fail the transaction); the start time already tells two
// clusters apart. pg_walfile_name fails during recovery, where nothing
// commits.
const HistoryExpr = "pg_catalog.substr(pg_catalog.pg_walfile_name(pg_catalog.pg_current_wal_lsn()), 1, 8)" +
	" || '/' || (extract(epoch FROM pg_catalog.pg_postmaster_start_time()) * 1000000)::bigint" +
	" || '/' || coalesce((extract(epoch FROM (SELECT stats_reset FROM pg_catalog.pg_stat_bgwriter)) * 1000000)::bigint::text, '-')"

// MarkQuery takes the transaction's id, assigning one if it has none, and
// the history it runs on: "xid@history". On a hot standby, where none can be
// assigned and nothing can commit, it returns NULL.
const MarkQuery = "SELECT CASE WHEN pg_catalog.pg_is_in_recovery() THEN NULL ELSE pg_catalog.pg_current_xact_id()::text || '@' || " + HistoryExpr + " END"

// StatusQuery asks the status of transaction $1 if the server is on
// history $2, and returns the server's history (NULL on a standby, in
// recovery) and whether it has synchronous standbys. pg_xact_status itself
// fails for an id the server has not handed out yet.
const StatusQuery = "SELECT h, CASE WHEN h = $2 THEN pg_catalog.pg_xact_status($1::text::xid8) END, " +
	"pg_catalog.current_setting('synchronous_standby_names') <> '' FROM " +
	"(SELECT CASE WHEN pg_catalog.pg_is_in_recovery() THEN NULL ELSE " + HistoryExpr + " END) AS s(h)"

// The barrier's two statements: synchronous_commit at least "on" for its
// transaction (a session or role may have set local or off), and one WAL
// record, a transactional logical message (which any user may write; with
// wal_level=logical, decoding plugins see it, prefix "sqlretry").
const (
	BarrierSyncCommit = "SELECT pg_catalog.set_config('synchronous_commit', CASE WHEN pg_catalog.current_setting('synchronous_commit') IN ('off', 'local') " +
		"THEN 'on' ELSE pg_catalog.current_setting('synchronous_commit') END, true)"
	BarrierWrite = "SELECT pg_catalog.pg_logical_emit_message(true, 'sqlretry', '')"
)

// SyncStandbysQuery reports whether the server waits for synchronous
// standbys.
const SyncStandbysQuery = "SELECT pg_catalog.current_setting('synchronous_standby_names') <> ''"
