package taskstore

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/faults"
)

// TestWorkSettlesStartThroughOutage is the chaos command's "job attempts
// burned" on PostgreSQL and MariaDB: Start's COMMIT lands, its reply is lost
// (there, a connection reset as an outage begins), and the database stays
// unreachable for longer than Start's verify and one settling read under the
// Read policy can retry. Work must go on settling until the database
// answers, then run the handler: giving up leaves a job attempt counted
// with no handler start.
func TestWorkSettlesStartThroughOutage(t *testing.T) {
	for _, d := range dialects {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			// Reads of the audit table are refused 30 times in a row: the
			// outage. Each read meets 3 refusals (database/sql retries a
			// driver.ErrBadConn twice), so Start's verify (MaxRetries 1)
			// gives up after 6 of them and one Read-policy call (MaxRetries
			// 3, as the chaos command's) after 12 more.
			const outage = 30
			plan := faults.MustPlan(faults.Config{Rules: []faults.Rule{
				// COMMIT 1 is the claim's, COMMIT 2 is Start's.
				{Kind: faults.CommitAppliedReplyLost, Op: faults.OpCommit, Nth: 2, Count: 1},
				{Kind: faults.Outage, Phase: sqlretry.NotSent, Op: faults.OpQuery, Match: "FROM status_audit", Count: outage},
			}, Seed: 1})
			fin, err := sqlretry.New(sqlretry.Config{MaxRetries: 1, BaseDelay: time.Millisecond, Classifier: Classifier(d), Budget: sqlretry.NoBudget})
			if err != nil {
				t.Fatal(err)
			}
			rd, err := sqlretry.New(sqlretry.Config{MaxRetries: 3, BaseDelay: time.Millisecond, MaxDelay: 2 * time.Millisecond, Classifier: Classifier(d), Budget: sqlretry.NoBudget})
			if err != nil {
				t.Fatal(err)
			}
			led := NewLedger()
			s, _ := newStore(t, d, plan, Options{Policy: fin, Policies: Policies{Read: rd}, Ledger: led, MaxAttempts: 1, LeaseTTL: time.Hour})
			plan.Disable()
			task, err := s.Persist(ctx, Task{})
			if err != nil {
				t.Fatal(err)
			}
			plan.Enable()

			ran := 0
			claimed, err := s.Work(ctx, "w", func(context.Context, Task) error { ran++; return nil }, 0)
			plan.Disable()
			if o := startOutcome(led); o != ToldAmbiguous {
				t.Fatalf("Start told %v, want ambiguous: the test no longer reaches an unsettled start", o)
			}
			if !claimed || err != nil {
				t.Errorf("Work: got (%v, %v), want (true, nil)", claimed, err)
			}
			if ran != 1 {
				t.Errorf("handler ran %d times, want 1", ran)
			}
			got, err := s.Get(ctx, task.ID)
			if err != nil {
				t.Fatal(err)
			}
			if got.Status != Succeeded || got.JobAttempts != 1 {
				t.Errorf("task: got %s with %d attempts, want succeeded with 1", got.Status, got.JobAttempts)
			}
			if n := plan.Counts().Faults[faults.Outage]; n != outage {
				t.Errorf("outage: %d reads refused, want all %d: the start was settled through it", n, outage)
			}
			r, err := s.Check(ctx, led)
			if err != nil {
				t.Fatal(err)
			}
			if !r.Clean() {
				t.Errorf("check: got %v\n%v, want clean", r, r.Problems)
			}
		})
	}
}

