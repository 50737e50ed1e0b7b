package faults_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/faults"
)

// TestComposesWithRunTx is the gate in miniature: the fault driver under
// sqlretry.RunTx on real SQLite, one COMMIT fault per case, and the row
// counted afterwards — never lost, never doubled.
func TestComposesWithRunTx(t *testing.T) {
	e := sqliteEngine()
	dsn := e.dsn(t)
	tests := []struct {
		name     string
		rule     faults.Rule
		verify   bool
		wantErr  error // nil: success
		attempts int   // transaction function runs
	}{
		{"commit reply lost, verify finds the row", faults.Rule{Kind: faults.CommitAppliedReplyLost}, true, nil, 1},
		{"commit reply lost, no verify: ambiguous", faults.Rule{Kind: faults.CommitAppliedReplyLost}, false, sqlretry.ErrAmbiguous, 1},
		{"commit not applied: replayed", faults.Rule{Kind: faults.CommitNotApplied}, false, nil, 2},
		{"after exec: verify finds nothing, replayed", faults.Rule{Kind: faults.AfterExec, Verb: "INSERT"}, true, nil, 2},
		{"deadlock: replayed", faults.Rule{Kind: faults.ServerError, Verb: "INSERT", Engine: faults.Postgres}, false, nil, 2},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plan := faults.MustPlan(faults.Config{Rules: []faults.Rule{tt.rule}})
			db, clean := e.open(t, dsn, plan)
			table := "compose" + string(rune('a'+i))
			if _, err := clean.Exec("CREATE TABLE " + table + " (id INT PRIMARY KEY)"); err != nil {
				t.Fatal(err)
			}
			classify := sqlretry.ClassifierFunc(func(err error) sqlretry.Class {
				var se interface{ SQLState() string }
				if errors.As(err, &se) && se.SQLState() == "40P01" {
					return sqlretry.Class{Retryable: true, Phase: sqlretry.NotApplied, Code: "40P01"}
				}
				return sqlretry.ClassifyNeutral(err)
			})
			p, err := sqlretry.New(sqlretry.Config{BaseDelay: time.Millisecond, MaxDelay: time.Millisecond, Classifier: classify})
			if err != nil {
				t.Fatal(err)
			}
			var verify sqlretry.VerifyFunc
			if tt.verify {
				verify = func(ctx context.Context) (bool, error) {
					var n int
					err := clean.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+table+" WHERE id = 1").Scan(&n)
					return n == 1, err
				}
			}
			runs := 0
			err = sqlretry.RunTx(context.Background(), db, p, sqlretry.Write("insert", verify), nil, func(ctx context.Context, tx *sql.Tx) error {
				runs++
				_, err := tx.ExecContext(ctx, "INSERT INTO "+table+" (id) VALUES (1)")
				return err
			})
			if tt.wantErr == nil && err != nil || tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("got %v, want %v", err, tt.wantErr)
			}
			if runs != tt.attempts {
				t.Errorf("got %d runs of the transaction, want %d", runs, tt.attempts)
			}
			var n int
			if err := clean.QueryRow("SELECT COUNT(*) FROM " + table).Scan(&n); err != nil || n != 1 {
				t.Errorf("got %d rows, %v; want exactly 1", n, err)
			}
			if got := plan.Counts().Faults[tt.rule.Kind]; got != 1 {
				t.Errorf("got %d %s faults, want 1", got, tt.rule.Kind)
			}
		})
	}
}
