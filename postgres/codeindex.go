package postgres

import (
	"math/bits"

	sr "github.com/sqlretry/sqlretry"
)

// codeIndex finds a table's verdict by SQLSTATE without hashing a string:
// a code's five bytes packed into one word are the key of an
// open-addressing table, probed in turn from a multiplicative hash. A map
// of strings cost ~110 instructions a look-up (the string hash and the
// map's probe), a third of classifying a server error; this costs ~20.
// Built once by compile, read only after: safe for concurrent use.
type codeIndex struct {
	slots []codeSlot // a power of two, at most a quarter full
	shift uint       // 64 - log2(len(slots))
}

type codeSlot struct {
	key     uint64   // 0: empty
	class   sr.Class // the row's verdict
	startup sr.Class // ... in reply to a connection's startup (atStartup)
}

// exactKey packs a five-byte code with a length mark, so that no key is 0
// and none equals a classKey.
func exactKey(code string) (uint64, bool) {
	if len(code) != 5 {
		return 0, false
	}
	return uint64(code[0]) | uint64(code[1])<<8 | uint64(code[2])<<16 | uint64(code[3])<<24 | uint64(code[4])<<32 | 5<<40, true
}

// classKey is the key of a code's class, its first two bytes; code has at
// least two.
func classKey(code string) uint64 {
	return uint64(code[0]) | uint64(code[1])<<8 | 2<<40
}

func newCodeIndex(verdicts map[uint64]sr.Class) codeIndex {
	n := 16
	for n < 4*len(verdicts) {
		n *= 2
	}
	x := codeIndex{slots: make([]codeSlot, n), shift: uint(64 - bits.TrailingZeros(uint(n)))}
	for k, c := range verdicts {
		i := x.home(k)
		for x.slots[i].key != 0 {
			i = (i + 1) & uint64(n-1)
		}
		x.slots[i] = codeSlot{key: k, class: c, startup: atStartup(c)}
	}
	return x
}

// home is key's first slot.
func (x *codeIndex) home(key uint64) uint64 { return key * 0x9E3779B97F4A7C15 >> x.shift }

// find returns key's slot, or nil.
func (x *codeIndex) find(key uint64) *codeSlot {
	mask := uint64(len(x.slots) - 1)
	for i := x.home(key); ; i = (i + 1) & mask {
		s := &x.slots[i]
		if s.key == key {
			return s
		}
		if s.key == 0 {
			return nil
		}
	}
}
