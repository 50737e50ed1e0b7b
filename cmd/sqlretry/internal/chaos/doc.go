// Package chaos is the harness behind `sqlretry chaos`. Its default
// scenario (tasks, [Run]) drives the reference task store (package
// taskstore) with concurrent workers while the fault driver (package
// faults) injects every kind of fault and a sustained outage, then checks
// with injection off that nothing was lost or applied twice. The
// contention scenario ([RunContention], contention.go) runs hot rows and
// opposite-order two-row transactions under sqlretry's policy, the old
// defaults and a blind loop, and sets their success rates, latencies,
// attempts per call and budget refusals side by side.
//
//	r, err := chaos.Run(ctx, chaos.Config{})   // 20 s on a temporary SQLite database
//	if err != nil { ... }                      // an *InputError: a bad setting or an unusable DSN
//	r.WriteText(os.Stdout)                     // or encode r as JSON
//	_ = chaos.WritePlot("chaos.png", r, nil)   // throughput, attempts/s, budget; the outage shaded
//	if !r.OK { ... }                           // an invariant was violated
//
// The workload mixes the store's write shapes: Persist (a non-idempotent
// INSERT, with a task-key collision now and then), SetStatus (a guarded
// UPDATE with an audit row), AdvanceRun (a compare-and-swap on a schedule
// version) and the lease lifecycle (Claim, Start, Complete or Fail). Every
// statement and COMMIT gets a fault with probability Config.FaultRate, shared
// by the kinds that apply to it: before_send, after_exec (inside a
// transaction) or applied_reply_lost (outside one), server_error (the
// engine's deadlock or busy error), commit_not_applied,
// commit_applied_reply_lost, and a few hangs that only the command timeout
// ends. During an outage every connection is refused.
//
// Against a server (Config.DSN with PostgreSQL or MySQL), the run creates a
// schema (PostgreSQL) or database (MySQL) of its own and drops it afterwards,
// and puts a [proxy.Proxy] between the driver and the server: outside the
// outages it resets connections and cuts them after a COMMIT has reached the
// server; as an outage starts it resets every established connection, and
// new ones are refused until it ends.
//
// With Config.Naive the store replays blindly (internal/naivestore, what a
// retry-everything policy does); the same seed gives the same fault plan,
// so the naive run's damage can be set beside the safe run's zero.
//
// The workers' series have a small MaxRuns and are renewed as they
// complete, so the ended_early and double_counted invariants are checked
// (the report's series_completed says how often). Per outage window, the
// report counts refusals between its edges and the operations begun inside
// it that were told OK (ok_inside), which counts operations, not samples,
// so it does not depend on how fast the machine runs.
//
// The report counts, per shape, operations, faults by kind, retries,
// verifies, and ambiguous errors surfaced; the invariants ([Invariants]);
// the outage's calls, attempts and amplification (attempts per call) and the
// time to the first success after it; and latency percentiles. Durations
// are read on Config.Now, so a test can drive the outage on a clock of its
// own.
package chaos
