package sqlretry_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"

	"github.com/sqlretry/sqlretry"
	_ "modernc.org/sqlite"
)

// DBTX is the interface sqlc generates for its Queries: *sql.DB, *sql.Conn
// and *sql.Tx all satisfy it, so generated code runs unchanged over a
// database opened with sqlretry.Open or sqlretry.Connector.
type DBTX interface {
	ExecContext(context.Context, string, ...interface{}) (sql.Result, error)
	PrepareContext(context.Context, string) (*sql.Stmt, error)
	QueryContext(context.Context, string, ...interface{}) (*sql.Rows, error)
	QueryRowContext(context.Context, string, ...interface{}) *sql.Row
}

// Queries stands for sqlc's generated code.
type Queries struct{ db DBTX }

func NewQueries(db DBTX) *Queries             { return &Queries{db: db} }
func (q *Queries) WithTx(tx *sql.Tx) *Queries { return &Queries{db: tx} }

func (q *Queries) CreateTask(ctx context.Context, name string) error {
	_, err := q.db.ExecContext(ctx, "INSERT INTO task (name) VALUES (?)", name)
	return err
}

func (q *Queries) CountTasks(ctx context.Context) (n int64, err error) {
	err = q.db.QueryRowContext(ctx, "SELECT count(*) FROM task").Scan(&n)
	return n, err
}

// Plain database/sql code and sqlc's generated queries work unchanged on a
// database opened through sqlretry: statements outside transactions are
// retried underneath, and RunTx retries a transaction whole.
func Example_databaseSQL() {
	p, err := sqlretry.New(sqlretry.Config{MaxRetries: 3}) // with an engine's Classifier in real code
	if err != nil {
		log.Fatal(err)
	}
	db, err := sqlretry.Open("sqlite", "file:example?mode=memory&cache=shared", p)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()

	// Plain database/sql.
	if _, err := db.ExecContext(ctx, "CREATE TABLE task (id INTEGER PRIMARY KEY, name TEXT NOT NULL)"); err != nil {
		log.Fatal(err)
	}

	// sqlc-style code over the *sql.DB, and inside RunTx over the *sql.Tx.
	q := NewQueries(db)
	if err := q.CreateTask(ctx, "first"); err != nil {
		log.Fatal(err)
	}
	err = sqlretry.RunTx(ctx, db, p, sqlretry.Write("create-two", nil), nil, func(ctx context.Context, tx *sql.Tx) error {
		qtx := q.WithTx(tx)
		if err := qtx.CreateTask(ctx, "second"); err != nil {
			return err
		}
		return qtx.CreateTask(ctx, "third")
	})
	if err != nil {
		log.Fatal(err)
	}
	n, err := q.CountTasks(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(n, "tasks")
	// Output: 3 tasks
}
