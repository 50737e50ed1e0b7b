// Package dbtest gives tests real databases: the shared PostgreSQL and
// MariaDB servers, a fresh database on either for each test, and throwaway
// servers a test may stop, kill and restart.
//
//	func TestSomething(t *testing.T) {
//		dsn := dbtest.FreshPostgres(t) // a new empty database, dropped at cleanup
//		db, err := sql.Open("pgx", dsn)
//		...
//	}
//
//	func TestFailover(t *testing.T) {
//		srv := dbtest.StartPostgres(t) // initdb'd server on a free port, gone at cleanup
//		db, _ := sql.Open("pgx", srv.DSN())
//		...
//		srv.Kill()  // SIGKILL, like a crash
//		srv.Start() // same data directory, same port
//	}
//
// The shared servers are PostgreSQL at 127.0.0.1:5432 (user postgres, trust
// authentication, database test) and MariaDB at 127.0.0.1:3306 (root without
// password, database test); SQLRETRY_PG_DSN and SQLRETRY_MYSQL_DSN override
// them. Tests must never stop or restart the shared servers: that is what the
// throwaway servers are for.
//
// A test whose server is absent is skipped with a message saying what is
// missing, unless SQLRETRY_REQUIRE_DB=1, in which case it fails (CI sets it).
//
// Throwaway servers start from a data directory initialised once per machine
// and binary version and cached under os.TempDir() (sqlretry-dbtest/), so a
// start costs a directory copy and the server's own startup rather than an
// initdb (about 2 s) or a mariadb-install-db (about 3.5 s). On an idle 2-core
// machine the copy takes about 0.15 s (PostgreSQL, 29 MB in 1,000 files) and
// 0.1 s (MariaDB, 20 MB) and the server is ready 0.2 s (PostgreSQL) or 0.5 s
// (MariaDB) later; on a saturated machine each step can take seconds.
//
// The binaries are looked up in /usr/lib/postgresql/*/bin (or
// SQLRETRY_PG_BINDIR) and on PATH and in /usr/sbin for mariadbd. When the
// tests run as root, PostgreSQL runs as the postgres user, since it refuses
// to run as root.
package dbtest
