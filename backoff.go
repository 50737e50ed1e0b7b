package sqlretry

import (
	"time"

	"github.com/sqlretry/sqlretry/internal/enum"
)

// Jitter chooses how a backoff step is randomised. The zero value is
// [FullJitter].
type Jitter uint8

const (
	// FullJitter waits uniform [0, d]: the least total work in AWS's study.
	FullJitter Jitter = iota
	// EqualJitter waits d/2 + uniform [0, d/2]: never less than half the step.
	EqualJitter
	// DecorrelatedJitter waits min(MaxDelay, uniform [BaseDelay, 3·previous]).
	DecorrelatedJitter
	// NoJitter waits exactly d. Clients in lockstep retry in lockstep: use
	// it only in tests and with a single client.
	NoJitter
)

var jitterNames = []string{"full", "equal", "decorrelated", "none"}

// String returns "full", "equal", "decorrelated" or "none".
func (j Jitter) String() string { return enum.Name(jitterNames, j, "Jitter") }

// ParseJitter is the inverse of [Jitter.String].
func ParseJitter(s string) (Jitter, bool) {
	j, err := enum.Parse[Jitter](jitterNames, s, s, "")
	return j, err == nil
}

// Step returns the un-jittered wait before retry n (1 for the first retry):
// base·2^(n-1), capped at max. It never overflows.
func Step(base, max time.Duration, n int) time.Duration {
	if n < 1 {
		n = 1
	}
	if base <= 0 {
		return 0
	}
	d := base
	for i := 1; i < n; i++ {
		if d >= max/2 {
			return max
		}
		d *= 2
	}
	if d > max {
		return max
	}
	return d
}

// Delay returns the jittered wait before retry n (1 for the first retry),
// given the previous wait (for DecorrelatedJitter) and r, a uniform random
// number in [0, 1). The cap applies before the jitter, so no wait exceeds
// max. It is a pure function: the Policy passes its clock-free inputs in.
func Delay(j Jitter, base, max time.Duration, n int, prev time.Duration, r float64) time.Duration {
	switch j {
	case NoJitter:
		return Step(base, max, n)
	case EqualJitter:
		d := Step(base, max, n)
		return d/2 + time.Duration(r*float64(d-d/2))
	case DecorrelatedJitter:
		if prev < base {
			prev = base
		}
		hi := prev
		if hi > max/3 {
			hi = max
		} else {
			hi *= 3
		}
		d := base + time.Duration(r*float64(hi-base))
		if d > max {
			d = max
		}
		return d
	default: // FullJitter
		d := Step(base, max, n)
		return time.Duration(r * float64(d))
	}
}
