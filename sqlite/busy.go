package sqlite

import (
	"net/url"
	"strconv"
	"strings"
	"time"
)

// BusyTimeout is the busy_timeout we recommend for a database file that
// several connections write: 5 s. Set it in the DSN with
// [DSNWithBusyTimeout], so that every connection the pool opens has it.
//
// SQLite lets one writer at a time hold a file's write lock. Without a busy
// timeout (SQLite's default is 0), a connection that finds the lock taken
// fails at once with SQLITE_BUSY, and the writers spin through retries.
// With one, SQLite's busy handler waits for the lock inside the call, so
// most contention never surfaces as an error: the writers queue, each
// writes in turn, and none is starved (measured with 6 writers on one WAL
// file: see busy_test.go).
//
// What still surfaces is contention the busy handler cannot wait out:
// SQLITE_BUSY_SNAPSHOT, when a transaction that read first (BEGIN DEFERRED,
// database/sql's default) tries to write after another connection
// committed since, and a wait longer than the timeout. Both are classified
// as contention (Class.Kind), so sqlretry retries them up to
// Config.ContentionRetries (default 10) without drawing on the retry
// budget: a busy database does not make an outage's budget run dry, and
// the budget does not make busy writers give up. Starting write
// transactions with BEGIN IMMEDIATE (modernc.org/sqlite: _txlock=immediate
// in the DSN) removes BUSY_SNAPSHOT as well: the write lock is then taken,
// through the busy handler, before anything is read.
//
// Keep the busy timeout below Config.CommandTimeout, if one is set: a
// command timeout that fires while SQLite waits for the lock is an attempt
// of unknown outcome to sqlretry, a busy error is not.
const BusyTimeout = 5 * time.Second

// DSNWithBusyTimeout returns the modernc.org/sqlite DSN dsn with its busy
// timeout set to d (rounded down to milliseconds; 0 or less turns it off):
// "file:app.db?_pragma=journal_mode(WAL)" becomes
// "file:app.db?_pragma=journal_mode(WAL)&_pragma=busy_timeout(5000)". A busy
// timeout dsn already sets, as a _pragma or through the _busy_timeout and
// _timeout keys, is replaced; every other parameter is kept as written.
//
//	db, err := sqlretry.Open("sqlite", sqlite.DSNWithBusyTimeout("file:app.db?_txlock=immediate", sqlite.BusyTimeout), p)
func DSNWithBusyTimeout(dsn string, d time.Duration) string {
	base, query, _ := strings.Cut(dsn, "?")
	var keep []string
	for _, p := range strings.Split(query, "&") {
		if p != "" && !isBusyParam(p) {
			keep = append(keep, p)
		}
	}
	keep = append(keep, "_pragma=busy_timeout("+strconv.FormatInt(max(d.Milliseconds(), 0), 10)+")")
	return base + "?" + strings.Join(keep, "&")
}

// isBusyParam reports whether one DSN query parameter, key=value, sets the
// busy timeout: _busy_timeout or _timeout (the mattn-compatible keys
// modernc.org/sqlite reads), or a _pragma of busy_timeout in any spelling
// SQLite accepts ("busy_timeout(5000)", "busy_timeout = 5000", any case,
// escaped or not).
func isBusyParam(p string) bool {
	k, v, _ := strings.Cut(p, "=")
	if uk, err := url.QueryUnescape(k); err == nil {
		k = uk
	}
	switch k {
	case "_busy_timeout", "_timeout":
		return true
	case "_pragma":
		if uv, err := url.QueryUnescape(v); err == nil {
			v = uv
		}
		v = strings.ToLower(strings.TrimSpace(v))
		name, _, _ := strings.Cut(v, "(")
		name, _, _ = strings.Cut(name, "=")
		return strings.TrimSpace(name) == "busy_timeout"
	}
	return false
}
