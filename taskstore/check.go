package taskstore

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/sqlretry/sqlretry"
)

// Report is the result of [Store.Check]: the invariants the fault matrix and
// the chaos command assert, each a count of violations (0 when it holds),
// and what the ledger recorded.
type Report struct {
	// Lost: writes told OK whose effect is not in the database (a persisted
	// task missing or not the caller's, an advance with no run recorded). A
	// transition told OK with no audit row is an AuditMismatch, not also
	// Lost: each violation is counted once.
	Lost int `json:"lost"`
	// Duplicated: extra completions: a task that reached Succeeded more than
	// once.
	Duplicated int `json:"duplicated"`
	// DoubleCounted: runs counted more than once for one advance, plus runs
	// beyond a series' MaxRuns.
	DoubleCounted int `json:"double_counted"`
	// EndedEarly: series at MaxRuns with fewer distinct advances than
	// MaxRuns.
	EndedEarly int `json:"ended_early"`
	// AuditMismatch: audit rows that do not match transitions: a transition
	// with more than one row, or an OK transition with none.
	AuditMismatch int `json:"audit_mismatch"`
	// JobAttemptsBurned: job attempts counted with no handler start (and no
	// Start call its caller cancelled, whose audit row shows it counted
	// one, to explain them). An ambiguous Start explains nothing: its caller
	// must settle it and run the handler.
	JobAttemptsBurned int `json:"job_attempts_burned"`
	// UncountedStarts: handler starts beyond the attempts counted.
	UncountedStarts int `json:"uncounted_starts"`
	// Misreported: writes told Failed (a definite error) that were applied.
	Misreported int `json:"misreported"`

	Ops           int            `json:"ops"`            // writes recorded in the ledger
	Told          map[string]int `json:"told"`           // per outcome: ok, ambiguous, canceled, failed
	HandlerStarts int            `json:"handler_starts"` // recorded handler starts
	Tasks         int            `json:"tasks"`          // rows in tasks
	Pending       int            `json:"pending"`        // tasks not Succeeded or Failed
	AuditRows     int            `json:"audit_rows"`
	Runs          int            `json:"runs"` // rows in task_runs
	// Problems describes the first violations found, for a human.
	Problems []string `json:"problems,omitempty"`
}

// Violations returns the sum of the violation counts.
func (r Report) Violations() int {
	return r.Lost + r.Duplicated + r.DoubleCounted + r.EndedEarly + r.AuditMismatch + r.JobAttemptsBurned + r.UncountedStarts + r.Misreported
}

// Clean reports whether every invariant holds.
func (r Report) Clean() bool { return r.Violations() == 0 }

func (r Report) String() string {
	return fmt.Sprintf("lost=%d duplicated=%d double_counted=%d ended_early=%d audit_mismatch=%d job_attempts_burned=%d uncounted_starts=%d misreported=%d (ops=%d told=%v starts=%d tasks=%d pending=%d audit=%d runs=%d)",
		r.Lost, r.Duplicated, r.DoubleCounted, r.EndedEarly, r.AuditMismatch, r.JobAttemptsBurned, r.UncountedStarts, r.Misreported,
		r.Ops, r.Told, r.HandlerStarts, r.Tasks, r.Pending, r.AuditRows, r.Runs)
}

const maxProblems = 20

func (r *Report) problem(format string, a ...any) {
	if len(r.Problems) < maxProblems {
		r.Problems = append(r.Problems, fmt.Sprintf(format, a...))
	}
}

// Check compares the database with what the ledger says callers were told,
// and counts every violation of the store's invariants. Run it after the
// workload, with fault injection off: it reads whole tables, under the Read
// policy. l may be nil, to check the database-only invariants.
func (s *Store) Check(ctx context.Context, l *Ledger) (Report, error) {
	var snap snapshot
	err := s.pol.Read.Do(ctx, sqlretry.Idempotent("taskstore.check"), func(ctx context.Context) error {
		var err error
		snap, err = s.snapshot(ctx)
		return err
	})
	if err != nil {
		return Report{}, err
	}
	if l == nil {
		l = NewLedger()
	}
	return check(snap, l.Entries(), l.Starts()), nil
}

type taskRow struct {
	task     Task
	fp       string
	maxRuns  int
	runCount int
}

type snapshot struct {
	tasks     map[string]taskRow
	audit     map[string]int            // transition id → rows
	auditTask map[string]string         // transition id → its audit rows' task
	succeeded map[string]int            // task id → rows into succeeded
	runs      map[string]int            // advance id → rows
	advances  map[string]map[string]int // task id → advance id → rows
	auditRows int
	runRows   int
}

