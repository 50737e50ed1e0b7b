package proxy

import (
	"encoding/binary"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"
)

func encode(t *testing.T, msgs ...pgproto3.FrontendMessage) []byte {
	t.Helper()
	var b []byte
	for _, m := range msgs {
		var err error
		if b, err = m.Encode(b); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

func myPacket(seq byte, payload []byte) []byte {
	n := len(payload)
	return append([]byte{byte(n), byte(n >> 8), byte(n >> 16), seq}, payload...)
}

func myQuery(q string) []byte { return myPacket(0, append([]byte{myComQuery}, q...)) }

func myHandshake(caps uint32, n int) []byte {
	p := make([]byte, n)
	binary.LittleEndian.PutUint32(p, caps)
	return myPacket(1, p)
}

// feedAll feeds stream in chunks of size (0: all at once) and sums what
// was found.
func feedAll(p streamParser, stream []byte, size int) seen {
	if size <= 0 {
		return p.feed(stream)
	}
	var s seen
	for len(stream) > 0 {
		k := min(size, len(stream))
		s.add(p.feed(stream[:k]))
		stream = stream[k:]
	}
	return s
}

func TestParsersFindCommit(t *testing.T) {
	startup := &pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersionNumber, Parameters: map[string]string{"user": "postgres"}}
	tests := []struct {
		name   string
		proto  Protocol
		stream func(t *testing.T) []byte
		want   int
	}{
		{"pg simple commit", ProtocolPostgres, func(t *testing.T) []byte {
			return encode(t, startup, &pgproto3.Query{String: "begin"}, &pgproto3.Query{String: "insert into t values (1)"}, &pgproto3.Query{String: "commit"})
		}, 1},
		{"pg END and COMMIT AND CHAIN", ProtocolPostgres, func(t *testing.T) []byte {
			return encode(t, startup, &pgproto3.Query{String: "  END"}, &pgproto3.Query{String: "/* c */ COMMIT AND CHAIN"})
		}, 2},
		{"pg extended protocol: unnamed COMMIT parsed, bound and executed", ProtocolPostgres, func(t *testing.T) []byte {
			return encode(t, startup, &pgproto3.Parse{Query: "COMMIT"}, &pgproto3.Bind{}, &pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{}, &pgproto3.Sync{})
		}, 1},
		{"pg extended protocol: a prepared COMMIT counts when executed, each time", ProtocolPostgres, func(t *testing.T) []byte {
			return encode(t, startup,
				&pgproto3.Parse{Name: "s1", Query: "commit"}, &pgproto3.Describe{ObjectType: 'S', Name: "s1"}, &pgproto3.Sync{},
				&pgproto3.Parse{Name: "s2", Query: "insert into t values ($1)"}, &pgproto3.Sync{},
				&pgproto3.Bind{DestinationPortal: "p", PreparedStatement: "s2"}, &pgproto3.Execute{Portal: "p"}, &pgproto3.Sync{},
				&pgproto3.Bind{DestinationPortal: "p", PreparedStatement: "s1"}, &pgproto3.Execute{Portal: "p"}, &pgproto3.Sync{},
				&pgproto3.Bind{PreparedStatement: "s1"}, &pgproto3.Execute{}, &pgproto3.Sync{})
		}, 2},
		{"pg extended protocol: a prepared COMMIT never executed runs nothing", ProtocolPostgres, func(t *testing.T) []byte {
			return encode(t, startup, &pgproto3.Parse{Name: "s1", Query: "COMMIT"}, &pgproto3.Describe{ObjectType: 'S', Name: "s1"}, &pgproto3.Sync{})
		}, 0},
		{"pg extended protocol: a statement name reused for another query", ProtocolPostgres, func(t *testing.T) []byte {
			return encode(t, startup, &pgproto3.Parse{Name: "s", Query: "COMMIT"}, &pgproto3.Parse{Name: "s", Query: "SELECT 1"},
				&pgproto3.Bind{PreparedStatement: "s"}, &pgproto3.Execute{}, &pgproto3.Sync{})
		}, 0},
		{"pg batch ending in commit", ProtocolPostgres, func(t *testing.T) []byte {
			return encode(t, startup, &pgproto3.Query{String: "BEGIN; INSERT INTO t VALUES ('a;commit'); COMMIT;"})
		}, 1},
		{"pg no commit: rollback, END inside a DO body, commit in a string", ProtocolPostgres, func(t *testing.T) []byte {
			return encode(t, startup,
				&pgproto3.Query{String: "rollback"},
				&pgproto3.Query{String: "DO $body$ BEGIN PERFORM 1; END $body$"},
				&pgproto3.Query{String: "select 'commit'"},
				&pgproto3.Parse{Query: "insert into t values ($1)"})
		}, 0},
		{"pg after SSLRequest refused", ProtocolPostgres, func(t *testing.T) []byte {
			return append(encode(t, &pgproto3.SSLRequest{}, startup), encode(t, &pgproto3.Query{String: "commit"})...)
		}, 1},
		{"pg TLS turns the parser off", ProtocolPostgres, func(t *testing.T) []byte {
			return append(encode(t, &pgproto3.SSLRequest{}), 0x16, 3, 1, 0, 5, 'c', 'o', 'm', 'm', 'i', 't')
		}, 0},
		{"auto detects pg", ProtocolAuto, func(t *testing.T) []byte {
			return encode(t, startup, &pgproto3.Query{String: "commit"})
		}, 1},
		{"mysql COM_QUERY COMMIT", ProtocolMySQL, func(t *testing.T) []byte {
			s := myHandshake(0x000fa685, 60)
			s = append(s, myQuery("START TRANSACTION")...)
			s = append(s, myQuery("INSERT INTO t VALUES (1)")...)
			return append(s, myQuery("COMMIT")...)
		}, 1},
		{"mysql END is not a commit", ProtocolMySQL, func(t *testing.T) []byte {
			return append(myHandshake(0x000fa685, 60), myQuery("END")...)
		}, 0},
		{"mysql SSL request turns the parser off", ProtocolMySQL, func(t *testing.T) []byte {
			return append(myHandshake(0x000fa685|myClientSSL, 32), myQuery("COMMIT")...)
		}, 0},
		{"auto detects mysql", ProtocolAuto, func(t *testing.T) []byte {
			return append(myHandshake(0x000fa685, 60), myQuery("commit")...)
		}, 1},
		{"auto leaves an unknown stream alone", ProtocolAuto, func(t *testing.T) []byte {
			return []byte("GET / HTTP/1.1\r\n\r\ncommit")
		}, 0},
	}
	for _, tt := range tests {
		stream := tt.stream(t)
		for _, size := range []int{0, 1, 3, 7} {
			if got := feedAll(newParser(tt.proto), stream, size).commits; got != tt.want {
				t.Errorf("%s, chunks of %d: got %d commits, want %d", tt.name, size, got, tt.want)
			}
		}
	}
}

func TestParserSkipsHugeMessages(t *testing.T) {
	big := make([]byte, maxParsed+10)
	for i := range big {
		big[i] = 'x'
	}
	startup := &pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersionNumber, Parameters: map[string]string{"user": "u"}}
	pg := encode(t, startup, &pgproto3.Query{String: string(big)}, &pgproto3.Query{String: "commit"})
	my := append(myHandshake(0x000fa685, 60), myQuery(string(big))...)
	my = append(my, myQuery("commit")...)
	for _, tt := range []struct {
		name   string
		proto  Protocol
		stream []byte
	}{{"pg", ProtocolPostgres, pg}, {"mysql", ProtocolMySQL, my}} {
		for _, size := range []int{0, 32 << 10} {
			if got := feedAll(newParser(tt.proto), tt.stream, size).commits; got != 1 {
				t.Errorf("%s, chunks of %d: got %d commits after a huge message, want 1", tt.name, size, got)
			}
		}
	}
}

