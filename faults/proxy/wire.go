package proxy

import (
	"encoding/binary"
	"strings"

	"github.com/sqlretry/sqlretry/internal/sqltext"
)

// Protocol is the wire protocol a [Proxy] parses to recognise COMMIT.
type Protocol string

// The protocols a Proxy understands.
const (
	// ProtocolAuto (also "") detects the protocol from the client's first
	// message: a PostgreSQL startup, SSL or GSS request, or a MySQL
	// handshake response.
	ProtocolAuto     Protocol = "auto"
	ProtocolPostgres Protocol = "postgres"
	ProtocolMySQL    Protocol = "mysql"
)

// ParseProtocol parses "auto", "" , "postgres" (or "pg") and "mysql" (or
// "mariadb").
func ParseProtocol(s string) (Protocol, error) {
	switch strings.ToLower(s) {
	case "", "auto":
		return ProtocolAuto, nil
	case "postgres", "postgresql", "pg":
		return ProtocolPostgres, nil
	case "mysql", "mariadb":
		return ProtocolMySQL, nil
	}
	return "", &protocolError{s}
}

type protocolError struct{ s string }

func (e *protocolError) Error() string {
	return "proxy: unknown protocol " + `"` + e.s + `"` + " (want auto, postgres or mysql)"
}

// maxParsed is the largest message whose text the parsers look at; larger
// ones (bulk data, huge statements) are skipped unread.
const maxParsed = 1 << 20

// A streamParser reads the client-to-server byte stream of one connection
// and counts the COMMIT statements in it. Chunks may split messages anywhere.
type streamParser interface {
	feed(b []byte) seen
}

// seen is what a parser found in one chunk of a client's stream.
type seen struct {
	commits int
	// askedEncryption: a PostgreSQL SSLRequest or GSSENCRequest. Whether
	// encrypted bytes follow is the server's one-byte answer ('S' for TLS,
	// 'G' for GSS; 'N' for no), which the proxy reads on the way back.
	askedEncryption bool
	// encrypted: the client starts an encrypted stream with no answer to
	// wait for: MySQL's SSL request (the server offered CLIENT_SSL, the TLS
	// handshake follows at once), or a TLS ClientHello in place of a
	// PostgreSQL startup message (PostgreSQL 17's sslnegotiation=direct).
	encrypted bool
}

// add accumulates what a later chunk found.
func (s *seen) add(t seen) {
	s.commits += t.commits
	s.askedEncryption = s.askedEncryption || t.askedEncryption
	s.encrypted = s.encrypted || t.encrypted
}

// isTLSRecord reports whether b starts like a TLS handshake record: content
// type 22 (handshake), then major version 3 (SSL 3.0 to TLS 1.3 alike).
func isTLSRecord(b []byte) bool { return len(b) >= 2 && b[0] == 0x16 && b[1] == 0x03 }

func newParser(p Protocol) streamParser {
	switch p {
	case ProtocolPostgres:
		return &pgParser{startup: true}
	case ProtocolMySQL:
		return &myParser{}
	}
	return &autoParser{}
}

// autoParser buffers the client's first 8 bytes, then hands the stream to the
// parser they identify; a stream it cannot identify is passed unparsed.
type autoParser struct {
	buf   []byte
	inner streamParser
	off   bool
}

func (a *autoParser) feed(b []byte) seen {
	switch {
	case a.inner != nil:
		return a.inner.feed(b)
	case a.off:
		return seen{}
	}
	a.buf = append(a.buf, b...)
	if len(a.buf) < 8 {
		return seen{}
	}
	switch code := binary.BigEndian.Uint32(a.buf[4:8]); {
	case isTLSRecord(a.buf):
		// Checked first: a ClientHello's fourth byte is its length's
		// high byte, often 1, which would pass for MySQL's sequence id.
		a.off = true
		return seen{encrypted: true}
	case code == pgProtocol3 || code == pgSSLRequest || code == pgGSSENCRequest || code == pgCancelRequest:
		a.inner = &pgParser{startup: true}
	case a.buf[3] == 1: // a MySQL client's first packet, the handshake response, has sequence id 1
		a.inner = &myParser{}
	default:
		a.off = true
		return seen{}
	}
	buf := a.buf
	a.buf = nil
	return a.inner.feed(buf)
}

// PostgreSQL frontend protocol codes (protocol.html, "Message Formats").
const (
	pgProtocol3     = 196608   // StartupMessage, protocol 3.0
	pgSSLRequest    = 80877103 // SSLRequest
	pgGSSENCRequest = 80877104 // GSSENCRequest
	pgCancelRequest = 80877102 // CancelRequest
)

