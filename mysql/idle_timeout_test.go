package mysql_test

import (
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	sr "github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/mysql"
)

// idleTimeoutServer speaks just enough of the MySQL protocol for
// go-sql-driver to log in, answers the first command of each session with
// OK, and then does what MySQL 8.0.24+ does to a session that outlived
// wait_timeout: it sends ER_CLIENT_INTERACTION_TIMEOUT (4031) as an
// unsolicited packet (sequence 0) in place of the next command's reply,
// without running that command, and closes the connection. No MySQL 8
// server runs on our machines; MariaDB closes idle sessions silently. It
// counts the commands it ran.
func idleTimeoutServer(t *testing.T) (dsn string, ran *atomic.Int32) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	ran = new(atomic.Int32)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go serveIdleTimeout(c, ran)
		}
	}()
	return "u:pw@tcp(" + ln.Addr().String() + ")/db?timeout=5s", ran
}

func writePacket(c net.Conn, seq byte, payload []byte) error {
	h := []byte{byte(len(payload)), byte(len(payload) >> 8), byte(len(payload) >> 16), seq}
	_, err := c.Write(append(h, payload...))
	return err
}

func readPacket(c net.Conn) (seq byte, payload []byte, err error) {
	var h [4]byte
	if _, err := io.ReadFull(c, h[:]); err != nil {
		return 0, nil, err
	}
	payload = make([]byte, int(h[0])|int(h[1])<<8|int(h[2])<<16)
	_, err = io.ReadFull(c, payload)
	return h[3], payload, err
}

func serveIdleTimeout(c net.Conn, ran *atomic.Int32) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	const (
		longPassword  = 1 << 0
		connectWithDB = 1 << 3
		protocol41    = 1 << 9
		transactions  = 1 << 13
		secureConn    = 1 << 15
		pluginAuth    = 1 << 19
	)
	caps := uint32(longPassword | connectWithDB | protocol41 | transactions | secureConn | pluginAuth)
	scramble := []byte("abcdefghijklmnopqrst")
	hs := []byte{10}
	hs = append(hs, "8.0.36\x00"...)
	hs = binary.LittleEndian.AppendUint32(hs, 7) // connection id
	hs = append(hs, scramble[:8]...)
	hs = append(hs, 0)
	hs = binary.LittleEndian.AppendUint16(hs, uint16(caps))
	hs = append(hs, 255)                         // utf8mb4_0900_ai_ci
	hs = binary.LittleEndian.AppendUint16(hs, 2) // SERVER_STATUS_AUTOCOMMIT
	hs = binary.LittleEndian.AppendUint16(hs, uint16(caps>>16))
	hs = append(hs, 21)
	hs = append(hs, make([]byte, 10)...)
	hs = append(hs, scramble[8:]...)
	hs = append(hs, 0)
	hs = append(hs, "mysql_native_password\x00"...)
	if writePacket(c, 0, hs) != nil {
		return
	}
	if _, _, err := readPacket(c); err != nil { // the handshake response
		return
	}
	ok := []byte{0, 0, 0, 2, 0, 0, 0} // OK, 0 rows, id 0, autocommit, 0 warnings
	if writePacket(c, 2, ok) != nil {
		return
	}
	for n := 0; ; n++ {
		if _, _, err := readPacket(c); err != nil {
			return
		}
		if n == 0 {
			ran.Add(1)
			if writePacket(c, 1, ok) != nil {
				return
			}
			continue
		}
		// The session timed out: the command just read is not run.
		e := []byte{0xff}
		e = binary.LittleEndian.AppendUint16(e, 4031)
		e = append(e, "#HY000"...)
		e = append(e, "The client was disconnected by the server because of inactivity. See wait_timeout and interactive_timeout for configuring this behavior."...)
		writePacket(c, 0, e)
		return
	}
}

// TestIdleTimeout4031IsNotSent: MySQL's 4031 answers a command the server
// never ran, on a session it had already closed: retryable, not sent, so a
// write without Verify may be replayed instead of ending in ErrAmbiguous.
func TestIdleTimeout4031IsNotSent(t *testing.T) {
	dsn, ran := idleTimeoutServer(t)
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "DO 1"); err != nil {
		t.Fatalf("first command: %v", err)
	}
	_, err = conn.ExecContext(ctx, "INSERT INTO t VALUES (1)")
	var me *gomysql.MySQLError
	if !errors.As(err, &me) || me.Number != 4031 {
		t.Fatalf("command on the timed-out session: got %v (%T), want a *mysql.MySQLError 4031", err, err)
	}
	if c := mysql.Classify(err); !c.Retryable || c.Phase != sr.NotSent || c.Code != "4031" {
		t.Errorf("Classify(%v) = %+v, want retryable, not sent", err, c)
	}
	if n := ran.Load(); n != 1 {
		t.Errorf("the server ran %d commands, want 1", n)
	}
}
