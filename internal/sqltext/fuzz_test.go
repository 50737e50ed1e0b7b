package sqltext

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// corpusSeeds returns the texts of the checked-in corpus of
// FuzzReadOnlyEngines, for the fuzz targets that need no database.
func corpusSeeds(tb testing.TB) []string {
	tb.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "fuzz", "FuzzReadOnlyEngines", "*"))
	if err != nil {
		tb.Fatal(err)
	}
	var seeds []string
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			tb.Fatal(err)
		}
		lines := strings.SplitN(string(b), "\n", 3)
		if len(lines) < 2 || lines[0] != "go test fuzz v1" ||
			!strings.HasPrefix(lines[1], "string(") || !strings.HasSuffix(lines[1], ")") {
			tb.Fatalf("%s: not a corpus file of one string", name)
		}
		s, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(lines[1], "string("), ")"))
		if err != nil {
			tb.Fatalf("%s: %v", name, err)
		}
		seeds = append(seeds, s)
	}
	if len(seeds) == 0 {
		tb.Fatal("no corpus in testdata/fuzz/FuzzReadOnlyEngines")
	}
	return seeds
}

// FuzzAnalyze checks the invariants of the analysis that need no database:
// no panic; the lexer advances in every dialect; a read-only text is one
// statement whose verb is a read; Analyze agrees with Verb and IsReadOnly;
// a text that divergent finds plain reads the same under the fast path
// (PostgreSQL's rules alone) as under every dialect, calls included; and
// CalledNames agrees with Analyze on every engine.
func FuzzAnalyze(f *testing.F) {
	for _, s := range corpusSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		in := Analyze(s)
		if in.Verb != Verb(s) || in.ReadOnly != IsReadOnly(s) {
			t.Fatalf("Analyze(%q) = %+v, Verb %q, IsReadOnly %v", s, in, Verb(s), IsReadOnly(s))
		}
		if in.Calls && !in.ReadOnly {
			t.Fatalf("Analyze(%q): Calls without ReadOnly", s)
		}
		for e := AnyEngine; e <= SQLite; e++ {
			names, ok := CalledNames(e, s)
			switch {
			case ok && !in.ReadOnly:
				t.Fatalf("CalledNames(%v, %q) ok for a text that is not read-only", e, s)
			case len(names) > 0 && !in.Calls:
				t.Fatalf("CalledNames(%v, %q) = %q, but Analyze saw no call", e, s, names)
			case in.ReadOnly && !in.Calls && !ok:
				t.Fatalf("CalledNames(%v, %q) not ok for a read that calls nothing", e, s)
			}
		}
		if in.ReadOnly {
			switch in.Verb {
			case "select", "values", "table", "show", "explain", "describe", "desc":
			default:
				t.Fatalf("IsReadOnly(%q) = true with verb %q", s, in.Verb)
			}
			if !in.OneStatement() {
				t.Fatalf("IsReadOnly(%q) = true, but Multi %v Opaque %v", s, in.Multi, in.Opaque)
			}
		}
		for d := anyDialect; d < numDialects; d++ {
			l := lexer{s: s, d: d}
			end := 0
			for n := 0; ; n++ {
				tok := l.next()
				if tok.start < end || tok.end > len(s) || tok.end < tok.start || n > len(s)+1 {
					t.Fatalf("dialect %d, %q: token %d at [%d, %d) after %d", d, s, n, tok.start, tok.end, end)
				}
				if tok.kind == tokEOF {
					break
				}
				if tok.end == tok.start {
					t.Fatalf("dialect %d, %q: empty token at %d", d, s, tok.start)
				}
				end = tok.end
			}
		}
		if !divergent(s) {
			all := true
			for d := dlPostgres; d < numDialects; d++ {
				all = all && readOnly(s, d, 0, nil)
			}
			if fast := readOnly(s, dlPostgres, 0, nil); fast != all {
				t.Fatalf("%q is not divergent, but PostgreSQL's rules say read-only %v and all dialects %v", s, fast, all)
			}
			// The fast path reads calls with PostgreSQL's rules alone: no
			// dialect may see one it does not (MySQL reads "f" as a
			// string, never as a name, so it may see fewer).
			var pgList []called
			if readOnly(s, dlPostgres, 0, &callSink{list: &pgList}) {
				seen := map[called]bool{}
				for _, c := range pgList {
					seen[c] = true
				}
				for d := dlPostgres; d < numDialects; d++ {
					var list []called
					readOnly(s, d, 0, &callSink{list: &list})
					for _, c := range list {
						if !seen[c] {
							t.Fatalf("%q is not divergent, but dialect %d finds %+v, which PostgreSQL's rules do not", s, d, c)
						}
					}
				}
			}
			for d := anyDialect; d < numDialects; d++ {
				m0, o0, c0 := shapeIn(s, dlPostgres)
				m, o, c := shapeIn(s, d)
				if m != m0 || o != o0 || c != c0 {
					t.Fatalf("%q is not divergent, but dialect %d reads its shape as %v %v %v, PostgreSQL as %v %v %v", s, d, m, o, c, m0, o0, c0)
				}
			}
		}
		_ = hiddenTxControl(s)
	})
}
