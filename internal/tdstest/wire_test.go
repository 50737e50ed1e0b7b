package tdstest

import (
	"bytes"
	"errors"
	"net"
	"testing"
	"time"
)

func TestPacketizeRoundTrip(t *testing.T) {
	for _, n := range []int{0, 1, 503, 504, 505, 4088, 4089, 20000} {
		payload := bytes.Repeat([]byte{0xAB}, n)
		wire := packetize(pktReply, payload, 512)
		m, err := readMessage(bytes.NewReader(wire))
		if err != nil {
			t.Fatalf("%d bytes: readMessage: %v", n, err)
		}
		if m.typ != pktReply || !bytes.Equal(m.data, payload) {
			t.Errorf("%d bytes: got type %d and %d bytes back, want type %d and the payload", n, m.typ, len(m.data), pktReply)
		}
		if want := max(1, (n+503)/504); len(wire) != n+8*want {
			t.Errorf("%d bytes: got %d wire bytes, want %d packets of at most 512", n, len(wire), want)
		}
	}
}

func TestMatchSQL(t *testing.T) {
	for _, tc := range []struct {
		prefix, sql string
		want        bool
	}{
		{"", "anything", true},
		{"UPDATE", "update t", true},
		{"UPDATE", "  \n\tUpdate t", true},
		{"UPDATE", "UPD", false},
		{"UPDATE", "/* c */ UPDATE t", false},
		{"select count", "SELECT COUNT(*)", true},
	} {
		if got := matchSQL(tc.prefix, tc.sql); got != tc.want {
			t.Errorf("matchSQL(%q, %q): got %v, want %v", tc.prefix, tc.sql, got, tc.want)
		}
	}
}

func TestPasswordUnmangle(t *testing.T) {
	// [MS-TDS] 2.2.6.4: swap the nibbles of each byte, then XOR with 0xA5.
	mangle := func(s string) []byte {
		b := ucs2(s)
		for i, c := range b {
			b[i] = (c<<4 | c>>4) ^ 0xA5
		}
		return b
	}
	for _, pw := range []string{"", "pw", "Pässwörd!☃"} {
		got, err := fromUCS2(unmanglePassword(mangle(pw)))
		if err != nil || got != pw {
			t.Errorf("unmangle(mangle(%q)): got %q, %v", pw, got, err)
		}
	}
}

// FuzzRequestParsers feeds arbitrary bytes to every request parser: none
// may panic (a panic would take down the test binary of whoever uses the
// responder). Seeds run in every go test; fuzz with
// go test -fuzz FuzzRequestParsers ./internal/tdstest.
func FuzzRequestParsers(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0x16, 0, 0, 0, 0x12, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0})
	f.Add(append([]byte{4, 0, 0, 0, 0xFF, 0xFF, 10, 0, 0, 0, 0, 0, typeNVarChar, 0x40, 0x1F, 9, 4, 0xD0, 0, 0x34, 4, 0}, ucs2("hi")...))
	f.Add(bytes.Repeat([]byte{0xFF}, 100))
	f.Add(make([]byte, 94))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _, _, _, _ = parseRPC(b)
		_, _ = parseLogin7(b)
		r := reader{b: b}
		r.skipAllHeaders()
		for r.err == nil && len(r.b) > 0 {
			r.paramValue()
		}
		_, _ = readMessage(bytes.NewReader(b))
	})
}

func TestMalformedRequestsAreRecorded(t *testing.T) {
	s, err := New(Script{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i, raw := range [][]byte{
		{pktPrelogin, statusEOM, 0, 4, 0, 0, 1, 0},          // length below the header
		packetize(pktLogin7, []byte{1, 2, 3}, 4096),         // LOGIN7 too short
		packetize(pktTransMgr, []byte{1, 0, 0, 0}, 4096),    // ALL_HEADERS length 1
		packetize(0x42, []byte{0}, 4096),                    // unknown packet type
		packetize(pktSQLBatch, []byte{4, 0, 0, 0, 1}, 4096), // odd UCS-2 text
	} {
		nc, err := net.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		nc.SetDeadline(time.Now().Add(10 * time.Second))
		nc.Write(raw)
		// The responder closes the connection after a malformed request.
		if _, err := nc.Read(make([]byte, 1)); err == nil {
			t.Errorf("request %d: the connection stayed open", i)
		}
		nc.Close()
		if got := len(s.ProtocolErrors()); got != i+1 {
			t.Fatalf("request %d: got %d protocol errors, want %d", i, got, i+1)
		}
	}
	for _, err := range s.ProtocolErrors() {
		if !errors.Is(err, errProtocol) {
			t.Errorf("protocol error %v does not match errProtocol", err)
		}
	}
}

func TestRowRejectsWrongValues(t *testing.T) {
	for _, tc := range []struct {
		col Column
		v   any
	}{
		{Column{Name: "i", Type: Int}, "x"},
		{Column{Name: "i", Type: Int}, int64(1) << 40},
		{Column{Name: "b", Type: Bit}, 1},
		{Column{Name: "f", Type: Float}, "x"},
	} {
		var tk tokens
		if err := tk.row([]Column{tc.col}, []any{tc.v}); err == nil {
			t.Errorf("row(%v, %#v): got nil, want an error", tc.col, tc.v)
		}
	}
	var tk tokens
	if err := tk.row([]Column{{Type: Int}}, []any{1, 2}); err == nil {
		t.Errorf("row with 2 values for 1 column: got nil, want an error")
	}
}
