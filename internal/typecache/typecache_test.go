package typecache

import (
	"errors"
	"testing"
	"unsafe"
)

// A type whose slot another type holds is computed at each call, with the
// right answer and no allocation: two hot types sharing a slot evicted each
// other before, and allocated an entry at every call (review of the type
// cache: 2 allocations a call for a tree holding both).
func TestTypeCacheSlotTakenAllocatesNothing(t *testing.T) {
	var c Cache
	err := errors.New("x")
	other := unsafe.Pointer(new(int)) // stands for another type's itab
	c.slots[slotOf(typeWord(err))].Store(&typeEntry{word: other, bits: 1})
	compute := func(error) uint32 { return 7 }
	if got := c.Bits(err, compute); got != 7 {
		t.Fatalf("Bits = %d, want 7 (computed, not the slot holder's 1)", got)
	}
	if n := testing.AllocsPerRun(100, func() { c.Bits(err, compute) }); n != 0 {
		t.Errorf("%v allocations a call for a type whose slot is taken, want 0", n)
	}
	if e := c.slots[slotOf(typeWord(err))].Load(); e.word != other {
		t.Errorf("the slot's first type was evicted")
	}
}
