package chaos

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/sqlretry/sqlretry"
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
	Modes       []ModeReport `json:"modes"`
	Interrupted bool         `json:"interrupted,omitempty"`
	// Problems say which check failed. The checks are sqlretry's: its
	// invariants hold, and contention drew nothing from its budget.
	Problems []string `json:"problems,omitempty"`
	OK       bool     `json:"ok"`
}

// ModeReport is the workload under one policy.
type ModeReport struct {
	Mode   string `json:"mode"`
	Policy string `json:"policy"`
	Calls  int64  `json:"calls"`
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

	// Samples are the run's time series, for the plot.
	Samples []Sample `json:"-"`
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
	inv, err := pr.invariants(cctx)
	if err != nil {
		return nil, fmt.Errorf("%s: check the database: %w", pr.mode, err)
	}
	st := pr.pol.Stats()
	pr.mu.Lock()
	defer pr.mu.Unlock()
	lat := slices.Clone(pr.latencies)
	slices.Sort(lat)
	mr := &ModeReport{Mode: pr.mode, Policy: modeDescription(pr.cfg, pr.mode), Calls: pr.calls, Succeeded: pr.ok,
		SuccessRate: fraction(pr.ok, pr.calls), Failed: map[string]int64{}, Latency: Latency{P50MS: ms(percentile(lat, 0.5)), P99MS: ms(percentile(lat, 0.99))},
		Attempts: st.Attempts, AttemptsPerCall: ratio(st.Attempts, st.Calls), Retries: st.Retries,
		ContentionErrors: pr.contentionErrors.Load(), BudgetRefusals: st.BudgetExhausted, ContentionBudgetRefusals: pr.contentionRefusals.Load(),
		Faults: pr.plan.Counts().Total(), Invariants: inv, Samples: slices.Clone(pr.samples)}
	for k, v := range pr.failedBy {
		mr.Failed[k] = v
	}
	return mr, nil
}

// invariants compares the calls table and the hot rows with what each
// caller was told.
func (pr *pairRun) invariants(ctx context.Context) (PairInvariants, error) {
	applied := map[string]int{}
	rows, err := pr.db.QueryContext(ctx, pr.q.applied)
	if err != nil {
		return PairInvariants{}, err
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			return PairInvariants{}, err
		}
		applied[id] = n
	}
	if err := rows.Err(); err != nil {
		return PairInvariants{}, err
	}
	var total int64
	if err := pr.db.QueryRowContext(ctx, pr.q.total).Scan(&total); err != nil {
		return PairInvariants{}, err
	}
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return countPairInvariants(pr.told, applied, total), nil
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
// truth, and no budget refusal of its was a contention failure's.
func (r *ContentionReport) check() {
	r.Problems = nil
	for _, m := range r.Modes {
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
	if len(r.Modes) == 0 {
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
	switch {
	case r.OK:
		fmt.Fprintln(w, "OK: sqlretry lost nothing, applied nothing twice, told every caller the truth, and contention drew nothing from its budget")
	case r.Interrupted && len(r.Problems) == 0:
		fmt.Fprintln(w, "INTERRUPTED: the run did not finish")
	default:
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
}
