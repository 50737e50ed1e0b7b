package mysql

import (
	"testing"

	gomysql "github.com/go-sql-driver/mysql"
)

// FuzzLookup checks that ValidCode, Lookup and Classify agree on any input
// and never panic; the committed corpus is in testdata/fuzz/FuzzLookup.
func FuzzLookup(f *testing.F) {
	for _, e := range Table() {
		f.Add(e.Code)
	}
	for _, s := range []string{"", "0", "-1", "65535", "65536", "01213", "HY000", "12 13"} {
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
		msg := ""
		if n == 4031 { // Lookup gives MySQL's 4031, which Classify knows by its text
			msg = "The client was " + interactionTimeoutText + "."
		}
		if got := Classify(&gomysql.MySQLError{Number: n, Message: msg}); got != c {
			t.Fatalf("Classify(number %d) = %+v disagrees with Lookup(%q) = %+v", n, got, code, c)
		}
	})
}
