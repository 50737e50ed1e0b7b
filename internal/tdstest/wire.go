package tdstest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"unicode/utf16"
)

// Packet types, [MS-TDS] 2.2.3.1.1.
const (
	pktSQLBatch  = 1
	pktRPC       = 3
	pktReply     = 4
	pktAttention = 6
	pktTransMgr  = 14
	pktLogin7    = 16
	pktPrelogin  = 18
)

// Packet status bits, [MS-TDS] 2.2.3.1.2.
const (
	statusEOM = 0x01
)

// Token types, [MS-TDS] 2.2.7.
const (
	tokColMetadata = 0x81
	tokError       = 0xAA
	tokLoginAck    = 0xAD
	tokRow         = 0xD1
	tokEnvChange   = 0xE3
	tokDone        = 0xFD
)

// DONE status bits, [MS-TDS] 2.2.7.6.
const (
	doneFinal  = 0x00
	doneError  = 0x02
	doneCount  = 0x10
	doneAttn   = 0x20
	doneSrvErr = 0x100
)

// DONE CurCmd values (undocumented in [MS-TDS]; as SQL Server sends them).
const (
	curCmdSelect = 0xC1
	curCmdUpdate = 0xC5
)

// ENVCHANGE types, [MS-TDS] 2.2.7.9.
const (
	envDatabase     = 1
	envPacketSize   = 4
	envSQLCollation = 7
	envBeginTran    = 8
	envCommitTran   = 9
	envRollbackTran = 10
)

// Transaction manager request types, [MS-TDS] 2.2.6.9.
const (
	tmBeginXact    = 5
	tmCommitXact   = 7
	tmRollbackXact = 8
)

// Type identifiers, [MS-TDS] 2.2.5.4.
const (
	typeNull         = 0x1F
	typeInt1         = 0x30
	typeBit          = 0x32
	typeInt2         = 0x34
	typeInt4         = 0x38
	typeDateTim4     = 0x3A
	typeFlt4         = 0x3B
	typeMoney        = 0x3C
	typeDateTime     = 0x3D
	typeFlt8         = 0x3E
	typeMoney4       = 0x7A
	typeInt8         = 0x7F
	typeGUID         = 0x24
	typeIntN         = 0x26
	typeDecimal      = 0x37
	typeNumeric      = 0x3F
	typeBitN         = 0x68
	typeDecimalN     = 0x6A
	typeNumericN     = 0x6C
	typeFltN         = 0x6D
	typeMoneyN       = 0x6E
	typeDateTimeN    = 0x6F
	typeDateN        = 0x28
	typeTimeN        = 0x29
	typeDateTime2N   = 0x2A
	typeDateTimeOffN = 0x2B
	typeChar         = 0x2F
	typeVarChar      = 0x27
	typeBinary       = 0x2D
	typeVarBinary    = 0x25
	typeBigVarBin    = 0xA5
	typeBigVarChar   = 0xA7
	typeBigBinary    = 0xAD
	typeBigChar      = 0xAF
	typeNVarChar     = 0xE7
	typeNChar        = 0xEF
	typeXML          = 0xF1
	typeUDT          = 0xF0
	typeText         = 0x23
	typeImage        = 0x22
	typeNText        = 0x63
	typeVariant      = 0x62
)

// collation is the 5-byte COLLATION the responder reports and declares on
// its NVARCHAR columns: LCID 0x0409 (en-US), flags for a case-insensitive,
// accent-sensitive order, SortId 52 — SQL_Latin1_General_CP1_CI_AS.
var collation = [5]byte{0x09, 0x04, 0xD0, 0x00, 0x34}

// errProtocol marks a request the responder could not parse.
var errProtocol = errors.New("tdstest: malformed request")

func protoErr(format string, a ...any) error {
	return fmt.Errorf("%w: %s", errProtocol, fmt.Sprintf(format, a...))
}

// message is one TDS message: the payloads of its packets joined.
type message struct {
	typ    byte
	status byte // of the first packet (RESETCONNECTION and friends)
	data   []byte
}

