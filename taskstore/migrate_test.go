package taskstore

import (
	"context"
	"os"
	"testing"
)

// TestMigrateUpgradesMariaDBIDsToBytes: tables a version-1 Migrate created
// on MariaDB, whose text columns took the database's case-insensitive,
// trailing-space-ignoring collation, are upgraded by Migrate to compare as
// bytes, their rows kept; a second Migrate changes nothing.
func TestMigrateUpgradesMariaDBIDsToBytes(t *testing.T) {
	ctx := context.Background()
	db := openFaulty(t, MariaDB, nil)
	v1, err := os.ReadFile("testdata/mariadb-v1.sql") // migrations/mariadb.sql as version 1 shipped it
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range statements(string(v1)) {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("version 1 schema: %v", err)
		}
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO taskstore_migrations (version, applied_us) VALUES (1, 0)`); err != nil {
		t.Fatal(err)
	}
	clk := newClock()
	s, err := New(db, MariaDB, Options{Now: clk.Now, Policy: fastPolicy(t, MariaDB, 0)})
	if err != nil {
		t.Fatal(err)
	}
	// collations lists the store's text columns that do not compare as bytes.
	collations := func() map[string]string {
		t.Helper()
		rows, err := db.QueryContext(ctx, `SELECT CONCAT(TABLE_NAME, '.', COLUMN_NAME), COLLATION_NAME FROM information_schema.COLUMNS
			WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME IN ('tasks', 'status_audit', 'task_runs') AND COLLATION_NAME IS NOT NULL`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		other := map[string]string{}
		n := 0
		for rows.Next() {
			var col, coll string
			if err := rows.Scan(&col, &coll); err != nil {
				t.Fatal(err)
			}
			n++
			if coll != "utf8mb4_nopad_bin" {
				other[col] = coll
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			t.Fatal("no text columns found")
		}
		return other
	}
	if len(collations()) == 0 {
		t.Fatal("the version 1 schema already compares as bytes: the test no longer starts from what version 1 created")
	}
	task, err := s.Persist(ctx, Task{Key: "Key-1", Payload: []byte("kept")})
	if err != nil {
		t.Fatal(err)
	}
	for _, tr := range []Transition{{ID: "Move-1", TaskID: task.ID, From: Queued, To: Running}, {TaskID: task.ID, From: Running, To: Queued}} {
		if _, err := s.SetStatus(ctx, tr); err != nil {
			t.Fatal(err)
		}
	}

	for i := 0; i < 2; i++ {
		if err := s.Migrate(ctx); err != nil {
			t.Fatalf("migrate %d: %v", i+1, err)
		}
		if other := collations(); len(other) > 0 {
			t.Errorf("after migrate %d: columns that do not compare as bytes: %v", i+1, other)
		}
	}
	var version int
	if err := db.QueryRowContext(ctx, `SELECT MAX(version) FROM taskstore_migrations`).Scan(&version); err != nil || version != schemaVersion {
		t.Errorf("recorded version: got %d (%v), want %d", version, err, schemaVersion)
	}
	if got, err := s.Get(ctx, task.ID); err != nil || !sameTask(got, task) || got.Status != Queued {
		t.Errorf("the stored task after the upgrade: got %+v (%v), want %+v, queued", got, err, task)
	}
	if n := auditRows(t, s, "Move-1"); n != 1 {
		t.Errorf("audit rows under Move-1 after the upgrade: got %d, want 1", n)
	}
	if _, err := s.SetStatus(ctx, Transition{ID: "move-1", TaskID: task.ID, From: Queued, To: Running}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(ctx, task.ID); err != nil || got.Status != Running {
		t.Errorf("transition move-1 after Move-1, upgraded: task is %s (%v), want running", got.Status, err)
	}
	if _, err := s.Persist(ctx, Task{Key: "key-1"}); err != nil {
		t.Errorf("task key key-1 after Key-1, upgraded: got %v, want nil", err)
	}
}
