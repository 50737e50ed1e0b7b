package taskstore

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/sqlretry/sqlretry/faults"
)

// TestNaiveShowsDamage runs each seed-002 trap once against the safe store
// and the naive one: the naive store breaks exactly the invariant the seed
// predicts, and Check sees it; the safe store breaks none. It is what makes
// the fault matrix's clean reports mean something.
func TestNaiveShowsDamage(t *testing.T) {
	replyLost := faults.Rule{Kind: faults.CommitAppliedReplyLost, Op: faults.OpCommit}
	tests := []struct {
		name string
		rule faults.Rule
		run  func(t *testing.T, s *Store, plan *faults.Plan) error
		harm func(r Report) int // the invariant the naive store breaks
	}{
		{
			name: "persist/task_key_read_as_already_inserted",
			// database/sql retries a bad connection twice itself: three
			// refusals reach the Policy as one failed attempt.
			rule: faults.Rule{Kind: faults.BeforeSend, Op: faults.OpExec, Match: "INSERT INTO tasks", Count: 3},
			run: func(t *testing.T, s *Store, plan *faults.Plan) error {
				plan.Disable()
				if _, err := s.Persist(context.Background(), Task{Key: "shared"}); err != nil {
					t.Fatal(err)
				}
				plan.Enable()
				_, err := s.Persist(context.Background(), Task{Key: "shared", Payload: []byte("second")})
				return err
			},
			harm: func(r Report) int { return r.Lost },
		},
		{
			name: "advance_run/counted_twice",
			rule: replyLost,
			run: func(t *testing.T, s *Store, plan *faults.Plan) error {
				plan.Disable()
				series, err := s.Persist(context.Background(), Task{MaxRuns: 3})
				if err != nil {
					t.Fatal(err)
				}
				plan.Enable()
				_, err = s.AdvanceRun(context.Background(), series.ID, 0)
				return err
			},
			harm: func(r Report) int { return r.DoubleCounted + r.EndedEarly },
		},
		{
			name: "set_status/second_audit_row",
			rule: replyLost,
			run: func(t *testing.T, s *Store, plan *faults.Plan) error {
				plan.Disable()
				task, err := s.Persist(context.Background(), Task{})
				if err != nil {
					t.Fatal(err)
				}
				plan.Enable()
				_, err = s.SetStatus(context.Background(), Transition{TaskID: task.ID, From: Queued, To: Running})
				return err
			},
			// The unique transition id turns the replay's second audit row
			// into a duplicate key: the write that landed is told failed.
			harm: func(r Report) int { return r.AuditMismatch + r.Misreported },
		},
		{
			name: "start/job_attempt_burned",
			rule: replyLost,
			run: func(t *testing.T, s *Store, plan *faults.Plan) error {
				l := setupLease(t, s, plan)
				err := s.Start(context.Background(), l)
				if err == nil {
					s.ledger.HandlerStarted(l.Task.ID)
				}
				return err
			},
			harm: func(r Report) int { return r.JobAttemptsBurned },
		},
		{
			name: "complete/completed_twice",
			rule: replyLost,
			run: func(t *testing.T, s *Store, plan *faults.Plan) error {
				l := setupLease(t, s, plan)
				plan.Disable()
				if err := s.Start(context.Background(), l); err != nil {
					t.Fatal(err)
				}
				s.ledger.HandlerStarted(l.Task.ID)
				plan.Enable()
				return s.Complete(context.Background(), l)
			},
			harm: func(r Report) int { return r.Duplicated + r.Misreported },
		},
	}
	for _, d := range dialects {
		t.Run(d.String(), func(t *testing.T) {
			name, dsn := driverFor(t, d)
			setup, err := sql.Open(name, dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer setup.Close()
			ms, _ := New(setup, d, Options{})
			if err := ms.Migrate(context.Background()); err != nil {
				t.Fatal(err)
			}
			for _, tt := range tests {
				for _, naive := range []bool{false, true} {
					mode := map[bool]string{false: "safe", true: "naive"}[naive]
					t.Run(tt.name+"/"+mode, func(t *testing.T) {
						reset(t, ms)
						plan := faults.MustPlan(faults.Config{Rules: []faults.Rule{tt.rule}})
						db, err := faults.Open(name, dsn, plan)
						if err != nil {
							t.Fatal(err)
						}
						defer db.Close()
						l := NewLedger()
						s, err := New(db, d, Options{Policy: fastPolicy(t, d, 5*time.Second), Ledger: l, Now: newClock().Now})
						if err != nil {
							t.Fatal(err)
						}
						s.naive = naive
						err = tt.run(t, s, plan)
						if hits := plan.Counts().Total(); hits == 0 {
							t.Fatalf("the fault was never injected")
						}
						plan.Disable()
						r, cerr := s.Check(context.Background(), l)
						if cerr != nil {
							t.Fatal(cerr)
						}
						harm := tt.harm(r)
						switch {
						case naive && harm == 0:
							t.Errorf("naive store: got no damage (%v, call error %v), want the seed's failure", r, err)
						case !naive && !r.Clean():
							t.Errorf("safe store: got %v %v (call error %v), want clean", r, r.Problems, err)
						}
						if !naive && err != nil && !errors.Is(err, ErrTaskKeyTaken) {
							t.Errorf("safe store: got error %v, want nil or ErrTaskKeyTaken", err)
						}
					})
				}
			}
		})
	}
}

// setupLease persists and claims one task with injection off.
func setupLease(t *testing.T, s *Store, plan *faults.Plan) *Lease {
	t.Helper()
	plan.Disable()
	defer plan.Enable()
	if _, err := s.Persist(context.Background(), Task{}); err != nil {
		t.Fatal(err)
	}
	l, err := s.Claim(context.Background(), "w")
	if err != nil || l == nil {
		t.Fatalf("claim: %v %v", l, err)
	}
	return l
}
