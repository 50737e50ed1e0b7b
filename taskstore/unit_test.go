package taskstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/faults"
)

func TestBind(t *testing.T) {
	q := `INSERT INTO x SELECT id, ?, ?i FROM t WHERE id = ? {skip}`
	tests := []struct {
		d    Dialect
		want string
	}{
		{SQLite, `INSERT INTO x SELECT id, ?, ? FROM t WHERE id = ? `},
		{MariaDB, `INSERT INTO x SELECT id, ?, ? FROM t WHERE id = ? FOR UPDATE SKIP LOCKED`},
		{Postgres, `INSERT INTO x SELECT id, $1, CAST($2 AS BIGINT) FROM t WHERE id = $3 FOR UPDATE SKIP LOCKED`},
	}
	for _, tt := range tests {
		if got := tt.d.bind(q); got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.d, got, tt.want)
		}
	}
}

func TestDuplicateKey(t *testing.T) {
	sqliteErr := func(code int, msg string) error { return &codeErr{code: code, msg: msg} }
	tests := []struct {
		name string
		d    Dialect
		err  error
		want Constraint
		dup  bool
	}{
		{"pg pk", Postgres, &pgconn.PgError{Code: "23505", ConstraintName: "pk_tasks"}, ConstraintPrimaryKey, true},
		{"pg key", Postgres, fmt.Errorf("wrapped: %w", &pgconn.PgError{Code: "23505", ConstraintName: "ux_tasks_task_key"}), ConstraintTaskKey, true},
		{"pg occurrence", Postgres, &pgconn.PgError{Code: "23505", ConstraintName: "ux_tasks_occurrence"}, ConstraintOccurrence, true},
		{"pg other", Postgres, &pgconn.PgError{Code: "23505", ConstraintName: "some_other"}, "", true},
		{"pg deadlock", Postgres, &pgconn.PgError{Code: "40P01"}, "", false},
		{"mariadb pk", MariaDB, &mysql.MySQLError{Number: 1062, Message: "Duplicate entry 'a' for key 'PRIMARY'"}, ConstraintPrimaryKey, true},
		{"mysql8 pk", MariaDB, &mysql.MySQLError{Number: 1062, Message: "Duplicate entry 'a' for key 'tasks.PRIMARY'"}, ConstraintPrimaryKey, true},
		{"mariadb key", MariaDB, &mysql.MySQLError{Number: 1062, Message: "Duplicate entry 'k' for key 'ux_tasks_task_key'"}, ConstraintTaskKey, true},
		{"mariadb occurrence", MariaDB, &mysql.MySQLError{Number: 1062, Message: "Duplicate entry 'p-1' for key 'ux_tasks_occurrence'"}, ConstraintOccurrence, true},
		{"mariadb deadlock", MariaDB, &mysql.MySQLError{Number: 1213}, "", false},
		{"sqlite pk", SQLite, sqliteErr(1555, "UNIQUE constraint failed: tasks.id"), ConstraintPrimaryKey, true},
		{"sqlite key", SQLite, sqliteErr(2067, "UNIQUE constraint failed: tasks.task_key"), ConstraintTaskKey, true},
		{"sqlite occurrence", SQLite, sqliteErr(2067, "UNIQUE constraint failed: tasks.parent_id, tasks.scheduled_us"), ConstraintOccurrence, true},
		{"sqlite busy", SQLite, sqliteErr(5, "database is locked"), "", false},
		{"nil", SQLite, nil, "", false},
	}
	for _, tt := range tests {
		c, dup := tt.d.duplicateKey(tt.err)
		if c != tt.want || dup != tt.dup {
			t.Errorf("%s: got (%q, %v), want (%q, %v)", tt.name, c, dup, tt.want, tt.dup)
		}
	}
}

type codeErr struct {
	code int
	msg  string
}

func (e *codeErr) Error() string { return e.msg }
func (e *codeErr) Code() int     { return e.code }

