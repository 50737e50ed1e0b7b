package postgres

import (
	"math/rand/v2"
	"testing"

	sr "github.com/sqlretry/sqlretry"
)

// TestCodeIndexAgreesWithAMap: the index finds every row of both tables by
// its code and its class, and nothing else, as the maps of strings it
// replaced did, on every code one byte away from a row and on random codes.
func TestCodeIndexAgreesWithAMap(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	for _, tab := range []*table{pgTable, crdbTable} {
		exact, class := map[string]sr.Class{}, map[string]sr.Class{}
		for _, e := range tab.rows {
			c := e.Class
			c = tagOf(c)
			if isClassRow(e.Code) {
				class[e.Code[:2]] = c
			} else {
				exact[e.Code] = c
			}
		}
		check := func(code string) {
			t.Helper()
			var got sr.Class
			ok := tab.lookup(code, false, &got)
			want, wok := exact[code]
			if !wok && len(code) == 5 {
				if want, wok = class[code[:2]]; wok {
					want.Code = code
				}
			}
			if !wok {
				want = sr.Class{Phase: sr.NotApplied, Code: code, Reason: "SQLSTATE not listed as transient: not retried"}
			}
			if ok != wok || got != want {
				t.Errorf("lookup(%q) = %+v, %v; the maps say %+v, %v", code, got, ok, want, wok)
			}
			var startup sr.Class
			tab.lookup(code, true, &startup)
			if want = atStartup(want); startup != want {
				t.Errorf("lookup(%q) at startup = %+v, want %+v", code, startup, want)
			}
		}
		const alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZx\x00\xff"
		for _, e := range tab.rows {
			check(e.Code)
			for i := 0; i < 5; i++ {
				for j := 0; j < len(alphabet); j++ {
					b := []byte(e.Code)
					b[i] = alphabet[j]
					check(string(b))
				}
			}
			check(e.Code[:4])
			check(e.Code + "0")
		}
		for range 20000 {
			b := make([]byte, rnd.IntN(7))
			for i := range b {
				b[i] = alphabet[rnd.IntN(len(alphabet))]
			}
			check(string(b))
		}
	}
}

func tagOf(c sr.Class) sr.Class {
	if c.Retryable {
		c.Kind = sr.Unavailable
		if contention(c.Code) {
			c.Kind = sr.Contention
		}
	}
	return c
}
