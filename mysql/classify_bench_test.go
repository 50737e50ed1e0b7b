package mysql

import (
	"fmt"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"

	sr "github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/internal/errsample"
)

var outerError = errsample.Wrapper{Name: "sqlretry.Error", Wrap: func(err error) error {
	return &sr.Error{Op: "load", Attempts: 2, Err: err, Cause: sr.ErrRetriesExhausted}
}}

// practice is every error of practice the MySQL classifier meets:
// go-sql-driver's server errors and ErrInvalidConn, and the engine-neutral
// ones, each bare and wrapped.
func practice() []errsample.Case {
	engine := []errsample.Case{
		{Name: "1213", Err: &gomysql.MySQLError{Number: 1213, SQLState: [5]byte{'4', '0', '0', '0', '1'}, Message: "Deadlock found when trying to get lock"}},
		{Name: "1205", Err: &gomysql.MySQLError{Number: 1205, Message: "Lock wait timeout exceeded"}},
		{Name: "1062", Err: &gomysql.MySQLError{Number: 1062, Message: "Duplicate entry"}},
		{Name: "1146", Err: &gomysql.MySQLError{Number: 1146, Message: "Table doesn't exist"}},
		{Name: "2013", Err: &gomysql.MySQLError{Number: 2013, Message: "Lost connection to server during query"}},
		{Name: "4031", Err: &gomysql.MySQLError{Number: 4031, Message: "The client was " + interactionTimeoutText + ". See wait_timeout"}},
		{Name: "9999", Err: &gomysql.MySQLError{Number: 9999, Message: "unlisted"}},
		{Name: "invalid-conn", Err: gomysql.ErrInvalidConn},
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
