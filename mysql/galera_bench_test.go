package mysql_test

import (
	"context"
	"database/sql"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/sqlretry/sqlretry/mysql"
)

// BenchmarkStatementProtocol is what GaleraConnector's text path costs a
// statement with an argument (a primary-key SELECT) against the prepared
// path go-sql-driver takes by default, on the shared MariaDB
// (127.0.0.1:3306; skipped when it does not answer).
func BenchmarkStatementProtocol(b *testing.B) {
	cfg, err := gomysql.ParseDSN("root@tcp(127.0.0.1:3306)/test")
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		open func() (*sql.DB, error)
	}{
		{"prepared", func() (*sql.DB, error) {
			conn, err := gomysql.NewConnector(cfg)
			return sql.OpenDB(conn), err
		}},
		{"text", func() (*sql.DB, error) {
			conn, err := mysql.GaleraConnector(cfg)
			return sql.OpenDB(conn), err
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			db, err := c.open()
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			ctx := context.Background()
			if err := db.PingContext(ctx); err != nil {
				b.Skipf("no MariaDB at 127.0.0.1:3306: %v", err)
			}
			db.SetMaxIdleConns(1)
			var v int
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if err := db.QueryRowContext(ctx, "SELECT ? + 1", 41).Scan(&v); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
