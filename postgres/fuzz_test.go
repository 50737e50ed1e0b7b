package postgres

import (
	"strings"
	"testing"

	sr "github.com/sqlretry/sqlretry"
)

// stateErr is any driver's server error, as the classifier sees it.
type stateErr string

func (e stateErr) Error() string    { return "sqlstate " + string(e) }
func (e stateErr) SQLState() string { return string(e) }

// FuzzLookup checks that ValidCode, Lookup and Classify agree on any input
// and never panic; the committed corpus is in testdata/fuzz/FuzzLookup.
func FuzzLookup(f *testing.F) {
	for _, e := range CockroachTable() {
		f.Add(e.Code)
	}
	for _, s := range []string{"", "4000", "400011", "40p01", "53xxx", "08\x00\x00\x00", "é4000", "-2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, code string) {
		for _, lookup := range []func(string) (sr.Class, bool){Lookup, CockroachLookup} {
			c, ok := lookup(code)
			if err := ValidCode(code); err != nil {
				if ok || c.Retryable {
					t.Fatalf("Lookup(%q) on a malformed code: got (%+v, %v), want not listed, not retryable", code, c, ok)
				}
				if err.Error() == "" {
					t.Fatalf("ValidCode(%q): empty error", code)
				}
				continue
			}
			if c.Code != strings.ToUpper(code) || c.Reason == "" {
				t.Fatalf("Lookup(%q): got Code %q Reason %q, want Code %q and a reason", code, c.Code, c.Reason, strings.ToUpper(code))
			}
			if !ok && c.Retryable {
				t.Fatalf("Lookup(%q): unlisted code is retryable", code)
			}
			if again, ok2 := lookup(c.Code); again != c || ok2 != ok {
				t.Fatalf("Lookup(%q) = (%+v, %v) but Lookup(%q) = (%+v, %v)", code, c, ok, c.Code, again, ok2)
			}
		}
		c, _ := Lookup(code)
		if ValidCode(code) == nil {
			if got := Classify(stateErr(strings.ToUpper(code))); got.Retryable != c.Retryable || got.Phase != c.Phase || got.Code != c.Code {
				t.Fatalf("Classify(%q) = %+v disagrees with Lookup = %+v", code, got, c)
			}
		}
	})
}
