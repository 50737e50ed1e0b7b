package proxy_test

import (
	"net"
	"testing"

	"github.com/sqlretry/sqlretry/faults/proxy"
)

// BenchmarkProxyRoundTrip measures one small round trip through the proxy
// (fault none) to a loopback echo server, against the echo server directly.
func BenchmarkProxyRoundTrip(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 64)
				for {
					n, err := c.Read(buf)
					if err != nil {
						return
					}
					c.Write(buf[:n])
				}
			}()
		}
	}()
	p, err := proxy.New(proxy.Config{Target: ln.Addr().String()})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	for _, tc := range []struct{ name, addr string }{{"direct", ln.Addr().String()}, {"proxy", p.Addr()}} {
		b.Run(tc.name, func(b *testing.B) {
			c, err := net.Dial("tcp", tc.addr)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			msg, buf := []byte("0123456789abcdef"), make([]byte, 16)
			for i := 0; i < b.N; i++ {
				c.Write(msg)
				for got := 0; got < len(msg); {
					n, err := c.Read(buf[got:])
					if err != nil {
						b.Fatal(err)
					}
					got += n
				}
			}
		})
	}
}
