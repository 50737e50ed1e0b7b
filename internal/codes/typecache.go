package codes

import (
	"sync/atomic"
	"unsafe"
)

// TypeCache keeps, for each dynamic type of error met, the answers a
// classifier's compute gives on it: which of the methods it looks for the
// type has, which of the types it looks for it is. A walk asks each error
// of a tree 4–7 such questions, each a type assertion to an interface type
// of ~30 instructions (the assertion's cache probe); the cache asks them
// once per type and answers them all in one probe of ~10. compute must
// answer from err's dynamic type alone. The zero TypeCache is empty and
// ready; it is safe for concurrent use, and allocates only when it keeps a
// type in an empty slot: practice meets a dozen types, and 256 slots hold
// them (a type whose slot another holds is computed each time).
type TypeCache struct {
	slots [256]atomic.Pointer[typeEntry]
}

type typeEntry struct {
	word unsafe.Pointer
	bits uint32
}

// Bits returns compute(err), computed once for err's dynamic type. err must
// not be nil.
func (c *TypeCache) Bits(err error, compute func(error) uint32) uint32 {
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

// Methods found by MethodBits, for AsOneBits and IsOneBits.
const (
	HasAs uint32 = 1 << iota // As(any) bool
	HasIs                    // Is(error) bool
	// The bits from here on are the caller's own.
	FirstFree
)

// MethodBits is the part of a TypeCache compute that AsOneBits and IsOneBits
// read.
func MethodBits(err error) uint32 {
	var b uint32
	if _, ok := err.(interface{ As(any) bool }); ok {
		b |= HasAs
	}
	if _, ok := err.(interface{ Is(error) bool }); ok {
		b |= HasIs
	}
	return b
}

// AsOneBits is AsOne with err's MethodBits known: the As method is asked
// only of a type that has one.
func AsOneBits[T any](err error, bits uint32, match func(error) (T, bool)) (T, bool) {
	if e, ok := match(err); ok {
		return e, true
	}
	if bits&HasAs != 0 {
		p := new(T)
		if err.(interface{ As(any) bool }).As(p) {
			return *p, true
		}
	}
	var zero T
	return zero, false
}

// IsOneBits is IsOne with err's MethodBits known.
func IsOneBits(err error, bits uint32, target error) bool {
	return err == target || bits&HasIs != 0 && err.(interface{ Is(error) bool }).Is(target)
}
