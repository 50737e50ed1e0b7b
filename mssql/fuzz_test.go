package mssql

import (
	"testing"

	gomssql "github.com/microsoft/go-mssqldb"
)

// FuzzLookup checks that ValidCode, Lookup and Classify agree on any input
// and never panic; the committed corpus is in testdata/fuzz/FuzzLookup.
func FuzzLookup(f *testing.F) {
	for _, e := range Table() {
		f.Add(e.Code)
	}
	for _, s := range []string{"", "-", "--2", "+5", "01205", "2147483647", "2147483648", "-2147483649", "1 2", "١٢٠٥"} {
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
		if again, ok2 := Lookup(c.Code); again != c || ok2 != ok {
			t.Fatalf("Lookup(%q) = (%+v, %v) but Lookup(%q) = (%+v, %v)", code, c, ok, c.Code, again, ok2)
		}
		// Lookup reads a number as the server sends it, at class 16; a
		// number only SqlClient uses, as its network error at class 20.
		class := uint8(16)
		if _, net := byNetwork[n]; net {
			if _, server := byServer[n]; !server {
				class = fatalClass
			}
		}
		if got := Classify(gomssql.Error{Number: n, Class: class}); got != c {
			t.Fatalf("Classify(number %d) = %+v disagrees with Lookup(%q) = %+v", n, got, code, c)
		}
	})
}
