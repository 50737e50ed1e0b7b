package taskstore

import (
	"context"
	"embed"
	"strconv"
	"strings"

	"github.com/sqlretry/sqlretry"
)

//go:embed migrations/*.sql
var migrations embed.FS

// schemaVersion is the version the embedded migrations create. Version 2:
// on MariaDB every text column compares as bytes (utf8mb4_nopad_bin).
const schemaVersion = 2

// Schema returns the dialect's migration: the CREATE statements for the
// tasks, status_audit, task_runs and taskstore_migrations tables, in the
// shape of the current schema version.
func Schema(d Dialect) string {
	b, err := migrations.ReadFile("migrations/" + d.String() + ".sql")
	if err != nil {
		return ""
	}
	return string(b)
}

// upgrade returns the statements that bring the dialect's tables from
// version-1 to version, "" if that version changes nothing for the dialect:
// the file migrations/<dialect>.<version>.sql.
func upgrade(d Dialect, version int) string {
	b, err := migrations.ReadFile("migrations/" + d.String() + "." + strconv.Itoa(version) + ".sql")
	if err != nil {
		return ""
	}
	return string(b)
}

// statements splits a migration into statements: they end with ";" at the
// end of a line, and "--" lines are comments.
func statements(schema string) []string {
	var out []string
	var cur strings.Builder
	for _, line := range strings.Split(schema, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "--") {
			continue
		}
		cur.WriteString(line)
		cur.WriteByte('\n')
		if strings.HasSuffix(strings.TrimSpace(line), ";") {
			if s := strings.TrimSpace(cur.String()); s != ";" {
				out = append(out, strings.TrimSuffix(s, ";"))
			}
			cur.Reset()
		}
	}
	return out
}

// Migrate creates the store's tables and indexes if they do not exist,
// upgrades tables an earlier version created, and records the schema
// version. Every CREATE is IF NOT EXISTS, an upgrade runs only on a
// database whose recorded version is older and leaves a table already in
// shape as it is, and the version row is an upsert, so Migrate is
// idempotent: it is replayed freely after a transient failure, and running
// it twice is harmless. An upgrade may rebuild a table (on MariaDB, version
// 2 converts the text columns' collation): run it while the tables are
// quiet.
func (s *Store) Migrate(ctx context.Context) error {
	stmts := statements(Schema(s.dialect))
	var record string
	switch s.dialect {
	case MariaDB:
		record = `INSERT INTO taskstore_migrations (version, applied_us) VALUES (?, ?) ON DUPLICATE KEY UPDATE version = version`
	default:
		record = `INSERT INTO taskstore_migrations (version, applied_us) VALUES (?, ?) ON CONFLICT (version) DO NOTHING`
	}
	record = s.dialect.bind(record)
	return s.pol.Read.Do(ctx, sqlretry.Idempotent("taskstore.migrate"), func(ctx context.Context) error {
		for _, q := range stmts {
			if _, err := s.db.ExecContext(ctx, q); err != nil {
				return err
			}
		}
		// A database with no version recorded may hold tables a Migrate of
		// version 1 created and could not record: it is upgraded too (on
		// tables the CREATEs just made, an upgrade changes nothing).
		var current int
		if err := s.db.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM taskstore_migrations`).Scan(&current); err != nil {
			return err
		}
		for v := current + 1; v <= schemaVersion; v++ {
			for _, q := range statements(upgrade(s.dialect, v)) {
				if _, err := s.db.ExecContext(ctx, q); err != nil {
					return err
				}
			}
			if _, err := s.db.ExecContext(ctx, record, v, s.now().UnixMicro()); err != nil {
				return err
			}
		}
		return nil
	})
}
