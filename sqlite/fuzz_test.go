package sqlite

import (
	"testing"
)

// FuzzLookup checks that ValidCode, Lookup and Classify agree on any input
// and never panic; the committed corpus is in testdata/fuzz/FuzzLookup.
func FuzzLookup(f *testing.F) {
	for _, e := range Table() {
		f.Add(e.Code)
		f.Add(e.Class.Code)
	}
	for _, s := range []string{"", "0", "-5", "65535", "65536", "sqlite_busy", "SQLITE_", "SQLITE_RC_99", "5 "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, code string) {
		c, ok := Lookup(code)
		n, err := parse(code)
		if err != nil {
			if ok || c.Retryable || ValidCode(code) == nil {
				t.Fatalf("Lookup(%q) on a malformed code: got (%+v, %v), want not listed, not retryable, ValidCode error", code, c, ok)
			}
			return
		}
		if !ok && c.Retryable {
			t.Fatalf("Lookup(%q): unlisted code is retryable", code)
		}
		if c.Code == "" || c.Reason == "" {
			t.Fatalf("Lookup(%q): got %+v, want a Code and a Reason", code, c)
		}
		if got := Classify(&fakeCoder{n}); got.Retryable != c.Retryable || got.Phase != c.Phase || got.Code != c.Code {
			t.Fatalf("Classify(code %d) = %+v disagrees with Lookup(%q) = %+v", n, got, code, c)
		}
	})
}
