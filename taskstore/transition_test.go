package taskstore

import (
	"context"
	"errors"
	"testing"
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
