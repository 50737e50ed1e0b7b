package chaos

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/faults"
	"github.com/sqlretry/sqlretry/taskstore"
)

// RunReport is what one run did and found. Its JSON form is the command's
// --json document (the naive run's sits beside it under "naive").
type RunReport struct {
	Scenario   string                 `json:"scenario"` // "tasks"
	Engine     string                 `json:"engine"`
	Mode       string                 `json:"mode"` // "sqlretry", or "naive" for blind replay
	Seed       uint64                 `json:"seed"`
	DurationMS int64                  `json:"duration_ms"`
	Workers    int                    `json:"workers"`
	FaultRate  float64                `json:"fault_rate"`
	Policy     PolicyReport           `json:"policy"`
	Operations int                    `json:"operations"`
	OpsPerSec  float64                `json:"ops_per_second"`
	Faults     map[string]int         `json:"faults"`
	Wire       *WireReport            `json:"wire,omitempty"`
	Shapes     map[string]ShapeReport `json:"shapes"`
	Invariants Invariants             `json:"invariants"`
	Outage     OutageReport           `json:"outage"`
	Latency    Latency                `json:"latency"`
	Retries    int64                  `json:"retries"`
	// SeriesCompleted counts the workers' series found at their MaxRuns
	// (SeriesMaxRuns each): the ended_early and double_counted checks
	// have something to check only when some did.
	SeriesCompleted int64 `json:"series_completed"`
	SeriesMaxRuns   int   `json:"series_max_runs"`
	// BudgetExhausted counts retries the budget refused.
	BudgetExhausted int64    `json:"budget_exhausted"`
	Interrupted     bool     `json:"interrupted,omitempty"`
	Problems        []string `json:"problems,omitempty"`
	OK              bool     `json:"ok"`

	// Samples are the run's time series, for the plot.
	Samples []Sample `json:"-"`
	// Windows are the outages on the run's clock, for the plot.
	Windows []Outage `json:"-"`
}

// PolicyReport is the policy under test, as the run applied it.
type PolicyReport struct {
	MaxRetries     int    `json:"max_retries"`
	BaseDelay      string `json:"base_delay"`
	MaxDelay       string `json:"max_delay"`
	CommandTimeout string `json:"command_timeout"`
	Budget         bool   `json:"budget"`
	Rules          string `json:"rules,omitempty"`
	BlindReplay    bool   `json:"blind_replay"`
}

// WireReport counts what the proxy injected outside the outages.
type WireReport struct {
	Proxy       string `json:"proxy"`
	Connections int    `json:"connections"`
	Commits     int    `json:"commits_seen"`
	Faults      int    `json:"faults"` // resets and cuts after COMMIT outside outages
	Reset       int    `json:"reset"`
	CutCommit   int    `json:"cut_after_commit"`
}

// ShapeReport is one write shape's account.
type ShapeReport struct {
	Operations int `json:"operations"`
	OK         int `json:"ok"`
	Failed     int `json:"failed"` // a definite error: a conflict, retries or budget spent
	// Faults counts the failed attempts the policy saw, by injected fault
	// kind; "other_transient" counts transient errors the fault driver did
	// not inject: wire faults through the proxy, real lock or busy errors.
	Faults  map[string]int `json:"faults"`
	Retries int            `json:"retries"`
	// VerifiedApplied and VerifiedNotApplied count ambiguous failures a
	// verify settled.
	VerifiedApplied    int `json:"verified_applied"`
	VerifiedNotApplied int `json:"verified_not_applied"`
	// Ambiguous counts calls that returned ErrAmbiguous: the caller was
	// told the outcome is unknown, never told a guess.
	Ambiguous       int     `json:"ambiguous"`
	Canceled        int     `json:"canceled"`
	BudgetExhausted int     `json:"budget_exhausted"`
	P50MS           float64 `json:"p50_ms"`
	P99MS           float64 `json:"p99_ms"`
}

// Invariants counts violations; every field is 0 when the store held.
type Invariants struct {
	Lost              int `json:"lost"`
	Duplicated        int `json:"duplicated"`
	DoubleCounted     int `json:"double_counted"`
	AuditMismatch     int `json:"audit_mismatch"`
	JobAttemptsBurned int `json:"job_attempts_burned"`
	// LostClaims: tasks left leased under a claim whose caller holds a
	// different task, or more orphaned leases than claims reported
	// unsettled.
	LostClaims      int `json:"lost_claims"`
	EndedEarly      int `json:"ended_early"`
	UncountedStarts int `json:"uncounted_starts"`
	Misreported     int `json:"misreported"`
}

