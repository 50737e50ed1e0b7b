package tdstest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
)

// ServerName is the name the responder gives in its ERROR tokens.
const ServerName = "tdstest"

// TxOutcome is how a transaction ended.
type TxOutcome uint8

const (
	TxOpen       TxOutcome = iota // still open
	TxCommitted                   // a COMMIT committed it (its reply may have been lost: see Tx.ReplyLost)
	TxRolledBack                  // rolled back: by ROLLBACK, a failed COMMIT, an error that aborts it, or the connection closing
)

var txOutcomeNames = [...]string{"open", "committed", "rolled-back"}

// String returns "open", "committed" or "rolled-back".
func (o TxOutcome) String() string {
	return enumName(txOutcomeNames[:], int(o), "TxOutcome")
}

// Tx is the responder's record of one transaction.
type Tx struct {
	Conn       int       // the connection it ran on
	Statements []string  // the statements that succeeded inside it, in order
	Outcome    TxOutcome // how it ended
	CommitSeen bool      // a COMMIT request for it arrived
	ReplyLost  bool      // the COMMIT's reply was never (fully) sent
	Reason     string    // why it ended: "commit", "rollback", "error 1205", "commit failed: error 3902", "connection closed"

	requests []Request // the statements, with their arguments
}

// Server is a TDS 7.4 responder on 127.0.0.1 that answers go-mssqldb by
// script. It is safe for concurrent use; every method may be called while
// clients are connected.
type Server struct {
	ln   net.Listener
	port int

	mu        sync.Mutex
	script    Script
	ruleUses  []int
	conns     map[int]*conn
	nconns    int
	log       []Request
	counts    map[countKey]int
	txs       []*Tx
	applied   []Request // in the order they took effect
	protoErrs []error
	closed    bool

	wg sync.WaitGroup
}

type countKey struct {
	kind Kind
	sql  string
}

type conn struct {
	id         int
	nc         net.Conn
	packetSize int
	idle       bool // waiting for the client's next request, nothing in flight
	tx         *Tx
	txID       uint64
	done       chan struct{}
}

// New starts a responder on a free port of 127.0.0.1. Close it when done.
// Tests should use [Start].
func New(script Script) (*Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Server{
		ln:     ln,
		port:   ln.Addr().(*net.TCPAddr).Port,
		conns:  map[int]*conn{},
		counts: map[countKey]int{},
	}
	s.setScriptLocked(script)
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

// Start starts a responder for the test and closes it at cleanup, failing
// the test if a client sent a request the responder could not parse.
func Start(t testing.TB, script Script) *Server {
	t.Helper()
	s, err := New(script)
	if err != nil {
		t.Fatalf("tdstest: %v", err)
	}
	t.Cleanup(func() {
		s.Close()
		for _, err := range s.ProtocolErrors() {
			t.Errorf("tdstest: %v", err)
		}
	})
	return s
}

// Addr returns the listening address, "127.0.0.1:PORT".
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Port returns the listening port.
func (s *Server) Port() int { return s.port }

// DSN returns a go-mssqldb connection string for the responder:
// "sqlserver://sa:pw@127.0.0.1:PORT?database=test&encrypt=disable".
// Append "&name=value" for more options.
func (s *Server) DSN() string {
	return "sqlserver://sa:pw@127.0.0.1:" + strconv.Itoa(s.port) + "?database=test&encrypt=disable"
}

// SetScript replaces the script; the rules' use counts start again.
func (s *Server) SetScript(script Script) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setScriptLocked(script)
}

func (s *Server) setScriptLocked(script Script) {
	script.Rules = append([]Rule(nil), script.Rules...)
	s.script = script
	s.ruleUses = make([]int, len(script.Rules))
}

// Close stops listening, closes every connection and waits for their
// goroutines. It is idempotent.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	err := s.ln.Close()
	for _, c := range s.conns {
		c.nc.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return err
}

// DropIdle resets (TCP RST) every connection that is waiting for the
// client's next request, waits until the responder has let go of them, and
// returns how many it dropped. The client learns of it only when its next
// request on such a connection fails to be written: go-mssqldb then returns
// a RetryableError (errors.Is driver.ErrBadConn), the command provably unsent.
func (s *Server) DropIdle() int {
	s.mu.Lock()
	var dropped []*conn
	for _, c := range s.conns {
		if c.idle {
			resetConn(c.nc)
			dropped = append(dropped, c)
		}
	}
	s.mu.Unlock()
	for _, c := range dropped {
		<-c.done
	}
	return len(dropped)
}

