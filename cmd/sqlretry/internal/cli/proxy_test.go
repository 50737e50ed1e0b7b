package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuf is a buffer safe to write from the command's goroutine while the
// test reads it.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// echoTarget is a loopback server that echoes, closed at cleanup.
func echoTarget(t *testing.T) string {
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
				io.Copy(c, c)
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	return ln.Addr().String()
}

// startProxy runs "sqlretry proxy args..." in a goroutine and waits
// (bounded) for the "listening on" line on out; it returns the address, the
// exit code channel and the cancel func.
func startProxy(t *testing.T, args []string, stdout, stderr *syncBuf, lineOn *syncBuf) (string, <-chan int, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	code := make(chan int, 1)
	go func() { code <- Main(ctx, append([]string{"proxy"}, args...), stdout, stderr) }()
	t.Cleanup(cancel)
	for i := 0; i < 2000; i++ {
		if first, _, ok := strings.Cut(lineOn.String(), "\n"); ok {
			addr, found := strings.CutPrefix(first, "listening on ")
			if !found {
				t.Fatalf("got first line %q, want \"listening on HOST:PORT\"", first)
			}
			return addr, code, cancel
		}
		select {
		case c := <-code:
			t.Fatalf("proxy exited with %d before listening; stderr: %s", c, stderr.String())
		default:
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("proxy did not print its address")
	return "", nil, nil
}

func waitExit(t *testing.T, code <-chan int) int {
	t.Helper()
	select {
	case c := <-code:
		return c
	case <-time.After(30 * time.Second):
		t.Fatal("proxy did not stop")
		return -1
	}
}

func TestProxyCommandForwardsUntilInterrupted(t *testing.T) {
	target := echoTarget(t)
	var stdout, stderr syncBuf
	addr, code, cancel := startProxy(t, []string{"--target", target}, &stdout, &stderr, &stdout)
	if !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Errorf("got address %q, want loopback", addr)
	}
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	c.Write([]byte("ping"))
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
		t.Errorf("through the proxy: got %q, %v; want the echo", buf, err)
	}
	c.Close()
	cancel()
	if got := waitExit(t, code); got != ExitOK {
		t.Errorf("got exit %d, want %d", got, ExitOK)
	}
	if !strings.Contains(stdout.String(), "stopped after") {
		t.Errorf("got stdout %q, want a summary line", stdout.String())
	}
}

func TestProxyCommandLogsFaultsAndReportsJSON(t *testing.T) {
	target := echoTarget(t)
	var stdout, stderr syncBuf
	_, code, cancel := startProxy(t, []string{"--target", target, "--fault", "reset", "--json"}, &stdout, &stderr, &stderr)
	addr := strings.TrimPrefix(strings.SplitN(stderr.String(), "\n", 2)[0], "listening on ")
	if c, err := net.DialTimeout("tcp", addr, 10*time.Second); err == nil {
		c.SetDeadline(time.Now().Add(10 * time.Second))
		c.Write([]byte("x"))
		c.Read(make([]byte, 1)) // reset
		c.Close()
	}
	// The fault is logged as it happens.
	for i := 0; i < 2000 && !strings.Contains(stderr.String(), `"fault":"reset"`); i++ {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if got := waitExit(t, code); got != ExitOK {
		t.Fatalf("got exit %d, want %d; stderr %s", got, ExitOK, stderr.String())
	}
	if !strings.Contains(stderr.String(), `"fault":"reset"`) {
		t.Errorf("stderr %q does not log the reset", stderr.String())
	}
	var rep proxyReport
	if err := json.Unmarshal([]byte(stdout.String()), &rep); err != nil {
		t.Fatalf("stdout is not one JSON document: %v\n%s", err, stdout.String())
	}
	if rep.Fault != "reset" || rep.Target != target || rep.Counts.Reset != 1 || rep.Counts.Connections != 1 {
		t.Errorf("got report %+v, want fault reset, 1 connection, 1 reset", rep)
	}
}

func TestProxyCommandDurationStopsByItself(t *testing.T) {
	var stdout, stderr syncBuf
	_, code, _ := startProxy(t, []string{"--target", "127.0.0.1:9", "--duration", "50ms", "--fault", "latency=10ms"}, &stdout, &stderr, &stdout)
	if got := waitExit(t, code); got != ExitOK {
		t.Errorf("got exit %d, want %d", got, ExitOK)
	}
}

func TestProxyCommandBadInput(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{}, "--target"},
		{[]string{"--target", "nowhere"}, "--target"},
		{[]string{"--target", "127.0.0.1:5432", "--fault", "explode"}, "--fault"},
		{[]string{"--target", "127.0.0.1:5432", "--fault", "latency=soon"}, "--fault"},
		{[]string{"--target", "127.0.0.1:5432", "--protocol", "oracle"}, "--protocol"},
		{[]string{"--target", "127.0.0.1:5432", "--listen", "nowhere"}, "--listen"},
		{[]string{"--target", "127.0.0.1:5432", "--duration", "-1s"}, "--duration"},
		{[]string{"--target", "127.0.0.1:5432", "--bogus"}, "bogus"},
		{[]string{"--target", "127.0.0.1:5432", "extra"}, "extra"},
	}
	for _, tt := range tests {
		var stdout, stderr bytes.Buffer
		got := Main(context.Background(), append([]string{"proxy"}, tt.args...), &stdout, &stderr)
		line := stderr.String()
		if got != ExitBadInput || !strings.HasPrefix(line, "error: ") || strings.Count(line, "\n") != 1 || !strings.Contains(line, tt.want) {
			t.Errorf("proxy %v: got exit %d, stderr %q; want exit 2 and one error line naming %s", tt.args, got, line, tt.want)
		}
	}
}

