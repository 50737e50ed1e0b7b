package dbtest

import (
	"fmt"
	"sync"
	"testing"
)

// TB is what the Start functions need of their caller: [testing.TB]
// satisfies it, and so does a [Host], which runs them outside go test (the
// command's chaos --cluster and --failover start their throwaway servers
// through one).
type TB interface {
	Helper()
	Name() string
	Cleanup(func())
	Logf(format string, args ...any)
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Skip(args ...any)
	Failed() bool
}

var _ TB = testing.TB(nil)

// A Host stands in for a test outside go test: Cleanup collects what
// [Host.Close] undoes, last first; Fatalf and Skip abort the function
// [Host.Do] runs (with a panic Do recovers) and make Do return the message
// as an error; Logf and Errorf go to the Host's log function. Its methods
// are safe for concurrent use.
type Host struct {
	name string
	logf func(format string, args ...any)

	mu       sync.Mutex
	cleanups []func()
	failed   bool
	closed   bool
}

// NewHost returns a Host named name (servers' directories are not named
// after it; it is what Name returns). logf receives the servers' start
// messages; nil discards them.
func NewHost(name string, logf func(format string, args ...any)) *Host {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	return &Host{name: name, logf: logf}
}

// hostAbort is the panic value of a Host's Fatalf and Skip.
type hostAbort struct{ err error }

// Do runs f, and returns the message of a Fatalf or Skip that ended it as
// an error; nil when f returned. Another panic goes on.
func (h *Host) Do(f func()) (err error) {
	defer func() {
		if v := recover(); v != nil {
			a, ok := v.(hostAbort)
			if !ok {
				panic(v)
			}
			err = a.err
		}
	}()
	f()
	return nil
}

// Close runs the cleanups registered so far, last first: it kills the
// servers and removes their directories. Later calls do nothing.
func (h *Host) Close() {
	h.mu.Lock()
	fs := h.cleanups
	h.cleanups, h.closed = nil, true
	h.mu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
}

// Helper does nothing: a Host has no call stack to report.
func (h *Host) Helper() {}

// Name returns the Host's name.
func (h *Host) Name() string { return h.name }

// Cleanup registers f for Close. After Close, f runs at once.
func (h *Host) Cleanup(f func()) {
	h.mu.Lock()
	if !h.closed {
		h.cleanups = append(h.cleanups, f)
		h.mu.Unlock()
		return
	}
	h.mu.Unlock()
	f()
}

// Logf writes to the Host's log.
func (h *Host) Logf(format string, args ...any) { h.logf(format, args...) }

// Errorf marks the Host failed and writes to its log.
func (h *Host) Errorf(format string, args ...any) {
	h.mu.Lock()
	h.failed = true
	h.mu.Unlock()
	h.logf(format, args...)
}

// Fatalf marks the Host failed and aborts the function Do runs.
func (h *Host) Fatalf(format string, args ...any) {
	h.mu.Lock()
	h.failed = true
	h.mu.Unlock()
	panic(hostAbort{fmt.Errorf(format, args...)})
}

// Skip aborts the function Do runs: outside go test there is nothing to
// skip to, so what a test would skip for (no MariaDB, no galera-4) is an
// error.
func (h *Host) Skip(args ...any) { panic(hostAbort{fmt.Errorf("%s", fmt.Sprint(args...))}) }

// Failed reports whether Errorf or Fatalf was called.
func (h *Host) Failed() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.failed
}

// GaleraAvailable returns nil when a throwaway Galera cluster can be
// started here ([StartGalera]): MariaDB, galera-4 and the rsync state
// transfer's tools are installed; else what is missing.
func GaleraAvailable() error {
	if _, _, err := mariadbBinaries(); err != nil {
		return err
	}
	_, err := galeraProvider()
	return err
}

// PostgresAvailable returns nil when throwaway PostgreSQL servers can be
// started here ([StartPostgres], [StartPostgresReplica]); else what is
// missing.
func PostgresAvailable() error {
	if _, err := postgresBinDir(); err != nil {
		return err
	}
	_, err := postgresCredential()
	return err
}
