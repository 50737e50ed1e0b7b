package taskstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/faults"
)

// TestTransitionIDScoped: a transition id names one transition of one task.
// Reused on another task it is never taken for that task's transition, and
// it never gets a second audit row.
func TestTransitionIDScoped(t *testing.T) {
	for _, d := range dialects {
		t.Run(d.String(), func(t *testing.T) {
			ctx := context.Background()
			s, _ := newStore(t, d, nil, Options{})
			c, err := s.Persist(ctx, Task{})
			if err != nil {
				t.Fatal(err)
			}
			other, err := s.Persist(ctx, Task{})
			if err != nil {
				t.Fatal(err)
			}
			id, err := s.SetStatus(ctx, Transition{TaskID: c.ID, From: Queued, To: Running})
			if err != nil {
				t.Fatal(err)
			}
			for _, tc := range []struct {
				name string
				tr   Transition
				want error
			}{
				{"replay of the same transition", Transition{ID: id, TaskID: c.ID, From: Queued, To: Running}, nil},
				{"other task, guard fails", Transition{ID: id, TaskID: other.ID, From: Running, To: Succeeded}, ErrStatusConflict},
				{"other task, guard passes", Transition{ID: id, TaskID: other.ID, From: Queued, To: Running}, ErrTransitionIDTaken},
				{"same task, other target", Transition{ID: id, TaskID: c.ID, From: Running, To: Succeeded}, ErrTransitionIDTaken},
				{"reserved start suffix", Transition{ID: "x:start", TaskID: other.ID, From: Queued, To: Failed}, ErrInvalidTransition},
				{"reserved complete suffix", Transition{ID: "x:complete", TaskID: other.ID, From: Queued, To: Failed}, ErrInvalidTransition},
				{"reserved fail suffix", Transition{ID: "x:fail", TaskID: other.ID, From: Queued, To: Failed}, ErrInvalidTransition},
				{"reserved expire prefix", Transition{ID: ExpirePrefix + "x", TaskID: other.ID, From: Queued, To: Failed}, ErrInvalidTransition},
			} {
				_, err := s.SetStatus(ctx, tc.tr)
				if (tc.want == nil && err != nil) || (tc.want != nil && !errors.Is(err, tc.want)) {
					t.Errorf("%s: got %v, want %v", tc.name, err, tc.want)
				}
			}
			if got, err := s.Get(ctx, other.ID); err != nil || got.Status != Queued {
				t.Errorf("other task: got %s (%v), want queued: a failed transition moved it", got.Status, err)
			}
			if got, err := s.Get(ctx, c.ID); err != nil || got.Status != Running {
				t.Errorf("first task: got %s (%v), want running", got.Status, err)
			}
			var n int
			if err := s.db.QueryRowContext(ctx, s.dialect.bind(`SELECT COUNT(*) FROM status_audit WHERE transition_id = ?`), id).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n != 1 {
				t.Errorf("audit rows under %s: got %d, want 1", id, n)
			}
		})
	}
}

