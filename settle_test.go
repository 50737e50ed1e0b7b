package sqlretry

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"
)

// cutOffAttempt is an attempt the caller's context cuts off: it cancels and
// returns the driver's error for it, as a driver whose command was in flight
// does.
func cutOffAttempt(cancel context.CancelFunc) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		cancel()
		return fmt.Errorf("driver: %w", ctx.Err())
	}
}

// A write whose attempt the caller's context cut off is settled by its
// verify, which runs although the caller's context has ended: applied is
// success, not applied the context's error, a failed verify ErrAmbiguous
// and the context's error together.
func TestCutOffWriteIsSettled(t *testing.T) {
	cases := []struct {
		name          string
		verify        VerifyFunc
		wantNil       bool
		wantAmbiguous bool
	}{
		{"applied", func(context.Context) (bool, error) { return true, nil }, true, false},
		{"not applied", func(context.Context) (bool, error) { return false, nil }, false, false},
		{"verify failed", func(context.Context) (bool, error) { return false, permanentErr("42P01") }, false, true},
		{"no verify", nil, false, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, _ := newTestPolicy(t, Config{})
			ctx, cancel := context.WithCancel(context.Background())
			verifyCtxAlive := true
			verify := tc.verify
			if verify != nil {
				verify = func(vctx context.Context) (bool, error) {
					verifyCtxAlive = vctx.Err() == nil
					return tc.verify(vctx)
				}
			}
			op := Write("pay", verify)
			op.fence = verifyWaits // the attempt has ended: "not applied" is final
			calls := 0
			attempt := cutOffAttempt(cancel)
			err := p.Do(ctx, op, func(ctx context.Context) error { calls++; return attempt(ctx) })
			switch {
			case calls != 1:
				t.Errorf("%d attempts; nothing may be started after the caller's cancel but the settling read", calls)
			case !verifyCtxAlive:
				t.Error("the verify ran under a context already done")
			case tc.wantNil && err != nil:
				t.Errorf("Do = %v, want nil: the verify found the write applied", err)
			case !tc.wantNil && !errors.Is(err, context.Canceled):
				t.Errorf("Do = %v, want it to match context.Canceled", err)
			case !tc.wantNil && errors.Is(err, ErrAmbiguous) != tc.wantAmbiguous:
				t.Errorf("Do = %v: matches ErrAmbiguous %v, want %v", err, errors.Is(err, ErrAmbiguous), tc.wantAmbiguous)
			}
		})
	}
}

// An attempt the caller's context ended that proves nothing was sent or
// applied — a read, a failure that says so — is the context's error alone.
func TestCutOffWithoutUnknownOutcomeIsPlain(t *testing.T) {
	verified := 0
	verify := func(context.Context) (bool, error) { verified++; return true, nil }
	cases := []struct {
		name string
		op   Op
		err  func(ctx context.Context) error
	}{
		{"idempotent", Idempotent("read"), func(ctx context.Context) error { return ctx.Err() }},
		{"safe to retry", Write("pay", verify), func(ctx context.Context) error { return &safeErr{ctx.Err()} }},
		{"not sent", Write("pay", verify), func(context.Context) error { return transient(NotSent, "dial") }},
		{"not applied", Write("pay", verify), func(context.Context) error { return permanentErr("40P01") }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, _ := newTestPolicy(t, Config{})
			ctx, cancel := context.WithCancel(context.Background())
			err := p.Do(ctx, tc.op, func(ctx context.Context) error { cancel(); return tc.err(ctx) })
			if !errors.Is(err, context.Canceled) {
				t.Errorf("Do = %v, want context.Canceled", err)
			}
			if errors.Is(err, ErrAmbiguous) || verified != 0 {
				t.Errorf("Do = %v after %d verifies; want no ambiguity and no verify", err, verified)
			}
		})
	}
}

// safeErr is pgconn's kind of error that proves nothing was sent.
type safeErr struct{ err error }

func (e *safeErr) Error() string     { return "pgconn: " + e.err.Error() }
func (e *safeErr) Unwrap() error     { return e.err }
func (e *safeErr) SafeToRetry() bool { return true }

