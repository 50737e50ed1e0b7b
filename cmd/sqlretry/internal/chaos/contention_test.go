package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image/png"
	"strings"
	"testing"
	"time"

	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/cmd/sqlretry/internal/engine"
	"github.com/sqlretry/sqlretry/faults"
)

func TestContentionConfigErrorsNameTheFlag(t *testing.T) {
	c := func(cfg Config) Config { cfg.Scenario = ScenarioContention; return cfg }
	cases := []struct {
		name string
		cfg  Config
		want string
	}{
		{"unknown scenario", Config{Scenario: "meteor"}, "--scenario"},
		{"hot rows in the tasks scenario", Config{HotRows: 4}, "--hot-rows"},
		{"one hot row", c(Config{HotRows: 1}), "--hot-rows"},
		{"negative hot rows", c(Config{HotRows: -2}), "--hot-rows"},
		{"too many hot rows", c(Config{HotRows: MaxHotRows + 1}), "--hot-rows"},
		{"an outage", c(Config{Duration: 2 * time.Second, Outages: []Outage{{Offset: 0, Length: time.Second}}}), "--outage"},
		{"naive", c(Config{Naive: true}), "--naive"},
		{"a fault kind not on COMMIT", c(Config{Kinds: []faults.Kind{faults.CommitNotApplied, faults.Hang}}), "--faults"},
		{"the common checks still apply", c(Config{Workers: 1000}), "--workers"},
		{"and the policy's", c(Config{Policy: PolicyConfig{BaseDelay: -time.Second}}), "--base-delay"},
	}
	for _, tc := range cases {
		err := tc.cfg.Validate()
		var ie *InputError
		if !errors.As(err, &ie) || ie.What != tc.want {
			t.Errorf("%s: Validate: got %v, want an *InputError naming %s", tc.name, err, tc.want)
		}
	}
	if err := c(Config{}).Validate(); err != nil {
		t.Fatal(err)
	}
	got := c(Config{}).WithDefaults()
	if got.HotRows != DefaultHotRows || got.Outages == nil || len(got.Outages) != 0 || got.FaultRate != 0.02 {
		t.Errorf("contention defaults: got hot rows %d, outages %v (nil %t), fault rate %v; want %d, none, 0.02",
			got.HotRows, got.Outages, got.Outages == nil, got.FaultRate, DefaultHotRows)
	}
	if got := (Config{}).WithDefaults(); got.Scenario != ScenarioTasks || got.HotRows != 0 || len(got.Outages) != 1 {
		t.Errorf("tasks defaults: got scenario %q, hot rows %d, outages %v", got.Scenario, got.HotRows, got.Outages)
	}
	if _, err := Run(context.Background(), c(Config{})); err == nil {
		t.Errorf("Run with the contention scenario: got no error, want one pointing to RunContention")
	}
}

