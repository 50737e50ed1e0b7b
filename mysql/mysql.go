package mysql

import (
	"cmp"
	"slices"
	"strconv"
	"strings"

	gomysql "github.com/go-sql-driver/mysql"

	sr "github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/internal/codes"
)

// Entry is one row of the classification table.
type Entry struct {
	// Code is the error number as text: "1213".
	Code string
	// Number is the error number.
	Number uint16
	// Class is the verdict for the number.
	Class sr.Class
	// Source says where the verdict comes from.
	Source string
}

var (
	byNumber = map[uint16]sr.Class{}
	rows     []Entry // sorted by Number
)

func init() {
	for _, e := range entries {
		e.Class = codes.File(byNumber, e.Number, e.Class, contention, "mysql: error number "+e.Code)
		rows = append(rows, e)
	}
	slices.SortFunc(rows, func(a, b Entry) int { return cmp.Compare(a.Number, b.Number) })
}

func itoa(n uint16) string { return strconv.Itoa(int(n)) }

// Classifier is the MySQL and MariaDB [sr.Classifier] for
// github.com/go-sql-driver/mysql: pass it as sqlretry.Config.Classifier. It
// is safe for concurrent use.
var Classifier sr.Classifier = sr.ClassifierFunc(Classify)

// invalidConn is the verdict on mysql.ErrInvalidConn.
var invalidConn = sr.Class{Retryable: true, Phase: sr.Unknown, Code: "invalid-conn", Reason: "go-sql-driver ErrInvalidConn: the connection failed after the command was sent; it may have run"}

// Classify gives MySQL's verdict on err: a *mysql.MySQLError by its number,
// mysql.ErrInvalidConn (a read failed after the command was sent) as
// retryable with an unknown outcome, and anything else by
// [sr.ClassifyNeutral] (go-sql-driver returns driver.ErrBadConn only when
// nothing was written). It never panics.
func Classify(err error) (c sr.Class) {
	// The classifiers' frame, with the verdict written through a pointer
	// (see codes.TagIn).
	if err == nil {
		return sr.ClassifyNeutral(nil)
	}
	defer codes.Recover(&c)
	classify(err, &c)
	codes.TagIn(&c, contention)
	return c
}

// classify writes its verdict to *c (see codes.TagIn).
func classify(err error, c *sr.Class) {
	// One walk of the tree answers every question: the first
	// *mysql.MySQLError (errors.As), mysql.ErrInvalidConn (errors.Is) and
	// the neutral verdict.
	var (
		me      *gomysql.MySQLError
		found   bool
		invalid bool
	)
	*c = sr.ClassifyNeutralVisit(err, func(e error, _ bool) bool {
		tb := methods.Bits(e, codes.MethodBits)
		if !found {
			if me, found = codes.AsOneBits(e, tb, asMySQLError); found && me != nil {
				return true // it decides, whatever follows
			}
		}
		if !invalid {
			invalid = codes.IsOneBits(e, tb, gomysql.ErrInvalidConn)
		}
		return false
	})
	if found && me != nil {
		switch {
		case me.Number == 4031 && !strings.Contains(me.Message, interactionTimeoutText):
			*c = mariaDB4031
		case me.Number == 1047 && strings.Contains(me.Message, "WSREP"):
			*c = galera1047
		default:
			verdictIn(me.Number, c)
		}
		return
	}
	if invalid {
		*c = invalidConn
	}
}

// methods keeps codes.MethodBits for each type of error met.
var methods codes.TypeCache

func asMySQLError(err error) (*gomysql.MySQLError, bool) {
	e, ok := err.(*gomysql.MySQLError)
	return e, ok
}

// interactionTimeoutText is in MySQL's message for 4031,
// ER_CLIENT_INTERACTION_TIMEOUT: "The client was disconnected by the server
// because of inactivity. See wait_timeout and interactive_timeout for
// configuring this behavior."
const interactionTimeoutText = "disconnected by the server because of inactivity"

// mariaDB4031 is the verdict on a 4031 without MySQL's idle-timeout text:
// MariaDB's ER_REFERENCED_TRG_DOES_NOT_EXIST ("Referenced trigger '%s' for
// the given action time and event type does not exist"), a CREATE TRIGGER
// the server refused. Either reading is not applied; only MySQL's is worth a
// retry, and a MySQL message in another language lands here, where it is
// merely not retried.
var mariaDB4031 = sr.Class{Phase: sr.NotApplied, Code: "4031", Reason: "ER_REFERENCED_TRG_DOES_NOT_EXIST (MariaDB): CREATE TRIGGER ... FOLLOWS/PRECEDES names a trigger that does not exist: not retried"}

// galera1047 is the verdict on Galera's 1047, "WSREP has not yet prepared
// node for application use": the node is not in the primary component (cut
// off, or still joining), and refused the statement — BEGIN, COMMIT and
// ROLLBACK too — before it ran. Retried, as a node that rejoins (or a pool
// that reaches another) takes it. A refused COMMIT leaves the transaction
// open on that session, which RunTx and the Connector then drop. MySQL's
// own 1047, an unknown command, stays permanent (the table). Sources:
// MariaDB's wsrep_cluster_status documentation
// (https://mariadb.com/docs/reference/mdb/status-variables/wsrep_cluster_status/);
// MaxScale's readwritesplit treats 1047 with this message as a node error.
var galera1047 = codes.Tag(sr.Class{Retryable: true, Phase: sr.NotApplied, Code: "1047", Reason: "WSREP has not yet prepared node for application use (Galera): the node is not in the primary component; the statement was refused before it ran"}, contention)

// unlisted is the verdict on a number the table does not list. Not inlined,
// so that verdict, which a listed number takes, is.
//
//go:noinline
func unlisted(n uint16) sr.Class {
	return sr.Class{Phase: sr.NotApplied, Code: codes.Itoa(int64(n)), Reason: "error number not listed as transient: not retried"}
}

// Lookup returns MySQL's verdict on a bare error number, as the command sees
// it: ok is false when the number is not listed (it is then not retryable)
// or malformed (see [ValidCode]).
func Lookup(code string) (sr.Class, bool) {
	return codes.Lookup(code, parse, "error number", verdict)
}

// verdict is the table's verdict on an error number (already tagged with
// its Kind), or (false) the one on a number the table does not list.
func verdict(n uint16) (sr.Class, bool) {
	var c sr.Class
	ok := verdictIn(n, &c)
	return c, ok
}

// verdictIn is verdict written to *c.
func verdictIn(n uint16, c *sr.Class) bool {
	if v, ok := byNumber[n]; ok {
		*c = v
		return true
	}
	*c = unlisted(n)
	return false
}

// contention reports whether an error number is one of lock contention:
// ER_LOCK_DEADLOCK, ER_LOCK_WAIT_TIMEOUT, ER_XA_RBDEADLOCK,
// ER_USER_LOCK_DEADLOCK, ER_LOCK_NOWAIT (MySQL server error reference).
func contention(code string) bool {
	switch code {
	case "1213", "1205", "1614", "3058", "3572":
		return true
	}
	return false
}

// ValidCode reports why code is not a well-formed MySQL or MariaDB error
// number (a decimal number from 1 to 65535), or nil.
func ValidCode(code string) error {
	_, err := parse(code)
	return err
}

var number = codes.Number{What: "MySQL error number", Example: "1213", Min: 1, Max: 65535}

func parse(code string) (uint16, error) {
	n, err := number.Parse(code)
	return uint16(n), err
}

// Table returns the whole table sorted by number: a fresh copy each call.
func Table() []Entry { return slices.Clone(rows) }
