package taskstore

import (
	"context"
	"embed"
	"strings"

	"github.com/sqlretry/sqlretry"
)

//go:embed migrations/*.sql
var migrations embed.FS

// schemaVersion is the version the embedded migrations create.
const schemaVersion = 1

// Schema returns the dialect's migration: the CREATE statements for the
// tasks, status_audit, task_runs and taskstore_migrations tables.
func Schema(d Dialect) string {
	b, err := migrations.ReadFile("migrations/" + d.String() + ".sql")
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

// Migrate creates the store's tables and indexes if they do not exist, and
// records the schema version. Every statement is IF NOT EXISTS and the
// version row is an upsert, so Migrate is idempotent: it is replayed freely
// after a transient failure, and running it twice is harmless.
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
		_, err := s.db.ExecContext(ctx, record, schemaVersion, s.now().UnixMicro())
		return err
	})
}
