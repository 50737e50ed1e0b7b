package chaos

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/faults"
)

// ContentionReport is what the contention scenario did under each policy.
// Its JSON form is the command's --json document for --scenario
// contention.
type ContentionReport struct {
	Scenario   string  `json:"scenario"` // "contention"
	Engine     string  `json:"engine"`
	Seed       uint64  `json:"seed"`
	DurationMS int64   `json:"duration_ms"` // per mode
	Workers    int     `json:"workers"`
	HotRows    int     `json:"hot_rows"`
	FaultRate  float64 `json:"fault_rate"` // of COMMITs
	// Settings are the engine settings the runs applied, such as the
	// SQLite busy timeout or the PostgreSQL deadlock_timeout.
	Settings []string `json:"settings"`
	// Modes are the runs, in order: sqlretry, old_defaults, blind_loop.
	Modes []ModeReport `json:"modes"`
	// Interrupted: the run's context ended (Ctrl-C) before every mode had
	// run its duration; InterruptedIn names the mode it ended in ("" when
	// it ended before one started). Modes holds the modes that ran, the
	// last one for the time it ran; the checks cover them, and OK is
	// false.
	Interrupted   bool   `json:"interrupted"`
	InterruptedIn string `json:"interrupted_in,omitempty"`
	// Problems say which check failed. The checks are sqlretry's: its
	// invariants hold, and contention drew nothing from its budget.
	Problems []string `json:"problems,omitempty"`
	OK       bool     `json:"ok"`
}

// ModeReport is the workload under one policy.
type ModeReport struct {
	Mode   string `json:"mode"`
	Policy string `json:"policy"`
	// DurationMS is how long the mode ran: the run's duration, or less
	// when Interrupted.
	DurationMS  int64 `json:"duration_ms"`
	Interrupted bool  `json:"interrupted,omitempty"`
	Calls       int64 `json:"calls"`
	// Succeeded counts calls told OK; SuccessRate is Succeeded / Calls.
	Succeeded   int64   `json:"succeeded"`
	SuccessRate float64 `json:"success_rate"`
	// Failed counts calls that did not succeed, by why: budget_exhausted,
	// retries_exhausted, ambiguous (told the outcome is unknown),
	// canceled, other.
	Failed          map[string]int64 `json:"failed"`
	Latency         Latency          `json:"latency"`
	Attempts        int64            `json:"attempts"`
	AttemptsPerCall float64          `json:"attempts_per_call"`
	Retries         int64            `json:"retries"`
	// ContentionErrors counts failed attempts that were contention
	// (deadlock victims, lock timeouts, SQLITE_BUSY), by the engine's own
	// classifier.
	ContentionErrors int64 `json:"contention_errors"`
	// BudgetRefusals counts retries the budget refused; Contention of them
	// were retries of a contention failure.
	BudgetRefusals           int64          `json:"budget_refusals"`
	ContentionBudgetRefusals int64          `json:"contention_budget_refusals"`
	Faults                   int            `json:"faults_injected"`
	Invariants               PairInvariants `json:"invariants"`
	// Settlement is what became of the ambiguous COMMITs: settled by the
	// commit verifier (its verdicts held against the attempts' rows), left
	// ambiguous, or (the blind loop) replayed without asking.
	Settlement Settlement `json:"commit_settlement"`

	// Samples are the run's time series, and Damage the calls lost,
	// applied twice or misreported by each sample's time, for the plot.
	Samples []Sample      `json:"-"`
	Damage  []DamagePoint `json:"-"`
}

// PairInvariants are what the database holds against what the callers
// were told; every field is 0 when the policy told the truth.
type PairInvariants struct {
	Lost        int `json:"lost"`        // told OK, not in the database
	Duplicated  int `json:"duplicated"`  // applied more than once: the extra copies
	Misreported int `json:"misreported"` // told it failed, yet applied
	// Unbalanced is the hot rows' total minus two per applied call: not 0
	// when a transaction was applied in part.
	Unbalanced int64 `json:"unbalanced"`
}