// resetConn closes nc with a TCP reset rather than a FIN.
func resetConn(nc net.Conn) {
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	nc.Close()
}

// Count returns how many requests of kind k whose SQL text matches prefix
// (as [Rule.Match]: without case, after leading white space; "" matches
// all) the responder has received. Statement counts batches and RPCs.
func (s *Server) Count(k Kind, prefix string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, r := range s.log {
		if k.matches(r.Kind) && matchSQL(prefix, r.SQL) {
			n++
		}
	}
	return n
}

// Requests returns every request received so far, in arrival order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.log...)
}

// Connections returns how many connections the responder has accepted.
func (s *Server) Connections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nconns
}

// Transactions returns a copy of the record of every transaction begun.
func (s *Server) Transactions() []Tx {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Tx, len(s.txs))
	for i, t := range s.txs {
		out[i] = *t
		out[i].Statements = append([]string(nil), t.Statements...)
	}
	return out
}

// Committed returns how many transactions a COMMIT committed.
func (s *Server) Committed() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, t := range s.txs {
		if t.Outcome == TxCommitted {
			n++
		}
	}
	return n
}

// Applied returns how many statements matching prefix (as [Rule.Match])
// took durable effect: autocommit statements that did not fail (their
// reply may have been lost), and statements of committed transactions.
func (s *Server) Applied(prefix string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, r := range s.applied {
		if matchSQL(prefix, r.SQL) {
			n++
		}
	}
	return n
}

// AppliedRequests returns the statements matching prefix (as [Rule.Match])
// that took durable effect, as [Server.Applied] counts them, with their
// arguments, in the order they took effect: a script answers a read from
// them as a table would (see the marker verifier's tests).
func (s *Server) AppliedRequests(prefix string) []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Request
	for _, r := range s.applied {
		if matchSQL(prefix, r.SQL) {
			out = append(out, r)
		}
	}
	return out
}

// ProtocolErrors returns the requests the responder could not parse.
func (s *Server) ProtocolErrors() []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]error(nil), s.protoErrs...)
}

func (s *Server) accept() {
	defer s.wg.Done()
	for {
		nc, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			nc.Close()
			return
		}
		s.nconns++
		c := &conn{id: s.nconns, nc: nc, packetSize: 4096, done: make(chan struct{})}
		s.conns[c.id] = c
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serve(c)
	}
}

// serve runs one connection until it closes.
func (s *Server) serve(c *conn) {
	defer s.wg.Done()
	defer close(c.done)
	defer func() {
		c.nc.Close()
		s.mu.Lock()
		if c.tx != nil && c.tx.Outcome == TxOpen {
			c.tx.Outcome, c.tx.Reason = TxRolledBack, "connection closed"
		}
		c.tx = nil
		delete(s.conns, c.id)
		s.mu.Unlock()
	}()
	for {
		m, err := readMessage(c.nc)
		s.mu.Lock()
		c.idle = false
		s.mu.Unlock()
		if err != nil {
			if errors.Is(err, errProtocol) {
				s.protocolError(c, err)
			}
			return
		}
		var keep bool
		switch m.typ {
		case pktPrelogin:
			keep = s.prelogin(c, m)
		case pktLogin7:
			keep = s.login(c, m)
		case pktSQLBatch, pktRPC:
			keep = s.statement(c, m)
		case pktTransMgr:
			keep = s.transMgr(c, m)
		case pktAttention:
			s.record(c, Request{Kind: Attention})
			var t tokens
			t.done(doneAttn, 0, 0)
			keep = s.write(c, t.b)
		default:
			s.protocolError(c, protoErr("unsupported packet type %d", m.typ))
			return
		}
		if !keep {
			return
		}
	}
}

func (s *Server) protocolError(c *conn, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.protoErrs = append(s.protoErrs, fmt.Errorf("connection %d: %w", c.id, err))
}

