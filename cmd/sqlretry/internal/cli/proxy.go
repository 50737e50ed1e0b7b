package cli

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/sqlretry/sqlretry/cmd/sqlretry/internal/engine"
	"github.com/sqlretry/sqlretry/faults/proxy"
)

func init() {
	register(command{name: "proxy", summary: "a TCP fault proxy in front of a real PostgreSQL or MariaDB server", run: runProxy})
}

// proxyReport is the --json document, written when the proxy stops.
type proxyReport struct {
	Listen   string       `json:"listen"`
	Target   string       `json:"target"`
	Protocol string       `json:"protocol"`
	Fault    string       `json:"fault"`
	Ran      string       `json:"ran"`
	Counts   proxy.Counts `json:"counts"`
}

const proxyUsage = `usage: sqlretry proxy --target HOST:PORT [--listen ADDR] [--fault FAULT] [--protocol PROTOCOL] [--duration D] [--json]

A TCP fault proxy in front of a real server, for rehearsing outages: point the application at
the address it prints. --protocol (auto, or an engine whose wire protocol it reads) matters only
for cut-after-commit and hold-after-commit, which must recognise a COMMIT on the wire.

The proxy cannot read inside TLS: connect through it with sslmode=disable (PostgreSQL; psql, pgx
and libpq default to sslmode=prefer, which uses TLS when the server offers it) or tls=false
(go-sql-driver/mysql; --ssl-mode=DISABLED for mysql, --skip-ssl for mariadb). A connection that
turns to TLS is passed on untouched, warned about on standard error, and counted ("tls" in --json).`

// proxyEngines are the engines whose wire protocol the proxy reads.
var proxyEngines = []engine.Engine{engine.Postgres, engine.Cockroach, engine.MySQL}

// parseProtocol reads --protocol: auto, or an engine in the command's one
// vocabulary (CockroachDB speaks PostgreSQL's protocol, MariaDB MySQL's).
func parseProtocol(s string) (proxy.Protocol, error) {
	if strings.EqualFold(s, "auto") {
		return proxy.ProtocolAuto, nil
	}
	e, err := engine.Parse(s, proxyEngines...)
	if err != nil {
		return "", err
	}
	if e == engine.MySQL {
		return proxy.ProtocolMySQL, nil
	}
	return proxy.ProtocolPostgres, nil
}

// runProxy runs a proxy.Proxy until ctx is done or --duration passes.
//
// Standard output's first line is "listening on HOST:PORT" (with --json it
// goes to standard error, so standard output holds only the JSON document
// written at the end). Each injected fault is logged on standard error.
func runProxy(ctx context.Context, env Env, args []string) int {
	fs := newFlagSet("proxy")
	listen := fs.String("listen", "127.0.0.1:0", "address to listen on")
	target := fs.String("target", "", "the server's address, HOST:PORT (required)")
	faultFlag := fs.String("fault", "none", "none, latency=DURATION, reset, blackhole, refuse, cut-after-commit or hold-after-commit")
	protoFlag := fs.String("protocol", "auto", "wire protocol, for cut-after-commit: auto, or the engine: "+engine.Help(proxyEngines...))
	duration := fs.Duration("duration", 0, "stop after this long (0: run until interrupted)")
	asJSON := fs.Bool("json", false, "write a JSON report when the proxy stops")
	if exit, done := parseNoArgs(env, fs, proxyUsage, args); done {
		return exit
	}
	if *target == "" {
		return badInput(env, "proxy: --target HOST:PORT is required")
	}
	if _, _, err := net.SplitHostPort(*target); err != nil {
		return badInput(env, "proxy: --target %q: %v", *target, err)
	}
	if _, _, err := net.SplitHostPort(*listen); err != nil {
		return badInput(env, "proxy: --listen %q: %v", *listen, err)
	}
	fault, err := proxy.ParseFault(*faultFlag)
	if err != nil {
		return badInput(env, "proxy: --fault: %v", err)
	}
	proto, err := parseProtocol(*protoFlag)
	if err != nil {
		return badInput(env, "proxy: --protocol: %v", err)
	}
	if *duration < 0 {
		return badInput(env, "proxy: --duration %v is negative", *duration)
	}

	var handler slog.Handler = slog.NewTextHandler(env.Stderr, nil)
	if *asJSON {
		handler = slog.NewJSONHandler(env.Stderr, nil)
	}
	p, err := proxy.New(proxy.Config{
		Listen: *listen, Target: *target, Protocol: proto, Fault: fault, Logger: slog.New(handler),
	})
	if err != nil {
		return badInput(env, "proxy: %s", proxyFlagError(err))
	}
	start := time.Now()
	first := env.Stdout
	if *asJSON {
		first = env.Stderr
	}
	fmt.Fprintf(first, "listening on %s\n", p.Addr())

	if *duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *duration)
		defer cancel()
	}
	<-ctx.Done()
	p.Close()
	counts := p.Counts()
	if *asJSON {
		writeJSON(env.Stdout, proxyReport{
			Listen: p.Addr(), Target: *target, Protocol: string(proto), Fault: fault.String(),
			Ran: time.Since(start).Round(time.Millisecond).String(), Counts: counts,
		})
		warnTLS(env, counts)
		return ExitOK
	}
	fmt.Fprintf(env.Stdout, "stopped after %s: %d connections (%d encrypted with TLS), %d faults injected (latency %d, reset %d, blackhole %d, refuse %d, cut-after-commit %d; %d COMMITs seen)\n",
		time.Since(start).Round(time.Millisecond), counts.Connections, counts.TLS, counts.Faults(),
		counts.Latency, counts.Reset, counts.Blackhole, counts.Refuse, counts.CutAfterCommit, counts.CommitsSeen)
	warnTLS(env, counts)
	return ExitOK
}

// proxyFlagError names the flag behind a proxy.Config field in an error of
// proxy.New ("proxy: Config.Listen: ..." is --listen's).
func proxyFlagError(err error) string {
	msg := err.Error()
	for field, flag := range map[string]string{"Listen": "--listen", "Target": "--target", "Protocol": "--protocol", "Fault": "--fault"} {
		if rest, ok := strings.CutPrefix(msg, "proxy: Config."+field); ok {
			return flag + rest
		}
	}
	return msg
}

// warnTLS repeats, at the end, the warning the proxy logged as each
// encrypted connection began: among many log lines it is easy to miss, and
// a run whose COMMITs went unseen must not look like a clean one.
func warnTLS(env Env, c proxy.Counts) {
	if c.TLS > 0 {
		fmt.Fprintf(env.Stderr, "warning: %d of %d connections used TLS: %s\n", c.TLS, c.Connections, proxy.TLSAdvice)
	}
}