// Total returns the number of violations.
func (v PairInvariants) Total() int64 {
	return int64(v.Lost+v.Duplicated+v.Misreported) + abs(v.Unbalanced)
}

func abs(n int64) int64 {
	if n < 0 {
		return -n
	}
	return n
}

// fraction is a/b to six places, 0 when b is 0: a success rate to 0.0001 %.
func fraction(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return math.Round(float64(a)/float64(b)*1e6) / 1e6
}

func newContentionReport(cfg Config) *ContentionReport {
	return &ContentionReport{Scenario: string(ScenarioContention), Engine: cfg.Engine.String(), Seed: cfg.Seed,
		DurationMS: cfg.Duration.Milliseconds(), Workers: cfg.Workers, HotRows: cfg.HotRows, FaultRate: cfg.FaultRate}
}

// modeDescription is one line on a mode's policy.
func modeDescription(cfg Config, mode string) string {
	switch mode {
	case modeOld:
		return fmt.Sprintf("old defaults: max retries %d for every failure, contention drawing from the budget", oldMaxRetries)
	case modeBlind:
		return fmt.Sprintf("blind loop: every error retried, up to %d times, no budget, no verify", blindMaxRetries)
	}
	p := policyReport(cfg)
	cr := sqlretry.Config{MaxRetries: cfg.Policy.MaxRetries}.WithDefaults().ContentionRetries
	s := fmt.Sprintf("sqlretry: max retries %d, contention retries %d outside the budget, budget %s", p.MaxRetries, max(cr, 0), onOff(p.Budget))
	if p.Rules != "" {
		s += ", rules " + p.Rules
	}
	return s
}

// report reads the database with faults off and builds the mode's report.
func (pr *pairRun) report(ctx context.Context) (*ModeReport, error) {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	inv, rows, err := pr.invariants(cctx)
	if err != nil {
		return nil, fmt.Errorf("%s: check the database: %w", pr.mode, err)
	}
	set := pr.settlement(rows)
	st := pr.pol.Stats()
	pr.mu.Lock()
	defer pr.mu.Unlock()
	lat := slices.Clone(pr.latencies)
	slices.Sort(lat)
	mr := &ModeReport{Mode: pr.mode, Policy: modeDescription(pr.cfg, pr.mode), DurationMS: pr.ran.Milliseconds(), Interrupted: pr.interrupted,
		Calls: pr.calls, Succeeded: pr.ok, Settlement: set,
		SuccessRate: fraction(pr.ok, pr.calls), Failed: map[string]int64{}, Latency: Latency{P50MS: ms(percentile(lat, 0.5)), P99MS: ms(percentile(lat, 0.99))},
		Attempts: st.Attempts, AttemptsPerCall: ratio(st.Attempts, st.Calls), Retries: st.Retries,
		ContentionErrors: pr.contentionErrors.Load(), BudgetRefusals: st.BudgetExhausted, ContentionBudgetRefusals: pr.contentionRefusals.Load(),
		Faults: pr.plan.Counts().Total(), Invariants: inv, Samples: slices.Clone(pr.samples)}
	for k, v := range pr.failedBy {
		mr.Failed[k] = v
	}
	mr.Damage = pairDamage(pr.told, copiesOf(rows), pr.finishedAt, pr.samples)
	mr.Settlement.StillAmbiguous = mr.Failed["ambiguous"]
	return mr, nil
}

// settlement counts the mode's ambiguous COMMITs (every COMMIT fault the
// plan injected: both kinds reset the connection) and what became of
// them, and holds each verdict against rows, the attempts the database
// holds.
func (pr *pairRun) settlement(rows map[attemptID]bool) Settlement {
	c := pr.plan.Counts()
	ambiguous := int64(c.Faults[faults.CommitNotApplied] + c.Faults[faults.CommitAppliedReplyLost])
	if pr.mode == modeBlind {
		return Settlement{Verifier: "none", Ambiguous: ambiguous, Note: "replayed without asking: the blind loop calls every transaction idempotent"}
	}
	s := pr.verdicts.settlement(pr.cfg, "")
	s.Ambiguous = ambiguous
	s.Checked, s.Wrong = pr.verdicts.check(rows)
	return s
}

