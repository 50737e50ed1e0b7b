package proxy_test

import (
	"database/sql"
	"fmt"
	"log"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/sqlretry/sqlretry/faults/proxy"
)

func ExampleParseFault() {
	for _, s := range []string{"latency=25ms", "cut-after-commit", "drop"} {
		f, err := proxy.ParseFault(s)
		fmt.Printf("%q: %v %v\n", s, f, err != nil)
	}
	// Output:
	// "latency=25ms": latency=25ms false
	// "cut-after-commit": cut-after-commit false
	// "drop": inherit true
}

// A proxy in front of a PostgreSQL server, cutting connections after COMMIT.
func ExampleNew() {
	p, err := proxy.New(proxy.Config{Target: "127.0.0.1:5432", Protocol: proxy.ProtocolPostgres})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
	db, err := sql.Open("pgx", "postgres://postgres@"+p.Addr()+"/test?sslmode=disable")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	p.SetFault(proxy.Fault{Mode: proxy.CutAfterCommit})
	tx, err := db.Begin()
	if err != nil {
		log.Fatal(err)
	}
	tx.Exec("INSERT INTO task VALUES (1)")
	err = tx.Commit() // a broken connection: the row is committed all the same
	fmt.Println(err != nil, p.Counts().CutAfterCommit)
}
