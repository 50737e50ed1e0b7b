package mysql_test

import (
	"fmt"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/mysql"
)

func Example() {
	p, err := sqlretry.New(sqlretry.Config{Classifier: mysql.Classifier})
	if err != nil {
		panic(err)
	}
	for _, err := range []error{
		&gomysql.MySQLError{Number: 1213, Message: "Deadlock found when trying to get lock"},
		gomysql.ErrInvalidConn,
	} {
		c := p.Classify(err)
		fmt.Println(c.Code, c.Retryable, c.Phase)
	}
	// Output:
	// 1213 true not-applied
	// invalid-conn true unknown
}

func ExampleLookup() {
	for _, code := range []string{"1205", "2013", "1062"} {
		c, _ := mysql.Lookup(code)
		fmt.Println(code, c.Retryable, c.Phase)
	}
	// Output:
	// 1205 true not-applied
	// 2013 true unknown
	// 1062 false not-applied
}
