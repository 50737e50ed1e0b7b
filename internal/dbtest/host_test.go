package dbtest

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// TestHostDoReturnsFatal checks that a Fatalf or Skip inside Do ends the
// function and comes back as Do's error, and that a Host counts as failed
// after Fatalf only.
func TestHostDoReturnsFatal(t *testing.T) {
	h := NewHost("x", nil)
	after := false
	err := h.Do(func() {
		h.Fatalf("start %s: %v", "node 1", errors.New("boom"))
		after = true
	})
	if err == nil || err.Error() != "start node 1: boom" || after {
		t.Fatalf("Do: got %v (after=%v), want the Fatalf message and f stopped", err, after)
	}
	if !h.Failed() {
		t.Fatal("Failed after Fatalf: got false")
	}
	h2 := NewHost("y", nil)
	if err := h2.Do(func() { h2.Skip("no galera") }); err == nil || !strings.Contains(err.Error(), "no galera") {
		t.Fatalf("Do with Skip: got %v, want the skip message", err)
	}
	if h2.Failed() {
		t.Fatal("Failed after Skip: got true")
	}
	if err := h2.Do(func() {}); err != nil {
		t.Fatalf("Do of a function that returns: got %v", err)
	}
}

// TestHostCloseRunsCleanupsLastFirst checks the order of Close's cleanups,
// that a second Close runs none again, and that a cleanup registered after
// Close runs at once.
func TestHostCloseRunsCleanupsLastFirst(t *testing.T) {
	h := NewHost("x", nil)
	var got []int
	for i := range 3 {
		h.Cleanup(func() { got = append(got, i) })
	}
	h.Close()
	h.Close()
	h.Cleanup(func() { got = append(got, 9) })
	if want := []int{2, 1, 0, 9}; !slices.Equal(got, want) {
		t.Fatalf("cleanup order: got %v, want %v", got, want)
	}
}