// invariants compares the calls table and the hot rows with what each
// caller was told; it returns the attempts the table holds too.
func (pr *pairRun) invariants(ctx context.Context) (PairInvariants, map[attemptID]bool, error) {
	applied, rows := map[string]int{}, map[attemptID]bool{}
	res, err := pr.db.QueryContext(ctx, pr.q.applied)
	if err != nil {
		return PairInvariants{}, nil, err
	}
	defer res.Close()
	for res.Next() {
		var a attemptID
		if err := res.Scan(&a.call, &a.n); err != nil {
			return PairInvariants{}, nil, err
		}
		applied[a.call]++
		rows[a] = true
	}
	if err := res.Err(); err != nil {
		return PairInvariants{}, nil, err
	}
	var total int64
	if err := pr.db.QueryRowContext(ctx, pr.q.total).Scan(&total); err != nil {
		return PairInvariants{}, nil, err
	}
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return countPairInvariants(pr.told, applied, total), rows, nil
}

// copiesOf counts each call's copies among the attempts the table holds.
func copiesOf(rows map[attemptID]bool) map[string]int {
	n := map[string]int{}
	for a := range rows {
		n[a.call]++
	}
	return n
}

// pairDamage places each call's damage (lost, applied twice, misreported:
// what countPairInvariants counts) at the time the call returned, and
// adds it up at each sample's time.
func pairDamage(told map[string]outcome, copies map[string]int, finishedAt map[string]time.Duration, samples []Sample) []DamagePoint {
	type event struct {
		at time.Duration
		d  DamagePoint
	}
	var evs []event
	for id, at := range finishedAt {
		n, o := copies[id], told[id]
		var d DamagePoint
		d.AppliedTwice = max(n-1, 0)
		if o == toldOK && n == 0 {
			d.Lost = 1
		}
		if o == toldFailed && n > 0 {
			d.Misreported = 1
		}
		if d != (DamagePoint{}) {
			evs = append(evs, event{at, d})
		}
	}
	slices.SortFunc(evs, func(a, b event) int { return cmp.Compare(a.at, b.at) })
	out := make([]DamagePoint, len(samples))
	var sum DamagePoint
	i := 0
	for k, s := range samples {
		last := k == len(samples)-1 // calls in flight at the stop end after it
		for ; i < len(evs) && (evs[i].at <= s.Elapsed || last); i++ {
			sum.Lost += evs[i].d.Lost
			sum.AppliedTwice += evs[i].d.AppliedTwice
			sum.Misreported += evs[i].d.Misreported
		}
		out[k] = sum
		out[k].ElapsedMS = s.Elapsed.Milliseconds()
	}
	return out
}

// countPairInvariants is the pure part of invariants: told is what each
// call's caller was told, applied how many copies of each call the
// database holds, total the hot rows' sum (two per copy).
func countPairInvariants(told map[string]outcome, applied map[string]int, total int64) PairInvariants {
	var v PairInvariants
	copies := int64(0)
	for id, n := range applied {
		copies += int64(n)
		if n > 1 {
			v.Duplicated += n - 1
		}
		if o, ok := told[id]; ok && o == toldFailed {
			v.Misreported++
		}
	}
	for id, o := range told {
		if o == toldOK && applied[id] == 0 {
			v.Lost++
		}
	}
	v.Unbalanced = total - 2*copies
	return v
}