// readMessage reads packets until one has the EOM status bit and returns
// their joined payloads. [MS-TDS] 2.2.3.1.
func readMessage(r io.Reader) (message, error) {
	var m message
	var hdr [8]byte
	for first := true; ; first = false {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return m, err
		}
		size := int(binary.BigEndian.Uint16(hdr[2:4]))
		if size < 8 {
			return m, protoErr("packet length %d below the header size", size)
		}
		if first {
			m.typ, m.status = hdr[0], hdr[1]
		} else if hdr[0] != m.typ {
			return m, protoErr("packet type %d inside a message of type %d", hdr[0], m.typ)
		}
		start := len(m.data)
		m.data = append(m.data, make([]byte, size-8)...)
		if _, err := io.ReadFull(r, m.data[start:]); err != nil {
			return m, err
		}
		if hdr[1]&statusEOM != 0 {
			return m, nil
		}
		if len(m.data) > 16<<20 {
			return m, protoErr("message longer than 16 MiB")
		}
	}
}

// packetize splits payload into packets of at most size bytes (header
// included) of type typ, the last one marked EOM.
func packetize(typ byte, payload []byte, size int) []byte {
	if size < 512 {
		size = 512
	}
	room := size - 8
	out := make([]byte, 0, len(payload)+8*(len(payload)/room+1))
	id := byte(1)
	for {
		n := min(len(payload), room)
		status := byte(0)
		if n == len(payload) {
			status = statusEOM
		}
		var hdr [8]byte
		hdr[0] = typ
		hdr[1] = status
		binary.BigEndian.PutUint16(hdr[2:4], uint16(n+8))
		binary.BigEndian.PutUint16(hdr[4:6], 0x0033) // SPID
		hdr[6] = id
		out = append(out, hdr[:]...)
		out = append(out, payload[:n]...)
		payload = payload[n:]
		id++
		if status == statusEOM {
			return out
		}
	}
}

// ---- little helpers for building token streams ----

type tokens struct{ b []byte }

func (t *tokens) byte(v byte)    { t.b = append(t.b, v) }
func (t *tokens) u16(v uint16)   { t.b = binary.LittleEndian.AppendUint16(t.b, v) }
func (t *tokens) u32(v uint32)   { t.b = binary.LittleEndian.AppendUint32(t.b, v) }
func (t *tokens) u64(v uint64)   { t.b = binary.LittleEndian.AppendUint64(t.b, v) }
func (t *tokens) bytes(v []byte) { t.b = append(t.b, v...) }
func (t *tokens) ucs2(s string)  { t.b = append(t.b, ucs2(s)...) }
func (t *tokens) bVarChar(s string) {
	u := ucs2(s)
	t.byte(byte(len(u) / 2))
	t.bytes(u)
}
func (t *tokens) usVarChar(s string) {
	u := ucs2(s)
	t.u16(uint16(len(u) / 2))
	t.bytes(u)
}

// withLen appends a token whose body is preceded by its uint16 length.
func (t *tokens) withLen(body func(b *tokens)) {
	var inner tokens
	body(&inner)
	t.u16(uint16(len(inner.b)))
	t.bytes(inner.b)
}

func ucs2(s string) []byte {
	u := utf16.Encode([]rune(s))
	b := make([]byte, 2*len(u))
	for i, c := range u {
		binary.LittleEndian.PutUint16(b[2*i:], c)
	}
	return b
}

func fromUCS2(b []byte) (string, error) {
	if len(b)%2 != 0 {
		return "", protoErr("odd UCS-2 byte count %d", len(b))
	}
	u := make([]uint16, len(b)/2)
	for i := range u {
		u[i] = binary.LittleEndian.Uint16(b[2*i:])
	}
	return string(utf16.Decode(u)), nil
}

// done appends a DONE token, [MS-TDS] 2.2.7.6.
func (t *tokens) done(status, curCmd uint16, rows uint64) {
	t.byte(tokDone)
	t.u16(status)
	t.u16(curCmd)
	t.u64(rows)
}

// errorToken appends an ERROR token, [MS-TDS] 2.2.7.10.
func (t *tokens) errorToken(e Error, server string) {
	t.byte(tokError)
	t.withLen(func(b *tokens) {
		b.u32(uint32(e.Number))
		b.byte(e.State)
		b.byte(e.Class)
		b.usVarChar(e.Message)
		b.bVarChar(server)
		b.bVarChar(e.Procedure)
		b.u32(uint32(e.Line))
	})
}

