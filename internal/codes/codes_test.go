package codes

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	sr "github.com/sqlretry/sqlretry"
)

func TestNumberParse(t *testing.T) {
	n := Number{What: "X error number", Example: "1205", Min: -5, Max: 9000, Signed: true}
	for code, want := range map[string]string{
		"":                     "is empty",
		"-":                    "has no digits",
		"12a":                  "must be decimal digits, optionally after a minus sign",
		"9001":                 "is out of range (-5 to 9000)",
		"-6":                   "is out of range",
		"99999999999999999999": "is out of range",
	} {
		if _, err := n.Parse(code); err == nil || !strings.Contains(err.Error(), want) || !strings.HasPrefix(err.Error(), "X error number") {
			t.Errorf("Parse(%q) = %v, want an error saying %q", code, err, want)
		}
	}
	if v, err := n.Parse("-2"); err != nil || v != -2 {
		t.Errorf("Parse(-2) = %d, %v", v, err)
	}
	if _, err := (Number{What: "Y", Example: "1", Max: 9}).Parse("-1"); err == nil || strings.Contains(err.Error(), "minus") {
		t.Errorf("unsigned Parse(-1) = %v, want an error that does not offer a minus sign", err)
	}
}

func TestRecover(t *testing.T) {
	classify := func() (c sr.Class) {
		defer Recover(&c)
		panic("boom")
	}
	if got := classify(); got != Panicked {
		t.Errorf("got %+v, want Panicked", got)
	}
}

func TestFile(t *testing.T) {
	byNumber := map[int]sr.Class{}
	contention := func(code string) bool { return code == "1" }
	got := File(byNumber, 1, sr.Class{Retryable: true, Code: "1"}, contention, "x: number 1")
	if got.Kind != sr.Contention || byNumber[1] != got {
		t.Errorf("File = %+v, filed %+v; want the verdict tagged Contention and filed", got, byNumber[1])
	}
	defer func() {
		if r := recover(); r != "x: number 1 listed twice" {
			t.Errorf("a number filed twice: recovered %v, want a panic naming it", r)
		}
	}()
	File(byNumber, 1, sr.Class{}, contention, "x: number 1")
}

func TestLookup(t *testing.T) {
	parse := func(code string) (int, error) {
		if code == "bad" {
			return 0, errors.New("bad")
		}
		return len(code), nil
	}
	find := func(n int) (sr.Class, bool) { return sr.Class{Code: strconv.Itoa(n)}, n == 3 }
	if c, ok := Lookup("abc", parse, "error number", find); !ok || c.Code != "3" {
		t.Errorf("Lookup(abc) = %+v, %v, want find's verdict on 3, true", c, ok)
	}
	if c, ok := Lookup("ab", parse, "error number", find); ok || c.Code != "2" {
		t.Errorf("Lookup(ab) = %+v, %v, want find's verdict on 2, false", c, ok)
	}
	want := sr.Class{Phase: sr.Unknown, Code: "bad", Reason: "malformed error number"}
	if c, ok := Lookup("bad", parse, "error number", find); ok || c != want {
		t.Errorf("Lookup(bad) = %+v, %v, want %+v, false", c, ok, want)
	}
}
