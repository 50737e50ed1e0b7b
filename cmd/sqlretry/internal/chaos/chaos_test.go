package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image/png"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sqlretry/sqlretry/cmd/sqlretry/internal/engine"
	"github.com/sqlretry/sqlretry/faults"
	"github.com/sqlretry/sqlretry/taskstore"
)

func TestParseOutage(t *testing.T) {
	cases := []struct {
		in      string
		want    Outage
		wantErr bool
	}{
		{"3s@8s", Outage{Offset: 8 * time.Second, Length: 3 * time.Second}, false},
		{"500ms@0s", Outage{Length: 500 * time.Millisecond}, false},
		{"3s", Outage{}, true},
		{"0s@1s", Outage{}, true},
		{"3s@-1s", Outage{}, true},
		{"x@1s", Outage{}, true},
		{"1s@y", Outage{}, true},
	}
	for _, c := range cases {
		got, err := ParseOutage(c.in)
		if (err != nil) != c.wantErr || got != c.want {
			t.Errorf("ParseOutage(%q): got %v, %v; want %v, error %t", c.in, got, err, c.want, c.wantErr)
		}
	}
}

func TestDefaultOutage(t *testing.T) {
	cases := []struct {
		run  time.Duration
		want Outage
	}{
		{20 * time.Second, Outage{Offset: 8333333334 * time.Nanosecond, Length: 3333333333 * time.Nanosecond}},
		{60 * time.Second, Outage{Offset: 28 * time.Second, Length: 4 * time.Second}},
		{time.Second, Outage{Offset: 400 * time.Millisecond, Length: 200 * time.Millisecond}},
	}
	for _, c := range cases {
		got := DefaultOutage(c.run)
		if got != c.want {
			t.Errorf("DefaultOutage(%s): got %v, want %v", c.run, got, c.want)
		}
		if got.Offset+got.Length > c.run {
			t.Errorf("DefaultOutage(%s) = %v ends after the run", c.run, got)
		}
	}
}

func TestRedactor(t *testing.T) {
	cases := []struct {
		dsn, text, want string
	}{
		{"postgres://app:hunter2@db:5432/x", "cannot connect to postgres://app:hunter2@db:5432/x", "cannot connect to postgres://app:xxxxx@db:5432/x"},
		{"postgres://app:p%40ss@db/x", "dial postgres://app:p%40ss@db/x: p@ss", "dial postgres://app:xxxxx@db/x: xxxxx"},
		{"host=db user=app password=hunter2 dbname=x", "bad password=hunter2", "bad password=xxxxx"},
		{"host=db password='hunter2'", "hunter2", "xxxxx"},
		{"app:hunter2@tcp(db:3306)/x", "Error 1045: app:hunter2@tcp", "Error 1045: app:xxxxx@tcp"},
		{"postgres://app@db/x", "postgres://app@db/x", "postgres://app@db/x"},
		{"", "nothing", "nothing"},
		// Unparsable (bad port): the fallback takes everything up to the next key.
		{"host=db port=bad password = hunter2", "cannot parse `host=db port=bad password = hunter2`", "cannot parse `host=db port=bad password = xxxxx`"},
		{"host=db port=bad password='a b c9' user=x", "password='a b c9' user=x", "password='xxxxx' user=x"},
		{"host=db port=bad password=a b c9 user=x", "password=a b c9 user=x", "password=xxxxx user=x"},
		// Parsable: the password pgx reads, quoted or spaced, and its escapes.
		{"host=db password = 'a b c9'", "pw a b c9 / a+b+c9 / a%20b%20c9", "pw xxxxx / xxxxx / xxxxx"},
		{"postgres://app:a%20b%40c@db/x", "a b@c a%20b%40c", "xxxxx xxxxx"},
		{"app:p\"w@tcp(db:3306)/x", `{"err":"p\"w"}`, `{"err":"xxxxx"}`},
	}
	for _, c := range cases {
		if got := NewRedactor(c.dsn).String(c.text); got != c.want {
			t.Errorf("NewRedactor(%q).String(%q): got %q, want %q", c.dsn, c.text, got, c.want)
		}
	}
	r := NewRedactor("postgres://app:hunter2@db/x")
	err := r.Error(inputErr("--dsn", errors.New("auth failed for hunter2")))
	var ie *InputError
	if !errors.As(err, &ie) || ie.What != "--dsn" || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("Redactor.Error: got %v (%T), want an *InputError for --dsn without the password", err, err)
	}
}

