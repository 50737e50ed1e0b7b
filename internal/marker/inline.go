package marker

import (
	"errors"
	"strconv"
	"strings"
)

// InlineMark returns a new key and the INSERT that marks a transaction with
// it, the values written into the text — INSERT INTO t (...) SELECT 'key',
// created_at, 0 — followed by then (a WHERE clause may come first): for a
// layer that sends the mark in one message with COMMIT (pgxretry sends
// "INSERT ...; COMMIT" as one simple-protocol query), where the key must be
// known before any reply and no parameter can travel. Writing the values in is safe: the
// key is 32 hex digits (checked), created_at an integer, and the table name
// was parsed as identifiers. One allocation besides the key's.
func (v *Verifier) InlineMark(then string) (key, stmt string, err error) {
	key = v.newKey()
	if !isKey(key) {
		// Only a test seam can do this: never write such a key into SQL.
		return "", "", errors.New(v.name + ": NewKey returned " + strconv.Quote(key) + ", not a marker key")
	}
	st := v.stmt()
	var b strings.Builder
	b.Grow(len(st.inlineInsert) + len(key) + 32 + len(then))
	b.WriteString(st.inlineInsert)
	b.WriteString(key)
	b.WriteString("', ")
	var num [20]byte
	b.Write(strconv.AppendInt(num[:0], v.now().Unix(), 10))
	b.WriteString(", 0")
	b.WriteString(then)
	return key, b.String(), nil
}

// NewMark returns a new key and its created_at, for the INSERT InsertText
// returns.
func (v *Verifier) NewMark() (key string, createdAt int64, err error) {
	key = v.newKey()
	if !isKey(key) {
		return "", 0, errors.New(v.name + ": NewKey returned " + strconv.Quote(key) + ", not a marker key")
	}
	return key, v.now().Unix(), nil
}

// InsertText returns the INSERT that marks a transaction, its values as
// parameters (key, created_at, tombstone 0): for a layer that prepares it
// and sends it with COMMIT in one pipeline (pgxretry, on a connection that
// caches prepared statements), which saves the server parsing and planning
// it every time. The text stays the same for the verifier's life once its
// table is resolved (BeforeTx), so it can name a prepared statement.
func (v *Verifier) InsertText() string { return v.stmt().insert }
