package faults_test

import (
	"database/sql"
	"fmt"
	"testing"

	"github.com/sqlretry/sqlretry/faults"
)

// BenchmarkSQLiteExec compares an autocommit INSERT on SQLite directly and
// through the fault driver with rules that never fire.
func BenchmarkSQLiteExec(b *testing.B) {
	for _, wrapped := range []bool{false, true} {
		b.Run(fmt.Sprintf("wrapped=%v", wrapped), func(b *testing.B) {
			dsn := "file:" + b.TempDir() + "/b.db?_pragma=journal_mode(wal)&_pragma=synchronous(off)"
			var db *sql.DB
			var err error
			if wrapped {
				plan := faults.MustPlan(faults.Config{Rules: []faults.Rule{
					{Kind: faults.BeforeSend, Verb: "DELETE"}, {Kind: faults.AfterExec, Match: "nothing"},
				}})
				db, err = faults.Open("sqlite", dsn, plan)
			} else {
				db, err = sql.Open("sqlite", dsn)
			}
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			if _, err := db.Exec("CREATE TABLE b (id INTEGER PRIMARY KEY)"); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := db.Exec("INSERT INTO b (id) VALUES (?)", i); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