func (s *Store) snapshot(ctx context.Context) (snapshot, error) {
	sn := snapshot{tasks: map[string]taskRow{}, audit: map[string]int{}, auditTask: map[string]string{}, succeeded: map[string]int{}, runs: map[string]int{}, advances: map[string]map[string]int{}}
	err := eachRow(ctx, s.db, s.dialect.bind(`SELECT `+taskColumns+` FROM tasks`), nil, func(rows *sql.Rows) error {
		t, err := scanTask(rows)
		if err != nil {
			return err
		}
		sn.tasks[t.ID] = taskRow{task: t, fp: fingerprint(t), maxRuns: t.MaxRuns, runCount: t.CurrentRunCount}
		return nil
	})
	if err != nil {
		return sn, err
	}
	err = eachRow(ctx, s.db, s.dialect.bind(`SELECT transition_id, task_id, to_status FROM status_audit`), nil, func(rows *sql.Rows) error {
		var tid, task, to string
		if err := rows.Scan(&tid, &task, &to); err != nil {
			return err
		}
		sn.auditRows++
		sn.audit[tid]++
		sn.auditTask[tid] = task
		if Status(to) == Succeeded {
			sn.succeeded[task]++
		}
		return nil
	})
	if err != nil {
		return sn, err
	}
	err = eachRow(ctx, s.db, s.dialect.bind(`SELECT task_id, advance_id FROM task_runs`), nil, func(rows *sql.Rows) error {
		var task, adv string
		if err := rows.Scan(&task, &adv); err != nil {
			return err
		}
		sn.runRows++
		sn.runs[adv]++
		m := sn.advances[task]
		if m == nil {
			m = map[string]int{}
			sn.advances[task] = m
		}
		m[adv]++
		return nil
	})
	return sn, err
}

// check is the pure part of Check.
func check(sn snapshot, entries []Entry, starts map[string]int) Report {
	r := Report{Ops: len(entries), Told: map[string]int{}, Tasks: len(sn.tasks), AuditRows: sn.auditRows, Runs: sn.runRows}
	// Start calls the caller cancelled whose audit row shows they ran: the
	// caller gave up on the attempt the Start counted, so it is not the
	// store's fault. A cancelled Start with no audit row counted nothing
	// and excuses nothing (it would hide another attempt burned), and one
	// Start excuses one attempt however many entries name it. An ambiguous
	// Start is not excused: the store settles it (see [Store.Work],
	// [Store.SettleStart]).
	canceledStarts := map[string]map[string]bool{} // task id → start transition ids
	// Start calls told anything but OK, per task, to explain a count that
	// does not match.
	unsettled := map[string][]string{}
	persists := map[string][]Entry{} // task id → the Persist calls under it, in order
	var persistIDs []string
	for _, e := range entries {
		r.Told[e.Outcome.String()]++
		switch e.Kind {
		case OpPersist:
			if persists[e.ID] == nil {
				persistIDs = append(persistIDs, e.ID)
			}
			persists[e.ID] = append(persists[e.ID], e)
		case OpAdvance:
			r.checkAdvance(e, sn.runs[e.ID])
		default: // transitions: claim, start, complete, fail, set-status
			if e.TaskID == "" { // a claim told failed names no task; its audit row does
				e.TaskID = cmp.Or(sn.auditTask[e.ID], "(no task)")
			}
			r.checkTransition(e, sn.audit[e.ID])
			if e.Kind == OpStart && e.Outcome == ToldCanceled && sn.audit[e.ID] > 0 {
				if canceledStarts[e.TaskID] == nil {
					canceledStarts[e.TaskID] = map[string]bool{}
				}
				canceledStarts[e.TaskID][e.ID] = true
			}
			if e.Kind == OpStart && e.Outcome != ToldOK {
				unsettled[e.TaskID] = append(unsettled[e.TaskID], fmt.Sprintf("start %s told %s", e.ID, e.Outcome))
			}
		}
	}
	for _, id := range persistIDs {
		r.checkPersists(id, persists[id], sn.tasks)
	}
	// Recover's transitions are not in the ledger; their ids are unique by
	// construction, so more than one row is a duplicate.
	for id, n := range sn.audit {
		if strings.HasPrefix(id, ExpirePrefix) && n > 1 {
			r.AuditMismatch += n - 1
			r.problem("recover transition %s has %d audit rows", id, n)
		}
	}
	for id, row := range sn.tasks {
		t := row.task
		if t.Status != Succeeded && t.Status != Failed {
			r.Pending++
		}
		if n := sn.succeeded[id]; n > 1 {
			r.Duplicated += n - 1
			r.problem("task %s completed %d times", id, n)
		}
		st := starts[id]
		r.HandlerStarts += st
		r.checkAttempts(id, t.JobAttempts, st, len(canceledStarts[id]), unsettled[id])
		r.checkSeries(id, row, len(sn.advances[id]))
	}
	return r
}

