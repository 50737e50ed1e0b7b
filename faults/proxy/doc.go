// Package proxy injects network faults between a database client and a real
// server. [Proxy] is a TCP proxy in front of a real PostgreSQL or MariaDB/MySQL
// server, for failures a driver wrapper cannot fake: the real driver's own
// reaction to a broken socket. At run time, for every connection or one, it
// passes, adds latency, resets connections, black-holes them, refuses new
// ones, or cuts a connection after the client's COMMIT reached the server but
// before the reply comes back (it reads the PostgreSQL and MySQL wire
// protocols far enough to recognise COMMIT):
//
//	p, err := proxy.New(proxy.Config{Target: "127.0.0.1:5432"}) // listens on 127.0.0.1, a free port
//	defer p.Close()
//	db, err := sql.Open("pgx", "postgres://postgres@"+p.Addr()+"/test?sslmode=disable")
//
//	p.SetFault(proxy.Fault{Mode: proxy.CutAfterCommit})
//	err = tx.Commit() // fails with a broken connection, yet the row is committed
//	p.SetFault(proxy.Fault{Mode: proxy.Refuse})        // an outage for new connections
//	p.SetFault(proxy.Fault{Mode: proxy.Pass})          // recovery
//	fmt.Println(p.Counts().CutAfterCommit)
//
// The same proxy is a command, for rehearsing against a running service:
//
//	sqlretry proxy --listen 127.0.0.1:0 --target 127.0.0.1:5432 --fault cut-after-commit
//	listening on 127.0.0.1:41234
//
// It runs until interrupted and logs each fault it injects on standard error.
//
// A Proxy is safe for concurrent use. The proxy listens on loopback
// unless told otherwise. It cannot read inside TLS, so cut-after-commit
// needs sslmode=disable (PostgreSQL; pgx and libpq default to prefer, which
// uses TLS when the server offers it) or tls=false (MySQL) between the
// client and the proxy. It recognises a connection that turns to TLS (a
// PostgreSQL SSLRequest the server accepts, a MySQL SSL request, a TLS
// ClientHello), passes it on untouched, logs a warning and counts it in
// [Counts].TLS, so that a run which needs to see COMMITs can refuse it.
package proxy
