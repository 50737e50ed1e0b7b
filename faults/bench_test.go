package faults_test

import (
	"database/sql"
	"fmt"
	"net"
	"testing"

	"github.com/sqlretry/sqlretry/faults"
)

// BenchmarkSQLiteExec compares an autocommit INSERT on SQLite directly and
// through the fault driver with rules that never fire.
func BenchmarkSQLiteExec(b *testing.B) {
	for _, wrapped := range []bool{false, true} {
		b.Run(fmt.Sprintf("wrapped=%v", wrapped), func(b *testing.B) {
			dsn := "file:" + b.TempDir() + "/b.db?_pragma=journal_mode(wal)&_pragma=synchronous(off)"
			var db *sql.DB
			var err error
			if wrapped {
				plan := faults.MustPlan(faults.Config{Rules: []faults.Rule{
					{Kind: faults.BeforeSend, Verb: "DELETE"}, {Kind: faults.AfterExec, Match: "nothing"},
				}})
				db, err = faults.Open("sqlite", dsn, plan)
			} else {
				db, err = sql.Open("sqlite", dsn)
			}
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			if _, err := db.Exec("CREATE TABLE b (id INTEGER PRIMARY KEY)"); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := db.Exec("INSERT INTO b (id) VALUES (?)", i); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

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
	p, err := faults.NewProxy(faults.ProxyConfig{Target: ln.Addr().String()})
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
