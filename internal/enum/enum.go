// Package enum gives the library's small enumerations one String and one
// parse, driven by a table of names indexed by value, so each type declares
// its names once instead of writing the same switch twice.
package enum

import (
	"errors"
	"strconv"
	"strings"
)

// Name returns names[v], or "typ(v)" for a value the table does not name,
// so a corrupt value still prints as something a reader can trace.
func Name[T ~uint8](names []string, v T, typ string) string {
	if int(v) < len(names) {
		return names[v]
	}
	return typ + "(" + strconv.Itoa(int(v)) + ")"
}

// Parse returns the value whose name is key. Otherwise it returns 0 and the
// error `what "s" (want a, b or c)`: s is the caller's text, quoted as given,
// and key may be s normalised (lower-cased, an alias resolved).
func Parse[T ~uint8](names []string, key, s, what string) (T, error) {
	for i, n := range names {
		if n == key {
			return T(i), nil
		}
	}
	return 0, errors.New(what + " " + strconv.Quote(s) + " (want " + List(names) + ")")
}

// List joins names as prose: "a, b or c".
func List(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}
