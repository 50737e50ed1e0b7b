package chaos

import (
	"time"
)

// runFixture is a run of d, sampled every 100 ms: about 3000 operations a
// second told OK, none during an outage from d/3 to d/2, where the calls
// (8 workers pausing 50 ms after each failure: 160 a second) are refused.
func runFixture(mode string, d time.Duration) *RunReport {
	out := Outage{Offset: d / 3, Length: d/2 - d/3}
	r := &RunReport{Scenario: "tasks", Engine: "sqlite", Mode: mode, Seed: 1, DurationMS: d.Milliseconds(), PlannedMS: d.Milliseconds(),
		Workers: 8, Windows: []Outage{out}}
	var s Sample
	for el := time.Duration(0); el <= d; el += 100 * time.Millisecond {
		s.Elapsed, s.Total = el, d
		s.Budget, s.Outage = 10, el >= out.Offset && el < out.Offset+out.Length
		if el > 0 && s.Outage {
			s.Ops += 16
			s.Attempts += 16
			s.Faults += 16
			s.Budget = 0.5
		} else if el > 0 {
			s.Ops += 300
			s.OK += 290
			s.Attempts += 310
			s.Faults += 12
		}
		if mode == "naive" {
			s.Budget = -1
		}
		r.Samples = append(r.Samples, s)
	}
	return r
}
