package sqlretry_test

import (
	"database/sql"
	"fmt"
	"testing"
	"time"
)

func sprintf(f string, a ...any) string { return fmt.Sprintf(f, a...) }

// waitSessionGone waits until the session id has left the server's process list.
func waitSessionGone(t *testing.T, admin *sql.DB, driver string, id int) {
	t.Helper()
	q := "SELECT count(*) FROM pg_stat_activity WHERE pid = $1"
	if driver == "mysql" {
		q = "SELECT count(*) FROM information_schema.PROCESSLIST WHERE ID = ?"
	}
	for i := 0; i < 500; i++ {
		var n int
		if err := admin.QueryRow(q, id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("session %d still there", id)
}
