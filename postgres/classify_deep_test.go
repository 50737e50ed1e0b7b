package postgres_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"

	sqlmysql "github.com/sqlretry/sqlretry/mysql"
	"github.com/sqlretry/sqlretry/postgres"
)

// TestClassifyDeepChain: errors.As finds a server error at any depth, and so
// did the classifiers before their one-walk rewrite (5f2aa8e); that walk
// (sr.ClassifyNeutralVisit) stopped after 100 wrappers of one chain, so a
// serialization failure wrapped 101 times (an error re-wrapped per retry
// by a caller's own loop) was read as "not a known transient error". It
// follows 10,000 now.
func TestClassifyDeepChain(t *testing.T) {
	wrap := func(e error) error {
		for i := 0; i < 101; i++ {
			e = fmt.Errorf("attempt %d: %w", i, e)
		}
		return e
	}
	pg := wrap(&pgconn.PgError{Code: "40001"})
	var pe *pgconn.PgError
	if !errors.As(pg, &pe) {
		t.Fatal("errors.As does not find the PgError")
	}
	if c := postgres.Classify(pg); !c.Retryable || c.Code != "40001" {
		t.Errorf("postgres: %+v; want 40001, retryable (as errors.As finds it)", c)
	}
	my := wrap(&mysql.MySQLError{Number: 1213})
	if c := sqlmysql.Classify(my); !c.Retryable || c.Code != "1213" {
		t.Errorf("mysql: %+v; want 1213, retryable", c)
	}
}
