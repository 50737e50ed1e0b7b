package taskstore

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestEnsureOccurrenceIdempotent: EnsureOccurrence returns the occurrence as
// stored, whoever stored it, refuses a zero scheduled time, and never takes
// another task's id for its own.
func TestEnsureOccurrenceIdempotent(t *testing.T) {
	at := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, d := range dialects {
		t.Run(d.String(), func(t *testing.T) {
			ctx := context.Background()
			s, _ := newStore(t, d, nil, Options{})
			series, err := s.Persist(ctx, Task{MaxRuns: 10})
			if err != nil {
				t.Fatal(err)
			}
			count := func() int {
				t.Helper()
				var n int
				if err := s.db.QueryRowContext(ctx, s.dialect.bind(`SELECT COUNT(*) FROM tasks WHERE parent_id = ?`), series.ID).Scan(&n); err != nil {
					t.Fatal(err)
				}
				return n
			}

			// A zero scheduled time is refused, every time.
			for i := 0; i < 2; i++ {
				if _, _, err := s.EnsureOccurrence(ctx, series.ID, Task{}); err == nil {
					t.Errorf("zero ScheduledAt, call %d: got nil error, want one", i+1)
				}
			}
			if n := count(); n != 0 {
				t.Errorf("zero ScheduledAt: got %d occurrences stored, want 0", n)
			}

			// Twice: created, then the same row.
			o1, c1, err := s.EnsureOccurrence(ctx, series.ID, Task{ScheduledAt: at})
			if err != nil || !c1 {
				t.Fatalf("first: got created=%v err=%v, want created", c1, err)
			}
			o2, c2, err := s.EnsureOccurrence(ctx, series.ID, Task{ScheduledAt: at})
			if err != nil || c2 || o2.ID != o1.ID {
				t.Errorf("replay: got id %s created=%v err=%v, want id %s, not created", o2.ID, c2, err, o1.ID)
			}

			// Persisted first under its own id: that id comes back.
			at2 := at.Add(time.Hour)
			p, err := s.Persist(ctx, Task{ID: "own-id", ParentID: series.ID, ScheduledAt: at2})
			if err != nil {
				t.Fatal(err)
			}
			o3, c3, err := s.EnsureOccurrence(ctx, series.ID, Task{ScheduledAt: at2})
			if err != nil || c3 || o3.ID != p.ID {
				t.Errorf("after Persist: got id %s created=%v err=%v, want id %s, not created", o3.ID, c3, err, p.ID)
			}
			if _, err := s.Get(ctx, o3.ID); err != nil {
				t.Errorf("Get(returned id %s): %v", o3.ID, err)
			}

			// The derived id held by a plain task: a collision, not a no-op.
			at3 := at.Add(2 * time.Hour)
			squatter, err := s.Persist(ctx, Task{ID: series.ID + "@" + at3.Format("20060102T150405.000000"), Payload: []byte("not an occurrence")})
			if err != nil {
				t.Fatal(err)
			}
			_, c4, err := s.EnsureOccurrence(ctx, series.ID, Task{ScheduledAt: at3})
			if !errors.Is(err, ErrIDTaken) || c4 {
				t.Errorf("id collision: got created=%v err=%v, want ErrIDTaken", c4, err)
			}
			if got, err := s.Get(ctx, squatter.ID); err != nil || got.ParentID != "" || string(got.Payload) != "not an occurrence" {
				t.Errorf("the task holding the id changed: %+v %v", got, err)
			}
			// A parent id too long for the derived id: refused on every engine.
			long := "p1234567890123456789012345678901234567890123456789012345678"
			if _, _, err := s.EnsureOccurrence(ctx, long, Task{ScheduledAt: at}); err == nil {
				t.Errorf("parent id of %d bytes: got nil error, want the id refused", len(long))
			}
			if n := count(); n != 2 {
				t.Errorf("occurrences stored: got %d, want 2", n)
			}
		})
	}
}
