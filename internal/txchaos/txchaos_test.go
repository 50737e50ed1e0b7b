package txchaos

import (
	"errors"
	"fmt"
	"testing"

	"github.com/sqlretry/sqlretry"
)

// Tally is the whole verdict of a chaos run, so it is checked here without
// a database: each way a call can be told something, against the ledger.
func TestTally(t *testing.T) {
	failed := errors.New("deadlock")
	ambiguous := fmt.Errorf("commit lost: %w", sqlretry.ErrAmbiguous)
	var r Result
	for _, c := range []struct {
		err   error
		count int
	}{
		{nil, 1},       // ok
		{nil, 0},       // lost
		{nil, 2},       // duplicated
		{ambiguous, 0}, // ambiguous: either way is right
		{failed, 0},    // failed
		{failed, 1},    // misreported
	} {
		Tally(&r, Outcome{1, c.err}, c.count)
	}
	want := Result{Calls: 6, OK: 3, Ambiguous: 1, Failed: 2, Lost: 1, Duplicated: 1, Misreported: 1, Sample: failed}
	if r != want {
		t.Errorf("got %v (sample %v), want %v (sample %v)", r, r.Sample, want, want.Sample)
	}
}
