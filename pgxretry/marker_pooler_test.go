package pgxretry_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/pgxretry"
	"github.com/sqlretry/sqlretry/postgres"
)

// TestMarkerPoolerFatalAfterCommit: a connection pooler between the client
// and the server (pgbouncer) answers for a backend that died with an
// ErrorResponse of its own ("server conn crashed?", FATAL 08P01) and closes
// the client's connection. If the backend died after its COMMIT was
// durable but before its replies reached the pooler, the client sees no
// result and a server error: WithMarker read that as "the INSERT failed,
// COMMIT never ran", and told the caller the pooler's error for a
// transaction that had committed (a retryable code would have run it
// again). A FATAL, or a session that ended, must be settled by the key
// instead: nil, one row.
//
// Both shapes of the marked COMMIT: the prepared INSERT and COMMIT in one
// pipeline (pgx's default exec mode), and one simple query (the mode a
// pooler in transaction mode asks for).
func TestMarkerPoolerFatalAfterCommit(t *testing.T) {
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeSimpleProtocol} {
		t.Run(mode.String(), func(t *testing.T) { poolerFatalAfterCommit(t, mode) })
	}
}

func poolerFatalAfterCommit(t *testing.T, mode pgx.QueryExecMode) {
	f := newFixture(t, nil)
	f.exec(t, itemsTable)
	f.exec(t, postgres.MarkerTableDDL)
	pooler := startFatalPooler(t, "127.0.0.1:5432")
	u, err := url.Parse(f.dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = pooler.addr
	q := u.Query()
	q.Set("sslmode", "disable")
	u.RawQuery = q.Encode()
	pool := openPool(t, u.String(), appName, func(c *pgxpool.Config) {
		c.MaxConns = 2
		c.ConnConfig.DefaultQueryExecMode = mode
	})
	w := pgxretry.New(pool, f.p, pgxretry.WithMarker(&postgres.MarkerVerifier{}))
	t.Cleanup(w.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	attempts := 0
	err = w.RunTx(ctx, sqlretry.Write("pooled", nil), pgx.TxOptions{}, func(ctx context.Context, tx pgx.Tx) error {
		attempts++
		_, err := tx.Exec(ctx, insertItem, 1, "pooled")
		pooler.armed.Store(attempts == 1) // the first attempt's COMMIT message
		return err
	})
	if pooler.fired.Load() != 1 {
		t.Fatalf("the pooler answered %d COMMITs with its FATAL, want 1: the test proved nothing", pooler.fired.Load())
	}
	if n := f.count(t, "SELECT count(*) FROM items WHERE call_id = 1"); n != 1 || err != nil {
		t.Errorf("%d rows after %d attempts (RunTx: %v); want 1 and nil: a committed transaction ran again", n, attempts, err)
	}
}

// fatalPooler forwards PostgreSQL's protocol, and, when armed, lets the
// next marked COMMIT's message run on the server (a query holding
// "; COMMIT", or the pipeline from the Bind of the prepared marker INSERT), swallows the
// server's whole reply and answers the client as pgbouncer does for a
// crashed server connection: ErrorResponse FATAL 08P01, then close.
type fatalPooler struct {
	addr  string
	armed atomic.Bool
	fired atomic.Int32
}

func startFatalPooler(t *testing.T, server string) *fatalPooler {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	p := &fatalPooler{addr: l.Addr().String()}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", server)
			if err != nil {
				c.Close()
				continue
			}
			go p.serve(c, s)
		}
	}()
	return p
}

func (p *fatalPooler) serve(client, server net.Conn) {
	defer client.Close()
	defer server.Close()
	swallow := make(chan struct{}, 1)
	go func() { // client to server: the startup message, then typed messages
		defer server.Close()
		var n [4]byte
		if _, err := io.ReadFull(client, n[:]); err != nil {
			return
		}
		body := make([]byte, binary.BigEndian.Uint32(n[:])-4)
		if _, err := io.ReadFull(client, body); err != nil {
			return
		}
		server.Write(append(n[:], body...))
		for {
			typ, msg, err := readMsg(client)
			if err != nil {
				return
			}
			marked := typ == 'Q' && bytes.Contains(msg, []byte("; COMMIT")) ||
				typ == 'B' && bytes.Contains(msg, []byte("\x00sqlretry_mark_"))
			if marked && p.armed.CompareAndSwap(true, false) {
				swallow <- struct{}{}
			}
			if _, err := server.Write(msg); err != nil {
				return
			}
		}
	}()
	for { // server to client
		typ, msg, err := readMsg(server)
		if err != nil {
			return
		}
		select {
		case <-swallow:
			// The reply to the marked COMMIT's message: swallowed to its
			// ReadyForQuery, then the pooler's own FATAL.
			for typ != 'Z' {
				if typ, _, err = readMsg(server); err != nil {
					break
				}
			}
			p.fired.Add(1)
			client.Write(fatalResponse("08P01", "server conn crashed?"))
			return
		default:
		}
		if _, err := client.Write(msg); err != nil {
			return
		}
	}
}

// readMsg reads one typed protocol message and returns its type and all
// its bytes.
func readMsg(r io.Reader) (byte, []byte, error) {
	var h [5]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, nil, err
	}
	msg := make([]byte, 1+binary.BigEndian.Uint32(h[1:]))
	copy(msg, h[:])
	_, err := io.ReadFull(r, msg[5:])
	return h[0], msg, err
}

// fatalResponse is an ErrorResponse of severity FATAL.
func fatalResponse(code, message string) []byte {
	var b bytes.Buffer
	for _, f := range [][2]string{{"S", "FATAL"}, {"V", "FATAL"}, {"C", code}, {"M", message}} {
		b.WriteString(f[0])
		b.WriteString(f[1])
		b.WriteByte(0)
	}
	b.WriteByte(0)
	out := []byte{'E', 0, 0, 0, 0}
	binary.BigEndian.PutUint32(out[1:], uint32(4+b.Len()))
	return append(out, b.Bytes()...)
}
