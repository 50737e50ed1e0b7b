package taskstore_test

import (
	"context"
	"database/sql"
	"errors"
	"log"
	"time"

	_ "modernc.org/sqlite"

	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/taskstore"
)

// A worker loop: persist a task, then claim, start, run and complete it.
// Storage retries stay inside the store; job attempts count handler starts.
func Example() {
	ctx := context.Background()
	db, err := sql.Open("sqlite", taskstore.SQLiteDSN("tasks.db"))
	if err != nil {
		log.Fatal(err)
	}
	p, err := sqlretry.New(sqlretry.Config{
		Classifier:     taskstore.Classifier(taskstore.SQLite),
		CommandTimeout: 5 * time.Second,
	})
	if err != nil {
		log.Fatal(err)
	}
	s, err := taskstore.New(db, taskstore.SQLite, taskstore.Options{Policy: p})
	if err != nil {
		log.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	_, err = s.Persist(ctx, taskstore.Task{Key: "invoice-42", Payload: []byte(`{"invoice":42}`)})
	switch {
	case errors.Is(err, taskstore.ErrTaskKeyTaken):
		// Another task holds the key: not "already inserted".
	case errors.Is(err, sqlretry.ErrAmbiguous):
		// The database could not be asked whether the insert landed.
	case err != nil:
		log.Fatal(err)
	}
	handle := func(ctx context.Context, t taskstore.Task) error { return nil }
	for {
		ran, err := s.Work(ctx, "worker-1", handle, time.Second)
		if err != nil || !ran {
			break
		}
	}
}

// Advancing a recurring series: re-read the version after a conflict.
func ExampleStore_AdvanceRun() {
	var s *taskstore.Store // from taskstore.New
	ctx := context.Background()
	for {
		series, err := s.Get(ctx, "series-1")
		if err != nil {
			log.Fatal(err)
		}
		run, err := s.AdvanceRun(ctx, series.ID, series.ScheduleVersion)
		switch {
		case errors.Is(err, taskstore.ErrVersionConflict):
			continue // another worker counted this run: read again
		case errors.Is(err, taskstore.ErrSeriesComplete):
			return
		case err != nil:
			log.Fatal(err)
		}
		log.Printf("run %d counted", run.RunNo)
		return
	}
}