// Total returns the number of violations.
func (v Invariants) Total() int {
	return v.Lost + v.Duplicated + v.DoubleCounted + v.AuditMismatch + v.JobAttemptsBurned + v.LostClaims +
		v.EndedEarly + v.UncountedStarts + v.Misreported
}

// OutageReport is the run during its outages.
type OutageReport struct {
	Calls int64 `json:"calls"` // store operations started while an outage was on
	// Attempts is Calls plus the retries begun while an outage was on
	// (of those calls, or of calls that started before it).
	Attempts      int64   `json:"attempts"`
	Amplification float64 `json:"amplification"`
	// RecoveryMS is the time from an outage's end to the first operation
	// that succeeded after it; the largest over the outages; -1 if no
	// operation succeeded after one.
	RecoveryMS float64        `json:"recovery_ms"`
	Refused    int            `json:"refused"` // calls the outage failed
	Windows    []OutageWindow `json:"windows"`
}

// OutageWindow is one outage.
type OutageWindow struct {
	OffsetMS      int64   `json:"offset_ms"`
	LengthMS      int64   `json:"length_ms"`
	Calls         int64   `json:"calls"`
	Attempts      int64   `json:"attempts"`
	Amplification float64 `json:"amplification"`
	RecoveryMS    float64 `json:"recovery_ms"`
	Refused       int     `json:"refused"`
	// OKInside counts operations begun while the outage was on and told OK
	// before it ended. With the outage in the fault driver (SQLite, or
	// --no-proxy) every call they made was refused, so it is 0; through the
	// proxy, the outage starts at the first sample after its offset, so
	// operations in that gap may count.
	OKInside int64 `json:"ok_inside"`
}

// Latency is the operations' latency.
type Latency struct {
	P50MS float64 `json:"p50_ms"`
	P99MS float64 `json:"p99_ms"`
}

// reportedKinds are the fault kinds the report always lists.
var reportedKinds = []faults.Kind{faults.BeforeSend, faults.AfterExec, faults.AppliedReplyLost, faults.CommitNotApplied,
	faults.CommitAppliedReplyLost, faults.ServerError, faults.Hang, faults.Outage}

func ms(d time.Duration) float64 { return math.Round(float64(d.Microseconds())/10) / 100 }

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return math.Round(float64(a)/float64(b)*1000) / 1000
}

// finish checks the invariants with injection off and builds the report.
func (h *harness) finish(ctx context.Context) (*RunReport, error) {
	cfg := h.cfg
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	lostClaims, claimProblems, err := h.lostClaims(cctx)
	if err != nil {
		return nil, fmt.Errorf("check leases: %w", err)
	}
	chk, err := h.store.Check(cctx, h.ledger)
	if err != nil {
		return nil, fmt.Errorf("check invariants: %w", err)
	}
	st := h.pol.Stats()
	r := &RunReport{
		Scenario: string(ScenarioTasks), Engine: cfg.Engine.String(), Mode: "sqlretry", Seed: cfg.Seed, DurationMS: cfg.Duration.Milliseconds(),
		Workers: cfg.Workers, FaultRate: cfg.FaultRate,
		Policy:     policyReport(cfg),
		Operations: int(h.ops.Load()), Faults: map[string]int{}, Shapes: map[string]ShapeReport{},
		Retries: st.Retries, SeriesCompleted: h.seriesDone.Load(), SeriesMaxRuns: seriesRuns, BudgetExhausted: st.BudgetExhausted, Interrupted: ctx.Err() != nil,
		Problems: append(claimProblems, chk.Problems...),
	}
	if cfg.Naive {
		r.Mode = "naive"
	}
	elapsed := min(h.elapsed(), cfg.Duration)
	if elapsed <= 0 {
		elapsed = cfg.Duration
	}
	r.OpsPerSec = math.Round(float64(r.Operations)/elapsed.Seconds()*10) / 10
	counts := h.plan.Counts()
	for _, k := range reportedKinds {
		r.Faults[string(k)] = counts.Faults[k]
	}
	if n := counts.Faults[faults.Latency]; n > 0 {
		r.Faults[string(faults.Latency)] = n
	}
	h.reportShapes(r)
	h.reportOutages(r, counts)
	r.Invariants = Invariants{Lost: chk.Lost, Duplicated: chk.Duplicated, DoubleCounted: chk.DoubleCounted,
		AuditMismatch: chk.AuditMismatch, JobAttemptsBurned: chk.JobAttemptsBurned, LostClaims: lostClaims,
		EndedEarly: chk.EndedEarly, UncountedStarts: chk.UncountedStarts, Misreported: chk.Misreported}
	r.OK = r.Invariants.Total() == 0
	return r, nil
}

