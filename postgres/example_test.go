package postgres_test

import (
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/postgres"
)

func Example() {
	// Give the Policy the classifier once; it reads every error the
	// operation returns.
	p, err := sqlretry.New(sqlretry.Config{Classifier: postgres.Classifier})
	if err != nil {
		panic(err)
	}
	c := p.Classify(fmt.Errorf("transfer: %w", &pgconn.PgError{Code: "40001", Message: "could not serialize access"}))
	fmt.Println(c.Code, c.Retryable, c.Phase)
	// Output: 40001 true not-applied
}

func ExampleLookup() {
	for _, code := range []string{"40P01", "57P01", "08007", "23505", "57014"} {
		c, listed := postgres.Lookup(code)
		fmt.Println(code, c.Retryable, c.Phase, listed)
	}
	// Output:
	// 40P01 true not-applied true
	// 57P01 true not-applied true
	// 08007 true unknown true
	// 23505 false not-applied true
	// 57014 false not-applied true
}

func ExampleCockroachLookup() {
	for _, code := range []string{"40001", "CR000", "40003"} {
		c, _ := postgres.CockroachLookup(code)
		fmt.Println(code, c.Retryable, c.Phase)
	}
	// Output:
	// 40001 true not-applied
	// CR000 true not-applied
	// 40003 true unknown
}
