package enum

import "testing"

type color uint8

var colors = []string{"red", "green", "blue"}

func TestName(t *testing.T) {
	for v, want := range map[color]string{0: "red", 2: "blue", 3: "color(3)", 255: "color(255)"} {
		if got := Name(colors, v, "color"); got != want {
			t.Errorf("Name(%d) = %q, want %q", v, got, want)
		}
	}
}

func TestParse(t *testing.T) {
	if got, err := Parse[color](colors, "green", "GREEN", "x: unknown color"); got != 1 || err != nil {
		t.Errorf("Parse(green) = %d, %v, want 1, nil", got, err)
	}
	got, err := Parse[color](colors, "pink", "Pink", "x: unknown color")
	want := `x: unknown color "Pink" (want red, green or blue)`
	if got != 0 || err == nil || err.Error() != want {
		t.Errorf("Parse(pink) = %d, %v, want 0, %q", got, err, want)
	}
}

func TestList(t *testing.T) {
	for _, c := range []struct {
		names []string
		want  string
	}{{nil, ""}, {[]string{"a"}, "a"}, {[]string{"a", "b"}, "a or b"}, {[]string{"a", "b", "c"}, "a, b or c"}} {
		if got := List(c.names); got != c.want {
			t.Errorf("List(%q) = %q, want %q", c.names, got, c.want)
		}
	}
}
