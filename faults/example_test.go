package faults_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/faults"
)

// A lost COMMIT reply on real SQLite: the caller sees a connection error of
// unknown phase, yet the row is there.
func ExampleConnector() {
	dir, err := os.MkdirTemp("", "faults-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	clean, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "x.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer clean.Close()

	plan := faults.MustPlan(faults.Config{Rules: []faults.Rule{{Kind: faults.CommitAppliedReplyLost}}})
	d := &faults.Driver{Inner: clean.Driver(), Plan: plan}
	connector, err := d.OpenConnector("file:" + filepath.Join(dir, "x.db"))
	if err != nil {
		log.Fatal(err)
	}
	db := sql.OpenDB(connector)
	defer db.Close()

	if _, err := clean.Exec("CREATE TABLE task (id INT PRIMARY KEY)"); err != nil {
		log.Fatal(err)
	}
	tx, err := db.BeginTx(context.Background(), nil)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := tx.Exec("INSERT INTO task VALUES (1)"); err != nil {
		log.Fatal(err)
	}
	err = tx.Commit()
	var n int
	clean.QueryRow("SELECT COUNT(*) FROM task").Scan(&n)

	var fe *faults.Error
	fmt.Println("injected:", errors.As(err, &fe), fe.Kind)
	fmt.Println("phase:", sqlretry.ClassifyNeutral(err).Phase)
	fmt.Println("rows:", n)
	fmt.Println("counted:", plan.Counts().Faults[faults.CommitAppliedReplyLost])
	// Output:
	// injected: true commit_applied_reply_lost
	// phase: unknown
	// rows: 1
	// counted: 1
}
