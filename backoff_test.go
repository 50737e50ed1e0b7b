package sqlretry

import (
	"testing"
	"time"
)

func TestStep(t *testing.T) {
	base, max := 100*time.Millisecond, 5*time.Second
	want := []time.Duration{100, 200, 400, 800, 1600, 3200, 5000, 5000}
	for i, w := range want {
		if got := Step(base, max, i+1); got != w*time.Millisecond {
			t.Errorf("Step(n=%d) = %v, want %v", i+1, got, w*time.Millisecond)
		}
	}
	// No overflow at large n, nor with the largest durations.
	for _, n := range []int{62, 63, 64, 1000, 1 << 30} {
		if got := Step(base, max, n); got != max {
			t.Errorf("Step(n=%d) = %v, want the cap %v", n, got, max)
		}
		if got := Step(time.Duration(1<<62), time.Duration(1<<63-1), n); got <= 0 {
			t.Errorf("Step(huge, n=%d) = %v overflowed", n, got)
		}
	}
}

func TestDelayBounds(t *testing.T) {
	base, maxd := 100*time.Millisecond, 2*time.Second
	rs := []float64{0, 0.25, 0.5, 0.999999}
	for n := 1; n <= 70; n++ {
		d := Step(base, maxd, n)
		for _, r := range rs {
			if got := Delay(FullJitter, base, maxd, n, 0, r); got < 0 || got > d {
				t.Fatalf("full n=%d r=%v: %v outside [0, %v]", n, r, got, d)
			}
			if got := Delay(EqualJitter, base, maxd, n, 0, r); got < d/2 || got > d {
				t.Fatalf("equal n=%d r=%v: %v outside [%v, %v]", n, r, got, d/2, d)
			}
			if got := Delay(NoJitter, base, maxd, n, 0, r); got != d {
				t.Fatalf("none n=%d: %v, want %v", n, got, d)
			}
			for _, prev := range []time.Duration{0, base, time.Second, maxd, 10 * maxd} {
				hi := min(maxd, 3*max(prev, base))
				if got := Delay(DecorrelatedJitter, base, maxd, n, prev, r); got < base || got > hi {
					t.Fatalf("decorrelated prev=%v r=%v: %v outside [%v, %v]", prev, r, got, base, hi)
				}
			}
		}
	}
}

func TestDelayCapAppliesBeforeJitter(t *testing.T) {
	// cenkalti/backoff randomises after the cap and exceeds it by up to 50%.
	base, max := time.Second, 3*time.Second
	for _, j := range []Jitter{FullJitter, EqualJitter, DecorrelatedJitter, NoJitter} {
		if got := Delay(j, base, max, 10, 10*time.Second, 0.999999); got > max {
			t.Errorf("%v: %v exceeds the cap %v", j, got, max)
		}
	}
}

func TestJitterNames(t *testing.T) {
	for _, j := range []Jitter{FullJitter, EqualJitter, DecorrelatedJitter, NoJitter} {
		got, ok := ParseJitter(j.String())
		if !ok || got != j {
			t.Errorf("ParseJitter(%q) = %v, %v", j.String(), got, ok)
		}
	}
	if _, ok := ParseJitter("bogus"); ok {
		t.Error("ParseJitter accepted bogus")
	}
}