// checkPersists checks the Persist calls made under task id against the
// row stored under it. At most one of them inserted it: the row is ours to
// a call whose content it holds, and then exactly one such call applied it.
// Every other call under the id met a collision, which is a failure, so:
// a call told OK whose row is missing or someone else's is lost; a second
// call told OK for the one row is lost too (it inserted nothing, as the
// collision a re-submission meets says); and the row stored while every
// call that could have stored it was told Failed is misreported.
func (r *Report) checkPersists(id string, calls []Entry, tasks map[string]taskRow) {
	row, there := tasks[id]
	var ok, maybe, failed []Entry // the calls whose content the row holds, by outcome
	for _, e := range calls {
		if !there || row.fp != e.Fingerprint {
			if e.Outcome == ToldOK {
				r.Lost++
				r.problem("persist %s told ok, but the row is %s", e.ID, map[bool]string{true: "someone else's", false: "missing"}[there])
			}
			continue
		}
		switch e.Outcome {
		case ToldOK:
			ok = append(ok, e)
		case ToldFailed:
			failed = append(failed, e)
		default:
			maybe = append(maybe, e)
		}
	}
	switch {
	case len(ok) > 1:
		r.Lost += len(ok) - 1
		r.problem("persist %s told ok %d times for one row: a call that inserted nothing was told it did", id, len(ok))
	case len(ok) == 0 && len(maybe) == 0 && len(failed) > 0:
		r.Misreported++
		r.problem("persist %s told %q, but the row is stored", id, failed[len(failed)-1].Err)
	}
}

// checkAdvance checks an AdvanceRun against the n runs recorded under its
// id.
func (r *Report) checkAdvance(e Entry, n int) {
	switch {
	case n > 1:
		r.DoubleCounted += n - 1
		r.problem("advance %s of %s counted %d runs", e.ID, e.TaskID, n)
	case n == 0 && e.Outcome == ToldOK:
		r.Lost++
		r.problem("advance %s of %s told ok, but no run is recorded", e.ID, e.TaskID)
	}
	if n > 0 && e.Outcome == ToldFailed {
		r.Misreported++
		r.problem("advance %s of %s told %q, but it was counted", e.ID, e.TaskID, e.Err)
	}
}

// checkTransition checks a transition against the n audit rows under its
// id.
func (r *Report) checkTransition(e Entry, n int) {
	switch {
	case n > 1:
		r.AuditMismatch += n - 1
		r.problem("%s %s on %s has %d audit rows", e.Kind, e.ID, e.TaskID, n)
	case n == 0 && e.Outcome == ToldOK:
		// Counted once, as an audit mismatch: the transition's
		// only record is its audit row.
		r.AuditMismatch++
		r.problem("%s %s on %s told ok, but no audit row exists", e.Kind, e.ID, e.TaskID)
	}
	if n > 0 && e.Outcome == ToldFailed {
		r.Misreported++
		r.problem("%s %s on %s told %q, but it was applied", e.Kind, e.ID, e.TaskID, e.Err)
	}
}

// checkAttempts compares task id's job attempts with its handler starts,
// less the Start calls its caller cancelled that counted one; unsettled
// explains a mismatch.
func (r *Report) checkAttempts(id string, attempts, starts, canceled int, unsettled []string) {
	if burned := attempts - starts - canceled; burned > 0 {
		r.JobAttemptsBurned += burned
		r.problem("task %s counts %d job attempts for %d handler starts%s", id, attempts, starts, explain(unsettled))
	}
	if starts > attempts {
		r.UncountedStarts += starts - attempts
		r.problem("task %s started its handler %d times but counts %d attempts%s", id, starts, attempts, explain(unsettled))
	}
}

// checkSeries checks a series' run count against its MaxRuns and its
// distinct advances.
func (r *Report) checkSeries(id string, row taskRow, advances int) {
	if row.maxRuns > 0 && row.runCount > row.maxRuns {
		r.DoubleCounted += row.runCount - row.maxRuns
		r.problem("series %s counts %d runs, max %d", id, row.runCount, row.maxRuns)
	}
	if row.maxRuns > 0 && row.runCount >= row.maxRuns && advances < row.maxRuns {
		r.EndedEarly++
		r.problem("series %s ended after %d distinct advances, max runs %d", id, advances, row.maxRuns)
	}
}

// explain lists the Start calls that were not told OK, for a problem line.
func explain(starts []string) string {
	if len(starts) == 0 {
		return ""
	}
	return " (" + strings.Join(starts, ", ") + ")"
}
