//go:build !race

package pgxretry_test

const raceEnabled = false
