package proxy_test

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/sqlretry/sqlretry/faults/proxy"
)

// The first bytes a client sends for each kind of encryption, written by
// hand so that a fake server needs no TLS.
var (
	pgSSLRequest    = []byte{0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f} // length 8, code 80877103
	pgGSSENCRequest = []byte{0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x30} // length 8, code 80877104
	// pgStartupCommit is a StartupMessage (user u) and a simple Query COMMIT.
	pgStartupCommit = []byte{
		0, 0, 0, 16, 0, 3, 0, 0, 'u', 's', 'e', 'r', 0, 'u', 0, 0,
		'Q', 0, 0, 0, 11, 'C', 'O', 'M', 'M', 'I', 'T', 0,
	}
	clientHello = []byte{0x16, 0x03, 0x01, 0x01, 0x20, 0x01, 0x00, 0x01, 0x1c, 0x03, 0x03}
	// mySSLRequest is MySQL's SSL request: sequence id 1, 32 bytes of
	// payload whose capabilities have CLIENT_SSL (0x800) set.
	mySSLRequest = func() []byte {
		b := make([]byte, 4+32)
		b[0], b[3] = 32, 1
		binary.LittleEndian.PutUint32(b[4:], 0x000fa685|0x800)
		return b
	}()
)

// fakeServer accepts connections and runs serve on each; it is stopped at
// cleanup.
func fakeServer(t *testing.T, serve func(c net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				c.SetDeadline(time.Now().Add(20 * time.Second))
				serve(c)
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	return ln.Addr().String()
}

// pgAnswering is a fake PostgreSQL server that answers the client's first
// 8-byte message with answer, then reads until the client closes.
func pgAnswering(answer byte) func(net.Conn) {
	return func(c net.Conn) {
		if _, err := io.ReadFull(c, make([]byte, 8)); err != nil {
			return
		}
		c.Write([]byte{answer})
		io.Copy(io.Discard, c)
	}
}

// myGreeting is a fake MySQL server that greets (the proxy does not read
// the greeting's content), then reads until the client closes.
func myGreeting(c net.Conn) {
	c.Write([]byte{1, 0, 0, 0, 10})
	io.Copy(io.Discard, c)
}

// A step of a conversation: bytes to send (if any), then how many bytes of
// the server's answer to read.
type step struct {
	send []byte
	read int
}

// converse dials addr, takes the steps in turn, and closes the connection.
func converse(t *testing.T, addr string, steps ...step) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	for _, s := range steps {
		if s.send != nil {
			if _, err := c.Write(s.send); err != nil {
				t.Fatal(err)
			}
		}
		if s.read > 0 {
			if _, err := io.ReadFull(c, make([]byte, s.read)); err != nil {
				t.Fatalf("reading the fake server's answer through the proxy: %v", err)
			}
		}
	}
}

