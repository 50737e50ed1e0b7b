package crl

import (
	"errors"
	"reflect"
	"slices"
	"testing"
)

var fuzzSeeds = []string{
	"1205:3", "{1205,1222:3,2*2:select,update}", "{1205:3,5+5};{1222:2,2}", "4,1*", "1205:4,1*",
	"{+4060};{40143}", "+4060,40143", "{{1205:1};{1222:1}}", "1205:3:", "1205:1:0", ":1,2*2:CREATE",
	"1205:3,2,2", "a:b:c:d", "{1205:3", "1205:3}", "01205:1", "1205:255,1*2", "40001,40P01:3,1*2",
}

// FuzzParseExec: no panics, every error is an *Error, and parse∘format∘parse
// equals parse.
func FuzzParseExec(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, s string, pg bool) {
		e := Numbers
		if pg {
			e = SQLState
		}
		x, err := e.ParseExec(s)
		if err != nil {
			var ce *Error
			if !errors.As(err, &ce) || ce.Pos < 0 || ce.Pos > len(s) {
				t.Fatalf("ParseExec(%q) error %v: want an *Error with a position inside the value", s, err)
			}
			return
		}
		for _, ent := range x.Entries() {
			if len(ent.Waits) != ent.Retries || ent.Retries > MaxRetries {
				t.Fatalf("ParseExec(%q): entry %+v", s, ent)
			}
			for _, w := range ent.Waits {
				if w < 0 || w > MaxWait {
					t.Fatalf("ParseExec(%q): wait %v out of bounds", s, w)
				}
			}
		}
		y, err := e.ParseExec(x.String())
		if err != nil {
			t.Fatalf("ParseExec(%q).String() = %q does not parse: %v", s, x.String(), err)
		}
		if !reflect.DeepEqual(y.Entries(), x.Entries()) || y.String() != x.String() {
			t.Fatalf("round trip of %q via %q: %+v, want %+v", s, x.String(), y.Entries(), x.Entries())
		}
		_ = x.CheckQueryTimeout(0)
	})
}

// FuzzParseConn: no panics, every error is an *Error, and parse∘format∘parse
// equals parse.
func FuzzParseConn(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, s string, pg bool) {
		e := Numbers
		if pg {
			e = SQLState
		}
		c, err := e.ParseConn(s)
		if err != nil {
			var ce *Error
			if !errors.As(err, &ce) || ce.Pos < 0 || ce.Pos > len(s) {
				t.Fatalf("ParseConn(%q) error %v: want an *Error with a position inside the value", s, err)
			}
			return
		}
		d, err := e.ParseConn(c.String())
		if err != nil {
			t.Fatalf("ParseConn(%q).String() = %q does not parse: %v", s, c.String(), err)
		}
		if d.Mode() != c.Mode() || !slices.Equal(d.Errors(), c.Errors()) || !slices.Equal(d.Effective(), c.Effective()) || d.String() != c.String() {
			t.Fatalf("round trip of %q via %q differs", s, c.String())
		}
	})
}