// envString appends an ENVCHANGE whose values are B_VARCHARs.
func (t *tokens) envString(typ byte, newV, oldV string) {
	t.byte(tokEnvChange)
	t.withLen(func(b *tokens) {
		b.byte(typ)
		b.bVarChar(newV)
		b.bVarChar(oldV)
	})
}

// envBytes appends an ENVCHANGE whose values are B_VARBYTEs.
func (t *tokens) envBytes(typ byte, newV, oldV []byte) {
	t.byte(tokEnvChange)
	t.withLen(func(b *tokens) {
		b.byte(typ)
		b.byte(byte(len(newV)))
		b.bytes(newV)
		b.byte(byte(len(oldV)))
		b.bytes(oldV)
	})
}

// loginAck appends a LOGINACK token, [MS-TDS] 2.2.7.14: interface 1 (T-SQL),
// TDS 7.4, and a SQL Server 2022 (16.0) program version.
func (t *tokens) loginAck() {
	t.byte(tokLoginAck)
	t.withLen(func(b *tokens) {
		b.byte(1)
		b.b = binary.BigEndian.AppendUint32(b.b, 0x74000004)
		b.bVarChar("Microsoft SQL Server")
		b.bytes([]byte{16, 0, 0x10, 0x00})
	})
}

// colMetadata appends COLMETADATA, [MS-TDS] 2.2.7.4.
func (t *tokens) colMetadata(cols []Column) {
	t.byte(tokColMetadata)
	t.u16(uint16(len(cols)))
	for _, c := range cols {
		t.u32(0)      // UserType
		t.u16(0x0001) // Flags: nullable
		switch c.Type {
		case Int:
			t.byte(typeIntN)
			t.byte(4)
		case BigInt:
			t.byte(typeIntN)
			t.byte(8)
		case Bit:
			t.byte(typeBitN)
			t.byte(1)
		case Float:
			t.byte(typeFltN)
			t.byte(8)
		default: // NVarChar
			t.byte(typeNVarChar)
			t.u16(8000) // nvarchar(4000), in bytes
			t.bytes(collation[:])
		}
		t.bVarChar(c.Name)
	}
}

// row appends a ROW token, [MS-TDS] 2.2.7.19.
func (t *tokens) row(cols []Column, vals []any) error {
	if len(vals) != len(cols) {
		return fmt.Errorf("tdstest: row has %d values for %d columns", len(vals), len(cols))
	}
	t.byte(tokRow)
	for i, c := range cols {
		if err := t.value(c, vals[i]); err != nil {
			return err
		}
	}
	return nil
}

// value appends one column's value in the form colMetadata declared for
// it.
func (t *tokens) value(c Column, v any) error {
	if v == nil {
		t.null(c.Type)
		return nil
	}
	switch c.Type {
	case Int, BigInt:
		return t.intValue(c, v)
	case Bit:
		return t.bitValue(c, v)
	case Float:
		return t.floatValue(c, v)
	}
	return t.nvarcharValue(c, v)
}

// null appends a NULL: a zero length, one byte for the BYTELEN types, 0xFFFF
// for nvarchar's USHORTLEN.
func (t *tokens) null(typ ColumnType) {
	switch typ {
	case Int, BigInt, Bit, Float:
		t.byte(0)
	default: // NVarChar
		t.u16(0xFFFF)
	}
}

func (t *tokens) intValue(c Column, v any) error {
	n, ok := asInt64(v)
	if !ok {
		return fmt.Errorf("tdstest: column %q (%s): value %v (%T) is not an integer", c.Name, c.Type, v, v)
	}
	if c.Type == BigInt {
		t.byte(8)
		t.u64(uint64(n))
		return nil
	}
	if n < math.MinInt32 || n > math.MaxInt32 {
		return fmt.Errorf("tdstest: column %q (int): %d out of range", c.Name, n)
	}
	t.byte(4)
	t.u32(uint32(int32(n)))
	return nil
}

func (t *tokens) bitValue(c Column, v any) error {
	b, ok := v.(bool)
	if !ok {
		return fmt.Errorf("tdstest: column %q (bit): value %v (%T) is not a bool", c.Name, v, v)
	}
	t.byte(1)
	if b {
		t.byte(1)
	} else {
		t.byte(0)
	}
	return nil
}