// waitsFor reports whether a session waits for a lock the session blocker
// (PostgreSQL) or some transaction of the test's database (MariaDB) holds.
func waitsFor(ctx context.Context, t *testing.T, db *sql.DB, d Dialect, blocker int64) bool {
	t.Helper()
	switch d {
	case Postgres:
		var n int
		if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM pg_stat_activity WHERE CAST($1 AS INTEGER) = ANY(pg_blocking_pids(pid))`, blocker).Scan(&n); err != nil {
			t.Fatalf("waitsFor: %v", err)
		}
		return n > 0
	case MariaDB:
		// Not information_schema.INNODB_LOCK_WAITS: MariaDB refreshes the
		// INNODB_* views only after 0.1 s without a read, so a session
		// that polls them (this one, or another test's) sees one stale
		// picture for ever. The monitor's text is current: a waiting
		// transaction's entry says LOCK WAIT and names the table.
		var dbName, typ, name, status string
		if err := db.QueryRowContext(ctx, `SELECT DATABASE()`).Scan(&dbName); err != nil {
			t.Fatalf("waitsFor: %v", err)
		}
		if err := db.QueryRowContext(ctx, `SHOW ENGINE INNODB STATUS`).Scan(&typ, &name, &status); err != nil {
			t.Fatalf("waitsFor: %v", err)
		}
		for _, trx := range strings.Split(status, "---TRANSACTION ")[1:] {
			if strings.Contains(trx, "LOCK WAIT") && strings.Contains(trx, "`"+dbName+"`.") {
				return true
			}
		}
		return false
	}
	t.Fatalf("waitsFor: no lock view on %s", d)
	return false
}

// attempt is a transaction left open: the state of the server while an
// attempt's COMMIT is on its way (its client saw the connection drop, the
// server has not read the COMMIT yet).
type attempt struct {
	tx      *sql.Tx
	session int64 // the server's id of its session
}

// inFlight runs body in a transaction it leaves open.
func inFlight(ctx context.Context, t *testing.T, s *Store, body func(tx *sql.Tx) error) *attempt {
	t.Helper()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback() })
	a := &attempt{tx: tx}
	q := `SELECT pg_backend_pid()`
	if s.dialect == MariaDB {
		q = `SELECT CONNECTION_ID()`
	}
	if err := tx.QueryRowContext(ctx, q).Scan(&a.session); err != nil {
		t.Fatal(err)
	}
	if err := body(tx); err != nil {
		t.Fatal(err)
	}
	return a
}

// awaitAnswer asks answer while the attempt a is in flight. An answer given
// before a ended is a verdict about an attempt that was not dead yet, and
// fails the test; once answer waits for one of a's locks, a commits, and the
// answer must see it.
func awaitAnswer[T any](ctx context.Context, t *testing.T, s *Store, a *attempt, answer func() (T, error)) T {
	t.Helper()
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		v, err := answer()
		ch <- result{v, err}
	}()
	for !waitsFor(ctx, t, s.db, s.dialect, a.session) {
		select {
		case r := <-ch:
			t.Fatalf("answered (%v, %v) while the attempt's transaction could still commit: a verdict before the attempt is dead", r.v, r.err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	if err := a.tx.Commit(); err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if r.err != nil {
		t.Fatalf("answer after the commit: %v", r.err)
	}
	return r.v
}

// TestVerdictsWaitForInFlightAttempt: on a server, a Start, Claim or
// AdvanceRun whose connection dropped may have its COMMIT still on the way.
// A read that says "not applied" then is a verdict about an attempt that is
// not dead: the COMMIT lands after it, the job attempt is counted with no
// handler start (Started), or a write told failed is there. Every verdict
// the store gives waits until no transaction that could still commit the
// write is in flight.
func TestVerdictsWaitForInFlightAttempt(t *testing.T) {
	for _, d := range []Dialect{Postgres, MariaDB} {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			// No command timeout: the verdict waits as long as the lock.
			s, clk := newStore(t, d, nil, Options{Policy: fastPolicy(t, d, 0), LeaseTTL: time.Hour})

			t.Run("started", func(t *testing.T) {
				task, err := s.Persist(ctx, Task{})
				if err != nil {
					t.Fatal(err)
				}
				l, err := s.Claim(ctx, "w")
				if err != nil || l == nil || l.Task.ID != task.ID {
					t.Fatalf("Claim: got (%v, %v), want the task", l, err)
				}
				now := clk.Now()
				a := inFlight(ctx, t, s, func(tx *sql.Tx) error {
					if _, err := tx.ExecContext(ctx, s.q.start, now.UnixMicro(), now.Add(time.Hour).UnixMicro(), task.ID, l.Token); err != nil {
						return err
					}
					_, err := tx.ExecContext(ctx, s.q.insertAudit, l.Token+":start", string(Leased), now.UnixMicro(), task.ID)
					return err
				})
				if started := awaitAnswer(ctx, t, s, a, func() (bool, error) { return s.Started(ctx, l) }); !started {
					t.Errorf("Started: got false, want true: the start committed")
				}
				// Complete's verify (every transition's) waits alike.
				a = inFlight(ctx, t, s, func(tx *sql.Tx) error {
					if _, err := tx.ExecContext(ctx, s.q.complete, task.ID, l.Token); err != nil {
						return err
					}
					_, err := tx.ExecContext(ctx, s.q.insertAudit, l.Token+":complete", string(Running), now.UnixMicro(), task.ID)
					return err
				})
				to := [2]Status{Succeeded, Succeeded}
				if done := awaitAnswer(ctx, t, s, a, func() (bool, error) { return s.transitionLanded(ctx, l.Token+":complete", task.ID, to) }); !done {
					t.Errorf("complete's verify: got false, want true: the completion committed")
				}
			})

			t.Run("claim", func(t *testing.T) {
				task, err := s.Persist(ctx, Task{})
				if err != nil {
					t.Fatal(err)
				}
				token, now := "claim-in-flight", clk.Now()
				a := inFlight(ctx, t, s, func(tx *sql.Tx) error {
					if _, err := tx.ExecContext(ctx, s.q.claim, "w", token, now.Add(time.Hour).UnixMicro(), task.ID); err != nil {
						return err
					}
					_, err := tx.ExecContext(ctx, s.q.insertAudit, token, string(Queued), now.UnixMicro(), task.ID)
					return err
				})
				type held struct {
					lease  *Lease
					landed bool
				}
				got := awaitAnswer(ctx, t, s, a, func() (held, error) {
					l, landed, err := s.claimLanded(ctx, token, "w")
					return held{l, landed}, err
				})
				if !got.landed || got.lease == nil || got.lease.Task.ID != task.ID {
					t.Errorf("claim's verify: got %+v, want the claim landed, holding %s", got, task.ID)
				}
			})

			t.Run("advance", func(t *testing.T) {
				series, err := s.Persist(ctx, Task{MaxRuns: 3})
				if err != nil {
					t.Fatal(err)
				}
				adv := Advance{ID: "advance-in-flight"}
				a := inFlight(ctx, t, s, func(tx *sql.Tx) error {
					if _, err := tx.ExecContext(ctx, s.q.advance, adv.ID, series.ID, series.ScheduleVersion); err != nil {
						return err
					}
					_, err := tx.ExecContext(ctx, s.q.insertRun, adv.ID, clk.Now().UnixMicro(), series.ID)
					return err
				})
				if done := awaitAnswer(ctx, t, s, a, func() (bool, error) { return s.advanceLanded(ctx, series.ID, &adv) }); !done || adv.RunNo != 1 {
					t.Errorf("advance's verify: got %v (run %d), want true (run 1): the advance committed", done, adv.RunNo)
				}
			})
		})
	}
}