// frames is the buffering both protocol parsers share: it collects a
// connection's bytes and cuts whole messages from them. Chunks may split
// messages anywhere, so a message is cut only once all of it has arrived.
type frames struct {
	buf  []byte
	skip int // bytes of an oversized message still to discard
}

// add appends a chunk of the stream, minus what is left of a message being
// discarded.
func (f *frames) add(b []byte) {
	if f.skip > 0 {
		k := min(f.skip, len(b))
		f.skip -= k
		b = b[k:]
	}
	f.buf = append(f.buf, b...)
}

// take cuts the first message, total bytes long, from the buffer, and
// reports false while it has not all arrived. A message too big to be a
// COMMIT is discarded unread, without waiting for all of it: take drops
// what has arrived, skips the rest as it arrives (add) and returns no
// message.
func (f *frames) take(total int) (msg []byte, ok bool) {
	switch {
	case total > maxParsed && len(f.buf) < total:
		f.skip = total - len(f.buf)
		f.buf = nil
		return nil, false
	case len(f.buf) < total:
		return nil, false
	case total <= maxParsed:
		msg = f.buf[:total]
	} // else an oversized message that has all arrived: dropped, msg nil
	f.buf = f.buf[total:]
	if len(f.buf) == 0 {
		f.buf = nil // let a large buffer go
	}
	return msg, true
}

// pgParser follows the PostgreSQL frontend stream: untyped startup-phase
// messages (length, code), then typed messages (type byte, length). It
// recognises COMMIT and END in simple Query ('Q') and extended-protocol Parse
// ('P') messages; the latter count when a portal bound to them is executed
// ('B', 'E'), since a Parse alone runs nothing. A TLS or GSS-encrypted stream
// turns it off.
type pgParser struct {
	frames
	startup   bool
	off       bool
	asked     bool // an SSLRequest or GSSENCRequest was sent
	directTLS bool // a ClientHello came with no request before it
	// The extended protocol's COMMITs: prepared statements whose text is a
	// COMMIT, and portals bound to them. Only those are kept.
	stmts, portals map[string]bool
}

func (p *pgParser) mark(m *map[string]bool, name string, commit bool) {
	if !commit {
		delete(*m, name)
		return
	}
	if *m == nil {
		*m = map[string]bool{}
	}
	(*m)[name] = true
}

func (p *pgParser) feed(b []byte) seen {
	var s seen
	if p.off {
		return s
	}
	p.add(b)
	for !p.off {
		msg, ok := p.next()
		if !ok {
			break
		}
		if msg == nil {
			continue // too big to be a COMMIT
		}
		if p.startup {
			s.askedEncryption = p.startupMessage(msg) || s.askedEncryption
		} else {
			s.commits += p.message(msg[0], msg[5:])
		}
	}
	s.encrypted = p.directTLS
	p.directTLS = false // reported once
	return s
}

// next cuts the next whole message from the stream. It reports false while
// none is complete, and turns the parser off at bytes that cannot be the
// frontend protocol in the clear.
func (p *pgParser) next() ([]byte, bool) {
	if p.startup {
		if len(p.buf) > 0 && p.buf[0] != 0 { // a TLS ClientHello (0x16) or garbage, not a startup length
			p.off = true
			// After an SSLRequest this is the TLS the server's 'S' let
			// in, which the proxy has counted already; without one it is
			// direct TLS, which only this byte shows.
			p.directTLS = p.buf[0] == 0x16 && !p.asked
			return nil, false
		}
		if len(p.buf) < 8 {
			return nil, false
		}
		n := int(binary.BigEndian.Uint32(p.buf[0:4]))
		if n < 8 || n > 10000 {
			p.off = true
			return nil, false
		}
		return p.take(n)
	}
	if len(p.buf) < 5 {
		return nil, false
	}
	n := int(binary.BigEndian.Uint32(p.buf[1:5]))
	if n < 4 {
		p.off = true
		return nil, false
	}
	return p.take(1 + n)
}

// startupMessage reads an untyped message (length, code): the startup phase
// ends with the StartupMessage. It reports an SSLRequest or GSSENCRequest.
func (p *pgParser) startupMessage(msg []byte) (askedEncryption bool) {
	switch binary.BigEndian.Uint32(msg[4:8]) {
	case pgSSLRequest, pgGSSENCRequest:
		// still in the startup phase: next comes TLS (turning us
		// off in next), or a StartupMessage after the server's 'N'
		p.asked = true
		return true
	case pgCancelRequest:
	default:
		p.startup = false
	}
	return false
}