// record logs a request and numbers it.
func (s *Server) record(c *conn, r Request) Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	r.Conn = c.id
	r.InTx = c.tx != nil && c.tx.Outcome == TxOpen
	k := countKey{r.Kind, r.SQL}
	s.counts[k]++
	r.N = s.counts[k]
	r.srv = s
	s.log = append(s.log, r)
	return r
}

// decide returns the script's reply to r: the first unspent matching rule,
// else Func, else the zero Reply.
func (s *Server) decide(r Request) Reply {
	s.mu.Lock()
	for i, rule := range s.script.Rules {
		if !rule.Kind.matches(r.Kind) || !matchSQL(rule.Match, r.SQL) {
			continue
		}
		if rule.Times > 0 && s.ruleUses[i] >= rule.Times {
			continue
		}
		s.ruleUses[i]++
		s.mu.Unlock()
		return rule.Reply
	}
	f := s.script.Func
	s.mu.Unlock()
	if f != nil {
		return f(r)
	}
	return Reply{}
}

// write sends a reply message and marks the connection idle first, so that
// a client that has read the reply finds it idle (see DropIdle).
func (s *Server) write(c *conn, payload []byte) bool {
	s.mu.Lock()
	c.idle = true
	s.mu.Unlock()
	_, err := c.nc.Write(packetize(pktReply, payload, c.packetSize))
	return err == nil
}

// finish sends payload under fault f (after the request's effect, if any,
// was applied) and reports whether the connection goes on.
func (s *Server) finish(c *conn, f Fault, payload []byte) bool {
	switch f {
	case Drop, DropAfterApply:
		c.nc.Close()
		return false
	case Reset:
		resetConn(c.nc)
		return false
	case Hang:
		return true
	case DropMidReply:
		msg := packetize(pktReply, payload, c.packetSize)
		c.nc.Write(msg[:len(msg)/2])
		c.nc.Close()
		return false
	case ResetAfterReply:
		s.write(c, payload)
		resetConn(c.nc)
		return false
	}
	return s.write(c, payload)
}

// applies reports whether a reply under fault f lets the request take effect.
func applies(f Fault) bool {
	switch f {
	case Drop, Reset, Hang:
		return false
	}
	return true
}

func (s *Server) prelogin(c *conn, m message) bool {
	r := s.record(c, Request{Kind: Prelogin})
	rep := s.decide(r)
	if rep.Fault != NoFault && rep.Fault != ResetAfterReply {
		return s.finish(c, rep.Fault, nil)
	}
	// [MS-TDS] 2.2.6.5: option headers (token, offset, length), 0xFF, data.
	// ENCRYPTION is ENCRYPT_NOT_SUP: go-mssqldb with encrypt=disable then
	// starts no TLS, for the login or after it.
	opts := []struct {
		token byte
		data  []byte
	}{
		{0, []byte{16, 0, 0x10, 0x00, 0, 0}}, // VERSION 16.0.4096.0
		{1, []byte{2}},                       // ENCRYPTION: ENCRYPT_NOT_SUP
		{2, []byte{0}},                       // INSTOPT
		{4, []byte{0}},                       // MARS: off
	}
	var b []byte
	off := len(opts)*5 + 1
	for _, o := range opts {
		b = append(b, o.token)
		b = binary.BigEndian.AppendUint16(b, uint16(off))
		b = binary.BigEndian.AppendUint16(b, uint16(len(o.data)))
		off += len(o.data)
	}
	b = append(b, 0xFF)
	for _, o := range opts {
		b = append(b, o.data...)
	}
	return s.finish(c, rep.Fault, b)
}

func (s *Server) login(c *conn, m message) bool {
	li, err := parseLogin7(m.data)
	if err != nil {
		s.protocolError(c, err)
		return false
	}
	r := s.record(c, Request{Kind: Login, User: li.user, Password: li.password, Database: li.database})
	rep := s.decide(r)
	var t tokens
	if rep.Error != nil {
		t.errorToken(withDefaults(*rep.Error), ServerName)
		t.done(doneError, 0, 0)
		s.finish(c, rep.Fault, t.b)
		return false // SQL Server closes the connection after a failed login
	}
	db := li.database
	if db == "" {
		db = s.script.Database
	}
	if db == "" {
		db = "test"
	}
	ps := li.packetSize
	if ps < 512 {
		ps = 4096
	}
	ps = min(ps, 32767)
	t.envString(envDatabase, db, "master")
	t.envBytes(envSQLCollation, collation[:], nil)
	t.loginAck()
	t.envString(envPacketSize, strconv.Itoa(ps), strconv.Itoa(ps))
	t.done(doneFinal, 0, 0)
	ok := s.finish(c, rep.Fault, t.b)
	c.packetSize = ps
	return ok
}

