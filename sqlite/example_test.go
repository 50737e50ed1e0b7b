package sqlite_test

import (
	"fmt"

	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/sqlite"
)

func Example() {
	// Pass the classifier to the Policy; a modernc.org/sqlite or
	// mattn/go-sqlite3 error is read by its result code.
	p, err := sqlretry.New(sqlretry.Config{Classifier: sqlite.Classifier})
	if err != nil {
		panic(err)
	}
	_ = p
}

func ExampleLookup() {
	for _, code := range []string{"5", "SQLITE_BUSY_SNAPSHOT", "2067"} {
		c, _ := sqlite.Lookup(code)
		fmt.Println(c.Code, c.Retryable, c.Phase)
	}
	// Output:
	// SQLITE_BUSY true not-applied
	// SQLITE_BUSY_SNAPSHOT true not-applied
	// SQLITE_CONSTRAINT_UNIQUE false not-applied
}
