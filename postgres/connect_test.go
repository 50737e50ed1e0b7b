package postgres_test

import (
	"context"
	"database/sql"
	"encoding/binary"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	sr "github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/internal/dbtest"
	"github.com/sqlretry/sqlretry/postgres"
)

// refusingServer answers every connection's StartupMessage with a FATAL
// ErrorResponse carrying code, then closes it: what a server or a pooler in
// front of one says when it refuses a connection.
func refusingServer(t *testing.T, code, msg string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				var n [4]byte
				if _, err := io.ReadFull(c, n[:]); err != nil {
					return
				}
				if _, err := io.CopyN(io.Discard, c, int64(binary.BigEndian.Uint32(n[:]))-4); err != nil {
					return
				}
				var body []byte
				for _, f := range []struct {
					k byte
					v string
				}{{'S', "FATAL"}, {'V', "FATAL"}, {'C', code}, {'M', msg}} {
					body = append(append(append(body, f.k), f.v...), 0)
				}
				body = append(body, 0)
				out := append([]byte{'E'}, binary.BigEndian.AppendUint32(nil, uint32(len(body)+4))...)
				c.Write(append(out, body...))
			}()
		}
	}()
	return "postgres://u@" + ln.Addr().String() + "/db?sslmode=disable&connect_timeout=5"
}

// TestConnectRefusalIsNotSent: a server error in answer to the startup
// message reaches pgx's caller inside a *pgconn.ConnectError. No statement
// was sent, whatever the code: the code decides only whether to retry.
func TestConnectRefusalIsNotSent(t *testing.T) {
	for _, tc := range []struct {
		code      string
		retryable bool
	}{
		{"08001", true}, // sqlclient_unable_to_establish_sqlconnection
		{"08004", true}, // sqlserver_rejected_establishment_of_sqlconnection
		{"08006", true},
		{"53300", true},
		{"57P03", true},
		{"55000", true},  // "database ... is not currently accepting connections"
		{"57P01", true},  // terminated during the startup
		{"28P01", false}, // password authentication failed: permanent
		{"3D000", false},
		{"08P01", false},
	} {
		dsn := refusingServer(t, tc.code, "refused by the test server")
		for _, d := range []string{"pgx-native", "pgx-stdlib"} {
			var err error
			ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
			if d == "pgx-native" {
				var c *pgx.Conn
				if c, err = pgx.Connect(ctx, dsn); err == nil {
					c.Close(ctx)
				}
			} else {
				var db *sql.DB
				if db, err = sql.Open("pgx", dsn); err == nil {
					err = db.PingContext(ctx)
					db.Close()
				}
			}
			cancel()
			c := postgres.Classify(err)
			if err == nil || c.Code != tc.code || c.Retryable != tc.retryable || c.Phase != sr.NotSent {
				t.Errorf("%s %s: Classify(%v) = %+v, want Retryable %v, not-sent", tc.code, d, err, c, tc.retryable)
			}
		}
	}
}

// TestConnectRefusedByRealServer provokes the startup refusals a real
// PostgreSQL sends on its own: a database that does not accept connections
// (55000), one that does not exist (3D000) and one the role may not connect
// to (42501). Through pgx they arrive inside a *pgconn.ConnectError and are
// not sent; lib/pq returns the bare *pq.Error, which cannot be told from the
// same code in answer to a statement, so its phase stays the table's.
func TestConnectRefusedByRealServer(t *testing.T) {
	dsn := dbtest.FreshPostgres(t)
	adm := admin(t, dsn)
	sfx := randHex(t)
	closed, locked, role := "sqlretry_closed_"+sfx, "sqlretry_locked_"+sfx, "sqlretry_nocon_"+sfx
	for _, q := range []string{
		"CREATE DATABASE " + closed + " ALLOW_CONNECTIONS false",
		"CREATE DATABASE " + locked,
		"REVOKE CONNECT ON DATABASE " + locked + " FROM PUBLIC",
		"CREATE ROLE " + role + " LOGIN",
	} {
		if _, err := adm.ExecContext(ctxT(t), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		a, err := sql.Open("pgx", dbtest.PostgresDSN(t))
		if err != nil {
			t.Error(err)
			return
		}
		defer a.Close()
		for _, q := range []string{"DROP DATABASE IF EXISTS " + closed, "DROP DATABASE IF EXISTS " + locked, "DROP ROLE IF EXISTS " + role} {
			if _, err := a.ExecContext(ctx, q); err != nil {
				t.Errorf("%s: %v", q, err)
			}
		}
	})
	asRole := func(dsn string) string { return strings.Replace(dsn, "postgres@", role+"@", 1) }
	for _, tc := range []struct {
		what, dsn string
		code      string
		retryable bool
		libpq     sr.Phase // lib/pq's phase: the table's
	}{
		{"database not accepting connections", replaceDB(t, dsn, closed), "55000", true, sr.NotApplied},
		{"database that does not exist", replaceDB(t, dsn, "sqlretry_no_such_db_"+sfx), "3D000", false, sr.NotApplied},
		{"database the role may not connect to", asRole(replaceDB(t, dsn, locked)), "42501", false, sr.NotApplied},
	} {
		for _, d := range pgDrivers {
			s, err := d.connect(ctxT(t), tc.dsn)
			if err == nil {
				// database/sql and lib/pq connect lazily: the first call fails.
				_, err = s.queryInt(ctxT(t), "SELECT 1")
				s.close()
			}
			phase := sr.NotSent
			if d.name == "lib-pq" {
				phase = tc.libpq
			}
			checkClass(t, d, tc.what, err, want{tc.retryable, phase, tc.code})
		}
	}
}
