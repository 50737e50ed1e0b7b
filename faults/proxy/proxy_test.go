package proxy_test

import (
	"bytes"
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/faults/proxy"
	"github.com/sqlretry/sqlretry/internal/dbtest"
)

// echoServer is a loopback TCP server that echoes what it reads, stopped at
// cleanup.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() { defer wg.Done(); io.Copy(c, c); c.Close() }()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// logBuf is a concurrency-safe buffer for a proxy's log.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) { l.mu.Lock(); defer l.mu.Unlock(); return l.b.Write(p) }
func (l *logBuf) String() string              { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

func newProxy(t *testing.T, cfg proxy.Config) (*proxy.Proxy, *logBuf) {
	t.Helper()
	logs := &logBuf{}
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	p, err := proxy.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p, logs
}

// roundTrip writes msg on c and reads the echo, with a deadline so a test
// cannot hang.
func roundTrip(c net.Conn, msg string, wait time.Duration) (string, error) {
	c.SetDeadline(time.Now().Add(wait))
	defer c.SetDeadline(time.Time{})
	if _, err := c.Write([]byte(msg)); err != nil {
		return "", err
	}
	buf := make([]byte, len(msg))
	_, err := io.ReadFull(c, buf)
	return string(buf), err
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// dialTrip dials addr and makes one round trip; the proxy may reset the
// connection before the dial returns, so either step may fail.
func dialTrip(addr, msg string, wait time.Duration) error {
	c, err := net.DialTimeout("tcp", addr, wait)
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = roundTrip(c, msg, wait)
	return err
}

// waitFor polls cond, bounded, for state another goroutine sets.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for i := 0; i < 2000; i++ {
		if cond() {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

func TestParseFault(t *testing.T) {
	tests := []struct {
		in      string
		want    proxy.Fault
		wantErr bool
	}{
		{"none", proxy.Fault{Mode: proxy.Pass}, false},
		{"latency=50ms", proxy.Fault{Mode: proxy.Delay, Latency: 50 * time.Millisecond}, false},
		{"reset", proxy.Fault{Mode: proxy.Reset}, false},
		{"blackhole", proxy.Fault{Mode: proxy.Blackhole}, false},
		{"refuse", proxy.Fault{Mode: proxy.Refuse}, false},
		{"cut-after-commit", proxy.Fault{Mode: proxy.CutAfterCommit}, false},
		{"hold-after-commit", proxy.Fault{Mode: proxy.HoldAfterCommit}, false},
		{"latency=0s", proxy.Fault{}, true},
		{"latency=fast", proxy.Fault{}, true},
		{"latency", proxy.Fault{}, true},
		{"drop", proxy.Fault{}, true},
		{"", proxy.Fault{}, true},
	}
	for _, tt := range tests {
		got, err := proxy.ParseFault(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ParseFault(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
		if err == nil && got.String() != tt.in {
			t.Errorf("ParseFault(%q).String() = %q, want the input back", tt.in, got.String())
		}
	}
}

func TestNewProxyRejectsBadConfig(t *testing.T) {
	for _, cfg := range []proxy.Config{
		{},
		{Target: "no-port"},
		{Target: "127.0.0.1:1", Protocol: "oracle"},
		{Target: "127.0.0.1:1", Fault: proxy.Fault{Mode: proxy.Delay}},
		{Target: "127.0.0.1:1", Listen: "256.0.0.1:0"},
	} {
		if p, err := proxy.New(cfg); err == nil {
			p.Close()
			t.Errorf("New(%+v): got nil error, want one", cfg)
		}
	}
}

func TestProxyModes(t *testing.T) {
	echo := echoServer(t)
	const wait = 10 * time.Second

	t.Run("pass forwards and listens on loopback", func(t *testing.T) {
		p, _ := newProxy(t, proxy.Config{Target: echo})
		if !strings.HasPrefix(p.Addr(), "127.0.0.1:") {
			t.Errorf("got address %s, want 127.0.0.1:PORT", p.Addr())
		}
		c := dial(t, p.Addr())
		if got, err := roundTrip(c, "hello", wait); err != nil || got != "hello" {
			t.Fatalf("got %q, %v; want the echo", got, err)
		}
		if got := p.Counts(); got.Connections != 1 || got.Faults() != 0 {
			t.Errorf("got counts %+v, want 1 connection, no faults", got)
		}
	})

	t.Run("latency delays each chunk", func(t *testing.T) {
		p, logs := newProxy(t, proxy.Config{Target: echo, Fault: proxy.Fault{Mode: proxy.Delay, Latency: time.Millisecond}})
		c := dial(t, p.Addr())
		if got, err := roundTrip(c, "slow", wait); err != nil || got != "slow" {
			t.Fatalf("got %q, %v; want the echo", got, err)
		}
		if got := p.Counts().Latency; got < 2 { // one chunk each way
			t.Errorf("got %d delayed chunks, want at least 2", got)
		}
		if !strings.Contains(logs.String(), "fault=latency") {
			t.Errorf("log %q does not record the latency fault", logs.String())
		}
	})

	t.Run("reset breaks established and new connections", func(t *testing.T) {
		p, _ := newProxy(t, proxy.Config{Target: echo})
		c := dial(t, p.Addr())
		if _, err := roundTrip(c, "x", wait); err != nil {
			t.Fatal(err)
		}
		p.SetFault(proxy.Fault{Mode: proxy.Reset})
		if _, err := roundTrip(c, "y", wait); err == nil {
			t.Error("established connection after reset: got nil error, want a broken connection")
		}
		if err := dialTrip(p.Addr(), "z", wait); err == nil {
			t.Error("new connection under reset: got nil error, want a broken connection")
		}
		if got := p.Counts().Reset; got != 2 {
			t.Errorf("got %d resets, want 2", got)
		}
	})

	t.Run("refuse resets new connections only", func(t *testing.T) {
		p, logs := newProxy(t, proxy.Config{Target: echo})
		old := dial(t, p.Addr())
		if _, err := roundTrip(old, "x", wait); err != nil {
			t.Fatal(err)
		}
		p.SetFault(proxy.Fault{Mode: proxy.Refuse})
		if err := dialTrip(p.Addr(), "y", wait); err == nil {
			t.Error("new connection under refuse: got nil error, want it refused")
		}
		if got, err := roundTrip(old, "still", wait); err != nil || got != "still" {
			t.Errorf("established connection under refuse: got %q, %v; want the echo", got, err)
		}
		p.SetFault(proxy.Fault{Mode: proxy.Pass})
		c3 := dial(t, p.Addr())
		if got, err := roundTrip(c3, "back", wait); err != nil || got != "back" {
			t.Errorf("after the outage: got %q, %v; want the echo", got, err)
		}
		if got := p.Counts().Refuse; got != 1 {
			t.Errorf("got %d refused, want 1", got)
		}
		if !strings.Contains(logs.String(), "fault=refuse") {
			t.Errorf("log %q does not record the refusal", logs.String())
		}
	})

	t.Run("blackhole holds data until the fault lifts", func(t *testing.T) {
		p, _ := newProxy(t, proxy.Config{Target: echo})
		c := dial(t, p.Addr())
		if _, err := roundTrip(c, "x", wait); err != nil {
			t.Fatal(err)
		}
		p.SetFault(proxy.Fault{Mode: proxy.Blackhole})
		_, err := roundTrip(c, "held", 100*time.Millisecond)
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("under blackhole: got %v, want a read timeout", err)
		}
		if got := p.Counts().Blackhole; got != 1 {
			t.Errorf("got %d blackholed connections, want 1", got)
		}
		p.SetFault(proxy.Fault{Mode: proxy.Pass})
		c.SetReadDeadline(time.Now().Add(wait))
		buf := make([]byte, 4)
		if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "held" {
			t.Errorf("after the blackhole lifted: got %q, %v; want the held data", buf, err)
		}
	})

	t.Run("blackhole holds new connections; Close releases them", func(t *testing.T) {
		p, _ := newProxy(t, proxy.Config{Target: echo, Fault: proxy.Fault{Mode: proxy.Blackhole}})
		c := dial(t, p.Addr())
		if _, err := roundTrip(c, "x", 100*time.Millisecond); err == nil {
			t.Fatal("under blackhole: got an answer, want none")
		}
		waitFor(t, "the held connection to be counted", func() bool { return p.Counts().Blackhole == 1 })
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		c.SetReadDeadline(time.Now().Add(wait))
		if _, err := c.Read(make([]byte, 1)); err == nil {
			t.Error("after Close: got a read, want the connection closed")
		}
	})

	t.Run("per-connection fault", func(t *testing.T) {
		p, _ := newProxy(t, proxy.Config{Target: echo})
		a, b := dial(t, p.Addr()), dial(t, p.Addr())
		for _, c := range []net.Conn{a, b} {
			if _, err := roundTrip(c, "x", wait); err != nil {
				t.Fatal(err)
			}
		}
		conns := p.Conns()
		if len(conns) != 2 || conns[0].ID != 1 || conns[1].ID != 2 {
			t.Fatalf("got connections %+v, want IDs 1 and 2", conns)
		}
		if err := p.SetConnFault(conns[0].ID, proxy.Fault{Mode: proxy.Reset}); err != nil {
			t.Fatal(err)
		}
		if _, err := roundTrip(a, "y", wait); err == nil {
			t.Error("reset connection: got nil error, want it broken")
		}
		if got, err := roundTrip(b, "ok", wait); err != nil || got != "ok" {
			t.Errorf("other connection: got %q, %v; want the echo", got, err)
		}
		if err := p.SetConnFault(99, proxy.Fault{Mode: proxy.Reset}); err == nil {
			t.Error("SetConnFault on an unknown connection: got nil, want an error")
		}
		if err := p.SetConnFault(conns[1].ID, proxy.Fault{Mode: proxy.Refuse}); err == nil {
			t.Error("SetConnFault refuse: got nil, want an error")
		}
	})
}

// cutCase is one client library driving a transaction through the proxy.
type cutCase struct {
	name  string
	db    *server
	proto proxy.Protocol
	// commitVia inserts id in a transaction through addr and returns the
	// COMMIT's error.
	commitVia func(t *testing.T, dsn string, table string, id int) error
}

// server is a fresh database on a shared server: its address, how to reach
// it through a proxy at addr, and a direct connection for verification.
type server struct {
	target string
	via    func(addr string) string
	clean  *sql.DB
}

func pgDSNVia(t *testing.T) *server {
	dsn := dbtest.FreshPostgres(t)
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	clean := stdlib.OpenDB(*cfg)
	t.Cleanup(func() { clean.Close() })
	target := net.JoinHostPort(cfg.Host, fmt.Sprint(cfg.Port))
	return &server{target: target, clean: clean, via: func(addr string) string {
		host, port, _ := net.SplitHostPort(addr)
		return fmt.Sprintf("postgres://%s@%s:%s/%s?sslmode=disable", cfg.User, host, port, cfg.Database)
	}}
}

func myDSNVia(t *testing.T) *server {
	dsn := dbtest.FreshMySQL(t)
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	clean, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { clean.Close() })
	return &server{target: cfg.Addr, clean: clean, via: func(addr string) string {
		c := cfg.Clone()
		c.Addr = addr
		c.Timeout = 10 * time.Second
		return c.FormatDSN()
	}}
}

func sqlCommit(driverName string) func(t *testing.T, dsn, table string, id int) error {
	return func(t *testing.T, dsn, table string, id int) error {
		db, err := sql.Open(driverName, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatalf("begin through the proxy: %v", err)
		}
		ph := "?"
		if driverName == "pgx" {
			ph = "$1"
		}
		if _, err := tx.ExecContext(ctx, fmt.Sprintf("INSERT INTO %s (id) VALUES (%s)", table, ph), id); err != nil {
			t.Fatalf("insert through the proxy: %v", err)
		}
		return tx.Commit()
	}
}

// pgxPreparedCommit commits through the extended protocol: COMMIT is a
// statement prepared before the transaction, bound and executed by name.
func pgxPreparedCommit(t *testing.T, dsn, table string, id int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect through the proxy: %v", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Prepare(ctx, "commit_stmt", "COMMIT"); err != nil {
		t.Fatalf("prepare COMMIT: %v", err)
	}
	if _, err := conn.Exec(ctx, "BEGIN"); err != nil {
		t.Fatalf("begin through the proxy: %v", err)
	}
	if _, err := conn.Exec(ctx, fmt.Sprintf("INSERT INTO %s (id) VALUES ($1)", table), id); err != nil {
		t.Fatalf("insert through the proxy: %v", err)
	}
	_, err = conn.Exec(ctx, "commit_stmt")
	return err
}

func pgxNativeCommit(t *testing.T, dsn, table string, id int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect through the proxy: %v", err)
	}
	defer conn.Close(context.Background())
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatalf("begin through the proxy: %v", err)
	}
	if _, err := tx.Exec(ctx, fmt.Sprintf("INSERT INTO %s (id) VALUES ($1)", table), id); err != nil {
		t.Fatalf("insert through the proxy: %v", err)
	}
	return tx.Commit(ctx)
}

