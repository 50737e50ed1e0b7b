package taskstore

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"testing"
	"time"
)

// idQueue is an Options.NewID that hands out the ids queued, then random
// ones.
type idQueue struct {
	mu  sync.Mutex
	ids []string
}

func (q *idQueue) push(ids ...string) {
	q.mu.Lock()
	q.ids = append(q.ids, ids...)
	q.mu.Unlock()
}

func (q *idQueue) next() string {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.ids) == 0 {
		return randomID()
	}
	id := q.ids[0]
	q.ids = q.ids[1:]
	return id
}

// idVariants are pairs of ids equal only to a comparison that ignores
// letter case or trailing spaces: as bytes they are different ids.
var idVariants = []struct{ name, first, second string }{
	{"case", "Move-1", "move-1"},
	{"trailing space", "m1", "m1 "},
}

// TestTransitionIDsCompareAsBytes: a transition id that differs from an
// earlier one only by letter case or a trailing space is another
// transition: it applies, on every engine. (MariaDB's default collation
// once took it for the earlier one: the audit insert met the unique index,
// the verify found the earlier row, and SetStatus returned nil with the task
// left queued.)
func TestTransitionIDsCompareAsBytes(t *testing.T) {
	for _, d := range dialects {
		for _, v := range idVariants {
			t.Run(d.String()+"/"+v.name, func(t *testing.T) {
				ctx := context.Background()
				s, _ := newStore(t, d, nil, Options{})
				task, err := s.Persist(ctx, Task{})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := s.SetStatus(ctx, Transition{ID: v.first, TaskID: task.ID, From: Queued, To: Running}); err != nil {
					t.Fatal(err)
				}
				if _, err := s.SetStatus(ctx, Transition{TaskID: task.ID, From: Running, To: Queued}); err != nil {
					t.Fatal(err)
				}
				_, err = s.SetStatus(ctx, Transition{ID: v.second, TaskID: task.ID, From: Queued, To: Running})
				got, gerr := s.Get(ctx, task.ID)
				if gerr != nil {
					t.Fatal(gerr)
				}
				if err != nil || got.Status != Running {
					t.Errorf("transition %q after %q: got %v with the task %s, want nil with the task running", v.second, v.first, err, got.Status)
				}
				for _, id := range []string{v.first, v.second} {
					if n := auditRows(t, s, id); n != 1 {
						t.Errorf("audit rows under %q: got %d, want 1", id, n)
					}
				}
			})
		}
	}
}

// auditRows counts the audit rows whose transition id is id, compared in
// Go: byte for byte, whatever the column's collation.
func auditRows(t *testing.T, s *Store, id string) int {
	t.Helper()
	n := 0
	err := eachRow(context.Background(), s.db, `SELECT transition_id FROM status_audit`, nil, func(rows *sql.Rows) error {
		var got string
		if err := rows.Scan(&got); err != nil {
			return err
		}
		if got == id {
			n++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestStoreKeysCompareAsBytes: every id and key the store looks up or
// guards on unique is compared as bytes on every engine: task ids, task
// keys, series parent ids, claim tokens and advance ids that differ only
// by letter case or a trailing space are different ones.
func TestStoreKeysCompareAsBytes(t *testing.T) {
	at := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, d := range dialects {
		for _, v := range idVariants {
			t.Run(d.String()+"/"+v.name, func(t *testing.T) {
				ctx := context.Background()
				ids := &idQueue{}
				s, _ := newStore(t, d, nil, Options{NewID: ids.next})

				// Task ids: two tasks, each read back as itself; a third
				// variant is not found.
				if _, err := s.Persist(ctx, Task{ID: v.first, Payload: []byte("a")}); err != nil {
					t.Fatal(err)
				}
				if _, err := s.Persist(ctx, Task{ID: v.second, Payload: []byte("b")}); err != nil {
					t.Errorf("task id %q after %q: got %v, want nil", v.second, v.first, err)
				}
				for id, want := range map[string]string{v.first: "a", v.second: "b"} {
					if got, err := s.Get(ctx, id); err != nil || got.ID != id || string(got.Payload) != want {
						t.Errorf("get %q: got id %q payload %q (%v), want id %q payload %q", id, got.ID, got.Payload, err, id, want)
					}
				}
				if got, err := s.Get(ctx, v.first+"x"); !errors.Is(err, ErrNotFound) {
					t.Errorf("get an id never stored: got %q, %v; want ErrNotFound", got.ID, err)
				}

				// Task keys.
				if _, err := s.Persist(ctx, Task{Key: v.first}); err != nil {
					t.Fatal(err)
				}
				if _, err := s.Persist(ctx, Task{Key: v.second}); err != nil {
					t.Errorf("task key %q after %q: got %v, want nil", v.second, v.first, err)
				}

				// Series parent ids: Persist's occurrence, and EnsureOccurrence's
				// derived id.
				if _, err := s.Persist(ctx, Task{ParentID: v.first, ScheduledAt: at}); err != nil {
					t.Fatal(err)
				}
				if _, err := s.Persist(ctx, Task{ParentID: v.second, ScheduledAt: at}); err != nil {
					t.Errorf("occurrence of series %q after %q's: got %v, want nil", v.second, v.first, err)
				}
				next := at.Add(time.Hour)
				if _, _, err := s.EnsureOccurrence(ctx, v.first, Task{ScheduledAt: next}); err != nil {
					t.Fatal(err)
				}
				o, created, err := s.EnsureOccurrence(ctx, v.second, Task{ScheduledAt: next})
				if err != nil || !created || o.ParentID != v.second {
					t.Errorf("ensure the occurrence of series %q after %q's: got parent %q created=%v (%v), want parent %q created", v.second, v.first, o.ParentID, created, err, v.second)
				}

				// Advance ids: an advance of series y at a stale version is
				// refused, not taken for series x's advance whose id differs
				// only so.
				x, err := s.Persist(ctx, Task{})
				if err != nil {
					t.Fatal(err)
				}
				y, err := s.Persist(ctx, Task{})
				if err != nil {
					t.Fatal(err)
				}
				ids.push(v.first)
				if _, err := s.AdvanceRun(ctx, x.ID, 0); err != nil {
					t.Fatal(err)
				}
				ids.push(v.second)
				if a, err := s.AdvanceRun(ctx, y.ID, 5); !errors.Is(err, ErrVersionConflict) {
					t.Errorf("advance %q of series y at a stale version after advance %q of x: got %+v, %v; want ErrVersionConflict", v.second, v.first, a, err)
				}
				if got, err := s.Get(ctx, y.ID); err != nil || got.CurrentRunCount != 0 {
					t.Errorf("series y: got %d runs (%v), want 0", got.CurrentRunCount, err)
				}

				// Claim tokens: two claims whose tokens differ only so
				// each lease and start their own task.
				reset(t, s)
				for i := 0; i < 2; i++ {
					if _, err := s.Persist(ctx, Task{}); err != nil {
						t.Fatal(err)
					}
				}
				var leases []*Lease
				for _, tok := range []string{v.first, v.second} {
					ids.push(tok)
					l, err := s.Claim(ctx, "w")
					if err != nil || l == nil {
						t.Fatalf("claim under token %q: got %v, %v; want a lease", tok, l, err)
					}
					leases = append(leases, l)
				}
				for _, l := range leases {
					if err := s.Start(ctx, l); err != nil {
						t.Errorf("start under token %q: %v", l.Token, err)
					}
				}
			})
		}
	}
}