func TestConfigErrorsNameTheFlag(t *testing.T) {
	cases := []struct {
		cfg  Config
		want string
	}{
		{Config{Engine: engine.Engine(99)}, "--engine"},
		{Config{Engine: engine.SQLServer, DSN: "sqlserver://x"}, "--engine"},
		{Config{Engine: engine.Postgres}, "--dsn"},
		{Config{Duration: -time.Second}, "--duration"},
		{Config{Duration: math.MaxInt64/4 + 1}, "--duration"},
		{Config{Duration: MaxDuration + 1}, "--duration"},
		{Config{Workers: 1000}, "--workers"},
		{Config{FaultRate: 2}, "--fault-rate"},
		{Config{Duration: 2 * time.Second, Outages: []Outage{{Offset: time.Second, Length: 2 * time.Second}}}, "--outage"},
		{Config{Policy: PolicyConfig{Rules: "1205:x"}}, "--rules"},
		{Config{Policy: PolicyConfig{BaseDelay: time.Second, MaxDelay: time.Millisecond}}, "--max-delay"},
		{Config{Policy: PolicyConfig{BaseDelay: -time.Second}}, "--base-delay"},
		{Config{Policy: PolicyConfig{CommandTimeout: -time.Second}}, "--command-timeout"},
	}
	for _, c := range cases {
		err := c.cfg.Validate()
		var ie *InputError
		if !errors.As(err, &ie) || ie.What != c.want {
			t.Errorf("Validate(%+v): got %v, want an *InputError naming %s", c.cfg, err, c.want)
		}
	}
	if err := (Config{}).Validate(); err != nil {
		t.Fatal(err)
	}
	got := Config{}.WithDefaults()
	if got.Engine != engine.SQLite || got.Duration != 20*time.Second || got.Workers != 8 || got.FaultRate != 0.02 ||
		len(got.Outages) != 1 || got.Seed != 1 || got.Policy.CommandTimeout != DefaultCommandTimeout {
		t.Errorf("defaults: got %+v", got)
	}
}

func TestShapeOf(t *testing.T) {
	cases := []struct {
		op   string
		want shape
		ok   bool
	}{
		{"taskstore.persist", shapePersist, true},
		{"taskstore.naive-persist", shapePersist, true},
		{"taskstore.persist verify", shapePersist, true},
		{"taskstore.set-status", shapeSetStatus, true},
		{"taskstore.advance-run verify", shapeAdvance, true},
		{"taskstore.naive-advance-run", shapeAdvance, true},
		{"taskstore.claim", shapeClaim, true},
		{"taskstore.start", shapeClaim, true},
		{"taskstore.complete verify", shapeClaim, true},
		{"taskstore.get", shapeRead, true},
		{"taskstore.migrate", 0, false},
	}
	for _, c := range cases {
		got, ok := shapeOf(c.op)
		if got != c.want || ok != c.ok {
			t.Errorf("shapeOf(%q): got %v, %t; want %v, %t", c.op, got, ok, c.want, c.ok)
		}
	}
}