// The settlement of a cut-off write is bounded by SettleTimeout: a verify
// that never answers ends in ErrAmbiguous and the context's error.
func TestCutOffSettlementIsBounded(t *testing.T) {
	p, _ := newTestPolicy(t, Config{SettleTimeout: 20 * time.Millisecond, MaxRetries: NoRetries})
	ctx, cancel := context.WithCancel(context.Background())
	op := Write("pay", func(vctx context.Context) (bool, error) {
		<-vctx.Done() // a verify that waits for an answer that never comes
		return false, vctx.Err()
	})
	err := p.Do(ctx, op, cutOffAttempt(cancel))
	if !errors.Is(err, ErrAmbiguous) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Do = %v; want ErrAmbiguous and context.Canceled", err)
	}
}

// A verify already running when the caller's context ends goes on: the write
// it settles failed with an unknown outcome, and its answer is the truth.
func TestVerifyOutlivesTheCallersCancel(t *testing.T) {
	p, _ := newTestPolicy(t, Config{SettleTimeout: time.Minute})
	ctx, cancel := context.WithCancel(context.Background())
	op := Write("pay", func(vctx context.Context) (bool, error) {
		cancel() // the caller gives up while the verify reads
		if vctx.Err() != nil {
			return false, vctx.Err()
		}
		return true, nil
	})
	op.fence = verifyWaits
	err := p.Do(ctx, op, func(context.Context) error { return transient(Unknown, "conn-lost") })
	if err != nil {
		t.Fatalf("Do = %v, want nil: the verify found the write applied", err)
	}
	ctx, cancel = context.WithCancel(context.Background())
	op = Write("pay", func(vctx context.Context) (bool, error) { cancel(); return false, nil })
	op.fence = verifyWaits
	calls := 0
	err = p.Do(ctx, op, func(context.Context) error { calls++; return transient(Unknown, "conn-lost") })
	if calls != 1 || !errors.Is(err, context.Canceled) || errors.Is(err, ErrAmbiguous) {
		t.Fatalf("Do = %v after %d attempts; want 1 attempt and the context's error alone (not applied)", err, calls)
	}
}

// SettleTimeout's zero value is 5 s; a negative one is refused.
func TestSettleTimeoutDefault(t *testing.T) {
	if d := (Config{}).WithDefaults().SettleTimeout; d != 5*time.Second {
		t.Errorf("default SettleTimeout %v, want 5s", d)
	}
	var ce *ConfigError
	if _, err := New(Config{SettleTimeout: -time.Second}); !errors.As(err, &ce) || ce.Field != "SettleTimeout" {
		t.Errorf("New with a negative SettleTimeout: %v, want a ConfigError naming SettleTimeout", err)
	}
}

// The Connector's autocommit write whose attempt the caller's context cut
// off after the server applied it: without an Op attached it ends in
// ErrAmbiguous and the context's error (before: the context's error alone,
// for a write that landed); with WithOp's verify it is settled: success.
// Its pinned path (a text of transaction control on an idle session) and a
// write's rows are held to the same rule.
func TestConnectorCutOffWriteIsSettled(t *testing.T) {
	cases := []struct {
		name    string
		query   string
		rows    bool
		op      bool
		wantNil bool
	}{
		{name: "autocommit", query: "ADD a 1"},
		{name: "autocommit, verified", query: "ADD a 1", op: true, wantNil: true},
		{name: "pinned text", query: "ADD a 1; COMMIT"},
		{name: "returning rows", query: "ADD a 1 RETURNING", rows: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := newFakeServer(&fault{op: "exec", match: "ADD a", apply: true, block: true},
				&fault{op: "query", match: "ADD a", apply: true, block: true})
			p := testPolicy(t, Config{})
			db := sql.OpenDB(Connector(&fakeConnector{s: srv}, p))
			defer db.Close()
			if err := db.Ping(); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go func() {
				for srv.get("a") == 0 { // applied: the server waits on, its reply unsent
					time.Sleep(time.Millisecond)
				}
				cancel()
			}()
			if tc.op {
				ctx = WithOp(ctx, Write("add", func(context.Context) (bool, error) { return srv.get("a") == 1, nil }))
			}
			var err error
			if tc.rows {
				var rows *sql.Rows
				if rows, err = db.QueryContext(ctx, tc.query); err == nil {
					for rows.Next() {
					}
					err = rows.Err()
					rows.Close()
				}
			} else {
				_, err = db.ExecContext(ctx, tc.query)
			}
			switch {
			case srv.get("a") != 1:
				t.Fatalf("a = %d; the test needs the write applied once", srv.get("a"))
			case tc.wantNil && err != nil:
				t.Errorf("got %v, want nil: the verify found the write applied", err)
			case !tc.wantNil && !(errors.Is(err, ErrAmbiguous) && errors.Is(err, context.Canceled)):
				t.Errorf("got %v; want ErrAmbiguous and context.Canceled: the write landed", err)
			}
		})
	}
}