func TestConflictErrorMatchesItsSentinel(t *testing.T) {
	tests := []struct {
		c    Constraint
		want error
	}{
		{ConstraintPrimaryKey, ErrIDTaken},
		{ConstraintTaskKey, ErrTaskKeyTaken},
		{ConstraintOccurrence, ErrOccurrenceTaken},
		{"", ErrUnattributedDuplicate},
	}
	driverErr := errors.New("driver says duplicate")
	for _, tt := range tests {
		err := error(&ConflictError{TaskID: "t1", Constraint: tt.c, Err: driverErr})
		if !errors.Is(err, tt.want) || !errors.Is(err, driverErr) {
			t.Errorf("%q: %v does not match %v and the driver's error", tt.c, err, tt.want)
		}
		for _, other := range []error{ErrIDTaken, ErrTaskKeyTaken, ErrOccurrenceTaken} {
			if other != tt.want && errors.Is(err, other) {
				t.Errorf("%q: %v also matches %v", tt.c, err, other)
			}
		}
	}
}

func TestOutcomeOf(t *testing.T) {
	dbErr := errors.New("db")
	tests := []struct {
		name string
		err  error
		want Outcome
	}{
		{"nil", nil, ToldOK},
		{"ambiguous", &sqlretry.Error{Cause: sqlretry.ErrAmbiguous, Err: dbErr}, ToldAmbiguous},
		{"caller cancelled", &sqlretry.Error{Cause: context.Canceled, Err: dbErr}, ToldCanceled},
		{"retries exhausted after a command timeout", &sqlretry.Error{Cause: sqlretry.ErrRetriesExhausted, Err: context.DeadlineExceeded}, ToldFailed},
		{"budget", &sqlretry.Error{Cause: sqlretry.ErrBudgetExhausted, Err: dbErr}, ToldFailed},
		{"plain cancel", context.Canceled, ToldCanceled},
		{"conflict", &ConflictError{Constraint: ConstraintTaskKey}, ToldFailed},
	}
	for _, tt := range tests {
		if got := OutcomeOf(tt.err); got != tt.want {
			t.Errorf("%s: got %s, want %s", tt.name, got, tt.want)
		}
	}
}

func TestStatements(t *testing.T) {
	for _, d := range dialects {
		stmts := statements(Schema(d))
		if len(stmts) < 10 {
			t.Errorf("%s: got %d statements, want at least 10", d, len(stmts))
		}
		for _, s := range stmts {
			if strings.HasPrefix(s, "--") || strings.HasSuffix(s, ";") || s == "" {
				t.Errorf("%s: malformed statement %q", d, s)
			}
		}
	}
}

func TestParseDialect(t *testing.T) {
	for _, d := range dialects {
		if got, err := ParseDialect(d.String()); err != nil || got != d {
			t.Errorf("ParseDialect(%q): got %v, %v", d.String(), got, err)
		}
	}
	if _, err := ParseDialect("oracle"); err == nil {
		t.Error("ParseDialect(oracle): got nil error")
	}
}

// TestCheck feeds the pure check known violations.
func TestCheck(t *testing.T) {
	task := Task{ID: "t1", Status: Succeeded, JobAttempts: 2, MaxRuns: 3, CurrentRunCount: 3, Payload: []byte{}}
	sn := snapshot{
		tasks:     map[string]taskRow{"t1": {task: task, fp: fingerprint(task), maxRuns: 3, runCount: 3}},
		audit:     map[string]int{"s1": 2, "c1": 1, "f1": 1},
		succeeded: map[string]int{"t1": 2},
		runs:      map[string]int{"a1": 2, "a2": 1},
		advances:  map[string]map[string]int{"t1": {"a1": 2, "a2": 1}},
	}
	entries := []Entry{
		{Kind: OpPersist, ID: "t1", Fingerprint: fingerprint(task), Outcome: ToldOK},
		{Kind: OpPersist, ID: "t2", Fingerprint: "x", Outcome: ToldOK},    // lost
		{Kind: OpSetStatus, ID: "s1", TaskID: "t1", Outcome: ToldOK},      // two audit rows
		{Kind: OpSetStatus, ID: "s2", TaskID: "t1", Outcome: ToldOK},      // none: an audit mismatch, counted once
		{Kind: OpComplete, ID: "f1", TaskID: "t1", Outcome: ToldFailed},   // applied: misreported
		{Kind: OpAdvance, ID: "a1", TaskID: "t1", Outcome: ToldOK},        // counted twice
		{Kind: OpAdvance, ID: "a2", TaskID: "t1", Outcome: ToldAmbiguous}, // fine
	}
	r := check(sn, entries, map[string]int{"t1": 1})
	want := Report{Lost: 1, Duplicated: 1, DoubleCounted: 1, EndedEarly: 1, AuditMismatch: 2, JobAttemptsBurned: 1, Misreported: 1}
	got := Report{Lost: r.Lost, Duplicated: r.Duplicated, DoubleCounted: r.DoubleCounted, EndedEarly: r.EndedEarly,
		AuditMismatch: r.AuditMismatch, JobAttemptsBurned: r.JobAttemptsBurned, UncountedStarts: r.UncountedStarts, Misreported: r.Misreported}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got %v, want %v\n%v", got, want, r.Problems)
	}
}

