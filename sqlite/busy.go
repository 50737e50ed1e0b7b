package sqlite

import (
	"net/url"
	"strconv"
	"strings"
	"time"
)

// BusyTimeout is the busy_timeout we recommend for a database file that
// several connections write: 5 s. Set it in the DSN, so that every
// connection the pool opens has it ([DSNWithBusyTimeout]), and start write
// transactions with BEGIN IMMEDIATE (modernc.org/sqlite: _txlock=immediate):
//
//	dsn := sqlite.DSNWithBusyTimeout("file:app.db?_pragma=journal_mode(WAL)&_txlock=immediate", sqlite.BusyTimeout)
//
// SQLite lets one connection at a time write a file. With no busy timeout
// (SQLite's default is 0) a connection that finds the write lock taken
// fails at once with SQLITE_BUSY; with one, SQLite's busy handler waits for
// the lock inside the call, and the contention never surfaces. The handler
// cannot wait for a transaction that has already read (BEGIN DEFERRED,
// database/sql's default): when another connection committed since its
// read, its first write fails with SQLITE_BUSY_SNAPSHOT at once. BEGIN
// IMMEDIATE takes the write lock, through the busy handler, before
// anything is read.
//
// What surfaces anyway is contention (Class.Kind): sqlretry retries it up
// to Config.ContentionRetries (10) after a jittered wait, and draws nothing
// from the retry budget, so a busy file neither empties the budget an
// outage needs nor makes writers give up when the budget is low.
//
// Measured (TestBusyTimeoutMeasure, SQLRETRY_LONG=1: 6 writers, a pool of 8,
// one WAL file, 15 s per cell, read-then-write transactions; two runs on a
// shared 2-core machine): with 5 s and BEGIN IMMEDIATE, no call failed,
// 5 SQLITE_BUSY surfaced in 12,000–20,000 transactions, the least served
// writer committed 626–789 and the slowest call took 6 s. With 5 s and
// BEGIN DEFERRED, 134–139 SQLITE_BUSY_SNAPSHOT were retried and 0–1 calls
// ran out of contention retries, but the backoff left one writer with a
// single commit in one run, and the slowest call took 15–17 s. With no
// busy timeout, 3–4 calls failed, one writer committed once in 15 s and
// the slowest call took 18–19 s. Under the old defaults (3 retries drawn
// from the budget), 5 s with BEGIN DEFERRED failed 120–200 calls and had
// 29–99 retries refused.
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
