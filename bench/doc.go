// Package bench compares sqlretry's call overhead with other Go retry
// libraries, each configured as equivalently as its API allows: 3 retries,
// exponential backoff, full jitter where offered. It is its own module, so
// the comparison libraries never enter sqlretry's go.mod.
//
// Run it from this directory:
//
//	cd bench && go test -run '^$' -bench . -benchmem -count 3
//
// The scenarios are in runners.go; bench_test.go checks that every runner
// calls the operation the expected number of times, so the comparison is fair.
// README.md records one run.
package bench