// TestCancelIsNeverRetried: a caller's cancellation during a hung write ends
// the call after one attempt, whatever the Policy's retries.
func TestCancelIsNeverRetried(t *testing.T) {
	plan := faults.MustPlan(faults.Config{Rules: []faults.Rule{{Kind: faults.Hang, Op: faults.OpExec, Count: faults.Unlimited}}})
	s, _ := newStore(t, SQLite, plan, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for plan.Counts().Faults[faults.Hang] == 0 {
			runtimeGosched()
		}
		cancel()
	}()
	_, err := s.Persist(ctx, Task{})
	var re *sqlretry.Error
	if !errors.Is(err, context.Canceled) || !errors.As(err, &re) || re.Attempts != 1 {
		t.Fatalf("got %v, want a *sqlretry.Error matching context.Canceled after 1 attempt", err)
	}
	if n := plan.Counts().Faults[faults.Hang]; n != 1 {
		t.Errorf("hung calls: got %d, want 1 (no retry after the cancellation)", n)
	}
}

// TestCheckPersistsUnderOneID: of the Persist calls under one id, exactly
// one inserted the row it holds: a re-submission told OK is a write that was
// not applied (lost), a re-submission refused beside the call told OK is
// right, and a row stored while every call that could have stored it was
// told it failed is misreported.
func TestCheckPersistsUnderOneID(t *testing.T) {
	task := Task{ID: "t1", Status: Succeeded, Payload: []byte("p")}
	fp := fingerprint(task)
	for _, tc := range []struct {
		name         string
		told         []Outcome
		lost, misrep int
	}{
		{"once", []Outcome{ToldOK}, 0, 0},
		{"re-submission refused", []Outcome{ToldOK, ToldFailed}, 0, 0},
		{"re-submission told ok", []Outcome{ToldOK, ToldOK}, 1, 0},
		{"ambiguous, then refused", []Outcome{ToldAmbiguous, ToldFailed}, 0, 0},
		{"every call told failed", []Outcome{ToldFailed, ToldFailed}, 0, 1},
	} {
		sn := snapshot{tasks: map[string]taskRow{"t1": {task: task, fp: fp}}}
		var entries []Entry
		for _, o := range tc.told {
			entries = append(entries, Entry{Kind: OpPersist, ID: "t1", TaskID: "t1", Fingerprint: fp, Outcome: o})
		}
		r := check(sn, entries, nil)
		if r.Lost != tc.lost || r.Misreported != tc.misrep {
			t.Errorf("%s: got lost=%d misreported=%d, want %d and %d (%v)", tc.name, r.Lost, r.Misreported, tc.lost, tc.misrep, r.Problems)
		}
	}
}

// TestCheckNamesTheTaskOfAClaimToldFailed: a claim told it failed has no
// task id in the caller's ledger (the claim found none, as far as it knew);
// when its audit row shows it was applied, the problem line names the task
// from that row, not an empty field ("claim c1 on  told …").
func TestCheckNamesTheTaskOfAClaimToldFailed(t *testing.T) {
	sn := snapshot{tasks: map[string]taskRow{}, audit: map[string]int{"c1": 1, "c2": 1}, auditTask: map[string]string{"c1": "t7"},
		succeeded: map[string]int{}, runs: map[string]int{}, advances: map[string]map[string]int{}}
	r := check(sn, []Entry{
		{Kind: OpClaim, ID: "c1", Outcome: ToldFailed, Err: "budget exhausted"},
		{Kind: OpClaim, ID: "c2", Outcome: ToldFailed, Err: "budget exhausted"},
	}, nil)
	if r.Misreported != 2 || len(r.Problems) != 2 {
		t.Fatalf("misreported %d, problems %q; want 2 of each", r.Misreported, r.Problems)
	}
	for i, want := range []string{"claim c1 on t7 told", "claim c2 on (no task) told"} {
		if !strings.Contains(r.Problems[i], want) {
			t.Errorf("problem %q; want it to say %q", r.Problems[i], want)
		}
	}
}
