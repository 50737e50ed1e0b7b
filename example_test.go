package sqlretry_test

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"

	"github.com/sqlretry/sqlretry"
)

// A deadlock victim: retryable, and the server rolled it back.
var errDeadlock = errors.New("deadlock detected")

var classifier = sqlretry.ClassifierFunc(func(err error) sqlretry.Class {
	if errors.Is(err, errDeadlock) {
		return sqlretry.Class{Retryable: true, Phase: sqlretry.NotApplied, Code: "40P01"}
	}
	return sqlretry.ClassifyNeutral(err)
})

func ExamplePolicy_Do() {
	p, err := sqlretry.New(sqlretry.Config{Classifier: classifier, BaseDelay: time.Millisecond})
	if err != nil {
		panic(err)
	}
	attempts := 0
	err = p.Do(context.Background(), sqlretry.Idempotent("load-task"), func(ctx context.Context) error {
		attempts++
		if attempts < 3 {
			return errDeadlock
		}
		return nil
	})
	fmt.Println(err, attempts)
	// Output: <nil> 3
}

func ExampleDoValue() {
	p, err := sqlretry.New(sqlretry.Config{BaseDelay: time.Millisecond})
	if err != nil {
		panic(err)
	}
	first := true
	payload, err := sqlretry.DoValue(context.Background(), p, sqlretry.Idempotent("load-payload"),
		func(ctx context.Context) (string, error) {
			if first { // a dead pooled connection: the driver proves nothing was sent
				first = false
				return "", driver.ErrBadConn
			}
			return `{"job":"send-mail"}`, nil
		})
	fmt.Println(payload, err)
	// Output: {"job":"send-mail"} <nil>
}

// A write whose reply was lost: the policy does not replay it blindly, it asks
// verify what the database holds.
func ExampleWrite() {
	p, err := sqlretry.New(sqlretry.Config{BaseDelay: time.Millisecond})
	if err != nil {
		panic(err)
	}
	stored := map[string]string{}
	insert := func(ctx context.Context) error {
		stored["task-1"] = "queued"
		return errors.New("read tcp 127.0.0.1:5432: connection reset by peer")
	}
	insertReset := func(ctx context.Context) error {
		err := insert(ctx)
		return fmt.Errorf("%w: %w", err, errConnReset)
	}
	verify := func(ctx context.Context) (bool, error) {
		_, ok := stored["task-1"]
		return ok, nil
	}
	err = p.Do(context.Background(), sqlretry.Write("persist-task", verify), insertReset)
	fmt.Println("err:", err, "rows:", len(stored))

	// Without a verify, the same failure is reported as ambiguous.
	err = p.Do(context.Background(), sqlretry.Write("persist-task", nil), insertReset)
	fmt.Println(errors.Is(err, sqlretry.ErrAmbiguous))
	// Output:
	// err: <nil> rows: 1
	// true
}

// errConnReset stands for a driver's "connection reset" after the command
// was sent: the neutral classifier calls it retryable, phase unknown.
var errConnReset = &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