func TestPercentile(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 100; i++ {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	cases := []struct {
		p    float64
		want time.Duration
	}{{0.5, 50 * time.Millisecond}, {0.99, 99 * time.Millisecond}, {1, 100 * time.Millisecond}, {0, time.Millisecond}}
	for _, c := range cases {
		if got := percentile(d, c.p); got != c.want {
			t.Errorf("percentile(1..100 ms, %v): got %v, want %v", c.p, got, c.want)
		}
	}
	if got := percentile(nil, 0.5); got != 0 {
		t.Errorf("percentile(nil): got %v, want 0", got)
	}
}

// stepClock is a clock that moves only when told: the run's outage window
// is then a fixed span of samples, whatever the machine's speed.
type stepClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *stepClock) step(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// TestOutageOnInjectedClock runs the harness on a clock that advances 100 ms
// per sample, so the outage covers exactly samples 10 to 14: nothing may
// succeed while it is on, calls must be refused, and every invariant holds.
func TestOutageOnInjectedClock(t *testing.T) {
	clk := &stepClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	const step = 100 * time.Millisecond
	cfg := Config{
		Duration: 2 * time.Second, Workers: 4, Seed: 11, FaultRate: 0.05,
		Outages:     []Outage{{Offset: time.Second, Length: 500 * time.Millisecond}},
		Policy:      PolicyConfig{BaseDelay: time.Millisecond, MaxDelay: 4 * time.Millisecond},
		Now:         clk.Now,
		SampleEvery: 40 * time.Millisecond,
		Progress:    func(Sample) { clk.step(step) },
	}
	r, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK {
		t.Errorf("invariants: got %+v, want all 0\n%v", r.Invariants, r.Problems)
	}
	var on []Sample
	for _, s := range r.Samples {
		in := s.Elapsed >= time.Second && s.Elapsed < 1500*time.Millisecond
		if s.Outage != in {
			t.Errorf("sample at %s: outage %t, want %t", s.Elapsed, s.Outage, in)
		}
		if in {
			on = append(on, s)
		}
	}
	if len(on) != 5 {
		t.Fatalf("got %d samples during the outage, want 5", len(on))
	}
	// An operation begun before the outage may have reached the database
	// then and finish OK during it (its command timeout runs on real time,
	// the window on this clock): only operations begun inside the window
	// count, and none of those may be told OK before it ends.
	if len(r.Outage.Windows) != 1 {
		t.Fatalf("outage windows: got %d, want 1", len(r.Outage.Windows))
	}
	if w := r.Outage.Windows[0]; w.OKInside != 0 || w.Calls == 0 {
		t.Errorf("outage window: got %d operations begun and told OK inside it (of %d calls), want 0 of > 0", w.OKInside, w.Calls)
	}
	// Each shape's operations begun in the outage add up to the window's
	// calls, and each operation is told exactly one outcome.
	inOutage := 0
	for name, sh := range r.Shapes {
		inOutage += sh.InOutage
		if sh.OK+sh.Failed+sh.Ambiguous+sh.Canceled != sh.Operations || sh.InOutage > sh.Operations {
			t.Errorf("shape %s: %+v: want ok + failed + ambiguous + canceled = operations >= in_outage", name, sh)
		}
	}
	if int64(inOutage) != r.Outage.Windows[0].Calls {
		t.Errorf("operations begun in the outage: the shapes count %d, the window %d", inOutage, r.Outage.Windows[0].Calls)
	}
	if w := r.Outage.Windows[0]; w.Refused != r.Outage.Refused {
		t.Errorf("outage window refused: got %d, want the run's %d", w.Refused, r.Outage.Refused)
	}
	if r.Outage.Calls == 0 || r.Outage.Refused == 0 || r.Faults[string(faults.Outage)] != r.Outage.Refused {
		t.Errorf("outage: got %+v with %d outage faults, want calls and refusals, counted alike", r.Outage, r.Faults[string(faults.Outage)])
	}
	if r.Outage.Attempts < r.Outage.Calls {
		t.Errorf("outage: got %d attempts for %d calls, want attempts >= calls", r.Outage.Attempts, r.Outage.Calls)
	}
	if r.Outage.RecoveryMS < 0 {
		t.Errorf("outage recovery: got %v ms, want an operation to succeed after the outage", r.Outage.RecoveryMS)
	}
	// The plot of the run decodes.
	var buf bytes.Buffer
	if err := DrawPlot(&buf, "png", r, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := png.Decode(&buf); err != nil {
		t.Errorf("DrawPlot png: %v", err)
	}
	if err := DrawPlot(&buf, "gif", r, nil); err == nil {
		t.Errorf("DrawPlot gif: got no error, want an unknown-format error")
	}
}

// TestOutageWindowsCountTheirOwnRefusals runs two outages on a stepped
// clock: each window's refusals are its own, and they add up to the run's.
// The clock steps only at a sample that follows finished operations, so
// each window sees calls however slowly a loaded machine runs the workers.
func TestOutageWindowsCountTheirOwnRefusals(t *testing.T) {
	clk := &stepClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	var ops int64
	cfg := Config{
		Duration: 2 * time.Second, Workers: 3, Seed: 5, FaultRate: -1,
		Outages: []Outage{
			{Offset: 400 * time.Millisecond, Length: 300 * time.Millisecond},
			{Offset: 1200 * time.Millisecond, Length: 300 * time.Millisecond},
		},
		Policy:      PolicyConfig{BaseDelay: time.Millisecond, MaxDelay: 4 * time.Millisecond},
		Now:         clk.Now,
		SampleEvery: 40 * time.Millisecond,
		Progress: func(s Sample) {
			if s.Ops > ops {
				ops = s.Ops
				clk.step(100 * time.Millisecond)
			}
		},
	}
	r, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Outage.Windows) != 2 {
		t.Fatalf("outage windows: got %d, want 2", len(r.Outage.Windows))
	}
	total := 0
	for i, w := range r.Outage.Windows {
		if w.Refused == 0 || w.Calls == 0 {
			t.Errorf("window %d: got %d refused of %d calls, want both > 0", i, w.Refused, w.Calls)
		}
		if w.OKInside != 0 {
			t.Errorf("window %d: got %d operations told OK inside it, want 0", i, w.OKInside)
		}
		total += w.Refused
	}
	if total != r.Outage.Refused {
		t.Errorf("windows' refusals: got %d in all, want the run's %d", total, r.Outage.Refused)
	}
}

// TestNaiveSeriesDamage runs one worker (its calls, and so the seeded
// faults, in a fixed order) with lost COMMIT replies and no retry budget:
// series reach their MaxRuns in both runs, so ended_early and
// double_counted check something; blind replay breaks them, ours not.
func TestNaiveSeriesDamage(t *testing.T) {
	base := Config{
		Duration: 3 * time.Second, Workers: 1, Seed: 7, FaultRate: 0.4, Outages: []Outage{},
		Kinds:  []faults.Kind{faults.CommitAppliedReplyLost},
		Policy: PolicyConfig{BaseDelay: time.Millisecond, MaxDelay: 2 * time.Millisecond, NoBudget: true, MaxRetries: 5},
	}
	runs := map[bool]*RunReport{}
	for _, naive := range []bool{false, true} {
		cfg := base
		cfg.Naive = naive
		r, err := Run(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if naive && r.SeriesCompleted == 0 {
			// How many series a run completes depends on how fast the
			// machine is; the naive run's damage below needs some.
			t.Errorf("naive: got 0 series at their max runs, want > 0")
		}
		runs[naive] = r
	}
	ours, naive := runs[false].Invariants, runs[true].Invariants
	t.Logf("ours: %d series completed, %+v; naive: %d, %+v", runs[false].SeriesCompleted, ours, runs[true].SeriesCompleted, naive)
	if ours.EndedEarly+ours.DoubleCounted != 0 {
		t.Errorf("ours: got ended_early %d, double_counted %d, want 0", ours.EndedEarly, ours.DoubleCounted)
	}
	if naive.EndedEarly == 0 || naive.DoubleCounted == 0 {
		t.Errorf("naive: got ended_early %d, double_counted %d, want both > 0", naive.EndedEarly, naive.DoubleCounted)
	}
}

// TestPolicyReport: the report states the policy the run applied, zeros
// resolved as sqlretry.New resolves them, and the crl rules when set.
func TestPolicyReport(t *testing.T) {
	cases := []struct {
		name     string
		cfg      Config
		want     PolicyReport
		wantText string
	}{
		{"defaults", Config{Policy: PolicyConfig{CommandTimeout: time.Second}},
			PolicyReport{MaxRetries: 3, BaseDelay: "100ms", MaxDelay: "5s", CommandTimeout: "1s", Budget: true},
			"policy: max retries 3, base delay 100ms, max delay 5s, command timeout 1s, budget on\n"},
		{"base delay above the default cap", Config{Policy: PolicyConfig{BaseDelay: 6 * time.Second, CommandTimeout: time.Second}},
			PolicyReport{MaxRetries: 3, BaseDelay: "6s", MaxDelay: "6s", CommandTimeout: "1s", Budget: true}, "max delay 6s"},
		{"no retries, no budget, naive", Config{Naive: true, Policy: PolicyConfig{MaxRetries: -1, BaseDelay: 5 * time.Millisecond, MaxDelay: 20 * time.Millisecond, NoBudget: true, CommandTimeout: 2 * time.Second}},
			PolicyReport{MaxRetries: 0, BaseDelay: "5ms", MaxDelay: "20ms", CommandTimeout: "2s", BlindReplay: true}, "max retries 0, base delay 5ms, max delay 20ms, command timeout 2s, budget off"},
		{"rules", Config{Policy: PolicyConfig{MaxRetries: 2, Rules: "5,6:4,10", CommandTimeout: time.Second}},
			PolicyReport{MaxRetries: 2, BaseDelay: "100ms", MaxDelay: "5s", CommandTimeout: "1s", Budget: true, Rules: "5,6:4,10"}, "; rules: 5,6:4,10 "},
	}
	for _, c := range cases {
		got := policyReport(c.cfg)
		if got != c.want {
			t.Errorf("%s: policyReport: got %+v, want %+v", c.name, got, c.want)
		}
		var buf bytes.Buffer
		(&RunReport{Policy: got, OK: true}).WriteText(&buf)
		if !strings.Contains(buf.String(), c.wantText) {
			t.Errorf("%s: report: got\n%s\nwant it to contain %q", c.name, buf.String(), c.wantText)
		}
	}
}

// TestCountLostClaims: every lost claim comes with a problem line that
// the VIOLATED report prints, and only a claim told its outcome is unknown
// excuses a lease nobody holds: its own. A run whose outage refused claims
// outright (the budget, the breaker) cannot hide as many lost leases, nor
// can an ambiguous claim that never landed hide another's.
func TestCountLostClaims(t *testing.T) {
	claimed := map[string]string{"tok-a": "task-a", "tok-b": "task-b"}
	claim := func(tok string, o taskstore.Outcome) taskstore.Entry {
		return taskstore.Entry{Kind: taskstore.OpClaim, ID: tok, Outcome: o}
	}
	cases := []struct {
		name     string
		leases   []lease
		entries  []taskstore.Entry
		want     int
		wantLine string
	}{
		{"held by their claims", []lease{{"task-a", "tok-a"}, {"task-b", "tok-b"}}, nil, 0, ""},
		{"replayed claim", []lease{{"task-c", "tok-a"}}, nil, 1, "task task-c is leased under claim token tok-a, whose caller was handed task task-a"},
		{"orphan explained by its own ambiguous claim", []lease{{"task-x", "tok-x"}},
			[]taskstore.Entry{claim("tok-x", taskstore.ToldAmbiguous)}, 0, ""},
		{"orphan no claim was told of", []lease{{"task-x", "tok-x"}}, nil, 1,
			"task task-x is leased under claim token tok-x nobody holds: no claim was told of this token"},
		{"definite failures excuse nothing", []lease{{"task-y", "tok-y"}},
			[]taskstore.Entry{claim("tok-f1", taskstore.ToldFailed), claim("tok-f2", taskstore.ToldFailed), claim("tok-f3", taskstore.ToldFailed)}, 1,
			"task task-y is leased under claim token tok-y nobody holds"},
		{"a claim told failed whose lease is there", []lease{{"task-f", "tok-f"}},
			[]taskstore.Entry{claim("tok-f", taskstore.ToldFailed)}, 1, "the claim that drew it was told failed, not an unknown outcome"},
		{"a cancelled claim whose lease is there", []lease{{"task-c", "tok-c"}},
			[]taskstore.Entry{claim("tok-c", taskstore.ToldCanceled)}, 1, "the claim that drew it was told canceled"},
		{"an ambiguous claim excuses only its own lease", []lease{{"task-y", "tok-y"}},
			[]taskstore.Entry{claim("tok-x", taskstore.ToldAmbiguous)}, 1, "task task-y is leased under claim token tok-y nobody holds"},
		{"one ambiguous claim, two of its own leases", []lease{{"task-x", "tok-x"}, {"task-z", "tok-x"}},
			[]taskstore.Entry{claim("tok-x", taskstore.ToldAmbiguous)}, 1, "task task-z is leased under claim token tok-x nobody holds"},
	}
	// An outage refused 30 claims (budget exhausted) while 30 leases were
	// lost under tokens nobody was told of.
	var refused []taskstore.Entry
	var orphans []lease
	for i := range 30 {
		refused = append(refused, claim(fmt.Sprintf("tok-refused-%d", i), taskstore.ToldFailed))
		orphans = append(orphans, lease{fmt.Sprintf("task-%d", i), fmt.Sprintf("tok-orphan-%d", i)})
	}
	cases = append(cases, struct {
		name     string
		leases   []lease
		entries  []taskstore.Entry
		want     int
		wantLine string
	}{"an outage's refused claims", orphans, refused, 30, "task task-0 is leased under claim token tok-orphan-0 nobody holds"})
	for _, c := range cases {
		got, problems := countLostClaims(c.leases, claimed, c.entries)
		if got != c.want {
			t.Errorf("%s: got %d lost claims, want %d", c.name, got, c.want)
		}
		if (len(problems) > 0) != (got > 0) {
			t.Errorf("%s: got %d lost claims with problems %q, want a problem line exactly when some are lost", c.name, got, problems)
		}
		r := &RunReport{Mode: "naive", Invariants: Invariants{LostClaims: got}, Problems: problems, OK: got == 0}
		var buf bytes.Buffer
		r.writeInvariants(&buf)
		if c.wantLine != "" && !strings.Contains(buf.String(), c.wantLine) {
			t.Errorf("%s: report: got\n%s\nwant the reason %q", c.name, buf.String(), c.wantLine)
		}
	}
}
