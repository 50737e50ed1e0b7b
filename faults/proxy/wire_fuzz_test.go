package proxy

import "testing"

// FuzzStreamParsers feeds arbitrary client streams, split at an arbitrary
// point, to each protocol parser: they must never panic, and what they find
// (COMMITs, encryption) must not depend on where the stream was split.
func FuzzStreamParsers(f *testing.F) {
	pgQuery := func(q string) []byte {
		n := len(q) + 5
		return append([]byte{'Q', byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}, append([]byte(q), 0)...)
	}
	myQuery := func(q string) []byte {
		n := len(q) + 1
		return append([]byte{byte(n), byte(n >> 8), byte(n >> 16), 0, 0x03}, q...)
	}
	startup := []byte{0, 0, 0, 8, 0, 3, 0, 0}
	f.Add(append(append([]byte{}, startup...), pgQuery("COMMIT")...), 3)
	f.Add(append(append([]byte{}, startup...), pgQuery("select 1; commit")...), 11)
	f.Add(myQuery("COMMIT"), 2)
	f.Add(myQuery("/* x */ commit"), 7)
	f.Add([]byte{}, 0)
	f.Add([]byte{0, 0, 0, 8, 4, 0xd2, 0x16, 0x2f, 0x16, 3, 1, 0, 5}, 9) // SSLRequest, ClientHello
	f.Add([]byte{0x16, 3, 1, 1, 0x20, 1, 0, 1, 0x1c}, 4)                // direct TLS
	f.Fuzz(func(t *testing.T, stream []byte, split int) {
		for _, p := range []Protocol{ProtocolPostgres, ProtocolMySQL, ProtocolAuto} {
			whole := newParser(p).feed(stream)
			if split < 0 {
				split = -split
			}
			if len(stream) > 0 {
				split %= len(stream) + 1
			} else {
				split = 0
			}
			parts := newParser(p)
			got := parts.feed(stream[:split])
			got.add(parts.feed(stream[split:]))
			if got != whole {
				t.Fatalf("%v: found %+v split at %d, %+v whole", p, got, split, whole)
			}
		}
	})
}