// reportShapes fills in r's per-shape counts and latencies.
func (h *harness) reportShapes(r *RunReport) {
	var all []time.Duration
	for i, s := range h.shapes {
		s.mu.Lock()
		lat := slices.Clone(s.latencies)
		sr := ShapeReport{Operations: s.ops, OK: s.ok, Failed: s.failed, Faults: map[string]int{}, Retries: s.retries,
			VerifiedApplied: s.verifiedApplied, VerifiedNotApplied: s.verifiedNotApplied, Ambiguous: s.ambiguous,
			Canceled: s.canceled, BudgetExhausted: s.budgetExhausted}
		for k, v := range s.faults {
			sr.Faults[k] = v
		}
		s.mu.Unlock()
		slices.Sort(lat)
		sr.P50MS, sr.P99MS = ms(percentile(lat, 0.5)), ms(percentile(lat, 0.99))
		all = append(all, lat...)
		r.Shapes[shape(i).String()] = sr
	}
	slices.Sort(all)
	r.Latency = Latency{P50MS: ms(percentile(all, 0.5)), P99MS: ms(percentile(all, 0.99))}
}

// reportOutages fills in r's outage windows, their amplification and
// recovery, the refusals, the samples and the wire proxy's counts.
func (h *harness) reportOutages(r *RunReport, counts faults.Counts) {
	h.mu.Lock()
	var worst time.Duration
	proxyOutage := 0
	never := false
	for _, w := range h.windows {
		ow := OutageWindow{OffsetMS: w.Offset.Milliseconds(), LengthMS: w.Length.Milliseconds()}
		ow.Calls, ow.Attempts, ow.OKInside = w.calls, w.calls+w.retries, w.okInside
		ow.Amplification = ratio(ow.Attempts, ow.Calls)
		if w.recovered {
			ow.RecoveryMS = ms(w.recovery)
			worst = max(worst, w.recovery)
		} else {
			ow.RecoveryMS = -1
			never = true
		}
		if !w.closed {
			w.refused = counts.Faults[faults.Outage] - w.refusedBefore
		}
		ow.Refused = w.refused + w.proxyOutageHits
		r.Outage.Windows = append(r.Outage.Windows, ow)
		r.Outage.Calls += ow.Calls
		r.Outage.Attempts += ow.Attempts
		proxyOutage += w.proxyOutageHits
		r.Outage.Refused += w.proxyOutageHits
		r.Windows = append(r.Windows, w.Outage)
	}
	r.Samples = slices.Clone(h.samples)
	h.mu.Unlock()
	r.Outage.Refused += counts.Faults[faults.Outage]
	r.Faults[string(faults.Outage)] = r.Outage.Refused
	if h.tgt.proxy != nil {
		pc := h.tgt.proxy.Counts()
		r.Wire = &WireReport{Proxy: h.tgt.proxy.Addr(), Connections: pc.Connections, Commits: pc.CommitsSeen,
			Reset: pc.Reset - proxyOutage, CutCommit: pc.CutAfterCommit}
		r.Wire.Reset = max(r.Wire.Reset, 0)
		r.Wire.Faults = r.Wire.Reset + r.Wire.CutCommit
	}
	r.Outage.Amplification = ratio(r.Outage.Attempts, r.Outage.Calls)
	r.Outage.RecoveryMS = ms(worst)
	if never {
		r.Outage.RecoveryMS = -1
	}
}

