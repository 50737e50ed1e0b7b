// Command sqlretry proves, explains and rehearses SQL retry configurations.
//
//	sqlretry chaos [flags]              drive a task store under injected faults and check nothing was lost or applied twice
//	sqlretry classify --engine E CODE   say whether an engine's error code is retryable, and in which phase
//	sqlretry rules explain RULES        expand JDBC-style retryExec / retryConn rules
//	sqlretry proxy --target HOST:PORT   a TCP fault proxy for rehearsing outages against a real server
//	sqlretry version
//
// Every subcommand takes --json, writes one JSON document to standard output,
// and exits 0 on success, 1 when a check it ran failed, 2 on bad input.
//
// --engine takes the same names in every subcommand: sqlserver (mssql),
// postgres (postgresql, pg), cockroach (cockroachdb, crdb), mysql (mariadb)
// and sqlite (sqlite3); chaos drives sqlite, postgres and mysql.
//
// The command is a module of its own (github.com/sqlretry/sqlretry/cmd/sqlretry),
// so that its plotting and terminal dependencies never reach a program that
// imports only the library; go.work at the repository root joins the two.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/sqlretry/sqlretry/cmd/sqlretry/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
