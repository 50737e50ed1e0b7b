package mssql_test

import (
	"fmt"

	gomssql "github.com/microsoft/go-mssqldb"

	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/mssql"
)

func Example() {
	p, err := sqlretry.New(sqlretry.Config{Classifier: mssql.Classifier})
	if err != nil {
		panic(err)
	}
	c := p.Classify(gomssql.Error{Number: 1205, Class: 13, Message: "Transaction was deadlocked"})
	fmt.Println(c.Code, c.Retryable, c.Phase)
	// Output: 1205 true not-applied
}

func ExampleLookup() {
	for _, code := range []string{"40501", "-2", "4060", "2627"} {
		c, _ := mssql.Lookup(code)
		fmt.Println(code, c.Retryable, c.Phase, c.MinDelay)
	}
	// Output:
	// 40501 true not-applied 10s
	// -2 true unknown 0s
	// 4060 true not-sent 0s
	// 2627 false not-applied 0s
}
