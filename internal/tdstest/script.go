package tdstest

import (
	"strconv"
	"strings"
)

// Kind is what a client request asks for.
type Kind uint8

const (
	// Statement, as a [Rule]'s Kind, matches both [Batch] and [RPC]: a
	// statement however the driver chose to send it. A [Request]'s Kind is
	// never Statement.
	Statement Kind = iota
	// Prelogin is the PRELOGIN message that opens every connection.
	Prelogin
	// Login is the LOGIN7 message; Request.User, Password and Database are set.
	Login
	// Batch is a SQL batch (packet type 1): go-mssqldb sends a statement
	// without arguments this way.
	Batch
	// RPC is a remote procedure call (packet type 3): go-mssqldb sends a
	// statement with arguments as sp_executesql; Request.SQL is the
	// statement text and Request.Args the argument values.
	RPC
	// Begin is a transaction manager BEGIN_XACT request (database/sql BeginTx).
	Begin
	// Commit is a transaction manager COMMIT_XACT request (Tx.Commit).
	Commit
	// Rollback is a transaction manager ROLLBACK_XACT request (Tx.Rollback).
	Rollback
	// Attention is a cancel signal (packet type 6): the client's context
	// ended while it waited for a reply. It is counted but never scripted:
	// the responder always acknowledges it.
	Attention
)

var kindNames = [...]string{"statement", "prelogin", "login", "batch", "rpc", "begin", "commit", "rollback", "attention"}

// String returns the kind's lower-case name, such as "commit".
func (k Kind) String() string {
	return enumName(kindNames[:], int(k), "Kind")
}

// enumName returns names[i], or typ(i) for a value without a name.
func enumName(names []string, i int, typ string) string {
	if i < len(names) {
		return names[i]
	}
	return typ + "(" + strconv.Itoa(i) + ")"
}

// matches reports whether a rule of kind k applies to a request of kind rk.
func (k Kind) matches(rk Kind) bool {
	if k == Statement {
		return rk == Batch || rk == RPC
	}
	return k == rk
}

// A Request is one client message as the script sees it.
type Request struct {
	Kind Kind
	// SQL is the statement text (Batch, RPC via sp_executesql), the
	// procedure name (any other RPC), or for transaction manager requests
	// "BEGIN TRANSACTION", "COMMIT TRANSACTION" or "ROLLBACK TRANSACTION".
	SQL string
	// Proc is the RPC's procedure: "sp_executesql" or a procedure name.
	Proc string
	// Args are an RPC's argument values, decoded where the type is simple:
	// int64, float64, bool, string, []byte or nil.
	Args []any
	// Conn numbers the connection, from 1, in the order they were accepted.
	Conn int
	// InTx reports whether a transaction was open on the connection when
	// the request arrived.
	InTx bool
	// User, Password and Database are the LOGIN7 fields (Login only).
	User, Password, Database string
	// N counts the requests of this Kind with this SQL text the server has
	// received, this one included: 1 for the first.
	N int

	srv *Server
}

// Server returns the responder the request arrived at, so a script can
// answer from its state (for example a verify query from [Server.Applied]).
// Scripts are called without the server's lock held.
func (r Request) Server() *Server { return r.srv }

// A Fault is a misbehaviour of the responder in answer to one request.
type Fault uint8

const (
	// NoFault: answer normally.
	NoFault Fault = iota
	// Drop closes the connection as soon as the request has arrived,
	// without an answer and without effect: the statement did not run, the
	// COMMIT did not commit. The client cannot tell it from DropAfterApply.
	Drop
	// DropAfterApply applies the request (an autocommit statement is
	// recorded as applied; a COMMIT commits) and then closes the connection
	// without an answer: the reply was lost.
	DropAfterApply
	// Reset is Drop with a TCP reset instead of an orderly close.
	Reset
	// DropMidReply applies the request, sends the first half of the reply
	// and closes the connection.
	DropMidReply
	// Hang sends nothing and applies nothing until the client's attention
	// (its context ended) arrives; then it acknowledges the attention. At
	// Login the client sends no attention: the connection stays silent
	// until the client gives up and closes it.
	Hang
	// ResetAfterReply answers normally, then resets the connection once the
	// reply is written. The client does not notice until its next request
	// on that connection fails to be sent. Prefer [Server.DropIdle] in
	// tests: the client may send its next request before the reset lands.
	ResetAfterReply
)

var faultNames = [...]string{"none", "drop", "drop-after-apply", "reset", "drop-mid-reply", "hang", "reset-after-reply"}

// String returns the fault's name, such as "drop-after-apply".
func (f Fault) String() string {
	return enumName(faultNames[:], int(f), "Fault")
}