// tlsTarget is a fake PostgreSQL server that accepts every SSLRequest ('S')
// and then reads until the client closes, closed at cleanup.
func tlsTarget(t *testing.T) string {
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
				if _, err := io.ReadFull(c, make([]byte, 8)); err == nil {
					c.Write([]byte{'S'})
					io.Copy(io.Discard, c)
				}
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	return ln.Addr().String()
}

// startTLS asks for TLS through the proxy at addr, as psql and pgx do with
// sslmode=prefer, and sends the start of a ClientHello once accepted.
func startTLS(t *testing.T, addr string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	c.Write([]byte{0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f}) // SSLRequest
	answer := make([]byte, 1)
	if _, err := io.ReadFull(c, answer); err != nil || answer[0] != 'S' {
		t.Fatalf("SSLRequest through the proxy: got %q, %v; want the server's 'S'", answer, err)
	}
	c.Write([]byte{0x16, 0x03, 0x01, 0x00, 0x05, 0x01, 0, 0, 1, 0}) // a ClientHello's start
}

func TestProxyCommandWarnsAboutTLS(t *testing.T) {
	for _, asJSON := range []bool{false, true} {
		t.Run(fmt.Sprintf("json=%v", asJSON), func(t *testing.T) {
			var stdout, stderr syncBuf
			args, lineOn := []string{"--target", tlsTarget(t), "--fault", "cut-after-commit"}, &stdout
			if asJSON {
				args, lineOn = append(args, "--json"), &stderr
			}
			addr, code, cancel := startProxy(t, args, &stdout, &stderr, lineOn)
			startTLS(t, addr)
			// The warning is logged as the connection turns to TLS.
			for i := 0; i < 2000 && !strings.Contains(stderr.String(), "sslmode=disable"); i++ {
				time.Sleep(5 * time.Millisecond)
			}
			cancel()
			if got := waitExit(t, code); got != ExitOK {
				t.Fatalf("got exit %d, want %d; stderr %s", got, ExitOK, stderr.String())
			}
			errs := stderr.String()
			if !strings.Contains(errs, "level=WARN") && !strings.Contains(errs, `"level":"WARN"`) {
				t.Errorf("stderr %q does not log a warning as the connection turns to TLS", errs)
			}
			if !strings.Contains(errs, "warning: 1 of 1 connections used TLS") || !strings.Contains(errs, "tls=false") {
				t.Errorf("stderr %q does not end with the TLS warning", errs)
			}
			if !asJSON {
				if !strings.Contains(stdout.String(), "1 connections (1 encrypted with TLS)") {
					t.Errorf("summary %q does not count the TLS connection", stdout.String())
				}
				return
			}
			var rep struct {
				Counts map[string]int `json:"counts"`
			}
			if err := json.Unmarshal([]byte(stdout.String()), &rep); err != nil {
				t.Fatalf("stdout is not one JSON document: %v\n%s", err, stdout.String())
			}
			if rep.Counts["tls"] != 1 || rep.Counts["commits_seen"] != 0 {
				t.Errorf("got counts %v, want tls 1, commits_seen 0", rep.Counts)
			}
		})
	}
}