func (t *tokens) floatValue(c Column, v any) error {
	f, ok := v.(float64)
	if !ok {
		n, isInt := asInt64(v)
		if !isInt {
			return fmt.Errorf("tdstest: column %q (float): value %v (%T) is not a number", c.Name, v, v)
		}
		f = float64(n)
	}
	t.byte(8)
	t.u64(math.Float64bits(f))
	return nil
}

// nvarcharValue appends v as text: strings and bytes as they are, anything
// else as it prints.
func (t *tokens) nvarcharValue(c Column, v any) error {
	var s string
	switch x := v.(type) {
	case string:
		s = x
	case []byte:
		s = string(x)
	case fmt.Stringer:
		s = x.String()
	default:
		if n, ok := asInt64(v); ok {
			s = strconv.FormatInt(n, 10)
		} else {
			s = fmt.Sprint(v)
		}
	}
	u := ucs2(s)
	if len(u) > 8000 {
		return fmt.Errorf("tdstest: column %q (nvarchar(4000)): value of %d characters is too long", c.Name, len(u)/2)
	}
	t.u16(uint16(len(u)))
	t.bytes(u)
	return nil
}

func asInt64(v any) (int64, bool) {
	switch x := v.(type) {
	case int:
		return int64(x), true
	case int8:
		return int64(x), true
	case int16:
		return int64(x), true
	case int32:
		return int64(x), true
	case int64:
		return x, true
	case uint8:
		return int64(x), true
	case uint16:
		return int64(x), true
	case uint32:
		return int64(x), true
	}
	return 0, false
}

// ---- request parsing ----

// reader walks a request payload; the first failure sticks.
type reader struct {
	b   []byte
	err error
}

func (r *reader) need(n int) bool {
	if r.err != nil {
		return false
	}
	if n < 0 || len(r.b) < n {
		r.err = protoErr("need %d bytes, have %d", n, len(r.b))
		return false
	}
	return true
}