func TestProxyCutAfterCommit(t *testing.T) {
	pg, my := pgDSNVia(t), myDSNVia(t)
	cases := []cutCase{
		{name: "pgx native", db: pg, proto: proxy.ProtocolPostgres, commitVia: pgxNativeCommit},
		{name: "pgx native, prepared COMMIT (extended protocol)", db: pg, proto: proxy.ProtocolPostgres, commitVia: pgxPreparedCommit},
		{name: "pgx stdlib", db: pg, proto: proxy.ProtocolAuto, commitVia: sqlCommit("pgx")},
		{name: "go-sql-driver/mysql", db: my, proto: proxy.ProtocolMySQL, commitVia: sqlCommit("mysql")},
		{name: "go-sql-driver/mysql, protocol detected", db: my, proto: proxy.ProtocolAuto, commitVia: sqlCommit("mysql")},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			target, via, clean := tc.db.target, tc.db.via, tc.db.clean
			table := fmt.Sprintf("cut%d", i)
			if _, err := clean.Exec("CREATE TABLE " + table + " (id INT PRIMARY KEY)"); err != nil {
				t.Fatal(err)
			}
			p, logs := newProxy(t, proxy.Config{Target: target, Protocol: tc.proto, Fault: proxy.Fault{Mode: proxy.CutAfterCommit}})
			err := tc.commitVia(t, via(p.Addr()), table, 1)
			if err == nil {
				t.Fatal("COMMIT through the cutting proxy: got nil error, want a broken connection")
			}
			// Neither driver may claim the COMMIT was never sent.
			if pgconnSafe(err) || errors.Is(err, driver.ErrBadConn) {
				t.Errorf("got %v, which claims nothing was sent; the COMMIT was sent", err)
			}
			if c := sqlretry.ClassifyNeutral(err); c.Phase != sqlretry.Unknown {
				t.Errorf("ClassifyNeutral(%v) phase = %v, want unknown", err, c.Phase)
			}
			var n int
			if err := clean.QueryRow("SELECT COUNT(*) FROM " + table + " WHERE id = 1").Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n != 1 {
				t.Errorf("got %d rows after the cut COMMIT, want 1: the server committed", n)
			}
			got := p.Counts()
			if got.CutAfterCommit != 1 || got.CommitsSeen != 1 {
				t.Errorf("got counts %+v, want 1 commit seen and 1 cut", got)
			}
			if !strings.Contains(logs.String(), "fault=cut-after-commit") {
				t.Errorf("log %q does not record the cut", logs.String())
			}
			// Without the fault the same path commits normally.
			p.SetFault(proxy.Fault{Mode: proxy.Pass})
			if err := tc.commitVia(t, via(p.Addr()), table, 2); err != nil {
				t.Errorf("COMMIT through the passing proxy: %v", err)
			}
		})
	}
}

