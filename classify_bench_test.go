package sqlretry

import (
	"fmt"
	"testing"

	"github.com/sqlretry/sqlretry/internal/errsample"
)

// outerError is the caller's own wrapper of practice: an outer Do's error,
// which unwraps to its cause and the last database error.
var outerError = errsample.Wrapper{Name: "sqlretry.Error", Wrap: func(err error) error {
	return &Error{Op: "load", Attempts: 2, Err: err, Cause: ErrRetriesExhausted}
}}

var classSink Class

// BenchmarkClassifyPractice measures ClassifyNeutral on every error of
// practice (internal/errsample), bare and wrapped. Issue 20: each at most
// 100 ns and no allocation.
func BenchmarkClassifyPractice(b *testing.B) {
	for _, c := range errsample.Wrapped(errsample.Neutral(), outerError) {
		b.Run(c.Name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				classSink = ClassifyNeutral(c.Err)
			}
		})
	}
}

// TestPracticeVerdicts holds ClassifyNeutral's verdicts on the errors of
// practice still (testdata/practice.golden).
func TestPracticeVerdicts(t *testing.T) {
	cases := errsample.Wrapped(errsample.Neutral(), outerError)
	errsample.Check(t, "testdata/practice.golden", cases, func(err error) string { return fmt.Sprintf("%+v", ClassifyNeutral(err)) })
}