// check sets r.OK and r.Problems: sqlretry's run told every caller the
// truth, no budget refusal of its was a contention failure's, and no mode's
// commit verifier gave a verdict the database contradicts. An interrupted
// run is checked over what ran, and is not OK.
func (r *ContentionReport) check() {
	r.Problems = nil
	for _, m := range r.Modes {
		if w := m.Settlement.Wrong; w != 0 {
			r.Problems = append(r.Problems, fmt.Sprintf("%s: %d of the commit verifier's %d verdicts are contradicted by the database", m.Mode, w, m.Settlement.Checked))
		}
		if m.Mode != modeSQLretry {
			continue
		}
		if v := m.Invariants; v.Total() != 0 {
			r.Problems = append(r.Problems, fmt.Sprintf("sqlretry: lost %d, duplicated %d, misreported %d, unbalanced %d", v.Lost, v.Duplicated, v.Misreported, v.Unbalanced))
		}
		if m.ContentionBudgetRefusals != 0 {
			r.Problems = append(r.Problems, fmt.Sprintf("sqlretry: the budget refused %d retries of contention, which must draw nothing from it", m.ContentionBudgetRefusals))
		}
	}
	if len(r.Modes) == 0 && !r.Interrupted {
		r.Problems = append(r.Problems, "no mode ran")
	}
	r.OK = len(r.Problems) == 0 && !r.Interrupted
}

// modeTitles are the modes' column heads.
var modeTitles = map[string]string{modeSQLretry: "sqlretry", modeOld: "old defaults", modeBlind: "blind loop"}

// WriteText writes r as the command's human report.
func (r *ContentionReport) WriteText(w io.Writer) {
	fmt.Fprintf(w, "sqlretry chaos --scenario contention: %s, %s per policy, %d workers on %d hot rows, seed %d, COMMIT fault rate %g\n",
		r.Engine, time.Duration(r.DurationMS)*time.Millisecond, r.Workers, r.HotRows, r.Seed, r.FaultRate)
	for _, s := range r.Settings {
		fmt.Fprintln(w, "engine setting: "+s)
	}
	for _, m := range r.Modes {
		fmt.Fprintln(w, "  "+m.Policy)
	}
	fmt.Fprintln(w)
	if len(r.Modes) > 0 {
		r.writeTable(w)
	}
	r.writeSettlementNotes(w)
	r.writeVerdict(w)
}

