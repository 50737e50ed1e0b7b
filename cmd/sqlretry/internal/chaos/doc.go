// Package chaos is the harness behind `sqlretry chaos`. Its default
// scenario (tasks, [Run]) drives the reference task store (package
// taskstore) with concurrent workers while the fault driver (package
// faults) injects every kind of fault and a sustained outage, then checks
// with injection off that nothing was lost or applied twice. The
// contention scenario ([RunContention], contention.go) runs hot rows and
// opposite-order two-row transactions under sqlretry's policy, the old
// defaults and a blind loop, and sets their success rates, latencies,
// attempts per call and budget refusals side by side; its plot
// ([WriteContentionPlot]) draws each policy's success rate, the damage it
// did over time (calls applied twice, lost or misreported) and its budget.
//
//	r, err := chaos.Run(ctx, chaos.Config{})   // 20 s on a temporary SQLite database
//	if err != nil { ... }                      // an *InputError (bad setting, unusable DSN), or ErrInterrupted
//	r.WriteText(os.Stdout)                     // or encode r as JSON
//	_ = chaos.WritePlot("chaos.png", r, nil)   // throughput, attempts/s, budget; the outage shaded
//	if !r.OK { ... }                           // an invariant was violated, or r.Interrupted
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
// The proxy reads the wire to find COMMITs; it cannot read inside TLS. A
// run whose connections through it are encrypted is refused before its
// workload starts (an *InputError naming --dsn: add sslmode=disable or
// tls=false, or set NoProxy), rather than report wire faults that never
// fired. A DSN that looks like another engine's than Config.Engine
// ([DSNEngine]) is refused too, saying which it looks like, and so is a DSN
// of none of the forms [DSNForms] lists: a typo is never taken for the
// name of an SQLite file to create.
//
// With Config.Naive the store replays blindly (internal/naivestore, what a
// retry-everything policy does); the same seed gives the same fault plan,
// so the naive run's damage can be set beside the safe run's zero. The
// command's --compare naive exits with sqlretry's run's code alone: the
// naive run's violations are what the comparison is there to show. With
// Config.Damage the report counts the violations over time
// (RunReport.Damage: lost, applied twice, misreported among the operations
// finished by each point), and the plot draws them beside sqlretry's.
//
// Commit settlement (Config.Verifier, the command's --verifier): the policy
// under test gets the engine's commit verifier (auto: PostgreSQL
// pg_xact_status, then the marker table after a change of server history;
// MySQL/MariaDB and SQLite the marker table, created by the verifier in
// the run's own schema, database or file). It settles the ambiguous COMMIT
// of a transaction that runs through RunTx without a Verify of its own.
// The task store has no such transaction (each write has its own Verify,
// claims and recovery are idempotent): its report says so. The contention
// scenario's transactions are such work: each attempt records its own row,
// and the report gives, per mode, the ambiguous COMMITs, settled applied,
// settled not applied, still ambiguous, and the verdicts the database
// contradicts ([Settlement]; wrong must be 0).
//
// The workers' series have a small MaxRuns and are renewed as they
// complete, so the ended_early and double_counted invariants are checked
// (the report says how many recurring tasks ran all their runs). Per
// outage window, the report counts the calls the outage failed between
// its edges and the operations begun inside it that were told OK
// (ok_inside), which counts operations, not samples, so it does not depend
// on how fast the machine runs.
//
// The report counts, per shape, operations, failures by cause (a retry the
// budget denied, retries used up, a conflict the workload expects, ...),
// faults by kind, retries, verifies, and ambiguous errors surfaced; the
// invariants ([Invariants]); the outage's calls, attempts and amplification
// (attempts per call) and the time to the first success after it; and
// latency percentiles. Durations are read on Config.Now, so a test can
// drive the outage on a clock of its own.
//
// A run whose context ends before its duration (Ctrl-C) stops its workers
// between operations and still checks the invariants over what ran: the
// report is Interrupted and not OK, gives the time actually run
// (DurationMS; PlannedMS the configured length), cuts short the outage it
// was in and lists the ones it never reached apart (OutageReport.NotReached).
// The command exits 130 then, unless a check failed (1). A context that
// ends before the workload starts returns [ErrInterrupted].
//
// Progress ([Progress]) is one line redrawn in place on a terminal (a
// carriage return, the frame, "erase to the end of the line", in one
// write), one plain line a second otherwise.
package chaos