func (r *reader) take(n int) []byte {
	if !r.need(n) {
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

// fixed takes n bytes, or once the reader has failed n zero bytes, so that
// the fixed-size reads below read 0 after a failure.
func (r *reader) fixed(n int) []byte {
	if v := r.take(n); v != nil {
		return v
	}
	return make([]byte, n)
}

func (r *reader) u8() byte    { return r.fixed(1)[0] }
func (r *reader) u16() uint16 { return binary.LittleEndian.Uint16(r.fixed(2)) }
func (r *reader) u32() uint32 { return binary.LittleEndian.Uint32(r.fixed(4)) }
func (r *reader) u64() uint64 { return binary.LittleEndian.Uint64(r.fixed(8)) }

func (r *reader) ucs2(chars int) string {
	b := r.take(2 * chars)
	if r.err != nil {
		return ""
	}
	s, err := fromUCS2(b)
	if err != nil {
		r.err = err
	}
	return s
}

func (r *reader) bVarChar() string { return r.ucs2(int(r.u8())) }

// skipAllHeaders skips the ALL_HEADERS block that TDS 7.2+ puts before a SQL
// batch, an RPC and a transaction manager request, [MS-TDS] 2.2.5.3, and
// returns the transaction descriptor it carries (0 if none).
func (r *reader) skipAllHeaders() (txDescr uint64) {
	total := int(r.u32())
	if r.err != nil {
		return 0
	}
	if total < 4 || total-4 > len(r.b) {
		r.err = protoErr("ALL_HEADERS length %d", total)
		return 0
	}
	h := reader{b: r.take(total - 4)}
	for len(h.b) > 0 && h.err == nil {
		n := int(h.u32())
		typ := h.u16()
		body := h.take(n - 6)
		if typ == 2 && len(body) >= 8 { // transaction descriptor
			txDescr = binary.LittleEndian.Uint64(body)
		}
	}
	if h.err != nil {
		r.err = h.err
	}
	return txDescr
}

// parseLogin7 extracts the fields a script may care about from a LOGIN7
// record, [MS-TDS] 2.2.6.4. Offsets are from the start of the record.
func parseLogin7(b []byte) (l loginInfo, err error) {
	if len(b) < 94 {
		return l, protoErr("LOGIN7 of %d bytes", len(b))
	}
	l.tdsVersion = binary.LittleEndian.Uint32(b[4:8])
	l.packetSize = int(binary.LittleEndian.Uint32(b[8:12]))
	field := func(at int) ([]byte, error) {
		off := int(binary.LittleEndian.Uint16(b[at:]))
		n := int(binary.LittleEndian.Uint16(b[at+2:])) * 2
		if off+n > len(b) {
			return nil, protoErr("LOGIN7 field at %d: offset %d length %d past the record", at, off, n)
		}
		return b[off : off+n], nil
	}
	str := func(at int) (string, error) {
		f, err := field(at)
		if err != nil {
			return "", err
		}
		return fromUCS2(f)
	}
	if l.host, err = str(36); err != nil {
		return l, err
	}
	if l.user, err = str(40); err != nil {
		return l, err
	}
	pw, err := field(44)
	if err != nil {
		return l, err
	}
	if l.password, err = fromUCS2(unmanglePassword(pw)); err != nil {
		return l, err
	}
	if l.app, err = str(48); err != nil {
		return l, err
	}
	if l.database, err = str(68); err != nil {
		return l, err
	}
	return l, nil
}

// unmanglePassword reverses the LOGIN7 password obfuscation, [MS-TDS]
// 2.2.6.4: every byte had its nibbles swapped and was XORed with 0xA5.
func unmanglePassword(b []byte) []byte {
	out := make([]byte, len(b))
	for i, c := range b {
		c ^= 0xA5
		out[i] = c<<4 | c>>4
	}
	return out
}

type loginInfo struct {
	tdsVersion                          uint32
	packetSize                          int
	host, user, password, app, database string
}

// parseRPC reads an RPC request, [MS-TDS] 2.2.6.6: the procedure (by name or
// by well-known id) and its parameters. For the sp_executesql family the
// statement text is returned as sql.
func parseRPC(b []byte) (proc, sql string, args []any, txDescr uint64, err error) {
	r := reader{b: b}
	txDescr = r.skipAllHeaders()
	nameLen := r.u16()
	if nameLen == 0xFFFF {
		id := r.u16()
		proc = procNames[id]
		if proc == "" {
			proc = "proc#" + strconv.Itoa(int(id))
		}
	} else {
		proc = r.ucs2(int(nameLen))
	}
	_ = r.u16() // OptionFlags
	if r.err != nil {
		return proc, "", nil, txDescr, r.err
	}
	var params []any
	for len(r.b) > 0 {
		if r.b[0] == 0xFF || r.b[0] == 0x80 { // batch separator: one RPC is all we read
			break
		}
		_ = r.bVarChar() // name
		_ = r.u8()       // status flags
		v := r.paramValue()
		if r.err != nil {
			// An unknown type ends parsing: keep what we have.
			break
		}
		params = append(params, v)
	}
	err = nil
	if r.err != nil && len(params) == 0 {
		err = r.err
	}
	switch proc {
	case "sp_executesql":
		if len(params) > 0 {
			sql, _ = params[0].(string)
		}
		if len(params) > 2 {
			args = params[2:]
		}
	case "sp_prepexec", "sp_prepare":
		// @handle OUTPUT, @params, @stmt, args...
		if len(params) > 2 {
			sql, _ = params[2].(string)
		}
		if len(params) > 3 && proc == "sp_prepexec" {
			args = params[3:]
		}
	default:
		sql = proc
		args = params
	}
	return proc, sql, args, txDescr, err
}

// procNames are the well-known procedure ids, [MS-TDS] 2.2.6.6.
var procNames = map[uint16]string{
	1: "sp_cursor", 2: "sp_cursoropen", 3: "sp_cursorprepare", 4: "sp_cursorexecute",
	5: "sp_cursorprepexec", 6: "sp_cursorunprepare", 7: "sp_cursorfetch", 8: "sp_cursoroption",
	9: "sp_cursorclose", 10: "sp_executesql", 11: "sp_prepare", 12: "sp_execute",
	13: "sp_prepexec", 14: "sp_prepexecrpc", 15: "sp_unprepare",
}

// paramValue reads one TYPE_INFO and the value after it, [MS-TDS] 2.2.5.4–
// 2.2.5.6, and returns the value as int64, float64, bool, string, []byte or
// nil. Types it does not decode come back as their raw bytes.
func (r *reader) paramValue() any {
	typ := r.u8()
	switch typ {
	case typeNull:
		return nil
	case typeInt1:
		return int64(r.u8())
	case typeBit:
		return r.u8() != 0
	case typeInt2:
		return int64(int16(r.u16()))
	case typeInt4:
		return int64(int32(r.u32()))
	case typeInt8:
		return int64(r.u64())
	case typeFlt8:
		return math.Float64frombits(r.u64())
	case typeFlt4:
		return float64(math.Float32frombits(r.u32()))
	case typeDateTim4, typeMoney4:
		return r.take(4)
	case typeMoney, typeDateTime:
		return r.take(8)
	case typeIntN, typeBitN, typeFltN, typeMoneyN, typeDateTimeN, typeGUID,
		typeChar, typeVarChar, typeBinary, typeVarBinary:
		return r.byteLenValue(typ)
	case typeDecimal, typeNumeric, typeDecimalN, typeNumericN:
		_ = r.u8() // length
		_ = r.u8() // precision
		_ = r.u8() // scale
		n := int(r.u8())
		return r.take(n)
	case typeDateN:
		n := int(r.u8())
		return r.take(n)
	case typeTimeN, typeDateTime2N, typeDateTimeOffN:
		_ = r.u8() // scale
		n := int(r.u8())
		return r.take(n)
	case typeBigVarBin, typeBigVarChar, typeBigBinary, typeBigChar, typeNVarChar, typeNChar:
		return r.ushortLenValue(typ)
	}
	r.err = protoErr("parameter type 0x%02X not decoded", typ)
	return nil
}

// byteLenValue reads the rest of a BYTELEN type's TYPE_INFO (its maximum
// length) and its value: a length byte and the bytes.
func (r *reader) byteLenValue(typ byte) any {
	_ = r.u8() // max length
	n := int(r.u8())
	v := r.take(n)
	if r.err != nil || n == 0 {
		return nil
	}
	switch typ {
	case typeIntN:
		switch n {
		case 1:
			return int64(v[0])
		case 2:
			return int64(int16(binary.LittleEndian.Uint16(v)))
		case 4:
			return int64(int32(binary.LittleEndian.Uint32(v)))
		case 8:
			return int64(binary.LittleEndian.Uint64(v))
		}
	case typeBitN:
		return v[0] != 0
	case typeFltN:
		switch n {
		case 4:
			return float64(math.Float32frombits(binary.LittleEndian.Uint32(v)))
		case 8:
			return math.Float64frombits(binary.LittleEndian.Uint64(v))
		}
	case typeChar, typeVarChar:
		return string(v)
	}
	return append([]byte(nil), v...)
}

// ushortLenValue reads the rest of a USHORTLEN type's TYPE_INFO (its maximum
// length and, for text, its collation) and its value: a 2-byte length and
// the bytes, or for a (MAX) type a PLP value.
func (r *reader) ushortLenValue(typ byte) any {
	max := r.u16()
	text := typ == typeBigVarChar || typ == typeBigChar || typ == typeNVarChar || typ == typeNChar
	if text {
		_ = r.take(5) // collation
	}
	var v []byte
	if max == 0xFFFF {
		var null bool
		v, null = r.plp()
		if null {
			return nil
		}
	} else {
		n := r.u16()
		if n == 0xFFFF {
			return nil
		}
		v = r.take(int(n))
	}
	if r.err != nil {
		return nil
	}
	switch typ {
	case typeNVarChar, typeNChar:
		s, err := fromUCS2(v)
		if err != nil {
			r.err = err
		}
		return s
	case typeBigVarChar, typeBigChar:
		return string(v)
	}
	return append([]byte(nil), v...)
}

// plp reads a partially length-prefixed value, [MS-TDS] 2.2.5.2.3.
func (r *reader) plp() (v []byte, null bool) {
	total := r.u64()
	if total == 0xFFFFFFFFFFFFFFFF {
		return nil, true
	}
	for r.err == nil {
		n := r.u32()
		if n == 0 {
			break
		}
		v = append(v, r.take(int(n))...)
	}
	return v, false
}
