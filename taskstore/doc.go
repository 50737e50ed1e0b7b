// Package taskstore is a small SQL task storage (a job queue's tables) that
// shows, in working code, how to make each write shape safe to retry. It is
// the reference to copy for your own storage, and the workload the
// `sqlretry chaos` command runs.
//
//	db, _ := sql.Open("sqlite", taskstore.SQLiteDSN("tasks.db"))
//	p, _ := sqlretry.New(sqlretry.Config{Classifier: taskstore.Classifier(taskstore.SQLite)})
//	s, _ := taskstore.New(db, taskstore.SQLite, taskstore.Options{Policy: p})
//	_ = s.Migrate(ctx)
//	t, err := s.Persist(ctx, taskstore.Task{Key: "invoice-42", Payload: body})
//	ran, err := s.Work(ctx, "worker-1", handle, time.Second) // claim, start, run, complete or fail
//
// # Schema
//
// Migrations for SQLite (the default), PostgreSQL and MariaDB are embedded
// ([Schema]): a tasks table (client-chosen primary key, optional unique task
// key, a unique occurrence index on (parent_id, scheduled_us) for recurring
// series, status, job attempts, last execution time, schedule version, run
// count, max runs, lease owner, token and expiry, payload), a status_audit
// table with one row per transition, and task_runs with one row per counted
// run of a series. Times are Unix microseconds in integer columns so the
// three engines compare them alike, and ids, keys and statuses are compared
// as bytes on every engine (on MariaDB the tables take utf8mb4_nopad_bin,
// not the database's default collation, which ignores letter case and
// trailing spaces; [Store.Migrate] upgrades tables an earlier version
// created). Every statement is a constant with placeholders; values are
// always parameters.
//
// # The rule
//
// A failure is classified before anything is decided (package sqlretry).
// A failure that proves nothing was applied (the command was never sent, or
// the server rolled it back: a deadlock victim) is retried, within the
// Policy's MaxRetries and budget. A failure with an unknown outcome (a
// timeout or a lost connection after the command left, a COMMIT whose reply
// never came) is never blindly replayed: the write is made idempotent, or
// the store first reads whether it happened. Each operation carries its own consent ([sqlretry.Idempotent],
// [sqlretry.Write] with a verify); there is no global "retry writes" flag.
// A caller's cancellation is final: it ends the call, never starts a retry.
//
// # The write shapes and their policies
//
// Persist (INSERT of a new task): retried after a not-sent or not-applied
// failure. After an ambiguous one it reads the row back by primary key and
// compares it with what it tried to store: ours → done, absent → retry. A
// duplicate-key error is "already inserted" only on a retry after an attempt
// of the same call whose outcome was unknown, and only when the row under
// our primary key is ours; a task-key collision ([ErrTaskKeyTaken]), the
// occurrence index firing ([ErrOccurrenceTaken]) or a row already under our
// id before this call could have inserted one ([ErrIDTaken]: someone else's,
// or this task re-submitted, which may have run since) is a different
// event, returned as a typed [*ConflictError].
//
// SetStatus, and the job transitions Claim, Start, Complete and Fail: the
// guarded UPDATE and its audit row commit in one transaction (RunTx), and
// the audit row carries the transition's id, unique in the table and matched
// with its task and target status. After an ambiguous COMMIT the
// store looks for that row: found → done, without a second audit row or a
// re-stamped execution time; absent → the transaction runs again. The guard
// (From status, lease token) makes a replay that meets the desired state
// already there stop instead of applying twice, and before reporting the
// guard's failure the store checks for its own audit row once more. A move
// from a status to itself, which sets nothing the guard does not already
// require, reads its guard under a row lock instead of counting the rows
// its UPDATE changed (MariaDB's driver counts 0 for a row already in shape),
// so it behaves the same on every engine.
//
// AdvanceRun (the recurring-series compare-and-swap): the statement consumes
// its own token. It bumps ScheduleVersion together with CurrentRunCount,
// guarded on the expected version and on MaxRuns, so the identical statement
// replayed after a COMMIT that landed fails its guard. The run is recorded
// in task_runs with the advance's id, so a verify tells "my advance landed"
// from "not applied" from "another worker won" ([ErrVersionConflict]). One
// run is never counted twice, and a series never ends early.
//
// Claim (lease the next due task, FOR UPDATE SKIP LOCKED where the engine
// has it; BEGIN IMMEDIATE on SQLite): an ambiguous claim is settled by
// reading what this worker holds under the claim's token, so a claimed task
// is neither abandoned nor taken twice. A claim that cannot be settled
// leaves at worst a lease nobody uses; it expires, and Recover (the pass
// that heals anything a failed write left stale) returns it to the queue.
// Recover itself is idempotent by construction and is replayed freely, as
// is EnsureOccurrence, an upsert that the occurrence index makes a no-op the
// second time.
//
// Start, Complete and Fail keep storage retries apart from job retries
// (a job must never lose an attempt to plumbing): a job attempt is counted
// by Start, when the handler starts, and only there; a storage retry of any
// write never reaches the counter.
// A Start whose outcome stays unknown is settled by [Store.SettleStart]
// (Work does it), which reads on through an outage for up to a lease: if
// the attempt was counted, the handler runs.
// Fail sends the task back to the queue while it has attempts left.
//
// A verdict on a failed attempt ("applied", "not applied": every verify,
// Started, SettleStart) is given only once that attempt is dead on the
// server. A client whose connection dropped may have left its COMMIT on the
// way, and a read on another connection would otherwise say "not there"
// before it lands. Each transaction here commits only after its last
// statement was answered, and holds a lock until it ends (the task's row;
// the transition id's unique-index entry), so a verdict first takes that
// lock in a transaction it rolls back, then reads.
//
// Before it reports a failure whose last attempt ended with an unknown
// outcome, the store reads once more whether its write is there, so a write
// that landed is never reported as failed. When even that read cannot reach
// the database, the caller gets an error matching [sqlretry.ErrAmbiguous]:
// the write may or may not have happened, and the error says so.
//
// # Checking it
//
// A [Ledger] records what every write told its caller (ok, ambiguous,
// cancelled, failed) and the handler starts; [Store.Check] compares it with
// the database and counts violations: tasks lost, duplicated, runs counted
// twice, audit rows that do not match transitions, job attempts burned by
// storage retries. The unsafe store (blind replay, and a compare-and-swap
// that does not consume its token), which the chaos command
// sets beside this one to show that damage, is not part of this package's
// API: only this repository's internal/naivestore can build it.
//
// A Store is safe for concurrent use by multiple goroutines.
package taskstore
