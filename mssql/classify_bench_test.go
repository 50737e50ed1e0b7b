package mssql

import (
	"fmt"
	"testing"

	gomssql "github.com/microsoft/go-mssqldb"

	sr "github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/internal/errsample"
)

var outerError = errsample.Wrapper{Name: "sqlretry.Error", Wrap: func(err error) error {
	return &sr.Error{Op: "load", Attempts: 2, Err: err, Cause: sr.ErrRetriesExhausted}
}}

// practice is every error of practice the SQL Server classifier meets:
// go-mssqldb's server errors (one of them with an earlier error in All), and
// the engine-neutral ones, each bare and wrapped.
func practice() []errsample.Case {
	deadlock := gomssql.Error{Number: 1205, Class: 13, Message: "Transaction was deadlocked"}
	engine := []errsample.Case{
		{Name: "1205", Err: deadlock},
		{Name: "40501", Err: gomssql.Error{Number: 40501, Class: 20, Message: "The service is currently busy"}},
		{Name: "40613", Err: gomssql.Error{Number: 40613, Class: 17, Message: "Database is not currently available"}},
		{Name: "4060", Err: gomssql.Error{Number: 4060, Class: 11, Message: "Cannot open database"}},
		{Name: "2627", Err: gomssql.Error{Number: 2627, Class: 14, Message: "Violation of PRIMARY KEY constraint"}},
		{Name: "208", Err: gomssql.Error{Number: 208, Class: 16, Message: "Invalid object name"}},
		{Name: "10054-class20", Err: gomssql.Error{Number: 10054, Class: 20}},
		// All holds every error of the reply, the last (the Error itself) too.
		{Name: "3621-after-1205", Err: gomssql.Error{Number: 3621, Class: 0, Message: "The statement has been terminated.", All: []gomssql.Error{deadlock, {Number: 3621, Message: "The statement has been terminated."}}}},
		{Name: "50001-user", Err: gomssql.Error{Number: 50001, Class: 16, Message: "raised by the application"}},
	}
	return errsample.Wrapped(append(engine, errsample.Neutral()...), outerError)
}

var classSink sr.Class

// BenchmarkClassifyPractice measures Classify on every error of practice.
// Issue 20: each at most 100 ns and no allocation.
func BenchmarkClassifyPractice(b *testing.B) {
	for _, c := range practice() {
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
	errsample.Check(t, "testdata/practice.golden", practice(), func(err error) string { return fmt.Sprintf("%+v", Classify(err)) })
}

// TestClassifyPracticeAllocatesNothing: Classify allocates nothing on an
// error of practice, an error number its table does not list included: that
// number's text is cached (issue 20).
func TestClassifyPracticeAllocatesNothing(t *testing.T) {
	for _, c := range practice() {
		if n := testing.AllocsPerRun(20, func() { classSink = Classify(c.Err) }); n != 0 {
			t.Errorf("%s: %v allocations a call, want 0", c.Name, n)
		}
	}
}
