package naivestore_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"

	_ "modernc.org/sqlite" // registers "sqlite"

	"github.com/sqlretry/sqlretry/internal/naivestore"
	"github.com/sqlretry/sqlretry/taskstore"
)

// New's store is the blind-replay one: its SetStatus is unguarded, so a
// transition from a status the task is not in applies anyway, where the
// safe store refuses it. (taskstore's naive_test.go shows the damage each
// unsafe shape does under faults; chaos --compare naive, the whole run's.)
func TestNewIsTheBlindReplayStore(t *testing.T) {
	ctx := context.Background()
	db, err := sql.Open("sqlite", taskstore.SQLiteDSN(filepath.Join(t.TempDir(), "tasks.db")))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	safe, err := taskstore.New(db, taskstore.SQLite, taskstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := safe.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	naive, err := naivestore.New(db, taskstore.SQLite, taskstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		s       *taskstore.Store
		applied bool
	}{{"safe", safe, false}, {"naive", naive, true}} {
		task, err := c.s.Persist(ctx, taskstore.Task{})
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.s.SetStatus(ctx, taskstore.Transition{TaskID: task.ID, From: taskstore.Running, To: taskstore.Succeeded})
		got, gerr := c.s.Get(ctx, task.ID)
		if gerr != nil {
			t.Fatal(gerr)
		}
		if applied := got.Status == taskstore.Succeeded; applied != c.applied {
			t.Errorf("%s: SetStatus from running on a queued task: applied %t (error %v), want %t", c.name, applied, err, c.applied)
		}
		if !c.applied && !errors.Is(err, taskstore.ErrStatusConflict) {
			t.Errorf("%s: got error %v, want ErrStatusConflict", c.name, err)
		}
	}
	if _, err := naivestore.New(nil, taskstore.SQLite, taskstore.Options{}); err == nil {
		t.Error("New(nil db): no error")
	}
}