func TestProxyCountsEncryptedConnections(t *testing.T) {
	tests := []struct {
		name    string
		server  func(net.Conn)
		proto   proxy.Protocol
		steps   []step
		wantTLS int
		commits int
	}{
		{"pg SSLRequest answered S", pgAnswering('S'), proxy.ProtocolAuto,
			[]step{{pgSSLRequest, 1}, {clientHello, 0}}, 1, 0},
		{"pg SSLRequest answered S, protocol postgres", pgAnswering('S'), proxy.ProtocolPostgres,
			[]step{{pgSSLRequest, 1}, {clientHello, 0}}, 1, 0},
		{"pg GSSENCRequest answered G", pgAnswering('G'), proxy.ProtocolAuto,
			[]step{{pgGSSENCRequest, 1}, {[]byte{0, 0, 0, 4, 1, 2, 3, 4}, 0}}, 1, 0},
		{"pg SSLRequest answered N: plain text follows", pgAnswering('N'), proxy.ProtocolAuto,
			[]step{{pgSSLRequest, 1}, {pgStartupCommit, 0}}, 0, 1},
		{"pg direct TLS", func(c net.Conn) { io.Copy(io.Discard, c) }, proxy.ProtocolAuto,
			[]step{{clientHello, 0}}, 1, 0},
		{"mysql SSL request after the greeting", myGreeting, proxy.ProtocolAuto,
			[]step{{nil, 5}, {append(append([]byte{}, mySSLRequest...), clientHello...), 0}}, 1, 0},
		{"mysql SSL request, protocol mysql", myGreeting, proxy.ProtocolMySQL,
			[]step{{nil, 5}, {mySSLRequest, 0}, {clientHello, 0}}, 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			target := fakeServer(t, tt.server)
			p, logs := newProxy(t, proxy.Config{Target: target, Protocol: tt.proto})
			converse(t, p.Addr(), tt.steps...)
			waitFor(t, "the proxy to see the conversation", func() bool {
				c := p.Counts()
				return c.TLS == tt.wantTLS && c.CommitsSeen == tt.commits && len(p.Conns()) == 0
			})
			warnings := strings.Count(logs.String(), "level=WARN")
			if warnings != tt.wantTLS {
				t.Errorf("got %d warnings, want %d; log:\n%s", warnings, tt.wantTLS, logs.String())
			}
			if tt.wantTLS > 0 && (!strings.Contains(logs.String(), "sslmode=disable") || !strings.Contains(logs.String(), "tls=false")) {
				t.Errorf("the warning does not say how to turn TLS off; log:\n%s", logs.String())
			}
		})
	}
}

func TestProxyWarnsOncePerEncryptedConnection(t *testing.T) {
	target := fakeServer(t, pgAnswering('S'))
	p, logs := newProxy(t, proxy.Config{Target: target})
	for range 2 {
		converse(t, p.Addr(), step{pgSSLRequest, 1}, step{clientHello, 0}, step{clientHello, 0})
	}
	waitFor(t, "two encrypted connections", func() bool { return p.Counts().TLS == 2 && len(p.Conns()) == 0 })
	if got := strings.Count(logs.String(), "level=WARN"); got != 2 {
		t.Errorf("got %d warnings for 2 encrypted connections, want 2; log:\n%s", got, logs.String())
	}
}