// writeTable writes the modes side by side.
func (r *ContentionReport) writeTable(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "\t")
	for _, m := range r.Modes {
		fmt.Fprint(tw, modeTitles[m.Mode]+"\t")
	}
	fmt.Fprintln(tw)
	for _, row := range modeRows {
		fmt.Fprint(tw, row.name+"\t")
		for _, m := range r.Modes {
			fmt.Fprint(tw, row.value(m)+"\t")
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	fmt.Fprintln(w)
}

// writeSettlementNotes explains the settlement rows.
func (r *ContentionReport) writeSettlementNotes(w io.Writer) {
	for _, m := range r.Modes {
		if m.Mode == modeSQLretry {
			fmt.Fprintf(w, "ambiguous COMMITs: the connection reset in reply to COMMIT, after it committed (commit_applied_reply_lost) or not (commit_not_applied); commit verifier: %s\n", m.Settlement.Verifier)
			if m.Settlement.Verifier == "none" {
				fmt.Fprintln(w, "  with no verifier, the caller of each is told ErrAmbiguous (still ambiguous): the truth, but no answer")
			} else {
				fmt.Fprintln(w, "  each verdict is held against the attempt's own row: \"verdicts wrong\" must be 0")
			}
			fmt.Fprintln(w)
		}
	}
}

// writeVerdict writes the report's last lines: OK, INTERRUPTED or FAILED.
func (r *ContentionReport) writeVerdict(w io.Writer) {
	if r.Interrupted {
		switch {
		case len(r.Modes) == 0:
			fmt.Fprintln(w, "INTERRUPTED before any policy ran: nothing to check")
		default:
			last := r.Modes[len(r.Modes)-1]
			fmt.Fprintf(w, "INTERRUPTED during %s after %.1f s of %.1f s", modeTitles[last.Mode],
				float64(last.DurationMS)/1000, float64(r.DurationMS)/1000)
			if n := len(contentionModes) - len(r.Modes); n > 0 {
				fmt.Fprintf(w, "; %d policies did not run", n)
			}
			fmt.Fprintln(w, ": the table and the checks cover what ran")
		}
	}
	switch {
	case r.OK:
		fmt.Fprintln(w, "OK: sqlretry lost nothing, applied nothing twice, told every caller the truth, and contention drew nothing from its budget; every commit verdict matched the database")
	case len(r.Problems) == 0 && len(r.Modes) > 0:
		fmt.Fprintln(w, "in what ran: sqlretry lost nothing, applied nothing twice, told every caller the truth; every commit verdict matched the database")
	case len(r.Problems) > 0:
		fmt.Fprintln(w, "FAILED:")
		for _, p := range r.Problems {
			fmt.Fprintln(w, "  "+p)
		}
	}
}

// modeRows are the rows of the text report's table.
var modeRows = []struct {
	name  string
	value func(ModeReport) string
}{
	{"calls", func(m ModeReport) string { return fmt.Sprint(m.Calls) }},
	{"success rate", func(m ModeReport) string { return fmt.Sprintf("%.3f%%", 100*m.SuccessRate) }},
	{"failed: budget exhausted", func(m ModeReport) string { return fmt.Sprint(m.Failed["budget_exhausted"]) }},
	{"failed: retries exhausted", func(m ModeReport) string { return fmt.Sprint(m.Failed["retries_exhausted"]) }},
	{"told ambiguous", func(m ModeReport) string { return fmt.Sprint(m.Failed["ambiguous"]) }},
	{"failed: other", func(m ModeReport) string { return fmt.Sprint(m.Failed["other"] + m.Failed["canceled"]) }},
	{"latency p50 ms", func(m ModeReport) string { return fmt.Sprintf("%.1f", m.Latency.P50MS) }},
	{"latency p99 ms", func(m ModeReport) string { return fmt.Sprintf("%.1f", m.Latency.P99MS) }},
	{"attempts per call", func(m ModeReport) string { return fmt.Sprintf("%.3f", m.AttemptsPerCall) }},
	{"contention errors", func(m ModeReport) string { return fmt.Sprint(m.ContentionErrors) }},
	{"COMMIT faults injected", func(m ModeReport) string { return fmt.Sprint(m.Faults) }},
	{"budget refusals", func(m ModeReport) string { return fmt.Sprint(m.BudgetRefusals) }},
	{"  of contention", func(m ModeReport) string { return fmt.Sprint(m.ContentionBudgetRefusals) }},
	{"lost", func(m ModeReport) string { return fmt.Sprint(m.Invariants.Lost) }},
	{"applied twice", func(m ModeReport) string { return fmt.Sprint(m.Invariants.Duplicated) }},
	{"misreported", func(m ModeReport) string { return fmt.Sprint(m.Invariants.Misreported) }},
	{"ambiguous COMMITs", func(m ModeReport) string { return fmt.Sprint(m.Settlement.Ambiguous) }},
	{"  settled applied", settled(func(s Settlement) int64 { return s.Applied })},
	{"  settled not applied", settled(func(s Settlement) int64 { return s.NotApplied })},
	{"  still ambiguous", settled(func(s Settlement) int64 { return s.StillAmbiguous })},
	{"  replayed blind", func(m ModeReport) string {
		if m.Mode == modeBlind {
			return fmt.Sprint(m.Settlement.Ambiguous)
		}
		return "0"
	}},
	{"  verdicts wrong", settled(func(s Settlement) int64 { return s.Wrong })},
}

// settled shows a settlement count, or "-" for the blind loop, which asks
// nothing.
func settled(f func(Settlement) int64) func(ModeReport) string {
	return func(m ModeReport) string {
		if m.Mode == modeBlind {
			return "-"
		}
		return fmt.Sprint(f(m.Settlement))
	}
}
