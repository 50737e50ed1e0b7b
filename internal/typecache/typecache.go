// Package typecache keeps, for each dynamic type of error met, the answers
// a classifier's walk computes from the type alone, so that a walk asks
// them once per type, not once per error. Standard library only: the root
// package and the engine classifiers share it.
package typecache

import (
	"sync/atomic"
	"unsafe"
)

// Cache keeps, for each dynamic type of error met, the answers a
// classifier's compute gives on it: which of the methods it looks for the
// type has, which of the types it looks for it is. A walk asks each error
// of a tree 4–7 such questions, each a type assertion to an interface type
// of ~30 instructions (the assertion's cache probe); the cache asks them
// once per type and answers them all in one probe of ~10. compute must
// answer from err's dynamic type alone. The zero Cache is empty and
// ready; it is safe for concurrent use, and allocates only when it keeps a
// type in an empty slot: practice meets a dozen types, and 256 slots hold
// them (a type whose slot another holds is computed each time).
type Cache struct {
	slots [256]atomic.Pointer[typeEntry]
}

type typeEntry struct {
	word unsafe.Pointer
	bits uint32
}

// Bits returns compute(err), computed once for err's dynamic type. err must
// not be nil.
func (c *Cache) Bits(err error, compute func(error) uint32) uint32 {
	w := typeWord(err)
	slot := &c.slots[slotOf(w)]
	if e := slot.Load(); e != nil {
		if e.word == w {
			return e.bits
		}
		// A slot keeps the first type met: two hot types sharing one
		// would otherwise evict each other and allocate at every call.
		// The second pays its assertions instead, and nothing more.
		return compute(err)
	}
	e := &typeEntry{word: w, bits: compute(err)}
	slot.CompareAndSwap(nil, e) // lost to another goroutine's type: fine
	return e.bits
}

// slotOf is the slot of type word w.
func slotOf(w unsafe.Pointer) uintptr {
	h := uintptr(w)
	return (h>>3 ^ h>>11) % 256
}

// typeWord is the first word of err, which stands for its dynamic type: an
// interface value is two words, the first the itab of (error, the dynamic
// type), one per type. unsafe, because nothing else reads a type's identity
// as one word: reflect.Type's comparison calls the runtime, and the point
// is to spare the type assertions.
func typeWord(err error) unsafe.Pointer { return (*[2]unsafe.Pointer)(unsafe.Pointer(&err))[0] }

// SameType reports whether a and b, neither nil, have the same dynamic
// type, in one comparison.
func SameType(a, b error) bool { return typeWord(a) == typeWord(b) }

// Occupy gives err's slot to a type no error has, as another type met
// first would hold it, for tests of a slot taken. It allocates nothing.
func (c *Cache) Occupy(err error) { c.slots[slotOf(typeWord(err))].Store(&occupant) }

var occupant = typeEntry{word: unsafe.Pointer(&occupantWord)}

var occupantWord int
