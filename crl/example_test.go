package crl_test

import (
	"fmt"

	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/crl"
)

func ExampleParseExec() {
	x, err := crl.ParseExec("{1205,1222:3,2*2:SELECT,update}")
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, e := range x.Entries() {
		fmt.Println(e.Error, e.Retries, e.Waits, e.Filter)
	}
	fmt.Println(x)
	// Output:
	// 1205 3 [2s 4s 8s] [select update]
	// 1222 3 [2s 4s 8s] [select update]
	// 1205,1222:3,2*2:select,update
}

func ExampleParseExec_error() {
	_, err := crl.ParseExec("{1205:3,5+5};{1222:2,2,2}")
	fmt.Println(err)
	// Output:
	// R_invalidParameterNumber: rule 2, token "2,2,2" at offset 19: more than one comma in the timings (retryCount[,initialRetryTime[op retryChange]])
}

func ExampleParseConn() {
	c, _ := crl.ParseConn("{+4060};{40143}")
	fmt.Println(c.Mode(), c.Effective())
	c, _ = crl.ParseConn("{+4060};{+50000}")
	fmt.Println(c.Mode(), len(c.Effective()), c.Retries("50000"), c.Retries("40613"))
	// Output:
	// replace [4060 40143]
	// append 21 true true
}

func ExampleExec_Schedule() {
	x, _ := crl.ParseExec("1205:3,2*2:update")
	for _, mode := range []crl.FilterMode{crl.FilterJDBC, crl.FilterVerb} {
		s := x.Schedule(mode)
		d, wait := s.Decide(sqlretry.Failure{
			Class:     sqlretry.Class{Code: "1205"},
			Statement: "WITH due AS (SELECT id FROM t) UPDATE t SET x = 1 FROM due",
			Retry:     1,
		})
		fmt.Println(mode, d, wait)
	}
	// Output:
	// jdbc stop 0s
	// verb retry 2s
}