func TestParseScenario(t *testing.T) {
	for in, want := range map[string]Scenario{"tasks": ScenarioTasks, "Contention": ScenarioContention} {
		if got, err := ParseScenario(in); err != nil || got != want {
			t.Errorf("ParseScenario(%q): got %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := ParseScenario("deadlocks"); err == nil || !strings.Contains(err.Error(), "contention") {
		t.Errorf("ParseScenario(deadlocks): got %v, want an error listing the scenarios", err)
	}
}

// sqliteErr is an error as modernc.org/sqlite reports one: package
// sqlite's classifier reads its Code().
type sqliteErr int

func (e sqliteErr) Error() string { return fmt.Sprintf("sqlite error %d", int(e)) }
func (e sqliteErr) Code() int     { return int(e) }

const (
	sqliteBusy       = sqliteErr(5)
	sqliteConstraint = sqliteErr(19)
)

// failing returns an operation that fails with err n times, then succeeds.
func failing(n int, err error) (fn func(context.Context) error, calls *int) {
	calls = new(int)
	return func(context.Context) error {
		*calls++
		if *calls <= n {
			return err
		}
		return nil
	}, calls
}

// TestModePolicies runs one call under each mode's policy, on SQLite's
// classifier and waits of a nanosecond: what each retries, how often, and
// what it draws from the budget.
func TestModePolicies(t *testing.T) {
	cfg := Config{Scenario: ScenarioContention, Engine: engine.SQLite,
		Policy: PolicyConfig{BaseDelay: time.Nanosecond, MaxDelay: time.Nanosecond}}.WithDefaults()
	cases := []struct {
		mode       string
		failures   int
		err        error
		wantErr    error // nil: the call succeeds
		wantCalls  int
		wantTokens float64 // the budget after the call; -1 for none
	}{
		// Contention: ten retries, none drawn from the budget.
		{modeSQLretry, 10, sqliteBusy, nil, 11, 10},
		{modeSQLretry, 11, sqliteBusy, sqlretry.ErrRetriesExhausted, 11, 10},
		// The old defaults: three retries, each a token.
		{modeOld, 3, sqliteBusy, nil, 4, 7},
		{modeOld, 4, sqliteBusy, sqlretry.ErrRetriesExhausted, 4, 7},
		// The blind loop retries what no retry can help, ten times.
		{modeBlind, 10, sqliteConstraint, nil, 11, -1},
		{modeSQLretry, 1, sqliteConstraint, sqliteConstraint, 1, 10},
	}
	for _, c := range cases {
		pc, op, err := cfg.modePolicy(c.mode, nil)
		if err != nil {
			t.Fatal(err)
		}
		pc.Budget = budgetFor(c.mode)
		p, err := sqlretry.New(pc)
		if err != nil {
			t.Fatal(err)
		}
		fn, calls := failing(c.failures, c.err)
		err = p.Do(context.Background(), op("x"), fn)
		name := fmt.Sprintf("%s, %d × %v", c.mode, c.failures, c.err)
		if (c.wantErr == nil) != (err == nil) || (c.wantErr != nil && !errors.Is(err, c.wantErr)) {
			t.Errorf("%s: got %v, want %v", name, err, c.wantErr)
		}
		if *calls != c.wantCalls {
			t.Errorf("%s: %d attempts, want %d", name, *calls, c.wantCalls)
		}
		tokens := p.Stats().BudgetTokens
		if c.wantTokens < 0 && tokens < 1e9 || c.wantTokens >= 0 && (tokens < c.wantTokens-0.01 || tokens > c.wantTokens+0.5) {
			// The floor adds up to a token a second: allow a little.
			t.Errorf("%s: budget %v after the call, want %v", name, tokens, c.wantTokens)
		}
	}
}

// budgetFor keeps modePolicy's choice of budget, but a fresh one per case.
func budgetFor(mode string) *sqlretry.Budget {
	if mode == modeBlind {
		return sqlretry.NoBudget
	}
	return sqlretry.DefaultBudget()
}

// TestModeOps: the pair transactions have no Verify of their own, so that
// an ambiguous COMMIT goes to the commit verifier; the blind loop alone
// calls them idempotent and replays them.
func TestModeOps(t *testing.T) {
	cfg := Config{Scenario: ScenarioContention}.WithDefaults()
	for _, mode := range contentionModes {
		_, op, err := cfg.modePolicy(mode, nil)
		if err != nil {
			t.Fatal(err)
		}
		o := op("pair")
		if blind := mode == modeBlind; o.IsIdempotent() != blind || o.Verify() != nil {
			t.Errorf("%s: op idempotent %t, verify %t; want no verify, and the blind loop alone idempotent", mode, o.IsIdempotent(), o.Verify() != nil)
		}
	}
	if _, _, err := (Config{Scenario: ScenarioContention, Policy: PolicyConfig{Rules: "5:x"}}.WithDefaults()).modePolicy(modeSQLretry, nil); err == nil {
		t.Errorf("modePolicy with bad rules: got no error")
	}
}

func TestTell(t *testing.T) {
	wrap := func(cause error) error { return &sqlretry.Error{Op: "x", Attempts: 2, Cause: cause, Err: sqliteBusy} }
	cases := []struct {
		err   error
		want  outcome
		cause string
	}{
		{nil, toldOK, ""},
		{wrap(sqlretry.ErrBudgetExhausted), toldFailed, "budget_exhausted"},
		{wrap(sqlretry.ErrRetriesExhausted), toldFailed, "retries_exhausted"},
		{wrap(sqlretry.ErrAmbiguous), toldAmbiguous, "ambiguous"},
		{fmt.Errorf("x: %w", context.Canceled), toldCanceled, "canceled"},
		{sqliteConstraint, toldFailed, "other"},
	}
	for _, c := range cases {
		o, cause := tell(c.err)
		if o != c.want || cause != c.cause {
			t.Errorf("tell(%v): got %d, %q; want %d, %q", c.err, o, cause, c.want, c.cause)
		}
	}
}

func TestCountPairInvariants(t *testing.T) {
	told := map[string]outcome{"ok": toldOK, "lost": toldOK, "twice": toldOK, "failed": toldFailed, "liar": toldFailed, "amb": toldAmbiguous}
	applied := map[string]int{"ok": 1, "twice": 3, "liar": 1, "amb": 1}
	got := countPairInvariants(told, applied, 2*6)
	want := PairInvariants{Lost: 1, Duplicated: 2, Misreported: 1}
	if got != want {
		t.Errorf("countPairInvariants: got %+v, want %+v", got, want)
	}
	if got := countPairInvariants(told, applied, 2*6+1); got.Unbalanced != 1 || got.Total() != 5 {
		t.Errorf("a hot-row total one off: got %+v (total %d), want unbalanced 1, total 5", got, got.Total())
	}
	if got := countPairInvariants(map[string]outcome{"a": toldOK}, map[string]int{"a": 1}, 2); got.Total() != 0 {
		t.Errorf("a clean run: got %+v, want no violation", got)
	}
}

// contentionFixture is a report as three modes would leave it.
func contentionFixture() *ContentionReport {
	r := &ContentionReport{Scenario: "contention", Engine: "postgres", Seed: 1, DurationMS: 2000, Workers: 8, HotRows: 2, FaultRate: 0.02,
		Settings: []string{"deadlock_timeout 20ms"}}
	for i, mode := range contentionModes {
		m := ModeReport{Mode: mode, Policy: modeTitles[mode] + " policy", Calls: 1000, Succeeded: int64(1000 - 100*i), Failed: map[string]int64{}}
		m.SuccessRate = fraction(m.Succeeded, m.Calls)
		for el := time.Duration(0); el <= 2*time.Second; el += 100 * time.Millisecond {
			s := Sample{Mode: mode, Elapsed: el, Ops: int64(el / time.Millisecond / 2), Budget: 10 - float64(i)*float64(el)/float64(time.Second)}
			s.OK = s.Ops - int64(i)*s.Ops/10
			if mode == modeBlind {
				s.Budget = -1
			}
			m.Samples = append(m.Samples, s)
			d := DamagePoint{ElapsedMS: el.Milliseconds()}
			if mode == modeBlind {
				d.AppliedTwice = int(el / (300 * time.Millisecond))
			}
			m.Damage = append(m.Damage, d)
		}
		r.Modes = append(r.Modes, m)
	}
	r.Modes[1].Failed["budget_exhausted"] = 100
	r.Modes[1].BudgetRefusals, r.Modes[1].ContentionBudgetRefusals = 120, 100
	r.Modes[2].Invariants.Duplicated = 7
	return r
}

func TestContentionReportCheck(t *testing.T) {
	r := contentionFixture()
	r.check()
	if !r.OK || len(r.Problems) != 0 {
		t.Errorf("the other modes' refusals and duplicates fail no check: got ok %t, %q", r.OK, r.Problems)
	}
	r.Modes[0].ContentionBudgetRefusals = 2
	r.Modes[0].Invariants.Lost = 1
	r.check()
	if r.OK || len(r.Problems) != 2 || !strings.Contains(r.Problems[0], "lost 1") || !strings.Contains(r.Problems[1], "refused 2 retries of contention") {
		t.Errorf("sqlretry's violations: got ok %t, %q; want both named", r.OK, r.Problems)
	}
	r = &ContentionReport{Interrupted: true}
	r.check()
	if r.OK {
		t.Errorf("an interrupted run with no mode: got ok")
	}
}

func TestContentionWriteText(t *testing.T) {
	r := contentionFixture()
	r.check()
	var buf bytes.Buffer
	r.WriteText(&buf)
	out := buf.String()
	for _, want := range []string{
		"postgres, 2s per policy, 8 workers on 2 hot rows, seed 1, COMMIT fault rate 0.02",
		"engine setting: deadlock_timeout 20ms",
		"sqlretry  old defaults  blind loop",
		"success rate  100.000%       90.000%     80.000%",
		"failed: budget exhausted         0           100           0",
		"of contention         0           100           0",
		"applied twice         0             0           7",
		"OK: sqlretry lost nothing",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	r.Modes[0].Invariants.Misreported = 3
	r.check()
	buf.Reset()
	r.WriteText(&buf)
	if !strings.Contains(buf.String(), "FAILED:\n  sqlretry: lost 0, duplicated 0, misreported 3") {
		t.Errorf("a failed check: report lacks the problem:\n%s", buf.String())
	}
}

func TestSuccessRates(t *testing.T) {
	at := func(ms, ops, ok int64) Sample {
		return Sample{Elapsed: time.Duration(ms) * time.Millisecond, Ops: ops, OK: ok}
	}
	samples := []Sample{at(0, 0, 0), at(500, 10, 10), at(1000, 20, 15), at(1500, 20, 15), at(2000, 40, 25), at(2500, 40, 25), at(3000, 40, 25)}
	got := successRates(samples, time.Second)
	// At 1.5 s the window is (0.5 s, 1.5 s]: 10 calls, 5 OK. At 2.5 s
	// and 3 s, the windows since 1.5 s and 2 s: 20 calls 10 OK, then none.
	want := []struct{ x, y float64 }{{0.5, 100}, {1, 75}, {1.5, 50}, {2, 50}, {2.5, 50}}
	if len(got) != len(want) {
		t.Fatalf("successRates: got %v, want %v", got, want)
	}
	for i, w := range want {
		if got[i].X != w.x || got[i].Y != w.y {
			t.Errorf("point %d: got (%v, %v), want (%v, %v)", i, got[i].X, got[i].Y, w.x, w.y)
		}
	}
	if b := budgetLevels([]Sample{{Budget: -1}, {Elapsed: time.Second, Budget: 3}}); len(b) != 1 || b[0].Y != 3 {
		t.Errorf("budgetLevels: got %v, want the one budgeted sample", b)
	}
}

func TestDrawContentionPlot(t *testing.T) {
	var buf bytes.Buffer
	if err := DrawContentionPlot(&buf, "png", contentionFixture()); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&buf)
	if err != nil {
		t.Fatalf("png: %v", err)
	}
	if b := img.Bounds(); b.Dx() < 400 || b.Dy() < 400 {
		t.Errorf("png: %dx%d pixels, want at least 400x400", b.Dx(), b.Dy())
	}
	buf.Reset()
	if err := DrawContentionPlot(&buf, "svg", contentionFixture()); err != nil || !strings.Contains(buf.String(), "<svg") {
		t.Errorf("svg: got %v, %d bytes", err, buf.Len())
	}
	if err := DrawContentionPlot(&buf, "gif", contentionFixture()); err == nil {
		t.Errorf("gif: got no error")
	}
	if err := DrawContentionPlot(&buf, "png", &ContentionReport{}); err == nil {
		t.Errorf("no modes: got no error")
	}
	if err := WriteContentionPlot(t.TempDir()+"/x.bmp", contentionFixture()); err == nil {
		t.Errorf("WriteContentionPlot .bmp: got no error")
	}
}

// TestContentionOnInjectedClock runs the scenario on SQLite on a clock that
// steps 100 ms at a sample only after ten more calls finished: each mode
// runs ten steps and at least a hundred calls however slow the machine.
// Every COMMIT fault loses its reply (a rate of 0.3), so the blind loop
// applies some twice and sqlretry settles every one by its verify.
func TestContentionOnInjectedClock(t *testing.T) {
	clk := &stepClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	var last int64
	mode := ""
	cfg := Config{
		Duration: time.Second, Workers: 3, Seed: 3, FaultRate: 0.3, Kinds: []faults.Kind{faults.CommitAppliedReplyLost},
		Policy:      PolicyConfig{BaseDelay: time.Millisecond, MaxDelay: 4 * time.Millisecond},
		Now:         clk.Now,
		SampleEvery: 5 * time.Millisecond,
		Progress: func(s Sample) {
			if s.Mode != mode {
				mode, last = s.Mode, 0
			}
			if s.Ops >= last+10 {
				last = s.Ops
				clk.step(100 * time.Millisecond)
			}
		},
	}
	r, err := RunContention(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK || r.Scenario != "contention" || r.Engine != "sqlite" || len(r.Settings) != 1 {
		t.Errorf("report: ok %t (%q), scenario %q, engine %q, settings %q", r.OK, r.Problems, r.Scenario, r.Engine, r.Settings)
	}
	if len(r.Modes) != 3 {
		t.Fatalf("modes: got %d, want 3", len(r.Modes))
	}
	for i, m := range r.Modes {
		if m.Mode != contentionModes[i] || m.Calls < 100 || m.Faults == 0 || len(m.Samples) < 10 {
			t.Errorf("mode %d: got %s with %d calls, %d faults, %d samples; want %s with >= 100 calls, faults and >= 10 samples",
				i, m.Mode, m.Calls, m.Faults, len(m.Samples), contentionModes[i])
		}
		for _, s := range m.Samples {
			if s.Mode != m.Mode || s.Elapsed > cfg.Duration {
				t.Errorf("%s: sample %+v", m.Mode, s)
				break
			}
		}
	}
	ours, blind := r.Modes[0], r.Modes[2]
	// With waits of a few milliseconds a deferred SQLite transaction may
	// lose the race for the write lock more than ten times in a row
	// (retries_exhausted); nothing else may end one of sqlretry's calls:
	// contention draws no token, and every lost COMMIT reply is settled.
	if ours.Invariants.Total() != 0 || ours.ContentionBudgetRefusals != 0 || ours.BudgetRefusals != 0 ||
		ours.Succeeded+ours.Failed["retries_exhausted"] != ours.Calls || ours.Succeeded == 0 {
		t.Errorf("sqlretry: got %+v, %d budget refusals (%d of contention), %d of %d calls OK (failed %v); want no violation, no refusal, every call OK but for contention retries running out",
			ours.Invariants, ours.BudgetRefusals, ours.ContentionBudgetRefusals, ours.Succeeded, ours.Calls, ours.Failed)
	}
	if blind.Invariants.Duplicated == 0 {
		t.Errorf("blind loop: got %+v, want calls applied twice (its COMMIT replies were lost)", blind.Invariants)
	}
}

// TestPairDamage places each call's damage at the time it returned: a
// call applied three times counts two copies too many, a call told OK and
// not applied is lost, a call told it failed and applied is misreported;
// a call that returned after the last sample counts in the last point.
func TestPairDamage(t *testing.T) {
	told := map[string]outcome{"twice": toldOK, "lost": toldOK, "mis": toldFailed, "fine": toldOK, "late": toldOK}
	copies := map[string]int{"twice": 3, "mis": 1, "fine": 1, "late": 2}
	at := map[string]time.Duration{"twice": 100 * time.Millisecond, "lost": 250 * time.Millisecond, "mis": 250 * time.Millisecond,
		"fine": 50 * time.Millisecond, "late": 900 * time.Millisecond}
	samples := []Sample{{Elapsed: 0}, {Elapsed: 200 * time.Millisecond}, {Elapsed: 400 * time.Millisecond}, {Elapsed: 500 * time.Millisecond}}
	got := pairDamage(told, copies, at, samples)
	want := []DamagePoint{
		{ElapsedMS: 0},
		{ElapsedMS: 200, AppliedTwice: 2},
		{ElapsedMS: 400, AppliedTwice: 2, Lost: 1, Misreported: 1},
		{ElapsedMS: 500, AppliedTwice: 3, Lost: 1, Misreported: 1},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d points, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("point %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
}
