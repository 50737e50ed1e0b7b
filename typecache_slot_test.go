package sqlretry

import (
	"errors"
	"fmt"
	"testing"
)

// TestNeutralTypeCacheSlotTakenAllocatesNothing: an error whose type's
// slot of the neutral walk's type cache another type holds is classified
// without allocating, however often the two alternate. The root's cache
// gave a slot to the last type met, so two hot types sharing one evicted
// each other and allocated an entry at every call (the bug fixed in the
// engines' cache in 8d7984b, present in the root's own until now).
func TestNeutralTypeCacheSlotTakenAllocatesNothing(t *testing.T) {
	inner := errors.New("x")
	err := fmt.Errorf("wrapped: %w", inner)
	want := ClassifyNeutral(err)
	n := testing.AllocsPerRun(100, func() {
		typeCache.Occupy(err) // another type met in between takes the slot
		typeCache.Occupy(inner)
		if got := ClassifyNeutral(err); got != want {
			t.Fatalf("ClassifyNeutral = %+v with the slots taken, want %+v", got, want)
		}
	})
	if n != 0 {
		t.Errorf("%v allocations a call with the types' slots taken, want 0", n)
	}
}