// Error is a server error the responder sends as an ERROR token, [MS-TDS]
// 2.2.7.10, followed by a DONE with the error bit. go-mssqldb turns it into
// an mssql.Error with the same Number, State, Class and Message.
type Error struct {
	Number    int32
	Class     uint8 // severity; 0 means 16
	State     uint8 // 0 means 1
	Message   string
	Procedure string
	Line      int32
	// AbortsTx rolls back the open transaction, as SQL Server does for a
	// deadlock victim (1205): the responder sends ENVCHANGE rollback before
	// the error, and go-mssqldb forgets the transaction.
	AbortsTx bool
	// Fatal marks the error as one that ends the session, as SQL Server
	// does at severity 20 and above: the DONE carries DONE_SRVERROR
	// (go-mssqldb returns an mssql.ServerError wrapping the mssql.Error and
	// drops the connection) and the responder closes the connection after
	// the reply. An open transaction is rolled back.
	Fatal bool
}

// ColumnType is a result column's SQL type.
type ColumnType uint8

const (
	NVarChar ColumnType = iota // nvarchar(4000): string values
	Int                        // int: integer values
	BigInt                     // bigint: integer values
	Bit                        // bit: bool values
	Float                      // float: float64 values
)

var columnTypeNames = [...]string{"nvarchar", "int", "bigint", "bit", "float"}

// String returns the type's SQL name.
func (t ColumnType) String() string {
	return enumName(columnTypeNames[:], int(t), "ColumnType")
}

// A Column describes one result column.
type Column struct {
	Name string
	Type ColumnType
}

// A Result is one result set: nil values are NULL.
type Result struct {
	Columns []Column
	Rows    [][]any
}

// A Reply is the responder's answer to one request. The zero Reply answers
// normally: a login succeeds, a transaction request succeeds, a statement
// reports zero rows affected.
type Reply struct {
	// Error, if set, rejects the request: the statement had no effect, the
	// login failed (the server then closes the connection), the COMMIT did
	// not commit (the transaction is rolled back).
	Error *Error
	// Result, if set, is sent as COLMETADATA, ROWs and a DONE with the row
	// count.
	Result *Result
	// RowsAffected is the count a statement without a Result reports.
	RowsAffected int64
	// Fault, if set, replaces or spoils the answer.
	Fault Fault
}

// Fail returns a Reply that rejects a request with a server error.
func Fail(number int32, class uint8, message string) Reply {
	return Reply{Error: &Error{Number: number, Class: class, State: 1, Message: message}}
}

// Deadlock returns the reply SQL Server sends a deadlock victim: error 1205,
// class 13, with the open transaction rolled back.
func Deadlock() Reply {
	return Reply{Error: &Error{Number: 1205, Class: 13, State: 51, AbortsTx: true,
		Message: "Transaction (Process ID 51) was deadlocked on lock resources with another process and has been chosen as the deadlock victim. Rerun the transaction."}}
}

// Affected returns a Reply reporting n rows affected.
func Affected(n int64) Reply { return Reply{RowsAffected: n} }

// Rows returns a Reply with one result set.
func Rows(cols []Column, rows ...[]any) Reply {
	return Reply{Result: &Result{Columns: cols, Rows: rows}}
}

// Scalar returns a Reply with one unnamed column and one row holding v: an
// int column for integers, bit for bool, float for float64, nvarchar
// otherwise.
func Scalar(v any) Reply {
	t := NVarChar
	switch v.(type) {
	case bool:
		t = Bit
	case float64:
		t = Float
	case int, int8, int16, int32, uint8, uint16:
		t = Int
	case int64, uint32:
		t = BigInt
	}
	return Rows([]Column{{Type: t}}, []any{v})
}

// Faulty returns a Reply that answers with fault f.
func Faulty(f Fault) Reply { return Reply{Fault: f} }

// A Rule answers the requests it matches, a limited number of times.
type Rule struct {
	// Kind is the request kind the rule applies to; the zero value,
	// Statement, matches batches and RPCs.
	Kind Kind
	// Match, if not empty, must be a prefix of the request's SQL text,
	// compared without case and after leading white space.
	Match string
	// Times is how many requests the rule answers before it is spent; 0
	// means without limit.
	Times int
	// Reply is the answer.
	Reply Reply
}

// A Script decides the responder's answers. For each request the first
// unspent Rule that matches answers it; when none does, Func is called; when
// Func is nil, the request gets the zero Reply (success).
//
//	// fail the first 2 UPDATEs with 1205, then succeed with 1 row affected
//	tdstest.Script{Rules: []tdstest.Rule{
//		{Match: "UPDATE", Times: 2, Reply: tdstest.Deadlock()},
//		{Match: "UPDATE", Reply: tdstest.Affected(1)},
//	}}
type Script struct {
	Rules []Rule
	// Func answers requests no rule matched. It is called without the
	// server's lock held, from the goroutine serving the connection, so it
	// must be safe for concurrent use when the client opens several
	// connections.
	Func func(Request) Reply
	// Database is the database name a login reports when the client names
	// none; if empty, "test".
	Database string
}

// matchSQL reports whether prefix matches sql as [Rule.Match] documents.
func matchSQL(prefix, sql string) bool {
	if prefix == "" {
		return true
	}
	sql = strings.TrimLeft(sql, " \t\r\n")
	return len(sql) >= len(prefix) && strings.EqualFold(sql[:len(prefix)], prefix)
}
