package crl

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sqlretry/sqlretry"
)

// codeErr is a database error with an error number.
type codeErr string

func (e codeErr) Error() string { return "error " + string(e) }

var classifyCode = sqlretry.ClassifierFunc(func(err error) sqlretry.Class {
	var c codeErr
	if errors.As(err, &c) {
		// Not retryable by the classifier: only a rule retries it.
		return sqlretry.Class{Code: string(c), Phase: sqlretry.NotApplied, Reason: "test"}
	}
	return sqlretry.ClassifyNeutral(err)
})

func newPolicy(t *testing.T, c Config) *sqlretry.Policy {
	t.Helper()
	pc := sqlretry.Config{Classifier: classifyCode, Budget: sqlretry.NoBudget}
	if err := c.Apply(&pc); err != nil {
		t.Fatal(err)
	}
	p, err := sqlretry.New(pc)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Two Policies with different rules, used at once: each keeps its own rules
// (the driver's rule set is process-wide; ours belongs to the Policy).
func TestPoliciesConcurrent(t *testing.T) {
	p1 := newPolicy(t, Config{Exec: "1205:2,0+0"})
	p2 := newPolicy(t, Config{Exec: "1222:4,0+0:update", FilterMode: FilterVerb})
	tests := []struct {
		p        *sqlretry.Policy
		code     string
		stmt     string
		attempts int64
	}{
		{p1, "1205", "select 1", 3},
		{p1, "1222", "update t set x = 1", 1}, // no rule in p1: the classifier says permanent
		{p2, "1222", "/* c */ update t set x = 1", 5},
		{p2, "1222", "select 1", 1}, // filter mismatch: stop
		{p2, "1205", "select 1", 1},
	}
	var wg sync.WaitGroup
	for _, tt := range tests {
		for g := 0; g < 8; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var n atomic.Int64
				op := sqlretry.Idempotent("op").WithStatement(tt.stmt)
				err := tt.p.Do(context.Background(), op, func(context.Context) error {
					n.Add(1)
					return codeErr(tt.code)
				})
				if !errors.Is(err, codeErr(tt.code)) {
					t.Errorf("%s %q: err = %v, want it to wrap the database error", tt.code, tt.stmt, err)
				}
				if got := n.Load(); got != tt.attempts {
					t.Errorf("%s %q: %d attempts, want %d", tt.code, tt.stmt, got, tt.attempts)
				}
			}()
		}
	}
	wg.Wait()
}

// A rule is the operator's consent to retry, not to replay an ambiguous
// write: the Policy still refuses that without a verify.
func TestRuleDoesNotOverrideAmbiguity(t *testing.T) {
	ambiguous := sqlretry.ClassifierFunc(func(err error) sqlretry.Class {
		return sqlretry.Class{Code: "1205", Phase: sqlretry.Unknown}
	})
	pc := sqlretry.Config{Classifier: ambiguous, Budget: sqlretry.NoBudget}
	if err := (Config{Exec: "1205:3,0+0"}).Apply(&pc); err != nil {
		t.Fatal(err)
	}
	p, err := sqlretry.New(pc)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	err = p.Do(context.Background(), sqlretry.Write("insert", nil).WithStatement("insert into t values (1)"), func(context.Context) error {
		n++
		return codeErr("1205")
	})
	if !errors.Is(err, sqlretry.ErrAmbiguous) || n != 1 {
		t.Errorf("ambiguous write under a rule: err = %v after %d attempts, want ErrAmbiguous after 1", err, n)
	}
}