// No goroutine or timer outlives a settlement: cut off, bounded by
// SettleTimeout, or with the caller's context ending while it runs.
func TestSettlementLeavesNoGoroutine(t *testing.T) {
	p, _ := newTestPolicy(t, Config{SettleTimeout: 20 * time.Millisecond, MaxRetries: NoRetries})
	base := runtime.NumGoroutine()
	for range 100 {
		ctx, cancel := context.WithCancel(context.Background())
		op := Write("pay", func(vctx context.Context) (bool, error) { <-vctx.Done(); return false, vctx.Err() })
		_ = p.Do(ctx, op, cutOffAttempt(cancel))
		ctx2, cancel2 := context.WithTimeout(context.Background(), time.Hour)
		_ = p.Do(ctx2, Write("pay", func(context.Context) (bool, error) { return true, nil }), func(context.Context) error { return transient(Unknown, "conn-lost") })
		cancel2()
		ctx3, cancel3 := context.WithCancel(context.Background())
		op3 := Write("pay", func(vctx context.Context) (bool, error) { cancel3(); <-vctx.Done(); return false, vctx.Err() })
		_ = p.Do(ctx3, op3, func(context.Context) error { return transient(Unknown, "conn-lost") })
	}
	for deadline := time.Now().Add(10 * time.Second); runtime.NumGoroutine() > base && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > base {
		t.Errorf("%d goroutines after 300 settlements, %d before", n, base)
	}
}

// An inner call that found its write applied (ErrValueUnknown: applied, the
// value unread) is returned as it is when the caller's context then ends,
// not wrapped as the context's error.
func TestCutOffKeepsAnInnerApplied(t *testing.T) {
	p, _ := newTestPolicy(t, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	inner := &Error{Op: "insert", Cause: ErrValueUnknown}
	err := p.Do(ctx, Write("outer", nil), func(context.Context) error { cancel(); return inner })
	if err != inner {
		t.Errorf("Do = %v (canceled %v); want the inner error as it is", err, errors.Is(err, context.Canceled))
	}
}

// An Exec whose ambiguous failure a verify settled as applied returns a
// Result: database/sql calls the driver's Result for RowsAffected, and a
// nil one panicked (GORM's Create under connection kills). What the
// statement would have reported is unknown, and says so.
func TestExecSettledAppliedHasAResult(t *testing.T) {
	srv := newFakeServer(&fault{op: "exec", err: errLost, apply: true})
	db, _ := openWrapped(t, srv, Config{})
	verify := func(context.Context) (bool, error) { return srv.get("n") == 1, nil }
	res, err := db.ExecContext(WithOp(context.Background(), Write("add-one", verify)), "ADD n 1")
	if err != nil {
		t.Fatalf("got %v, want the verify to settle it as applied", err)
	}
	n, err := res.RowsAffected()
	if !errors.Is(err, ErrValueUnknown) {
		t.Errorf("RowsAffected() = %d, %v; want an error matching ErrValueUnknown", n, err)
	}
	if _, err := res.LastInsertId(); !errors.Is(err, ErrValueUnknown) {
		t.Errorf("LastInsertId(): %v; want an error matching ErrValueUnknown", err)
	}
}

// A query that writes (INSERT … RETURNING), settled as applied by a verify,
// has no rows to return: the call says the write was applied and its result
// unknown, instead of handing database/sql nil rows.
func TestQuerySettledAppliedIsValueUnknown(t *testing.T) {
	srv := newFakeServer(&fault{op: "query", err: errLost, apply: true})
	db, _ := openWrapped(t, srv, Config{})
	verify := func(context.Context) (bool, error) { return srv.get("n") == 1, nil }
	rows, err := db.QueryContext(WithOp(context.Background(), Write("add-one", verify)), "ADD n 1 RETURNING")
	if err == nil {
		rows.Close()
		t.Fatal("got rows, want an error matching ErrValueUnknown")
	}
	if !errors.Is(err, ErrValueUnknown) || errors.Is(err, ErrAmbiguous) {
		t.Errorf("got %v; want ErrValueUnknown (applied), not ErrAmbiguous", err)
	}
	if srv.get("n") != 1 {
		t.Errorf("n = %d, want 1 (applied once)", srv.get("n"))
	}
}