func withDefaults(e Error) Error {
	if e.Class == 0 {
		e.Class = 16
	}
	if e.State == 0 {
		e.State = 1
	}
	return e
}

func (s *Server) statement(c *conn, m message) bool {
	r, err := parseStatement(m)
	if err != nil {
		s.protocolError(c, err)
		return false
	}
	r = s.record(c, r)
	rep := s.decide(r)
	if rep.Error != nil {
		return s.failStatement(c, withDefaults(*rep.Error), rep.Fault)
	}
	var t tokens
	if rep.Result != nil {
		t.colMetadata(rep.Result.Columns)
		for _, row := range rep.Result.Rows {
			if err := t.row(rep.Result.Columns, row); err != nil {
				// A script bug: report it to the client as a server error.
				s.protocolError(c, err)
				t = tokens{}
				t.errorToken(Error{Number: 50000, Class: 16, State: 1, Message: err.Error()}, ServerName)
				t.done(doneError, 0, 0)
				return s.finish(c, NoFault, t.b)
			}
		}
		t.done(doneCount, curCmdSelect, uint64(len(rep.Result.Rows)))
	} else {
		t.done(doneCount, curCmdUpdate, uint64(rep.RowsAffected))
	}
	if applies(rep.Fault) {
		s.mu.Lock()
		if c.tx != nil && c.tx.Outcome == TxOpen {
			c.tx.Statements = append(c.tx.Statements, r.SQL)
			c.tx.requests = append(c.tx.requests, r)
		} else {
			s.applied = append(s.applied, r)
		}
		s.mu.Unlock()
	}
	return s.finish(c, rep.Fault, t.b)
}

// parseStatement reads a SQL batch or an RPC as the script sees it.
func parseStatement(m message) (Request, error) {
	if m.typ == pktSQLBatch {
		rd := reader{b: m.data}
		rd.skipAllHeaders()
		if rd.err == nil && len(rd.b)%2 != 0 {
			rd.err = protoErr("SQL batch text of odd length %d", len(rd.b))
		}
		if rd.err != nil {
			return Request{}, rd.err
		}
		sql, _ := fromUCS2(rd.b)
		return Request{Kind: Batch, SQL: sql}, nil
	}
	proc, sql, args, _, err := parseRPC(m.data)
	if err != nil {
		return Request{}, err
	}
	return Request{Kind: RPC, SQL: sql, Proc: proc, Args: args}, nil
}

// failStatement answers a statement with the script's error e under fault
// f. An error that aborts the transaction rolls it back first; a fatal one
// ends the session.
func (s *Server) failStatement(c *conn, e Error, f Fault) bool {
	var t tokens
	if applies(f) && e.AbortsTx {
		s.mu.Lock()
		if c.tx != nil && c.tx.Outcome == TxOpen {
			s.endTxLocked(c, &t, TxRolledBack, "error "+strconv.Itoa(int(e.Number)))
		}
		s.mu.Unlock()
	}
	t.errorToken(e, ServerName)
	if e.Fatal {
		t.done(doneError|doneSrvErr, 0, 0)
		s.finish(c, f, t.b)
		return false // the session is over; serve's exit rolls back an open transaction
	}
	t.done(doneError, 0, 0)
	return s.finish(c, f, t.b)
}

func txBytes(id uint64) []byte { return binary.LittleEndian.AppendUint64(nil, id) }

func (s *Server) transMgr(c *conn, m message) bool {
	r, err := parseTransMgr(m.data)
	if err != nil {
		s.protocolError(c, err)
		return false
	}
	r = s.record(c, r)
	rep := s.decide(r)
	if rep.Error == nil && r.Kind != Begin && !r.InTx {
		rep.Error = nothingToEnd(r.Kind)
	}
	s.mu.Lock()
	t := s.transMgrLocked(c, r.Kind, rep)
	s.mu.Unlock()
	return s.finish(c, rep.Fault, t.b)
}