// TestSetStatusMoves: SetStatus refuses unknown statuses and the moves only
// Claim and Start make, and a task it takes out of Leased or Running keeps
// no lease.
func TestSetStatusMoves(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t, SQLite, nil, Options{})
	for _, tc := range []struct {
		from, to Status
		want     error
	}{
		{Queued, "bogus", ErrInvalidTransition},
		{"bogus", Queued, ErrInvalidTransition},
		{Queued, Leased, ErrInvalidTransition},
		{Leased, Running, ErrInvalidTransition},
		{Succeeded, Running, ErrInvalidTransition},
		{Queued, Running, nil},
		{Queued, Failed, nil},
	} {
		task, err := s.Persist(ctx, Task{})
		if err != nil {
			t.Fatal(err)
		}
		_, err = s.SetStatus(ctx, Transition{TaskID: task.ID, From: tc.from, To: tc.to})
		if (tc.want == nil && err != nil) || (tc.want != nil && !errors.Is(err, tc.want)) {
			t.Errorf("%s → %s: got %v, want %v", tc.from, tc.to, err, tc.want)
		}
		got, err := s.Get(ctx, task.ID)
		if err != nil {
			t.Fatal(err)
		}
		if want := map[bool]Status{true: tc.to, false: Queued}[tc.want == nil]; got.Status != want {
			t.Errorf("%s → %s: task is %s, want %s", tc.from, tc.to, got.Status, want)
		}
	}
	// Out of Leased and Running: the lease goes with it.
	for _, tc := range []struct {
		name  string
		start bool
		from  Status
		to    Status
	}{
		{"leased → failed", false, Leased, Failed},
		{"running → queued", true, Running, Queued},
		{"running → succeeded", true, Running, Succeeded},
	} {
		reset(t, s)
		if _, err := s.Persist(ctx, Task{}); err != nil {
			t.Fatal(err)
		}
		l, err := s.Claim(ctx, "w")
		if err != nil || l == nil {
			t.Fatalf("claim: %v %v", l, err)
		}
		if tc.start {
			if err := s.Start(ctx, l); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.SetStatus(ctx, Transition{TaskID: l.Task.ID, From: tc.from, To: tc.to}); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		got, err := s.Get(ctx, l.Task.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != tc.to || got.LeaseOwner != "" || !got.LeaseExpiresAt.IsZero() {
			t.Errorf("%s: got %s owner %q expires %v, want %s with no lease", tc.name, got.Status, got.LeaseOwner, got.LeaseExpiresAt, tc.to)
		}
		if tc.to == Queued {
			// The old holder cannot finish it.
			if err := s.Complete(ctx, l); !errors.Is(err, ErrLeaseLost) {
				t.Errorf("%s: old lease's Complete: got %v, want ErrLeaseLost", tc.name, err)
			}
		}
	}
}

// TestTransitionIDTakenUnsettledIsAmbiguous: a transition replayed under
// its id after the task came back to its From status (its earlier call
// landed, another transition moved the task back) meets its own audit row
// and asks whose row that is. When that read fails, the transition may be
// the caller's own and has then happened: the error must match
// sqlretry.ErrAmbiguous, not be a plain duplicate-key error that says it
// was not applied.
func TestTransitionIDTakenUnsettledIsAmbiguous(t *testing.T) {
	for _, d := range dialects {
		t.Run(d.String(), func(t *testing.T) {
			ctx := context.Background()
			plan := faults.MustPlan(faults.Config{Seed: 1})
			s, _ := newStore(t, d, plan, Options{})
			task, err := s.Persist(ctx, Task{DueAt: time.Now().Add(time.Hour)})
			if err != nil {
				t.Fatal(err)
			}
			run := Transition{ID: "run-1", TaskID: task.ID, From: Queued, To: Running}
			if _, err := s.SetStatus(ctx, run); err != nil {
				t.Fatal(err)
			}
			if _, err := s.SetStatus(ctx, Transition{TaskID: task.ID, From: Running, To: Queued}); err != nil {
				t.Fatal(err)
			}
			// Every read of the audit table fails from here on.
			if err := plan.Add(faults.Rule{Kind: faults.Outage, Phase: sqlretry.NotSent, Op: faults.OpQuery, Match: "FROM status_audit", Count: faults.Unlimited}); err != nil {
				t.Fatal(err)
			}
			_, err = s.SetStatus(ctx, run)
			plan.Disable()
			if !errors.Is(err, sqlretry.ErrAmbiguous) {
				t.Errorf("replayed transition with its audit row unreadable: got %v (%v), want an error matching ErrAmbiguous", err, OutcomeOf(err))
			}
		})
	}
}

// TestSelfTransition: a move the state machine allows from a status to
// itself (queued → queued, succeeded → succeeded, failed → failed) applies
// on every engine, with one audit row and its replay settled as its own; a
// self-transition whose guard fails is a conflict everywhere. (MariaDB's
// driver reports rows changed, not rows matched, so the guarded UPDATE that
// changes nothing once read as a failed guard: "want queued, got queued".)
func TestSelfTransition(t *testing.T) {
	for _, d := range dialects {
		t.Run(d.String(), func(t *testing.T) {
			ctx := context.Background()
			plan := faults.MustPlan(faults.Config{Seed: 1})
			s, _ := newStore(t, d, plan, Options{})
			for _, st := range []Status{Queued, Succeeded, Failed} {
				task, err := s.Persist(ctx, Task{DueAt: time.Now().Add(time.Hour)})
				if err != nil {
					t.Fatal(err)
				}
				if st != Queued {
					if _, err := s.SetStatus(ctx, Transition{TaskID: task.ID, From: Queued, To: st}); err != nil {
						t.Fatal(err)
					}
				}
				tr := Transition{ID: "self-" + string(st), TaskID: task.ID, From: st, To: st}
				for i, what := range []string{"self-transition", "its replay"} {
					if _, err := s.SetStatus(ctx, tr); err != nil {
						t.Errorf("%s → %s, %s: got %v, want nil", st, st, what, err)
					}
					if n := auditRows(t, s, tr.ID); n != 1 {
						t.Errorf("%s → %s after call %d: got %d audit rows, want 1", st, st, i+1, n)
					}
				}
				if got, err := s.Get(ctx, task.ID); err != nil || got.Status != st {
					t.Errorf("%s → %s: task is %s (%v)", st, st, got.Status, err)
				}
			}
			task, err := s.Persist(ctx, Task{DueAt: time.Now().Add(time.Hour)})
			if err != nil {
				t.Fatal(err)
			}
			// Its COMMIT lost or its reply lost, it is settled as any
			// transition is: applied once.
			for _, k := range []faults.Kind{faults.CommitNotApplied, faults.CommitAppliedReplyLost} {
				if err := plan.Add(faults.Rule{Kind: k, Op: faults.OpCommit}); err != nil {
					t.Fatal(err)
				}
				tr := Transition{ID: "self-" + string(k), TaskID: task.ID, From: Queued, To: Queued}
				if _, err := s.SetStatus(ctx, tr); err != nil {
					t.Errorf("queued → queued, %s: got %v, want nil", k, err)
				}
				if n := plan.Counts().Faults[k]; n != 1 {
					t.Errorf("%s fired %d times, want 1", k, n)
				}
				if n := auditRows(t, s, tr.ID); n != 1 {
					t.Errorf("queued → queued, %s: got %d audit rows, want 1", k, n)
				}
			}
			if _, err := s.SetStatus(ctx, Transition{TaskID: task.ID, From: Failed, To: Failed}); !errors.Is(err, ErrStatusConflict) {
				t.Errorf("failed → failed on a queued task: got %v, want ErrStatusConflict", err)
			}
			var se *StatusError
			if _, err := s.SetStatus(ctx, Transition{TaskID: "no-such-task", From: Queued, To: Queued}); !errors.As(err, &se) || !errors.Is(err, ErrNotFound) {
				t.Errorf("queued → queued on a missing task: got %v, want a *StatusError matching ErrNotFound", err)
			}
		})
	}
}