// TestProxyTLSRealPostgres connects pgx with its default sslmode, prefer,
// through a cut-after-commit proxy. A server that offers TLS (SHOW ssl: on)
// gets an encrypted connection: the proxy cannot see the COMMIT, so the cut
// never fires, and it must count and warn instead. A server that does not
// gets plain text, where the COMMIT is seen and cut.
func TestProxyTLSRealPostgres(t *testing.T) {
	pg := pgDSNVia(t)
	var ssl string
	if err := pg.clean.QueryRow("SHOW ssl").Scan(&ssl); err != nil {
		t.Fatal(err)
	}
	t.Logf("the server's ssl setting: %s", ssl)
	if _, err := pg.clean.Exec("CREATE TABLE tls_probe (id INT PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	p, logs := newProxy(t, proxy.Config{Target: pg.target, Fault: proxy.Fault{Mode: proxy.CutAfterCommit}})
	dsn, found := strings.CutSuffix(pg.via(p.Addr()), "?sslmode=disable")
	if !found {
		t.Fatalf("DSN %q: want it to end in ?sslmode=disable, to drop", dsn)
	}
	err := pgxNativeCommit(t, dsn, "tls_probe", 1)
	got := p.Counts()
	if ssl == "on" {
		if err != nil {
			t.Errorf("COMMIT over TLS: got %v, want it to pass unseen", err)
		}
		if got.TLS != 1 || got.CommitsSeen != 0 || got.CutAfterCommit != 0 {
			t.Errorf("got counts %+v, want 1 TLS connection, no COMMIT seen, no cut", got)
		}
		if n := strings.Count(logs.String(), "level=WARN"); n != 1 || !strings.Contains(logs.String(), "sslmode=disable") {
			t.Errorf("got %d warnings, want 1 that says sslmode=disable; log:\n%s", n, logs.String())
		}
		return
	}
	if err == nil || got.TLS != 0 || got.CommitsSeen != 1 || got.CutAfterCommit != 1 {
		t.Errorf("plain text: got %v and counts %+v, want the COMMIT seen and cut, no TLS", err, got)
	}
}

// TestProxyTLSRealMariaDB connects go-sql-driver/mysql with tls=preferred
// through the proxy: TLS if the server offers it (have_ssl YES), plain text
// otherwise, and the proxy must tell them apart.
func TestProxyTLSRealMariaDB(t *testing.T) {
	my := myDSNVia(t)
	var haveSSL string
	if err := my.clean.QueryRow("SELECT @@have_ssl").Scan(&haveSSL); err != nil {
		t.Fatal(err)
	}
	t.Logf("the server's have_ssl: %s", haveSSL)
	if _, err := my.clean.Exec("CREATE TABLE tls_probe (id INT PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	p, logs := newProxy(t, proxy.Config{Target: my.target})
	cfg, err := mysql.ParseDSN(my.via(p.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	cfg.TLSConfig = "preferred"
	if err := sqlCommit("mysql")(t, cfg.FormatDSN(), "tls_probe", 1); err != nil {
		t.Fatalf("COMMIT through the proxy: %v", err)
	}
	got := p.Counts()
	want := proxy.Counts{Connections: 1, CommitsSeen: 1}
	if haveSSL == "YES" {
		want = proxy.Counts{Connections: 1, TLS: 1}
	}
	if got != want {
		t.Errorf("got counts %+v, want %+v; log:\n%s", got, want, logs.String())
	}
}

// TestProxyTLSMySQLDriver has the real go-sql-driver/mysql, with
// tls=skip-verify, ask a fake server that offers CLIENT_SSL for TLS: the
// proxy must recognise the driver's SSL request.
func TestProxyTLSMySQLDriver(t *testing.T) {
	target := fakeServer(t, func(c net.Conn) {
		c.Write(myTLSGreeting())
		// The SSL request, then the ClientHello's first bytes: close
		// rather than answer, so the driver fails at once.
		io.ReadFull(c, make([]byte, 4+32+1))
	})
	p, logs := newProxy(t, proxy.Config{Target: target})
	cfg := mysql.NewConfig()
	cfg.User, cfg.Net, cfg.Addr, cfg.TLSConfig = "root", "tcp", p.Addr(), "skip-verify"
	cfg.Timeout = 500 * time.Millisecond
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if c, err := connector.Connect(ctx); err == nil {
		c.Close()
		t.Fatal("connect to a fake server: got a connection, want an error")
	}
	waitFor(t, "the SSL request to be counted", func() bool { return p.Counts().TLS == 1 })
	if !strings.Contains(logs.String(), "tls=false") {
		t.Errorf("the warning does not say tls=false; log:\n%s", logs.String())
	}
}

// myTLSGreeting is a MySQL protocol 10 server greeting that offers
// CLIENT_SSL, with mysql_native_password.
func myTLSGreeting() []byte {
	var caps uint32 = 0x1 | 0x8 | 0x200 | 0x800 | 0x2000 | 0x8000 | 0x80000 // long password, with db, 4.1, SSL, transactions, secure connection, plugin auth
	p := []byte{10}
	p = append(p, "5.5.5-10.11.0-fake\x00"...)
	p = append(p, 1, 0, 0, 0)                // connection id
	p = append(p, "abcdefgh"...)             // auth data, part 1
	p = append(p, 0)                         // filler
	p = append(p, byte(caps), byte(caps>>8)) // capabilities, low
	p = append(p, 0x21, 2, 0)                // charset, status
	p = append(p, byte(caps>>16), byte(caps>>24))
	p = append(p, 21)                  // auth data length
	p = append(p, make([]byte, 10)...) // reserved
	p = append(p, "ijklmnopqrst\x00"...)
	p = append(p, "mysql_native_password\x00"...)
	n := len(p)
	return append([]byte{byte(n), byte(n >> 8), byte(n >> 16), 0}, p...)
}