// parseTransMgr reads a transaction manager request, [MS-TDS] 2.2.6.9.
func parseTransMgr(b []byte) (Request, error) {
	rd := reader{b: b}
	rd.skipAllHeaders()
	typ := rd.u16()
	if rd.err != nil {
		return Request{}, rd.err
	}
	switch typ {
	case tmBeginXact:
		return Request{Kind: Begin, SQL: "BEGIN TRANSACTION"}, nil
	case tmCommitXact:
		return Request{Kind: Commit, SQL: "COMMIT TRANSACTION"}, nil
	case tmRollbackXact:
		return Request{Kind: Rollback, SQL: "ROLLBACK TRANSACTION"}, nil
	}
	return Request{}, protoErr("transaction manager request type %d not supported", typ)
}

// nothingToEnd is what SQL Server answers a COMMIT or ROLLBACK (kind) when
// there is no transaction to end.
func nothingToEnd(kind Kind) *Error {
	if kind == Commit {
		return &Error{Number: 3902, Class: 16, State: 1, Message: "The COMMIT TRANSACTION request has no corresponding BEGIN TRANSACTION."}
	}
	return &Error{Number: 3903, Class: 16, State: 1, Message: "The ROLLBACK TRANSACTION request has no corresponding BEGIN TRANSACTION."}
}

// transMgrLocked applies a transaction manager request of kind, answered
// by rep, to c's transaction, and returns the reply's tokens.
func (s *Server) transMgrLocked(c *conn, kind Kind, rep Reply) tokens {
	var t tokens
	tx := c.tx
	if tx != nil && kind == Commit {
		tx.CommitSeen = true
		tx.ReplyLost = rep.Fault != NoFault && rep.Fault != ResetAfterReply
	}
	switch {
	case rep.Error != nil:
		e := withDefaults(*rep.Error)
		if applies(rep.Fault) && tx != nil && kind != Begin {
			reason := "rollback failed: error "
			if kind == Commit {
				reason = "commit failed: error "
			}
			s.endTxLocked(c, &t, TxRolledBack, reason+strconv.Itoa(int(e.Number)))
		}
		t.errorToken(e, ServerName)
		t.done(doneError, 0, 0)
	case !applies(rep.Fault):
	case kind == Begin:
		s.beginLocked(c, &t)
		t.done(doneFinal, 0, 0)
	case kind == Commit:
		s.endTxLocked(c, &t, TxCommitted, "commit")
		t.done(doneFinal, 0, 0)
	case kind == Rollback:
		s.endTxLocked(c, &t, TxRolledBack, "rollback")
		t.done(doneFinal, 0, 0)
	}
	return t
}

// beginLocked opens a transaction on c and appends the ENVCHANGE that tells
// go-mssqldb its descriptor.
func (s *Server) beginLocked(c *conn, t *tokens) {
	// A nested BEGIN: SQL Server counts it in @@TRANCOUNT; one transaction
	// is all go-mssqldb ever opens, so keep the outer one.
	if c.tx == nil || c.tx.Outcome != TxOpen {
		c.txID = uint64(c.id)<<32 | uint64(len(s.txs)+1)
		c.tx = &Tx{Conn: c.id, Outcome: TxOpen}
		s.txs = append(s.txs, c.tx)
	}
	t.envBytes(envBeginTran, txBytes(c.txID), nil)
}

// endTxLocked ends c's transaction with outcome (for reason) and appends the
// ENVCHANGE by which go-mssqldb learns that it ended. A commit makes its
// statements applied.
func (s *Server) endTxLocked(c *conn, t *tokens, outcome TxOutcome, reason string) {
	c.tx.Outcome, c.tx.Reason = outcome, reason
	env := byte(envRollbackTran)
	if outcome == TxCommitted {
		s.applied = append(s.applied, c.tx.requests...)
		env = envCommitTran
	}
	c.tx = nil
	t.envBytes(env, nil, txBytes(c.txID))
}

var _ io.Closer = (*Server)(nil)