func TestProxyRealServerOutage(t *testing.T) {
	pg := pgDSNVia(t)
	p, _ := newProxy(t, proxy.Config{Target: pg.target})
	db, err := sql.Open("pgx", pg.via(p.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		t.Fatalf("ping through the proxy: %v", err)
	}
	p.SetFault(proxy.Fault{Mode: proxy.Reset})
	p.SetFault(proxy.Fault{Mode: proxy.Refuse})
	if err := db.PingContext(ctx); err == nil {
		t.Error("ping during the outage: got nil, want an error")
	}
	c := p.Counts()
	if c.Reset != 1 || c.Refuse < 1 {
		t.Errorf("got counts %+v, want 1 reset and at least 1 refused", c)
	}
	p.SetFault(proxy.Fault{Mode: proxy.Pass})
	if err := db.PingContext(ctx); err != nil {
		t.Errorf("ping after the outage: %v", err)
	}
}

// pgconnSafe reports pgconn's SafeToRetry verdict: true means the request
// never reached the server.
func pgconnSafe(err error) bool {
	var s interface{ SafeToRetry() bool }
	return errors.As(err, &s) && s.SafeToRetry()
}

// HoldAfterCommit holds the server's answer to a COMMIT: the server has
// committed, the client has heard nothing, until the fault changes; then the
// answer arrives and the COMMIT succeeds.
func TestProxyHoldAfterCommit(t *testing.T) {
	pg, my := pgDSNVia(t), myDSNVia(t)
	cases := []cutCase{
		{name: "pgx native", db: pg, proto: proxy.ProtocolPostgres, commitVia: pgxNativeCommit},
		{name: "pgx stdlib", db: pg, proto: proxy.ProtocolAuto, commitVia: sqlCommit("pgx")},
		{name: "go-sql-driver/mysql", db: my, proto: proxy.ProtocolMySQL, commitVia: sqlCommit("mysql")},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			target, via, clean := tc.db.target, tc.db.via, tc.db.clean
			table := fmt.Sprintf("hold%d", i)
			if _, err := clean.Exec("CREATE TABLE " + table + " (id INT PRIMARY KEY)"); err != nil {
				t.Fatal(err)
			}
			p, _ := newProxy(t, proxy.Config{Target: target, Protocol: tc.proto, Fault: proxy.Fault{Mode: proxy.HoldAfterCommit}})
			done := make(chan error, 1)
			go func() { done <- tc.commitVia(t, via(p.Addr()), table, 1) }()
			for p.Counts().HoldAfterCommit == 0 {
				select {
				case err := <-done:
					t.Fatalf("COMMIT returned %v while its answer should be held", err)
				case <-time.After(time.Millisecond):
				}
			}
			var n int
			if err := clean.QueryRow("SELECT COUNT(*) FROM " + table + " WHERE id = 1").Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n != 1 {
				t.Errorf("got %d rows while the COMMIT's answer is held, want 1: the server answered, so it committed", n)
			}
			select {
			case err := <-done:
				t.Fatalf("COMMIT returned %v while its answer is held", err)
			default:
			}
			if err := p.SetFault(proxy.Fault{Mode: proxy.Pass}); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Errorf("COMMIT after the answer was let through: %v", err)
			}
		})
	}
}