// clientHello is the start of a TLS 1.2 ClientHello record whose length's
// high byte is 1, as a MySQL handshake response's sequence id would be.
var clientHello = []byte{0x16, 0x03, 0x01, 0x01, 0x20, 0x01, 0x00, 0x01, 0x1c, 0x03, 0x03}

func TestParsersSeeEncryption(t *testing.T) {
	startup := &pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersionNumber, Parameters: map[string]string{"user": "postgres"}}
	tests := []struct {
		name   string
		proto  Protocol
		stream func(t *testing.T) []byte
		want   seen
	}{
		{"pg SSLRequest asks", ProtocolPostgres, func(t *testing.T) []byte {
			return encode(t, &pgproto3.SSLRequest{})
		}, seen{askedEncryption: true}},
		{"pg GSSENCRequest asks", ProtocolPostgres, func(t *testing.T) []byte {
			return encode(t, &pgproto3.GSSEncRequest{})
		}, seen{askedEncryption: true}},
		{"pg SSLRequest then TLS: the server's answer, not the ClientHello, decides", ProtocolPostgres, func(t *testing.T) []byte {
			return append(encode(t, &pgproto3.SSLRequest{}), clientHello...)
		}, seen{askedEncryption: true}},
		{"auto: pg SSLRequest asks", ProtocolAuto, func(t *testing.T) []byte {
			return encode(t, &pgproto3.SSLRequest{})
		}, seen{askedEncryption: true}},
		{"pg direct TLS (sslnegotiation=direct)", ProtocolPostgres, func(t *testing.T) []byte {
			return clientHello
		}, seen{encrypted: true}},
		{"auto: a ClientHello is TLS, not a MySQL handshake", ProtocolAuto, func(t *testing.T) []byte {
			return clientHello
		}, seen{encrypted: true}},
		{"pg in the clear", ProtocolPostgres, func(t *testing.T) []byte {
			return encode(t, startup, &pgproto3.Query{String: "commit"})
		}, seen{commits: 1}},
		{"pg CancelRequest asks nothing", ProtocolPostgres, func(t *testing.T) []byte {
			return encode(t, &pgproto3.CancelRequest{ProcessID: 1, SecretKey: []byte{0, 0, 0, 2}})
		}, seen{}},
		{"mysql SSL request", ProtocolMySQL, func(t *testing.T) []byte {
			return append(myHandshake(0x000fa685|myClientSSL, 32), clientHello...)
		}, seen{encrypted: true}},
		{"auto: mysql SSL request", ProtocolAuto, func(t *testing.T) []byte {
			return append(myHandshake(0x000fa685|myClientSSL, 32), clientHello...)
		}, seen{encrypted: true}},
		{"mysql: a full handshake response with CLIENT_SSL is not a request", ProtocolMySQL, func(t *testing.T) []byte {
			return append(myHandshake(0x000fa685|myClientSSL, 60), myQuery("commit")...)
		}, seen{commits: 1}},
		{"mysql in the clear", ProtocolMySQL, func(t *testing.T) []byte {
			return append(myHandshake(0x000fa685, 60), myQuery("commit")...)
		}, seen{commits: 1}},
	}
	for _, tt := range tests {
		stream := tt.stream(t)
		for _, size := range []int{0, 1, 3, 7} {
			if got := feedAll(newParser(tt.proto), stream, size); got != tt.want {
				t.Errorf("%s, chunks of %d: got %+v, want %+v", tt.name, size, got, tt.want)
			}
		}
	}
}
