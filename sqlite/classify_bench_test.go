package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"path/filepath"
	"testing"

	sr "github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/internal/errsample"
)

var outerError = errsample.Wrapper{Name: "sqlretry.Error", Wrap: func(err error) error {
	return &sr.Error{Op: "load", Attempts: 2, Err: err, Cause: sr.ErrRetriesExhausted}
}}

// busyError provokes a real modernc.org/sqlite SQLITE_BUSY.
func busyError(tb testing.TB) error {
	dsn := "file:" + filepath.Join(tb.TempDir(), "busy.db") + "?_pragma=busy_timeout(0)"
	a, err := sql.Open("sqlite", dsn)
	if err != nil {
		tb.Fatal(err)
	}
	defer a.Close()
	o, err := sql.Open("sqlite", dsn)
	if err != nil {
		tb.Fatal(err)
	}
	defer o.Close()
	ctx := context.Background()
	if _, err := a.ExecContext(ctx, "create table t (v int)"); err != nil {
		tb.Fatal(err)
	}
	c, err := a.Conn(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	defer c.Close()
	if _, err := c.ExecContext(ctx, "begin exclusive"); err != nil {
		tb.Fatal(err)
	}
	_, busy := o.ExecContext(ctx, "insert into t values (1)")
	c.ExecContext(ctx, "rollback")
	if got := Classify(busy); got.Code != "SQLITE_BUSY" {
		tb.Fatalf("setup: got %+v for %v, want SQLITE_BUSY", got, busy)
	}
	return busy
}

// practice is every error of practice the SQLite classifier meets:
// modernc's errors by code (one provoked, the others through fakeCoder), and
// the engine-neutral ones, each bare and wrapped.
func practice(tb testing.TB) []errsample.Case {
	engine := []errsample.Case{
		{Name: "modernc-BUSY", Err: busyError(tb)},
		{Name: "BUSY_SNAPSHOT", Err: &fakeCoder{517}},
		{Name: "LOCKED", Err: &fakeCoder{6}},
		{Name: "CONSTRAINT_UNIQUE", Err: &fakeCoder{2067}},
		{Name: "ERROR", Err: &fakeCoder{1}},
		{Name: "unlisted-extended", Err: &fakeCoder{5 | 99<<8}},
	}
	return errsample.Wrapped(append(engine, errsample.Neutral()...), outerError)
}

var classSink sr.Class

// BenchmarkClassifyPractice measures Classify on every error of practice.
// Issue 20: each at most 100 ns and no allocation.
func BenchmarkClassifyPractice(b *testing.B) {
	for _, c := range practice(b) {
		b.Run(c.Name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				classSink = Classify(c.Err)
			}
		})
	}
}

// TestPracticeVerdicts holds Classify's verdicts on the errors of practice
// still (testdata/practice.golden).
func TestPracticeVerdicts(t *testing.T) {
	errsample.Check(t, "testdata/practice.golden", practice(t), func(err error) string { return fmt.Sprintf("%+v", Classify(err)) })
}

// TestMattnCodeInsideOuterError: a mattn error is found behind an outer
// sqlretry.Error's cause or last error, the cause first, as Unwrap orders
// them.
func TestMattnCodeInsideOuterError(t *testing.T) {
	for _, c := range []struct {
		err  error
		want int
	}{
		{&sr.Error{Err: Error{Code: 5, ExtendedCode: 517}, Cause: sr.ErrRetriesExhausted}, 517},
		{&sr.Error{Err: Error{Code: 6}, Cause: Error{Code: 5}}, 5},
		{&sr.Error{Cause: fmt.Errorf("x: %w", Error{Code: 19})}, 19},
	} {
		if got, ok := mattnCode(c.err, testPkg); !ok || got != c.want {
			t.Errorf("mattnCode(%v) = %d, %v, want %d, true", c.err, got, ok, c.want)
		}
	}
	if _, ok := mattnCode(&sr.Error{Err: io.EOF, Cause: sr.ErrRetriesExhausted}, testPkg); ok {
		t.Error("found a mattn code in an outer error that holds none")
	}
}

// TestClassifyPracticeAllocatesNothing: Classify allocates nothing on an
// error of practice, an error number its table does not list included: that
// number's text is cached (issue 20).
func TestClassifyPracticeAllocatesNothing(t *testing.T) {
	for _, c := range practice(t) {
		if n := testing.AllocsPerRun(20, func() { classSink = Classify(c.Err) }); n != 0 {
			t.Errorf("%s: %v allocations a call, want 0", c.Name, n)
		}
	}
}
