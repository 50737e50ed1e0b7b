package sqltext

// kwClass says which of the analysis' word lists a word is in.
type kwClass uint8

const (
	kwWrite    kwClass = 1 << iota // writeWords
	kwState                        // stateFuncs
	kwTSQL                         // tsqlVerbs
	kwContinue                     // continues
)

// maxKeyword is the length of the longest word in the lists.
const maxKeyword = 32

// keywords maps each word of the lists to its classes.
var keywords = func() map[string]kwClass {
	m := make(map[string]kwClass)
	for _, list := range []struct {
		words []string
		c     kwClass
	}{
		{writeWords[:], kwWrite},
		{stateFuncs[:], kwState},
		{tsqlVerbs[:], kwTSQL},
		{continues[:], kwContinue},
	} {
		for _, w := range list.words {
			if len(w) > maxKeyword {
				panic("sqltext: keyword longer than maxKeyword: " + w)
			}
			m[w] |= list.c
		}
	}
	return m
}()

// class returns the classes of word token t, ignoring ASCII case.
func (l *lexer) class(t token) kwClass {
	n := t.end - t.start
	if n == 0 || n > maxKeyword {
		return 0
	}
	var buf [maxKeyword]byte
	for i := 0; i < n; i++ {
		c := l.s[t.start+i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		buf[i] = c
	}
	return keywords[string(buf[:n])]
}