// message reads a typed message and returns the COMMITs it runs.
func (p *pgParser) message(typ byte, body []byte) (commits int) {
	switch typ {
	case 'Q': // Query: the statement text, NUL-terminated
		if isCommit(cstring(body), true) {
			return 1
		}
	case 'P': // Parse: statement name, query text. It runs at Execute.
		if i := indexNUL(body); i >= 0 {
			p.mark(&p.stmts, string(body[:i]), isCommit(cstring(body[i+1:]), true))
		}
	case 'B': // Bind: portal name, statement name
		if i := indexNUL(body); i >= 0 {
			p.mark(&p.portals, string(body[:i]), p.stmts[cstring(body[i+1:])])
		}
	case 'E': // Execute: portal name
		if p.portals[cstring(body)] {
			return 1
		}
	}
	return 0
}

// myParser follows the MySQL client stream: packets of a 3-byte
// little-endian payload length, a sequence id and the payload. In the
// command phase each command is a packet with sequence id 0; COM_QUERY
// (0x03) carries the statement text. A client that asks for TLS turns it off.
type myParser struct {
	frames
	off bool
}

const (
	myComQuery  = 0x03
	myClientSSL = 0x0800 // CLIENT_SSL capability flag
)

func (p *myParser) feed(b []byte) seen {
	var s seen
	if p.off {
		return s
	}
	p.add(b)
	for !p.off && len(p.buf) >= 4 {
		n := int(p.buf[0]) | int(p.buf[1])<<8 | int(p.buf[2])<<16
		pkt, ok := p.take(4 + n)
		if !ok {
			break
		}
		if pkt != nil {
			s.add(p.packet(pkt[3], pkt[4:]))
		}
	}
	return s
}

// packet reads one packet and returns the COMMITs it runs, or that TLS
// begins.
func (p *myParser) packet(seq byte, payload []byte) seen {
	switch {
	case seq == 1 && len(payload) == 32 && binary.LittleEndian.Uint32(payload[0:4])&myClientSSL != 0:
		// The SSL request: the short handshake response, capabilities
		// with CLIENT_SSL and no user name. The TLS handshake follows.
		p.off = true
		return seen{encrypted: true}
	case seq == 0 && len(payload) >= 1 && payload[0] == myComQuery:
		if isCommit(string(payload[1:]), false) {
			return seen{commits: 1}
		}
	}
	return seen{}
}

func indexNUL(b []byte) int {
	for i, c := range b {
		if c == 0 {
			return i
		}
	}
	return -1
}

func cstring(b []byte) string {
	if i := indexNUL(b); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// isCommit reports whether any statement in text (statements separated by
// semicolons outside quotes and comments) is a COMMIT, or for PostgreSQL an
// END.
func isCommit(text string, pg bool) bool {
	for _, s := range splitStatements(text, pg) {
		switch sqltext.Verb(s) {
		case "commit":
			return true
		case "end":
			if pg {
				return true
			}
		}
	}
	return false
}

// splitStatements splits text at semicolons that are outside string
// literals, quoted identifiers, comments and (for PostgreSQL) dollar quotes.
func splitStatements(text string, pg bool) []string {
	var out []string
	start := 0
	for i := 0; i < len(text); i++ {
		switch c := text[i]; {
		case c == '\'' || c == '"' || c == '`':
			j := strings.IndexByte(text[i+1:], c)
			if j < 0 {
				return append(out, text[start:])
			}
			i += j + 1
		case c == '-' && strings.HasPrefix(text[i:], "--"):
			j := strings.IndexByte(text[i:], '\n')
			if j < 0 {
				return append(out, text[start:])
			}
			i += j
		case c == '/' && strings.HasPrefix(text[i:], "/*"):
			j := strings.Index(text[i+2:], "*/")
			if j < 0 {
				return append(out, text[start:])
			}
			i += j + 3
		case c == '$' && pg:
			// $tag$ ... $tag$, tag empty or an identifier
			k := i + 1
			for k < len(text) && (text[k] == '_' || text[k] >= 'a' && text[k] <= 'z' || text[k] >= 'A' && text[k] <= 'Z' || text[k] >= '0' && text[k] <= '9') {
				k++
			}
			if k < len(text) && text[k] == '$' {
				tag := text[i : k+1]
				j := strings.Index(text[k+1:], tag)
				if j < 0 {
					return append(out, text[start:])
				}
				i = k + j + len(tag)
			}
		case c == ';':
			out = append(out, text[start:i])
			start = i + 1
		}
	}
	return append(out, text[start:])
}