// policyReport is the policy c's run applies: its settings with zeros
// resolved as sqlretry.New resolves them ([sqlretry.Config.WithDefaults]);
// crl rules, when set, override retries and waits per error code.
func policyReport(c Config) PolicyReport {
	p := c.Policy
	d := sqlretry.Config{MaxRetries: p.MaxRetries, BaseDelay: p.BaseDelay, MaxDelay: p.MaxDelay}.WithDefaults()
	return PolicyReport{MaxRetries: max(d.MaxRetries, 0), BaseDelay: d.BaseDelay.String(), MaxDelay: d.MaxDelay.String(),
		CommandTimeout: p.CommandTimeout.String(), Budget: !p.NoBudget, Rules: p.Rules, BlindReplay: c.Naive}
}

// lostClaims counts leases nobody holds that no unsettled claim explains,
// with a problem line for each: a task leased under a token whose caller
// was handed another task (a blind replay of a claim whose COMMIT landed),
// and orphans beyond the claims that reported an unknown outcome.
func (h *harness) lostClaims(ctx context.Context) (int, []string, error) {
	rows, err := h.db.QueryContext(ctx, `SELECT id, lease_token FROM tasks WHERE status IN ('leased', 'running') AND lease_token IS NOT NULL`)
	if err != nil {
		return 0, nil, err
	}
	defer rows.Close()
	var leases []lease
	for rows.Next() {
		var l lease
		if err := rows.Scan(&l.id, &l.token); err != nil {
			return 0, nil, err
		}
		leases = append(leases, l)
	}
	if err := rows.Err(); err != nil {
		return 0, nil, err
	}
	unsettled := 0
	for _, e := range h.ledger.Entries() {
		if e.Kind == taskstore.OpClaim && e.Outcome != taskstore.ToldOK {
			unsettled++
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	n, problems := countLostClaims(leases, h.claimed, unsettled)
	return n, problems, nil
}

// lease is a task left leased at the end of a run.
type lease struct{ id, token string }

// countLostClaims is the pure part of lostClaims: claimed maps the token of
// every claim told OK to its task; unsettled counts claims whose outcome
// the caller was not told.
func countLostClaims(leases []lease, claimed map[string]string, unsettled int) (int, []string) {
	var problems []string
	lost, orphans := 0, 0
	for _, l := range leases {
		held, ok := claimed[l.token]
		switch {
		case !ok:
			orphans++
		case held != l.id:
			lost++
			problems = append(problems, fmt.Sprintf("task %s is leased under claim token %s, whose caller was handed task %s: a claim replayed after its COMMIT landed took a second task nobody works", l.id, l.token, held))
		}
	}
	if extra := orphans - unsettled; extra > 0 {
		problems = append(problems, fmt.Sprintf("%d tasks are leased under tokens no claim was told (%d claims ended with an unknown outcome, which may explain as many): %d leases lost", orphans, unsettled, extra))
		lost += extra
	}
	return lost, problems
}

// WriteText writes r as the command's human report.
func (r *RunReport) WriteText(w io.Writer) {
	fmt.Fprintf(w, "sqlretry chaos: %s, %s, %d workers, seed %d, fault rate %g per call, mode %s\n",
		r.Engine, time.Duration(r.DurationMS)*time.Millisecond, r.Workers, r.Seed, r.FaultRate, r.Mode)
	p := r.Policy
	fmt.Fprintf(w, "policy: max retries %d, base delay %s, max delay %s, command timeout %s, budget %s",
		p.MaxRetries, p.BaseDelay, p.MaxDelay, p.CommandTimeout, onOff(p.Budget))
	if p.Rules != "" {
		// crl rules override the retries and waits of the codes they name.
		fmt.Fprintf(w, "; rules: %s (they decide retries and waits for the codes they name)", p.Rules)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "%d operations (%.0f/s), %d retries, %d refused by the budget; latency p50 %.1f ms, p99 %.1f ms\n",
		r.Operations, r.OpsPerSec, r.Retries, r.BudgetExhausted, r.Latency.P50MS, r.Latency.P99MS)
	fmt.Fprintf(w, "%d series reached their max of %d runs\n\n", r.SeriesCompleted, r.SeriesMaxRuns)

	fmt.Fprintf(w, "faults injected:")
	for _, k := range reportedKinds {
		fmt.Fprintf(w, " %s %d", k, r.Faults[string(k)])
	}
	fmt.Fprintln(w)
	if r.Wire != nil {
		fmt.Fprintf(w, "wire faults through the proxy %s: %d resets, %d cuts after COMMIT (%d connections, %d COMMITs seen)\n",
			r.Wire.Proxy, r.Wire.Reset, r.Wire.CutCommit, r.Wire.Connections, r.Wire.Commits)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "shape\toperations\tok\tfailed\tfaults seen\tretries\tverified applied\tverified not applied\tambiguous\tp50 ms\tp99 ms\t")
	for _, name := range shapeNames {
		s := r.Shapes[name]
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.1f\t%.1f\t\n", name, s.Operations, s.OK, s.Failed, sum(s.Faults),
			s.Retries, s.VerifiedApplied, s.VerifiedNotApplied, s.Ambiguous, s.P50MS, s.P99MS)
	}
	tw.Flush()
	for _, name := range shapeNames {
		if f := r.Shapes[name].Faults; len(f) > 0 {
			fmt.Fprintf(w, "  %-10s faults by kind: %s\n", name, kindList(f))
		}
	}
	fmt.Fprintln(w)
	o := r.Outage
	for _, ow := range o.Windows {
		rec := fmt.Sprintf("recovered %.0f ms after it ended", ow.RecoveryMS)
		if ow.RecoveryMS < 0 {
			rec = "no operation succeeded after it"
		}
		fmt.Fprintf(w, "outage %s at %s: %d calls, %d attempts, amplification %.3f, %d calls refused, %s\n",
			time.Duration(ow.LengthMS)*time.Millisecond, time.Duration(ow.OffsetMS)*time.Millisecond,
			ow.Calls, ow.Attempts, ow.Amplification, ow.Refused, rec)
	}
	fmt.Fprintln(w)
	r.writeInvariants(w)
}

func (r *RunReport) writeInvariants(w io.Writer) {
	v := r.Invariants
	fmt.Fprintf(w, "invariants: lost %d, duplicated %d, double counted %d, audit mismatch %d, job attempts burned %d, lost claims %d",
		v.Lost, v.Duplicated, v.DoubleCounted, v.AuditMismatch, v.JobAttemptsBurned, v.LostClaims)
	if n := v.EndedEarly + v.UncountedStarts + v.Misreported; n > 0 {
		fmt.Fprintf(w, ", ended early %d, uncounted starts %d, misreported %d", v.EndedEarly, v.UncountedStarts, v.Misreported)
	}
	fmt.Fprintln(w)
	if r.OK {
		fmt.Fprintln(w, "OK: nothing lost, nothing applied twice")
		return
	}
	fmt.Fprintf(w, "VIOLATED (%s): %d violations\n", r.Mode, v.Total())
	for i, p := range r.Problems {
		if i == 5 {
			fmt.Fprintf(w, "  ... %d more\n", len(r.Problems)-5)
			break
		}
		fmt.Fprintln(w, "  "+p)
	}
}

// WriteComparison writes ours and the naive run side by side.
func WriteComparison(w io.Writer, ours, naive *RunReport) {
	fmt.Fprintf(w, "\nthe same seeded workload (seed %d), side by side:\n", ours.Seed)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "\tsqlretry\tnaive blind replay\t")
	row := func(name string, a, b any) { fmt.Fprintf(tw, "%s\t%v\t%v\t\n", name, a, b) }
	a, b := ours.Invariants, naive.Invariants
	row("operations", ours.Operations, naive.Operations)
	row("faults injected", sum(ours.Faults), sum(naive.Faults))
	row("retries", ours.Retries, naive.Retries)
	row("lost", a.Lost, b.Lost)
	row("duplicated", a.Duplicated, b.Duplicated)
	row("double counted runs", a.DoubleCounted, b.DoubleCounted)
	row("audit mismatch", a.AuditMismatch, b.AuditMismatch)
	row("job attempts burned", a.JobAttemptsBurned, b.JobAttemptsBurned)
	row("lost claims", a.LostClaims, b.LostClaims)
	row("misreported", a.Misreported, b.Misreported)
	row("ambiguous errors surfaced", ambiguous(ours), ambiguous(naive))
	row("outage amplification", fmt.Sprintf("%.3f", ours.Outage.Amplification), fmt.Sprintf("%.3f", naive.Outage.Amplification))
	tw.Flush()
}

func ambiguous(r *RunReport) int {
	n := 0
	for _, s := range r.Shapes {
		n += s.Ambiguous
	}
	return n
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func kindList(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}
