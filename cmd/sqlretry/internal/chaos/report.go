package chaos

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
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
	DurationMS int64                  `json:"duration_ms"` // how long the workload ran: less than planned when interrupted
	PlannedMS  int64                  `json:"planned_duration_ms"`
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
	// BudgetExhausted counts retries the retry budget denied (not the
	// outage's refusals: see OutageReport.Refused).
	BudgetExhausted int64 `json:"budget_exhausted"`
	// Settlement is what the commit verifier (--verifier) settled.
	Settlement Settlement `json:"commit_settlement"`
	// Interrupted: the run's context ended (Ctrl-C) before its duration;
	// the report and the invariants cover what ran, and OK is false.
	Interrupted bool     `json:"interrupted"`
	Problems    []string `json:"problems,omitempty"`
	OK          bool     `json:"ok"`
	// Fleet is the run's processes, when it ran as a fleet
	// (Config.Processes > 1): every other figure is the fleet's total.
	Fleet *FleetReport `json:"fleet,omitempty"`
	// Cluster is a cluster run's cluster, events and recoveries
	// (Config.Cluster, Config.Failover).
	Cluster *ClusterReport `json:"cluster,omitempty"`

	// Damage is the violations over time (Config.Damage), for the plot;
	// DamageUntimed counts the violations only the final tables show.
	Damage        []DamagePoint `json:"damage,omitempty"`
	DamageUntimed int           `json:"damage_untimed,omitempty"`

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
	TLS         int    `json:"tls"` // encrypted connections: the proxy sees no COMMIT in them
}

// ShapeReport is one write shape's account.
type ShapeReport struct {
	Operations int `json:"operations"`
	OK         int `json:"ok"`
	Failed     int `json:"failed"` // a definite error: a conflict, retries or budget spent
	// FailedBy counts the failed operations by cause: budget_exhausted,
	// retries_exhausted, circuit_open, conflict, other.
	FailedBy map[string]int `json:"failed_by"`
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
	Ambiguous int `json:"ambiguous"`
	// Canceled counts calls the run's end cut off (Ctrl-C, SIGTERM): told
	// the caller's context error, neither OK nor failed. Operations is
	// OK + Failed + Ambiguous + Canceled.
	Canceled int `json:"canceled"`
	// InOutage counts the operations begun while an outage was on.
	InOutage        int     `json:"in_outage"`
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
	// different task, or under a token no caller holds whose own claim did
	// not end ambiguous.
	LostClaims      int `json:"lost_claims"`
	EndedEarly      int `json:"ended_early"`
	UncountedStarts int `json:"uncounted_starts"`
	Misreported     int `json:"misreported"`
	// Diverged: live cluster nodes whose copy of the tables differs
	// from the others' (a cluster run's check, ClusterReport.Checks).
	Diverged int `json:"diverged,omitempty"`
}

// Total returns the number of violations.
func (v Invariants) Total() int {
	return v.Lost + v.Duplicated + v.DoubleCounted + v.AuditMismatch + v.JobAttemptsBurned + v.LostClaims +
		v.EndedEarly + v.UncountedStarts + v.Misreported + v.Diverged
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
	RecoveryMS float64 `json:"recovery_ms"`
	// Refused counts the calls the simulated outage failed (a connection
	// refused or reset): not the retry budget's denials.
	Refused int            `json:"refused"`
	Windows []OutageWindow `json:"windows"`
	// NotReached lists the outages planned after the point an interrupted
	// run reached: they did not happen, and count nowhere.
	NotReached []OutageWindow `json:"not_reached,omitempty"`
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
	// CutShort: the run was interrupted while the outage was on; LengthMS
	// is the part that happened.
	CutShort bool `json:"cut_short,omitempty"`
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
// runReport is what a run of the tasks scenario measured, before any check:
// the report a worker process sends its fleet's parent, and the start of a
// single process's.
func (h *harness) runReport() *RunReport {
	cfg := h.cfg
	st := h.pol.Stats()
	r := &RunReport{
		Scenario: string(ScenarioTasks), Engine: cfg.Engine.String(), Mode: "sqlretry", Seed: cfg.Seed,
		DurationMS: h.ran.Milliseconds(), PlannedMS: cfg.Duration.Milliseconds(),
		Workers: cfg.Workers, FaultRate: cfg.FaultRate,
		Policy:     policyReport(cfg),
		Operations: int(h.ops.Load()), Faults: map[string]int{}, Shapes: map[string]ShapeReport{},
		Retries: st.Retries, SeriesCompleted: h.seriesDone.Load(), SeriesMaxRuns: seriesRuns, BudgetExhausted: st.BudgetExhausted,
		Interrupted: h.interrupted,
	}
	if cfg.Naive {
		r.Mode = "naive"
	}
	r.OpsPerSec = math.Round(float64(r.Operations)/max(h.ran, time.Millisecond).Seconds()*10) / 10
	counts := h.plan.Counts()
	for _, k := range reportedKinds {
		r.Faults[string(k)] = counts.Faults[k]
	}
	if n := counts.Faults[faults.Latency]; n > 0 {
		r.Faults[string(faults.Latency)] = n
	}
	h.reportShapes(r)
	h.reportOutages(r, counts)
	r.Settlement = h.verdicts.settlement(cfg, tasksSettlementNote)
	return r
}

// An interrupted run is checked too, over what ran.
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
	r := h.runReport()
	r.Problems = append(claimProblems, chk.Problems...)
	r.Invariants = Invariants{Lost: chk.Lost, Duplicated: chk.Duplicated, DoubleCounted: chk.DoubleCounted,
		AuditMismatch: chk.AuditMismatch, JobAttemptsBurned: chk.JobAttemptsBurned, LostClaims: lostClaims,
		EndedEarly: chk.EndedEarly, UncountedStarts: chk.UncountedStarts, Misreported: chk.Misreported}
	if err := h.clusterFinish(cctx, r); err != nil {
		return nil, fmt.Errorf("check the cluster: %w", err)
	}
	r.OK = r.Invariants.Total() == 0 && !r.Interrupted
	if cfg.Damage {
		if r.Damage, r.DamageUntimed, err = h.damage(cctx); err != nil {
			return nil, fmt.Errorf("damage over time: %w", err)
		}
	}
	return r, nil
}

// tasksSettlementNote says why the tasks scenario gives its commit
// verifier nothing to do, in the help's words ([VerifierScope]).
const tasksSettlementNote = "in the tasks scenario, none: " + tasksVerifyReason

// reportShapes fills in r's per-shape counts and latencies.
func (h *harness) reportShapes(r *RunReport) {
	var all []time.Duration
	for i, s := range h.shapes {
		s.mu.Lock()
		lat := slices.Clone(s.latencies)
		sr := ShapeReport{Operations: s.ops, OK: s.ok, Failed: s.failed, Faults: maps.Clone(s.faults), FailedBy: maps.Clone(s.failedBy),
			Retries: s.retries, VerifiedApplied: s.verifiedApplied, VerifiedNotApplied: s.verifiedNotApplied, Ambiguous: s.ambiguous,
			Canceled: s.canceled, BudgetExhausted: s.budgetExhausted, InOutage: s.inOutage}
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
// recovery, the refusals, the samples and the wire proxy's counts. An
// outage the run never reached (it was interrupted first) is listed apart,
// in NotReached; one it was inside when interrupted is cut short.
func (h *harness) reportOutages(r *RunReport, counts faults.Counts) {
	h.mu.Lock()
	var worst time.Duration
	proxyOutage := 0
	never := false
	for _, w := range h.windows {
		ow := OutageWindow{OffsetMS: w.Offset.Milliseconds(), LengthMS: w.Length.Milliseconds()}
		if !w.opened {
			r.Outage.NotReached = append(r.Outage.NotReached, ow)
			continue
		}
		if !w.closed {
			ow.CutShort, ow.LengthMS = true, max(h.ran-w.Offset, 0).Milliseconds()
			w.refused = counts.Faults[faults.Outage] - w.refusedBefore
		}
		ow.Calls, ow.Attempts, ow.OKInside = w.calls, w.calls+w.retries, w.okInside
		ow.Amplification = ratio(ow.Attempts, ow.Calls)
		switch {
		case ow.CutShort:
			ow.RecoveryMS = -1 // no "after it": the run ended inside it
		case w.recovered:
			ow.RecoveryMS = ms(w.recovery)
			worst = max(worst, w.recovery)
		default:
			ow.RecoveryMS = -1
			never = true
		}
		ow.Refused = w.refused + w.proxyOutageHits
		r.Outage.Windows = append(r.Outage.Windows, ow)
		r.Outage.Calls += ow.Calls
		r.Outage.Attempts += ow.Attempts
		proxyOutage += w.proxyOutageHits
		r.Outage.Refused += w.proxyOutageHits
		r.Windows = append(r.Windows, Outage{Offset: w.Offset, Length: time.Duration(ow.LengthMS) * time.Millisecond})
	}
	r.Samples = slices.Clone(h.samples)
	h.mu.Unlock()
	r.Outage.Refused += counts.Faults[faults.Outage]
	r.Faults[string(faults.Outage)] = r.Outage.Refused
	if h.tgt.proxy != nil {
		pc := h.tgt.proxy.Counts()
		r.Wire = &WireReport{Proxy: h.tgt.proxy.Addr(), Connections: pc.Connections, Commits: pc.CommitsSeen, TLS: pc.TLS,
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

// lostClaims counts leases nobody holds that no ambiguous claim explains,
// with a problem line for each: a task leased under a token whose caller
// was handed another task (a blind replay of a claim whose COMMIT landed),
// and a task leased under a token no claim was told it holds, unless the
// claim that drew that token ended ambiguous.
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
	entries := h.ledger.Entries()
	h.mu.Lock()
	defer h.mu.Unlock()
	n, problems := countLostClaims(leases, h.claimed, entries)
	return n, problems, nil
}

// maxClaimProblems bounds the problem lines countLostClaims writes, as
// taskstore's Check bounds its own.
const maxClaimProblems = 20

// lease is a task left leased at the end of a run.
type lease struct{ id, token string }

// countLostClaims is the pure part of lostClaims: claimed maps the token of
// every claim told OK to its task; entries is the ledger, whose claim
// entries carry their token as ID. A lease no claim told OK holds is lost
// unless the claim under its own token was told its outcome is unknown
// (ErrAmbiguous): that claim may have landed, and its caller knows it may
// hold a lease, which expires. A claim told a definite failure (the budget
// refused it, the circuit was open, a conflict) or a cancellation was told
// it holds nothing, so a lease under its token is lost; and a claim excuses
// no lease but its own.
func countLostClaims(leases []lease, claimed map[string]string, entries []taskstore.Entry) (int, []string) {
	told := map[string]taskstore.Outcome{} // claim token → what its caller was told, ambiguous winning
	for _, e := range entries {
		if e.Kind != taskstore.OpClaim {
			continue
		}
		if prev, seen := told[e.ID]; !seen || prev != taskstore.ToldAmbiguous {
			told[e.ID] = e.Outcome
		}
	}
	var problems []string
	lost := 0
	excused := map[string]bool{}
	problem := func(format string, a ...any) {
		if len(problems) < maxClaimProblems {
			problems = append(problems, fmt.Sprintf(format, a...))
		}
	}
	for _, l := range leases {
		held, ok := claimed[l.token]
		switch {
		case ok && held == l.id:
		case ok:
			lost++
			problem("task %s is leased under claim token %s, whose caller was handed task %s: a claim replayed after its COMMIT landed took a second task nobody works", l.id, l.token, held)
		case told[l.token] == taskstore.ToldAmbiguous && !excused[l.token]:
			excused[l.token] = true // its own claim's outcome is unknown: it may have landed
		default:
			lost++
			o, seen := told[l.token]
			why := "no claim was told of this token"
			if seen {
				why = "the claim that drew it was told " + o.String() + ", not an unknown outcome"
			}
			problem("task %s is leased under claim token %s nobody holds: %s; the lease is lost", l.id, l.token, why)
		}
	}
	return lost, problems
}

// WriteText writes r as the command's human report.
func (r *RunReport) WriteText(w io.Writer) {
	fmt.Fprintf(w, "sqlretry chaos: %s, %s, %s, seed %d, fault rate %g per call, mode %s\n",
		r.Engine, time.Duration(r.PlannedMS)*time.Millisecond, r.workersText(), r.Seed, r.FaultRate, r.Mode)
	if r.Interrupted {
		fmt.Fprintf(w, "INTERRUPTED after %.1f s of %.1f s: what follows, the checks included, covers what ran\n",
			float64(r.DurationMS)/1000, float64(r.PlannedMS)/1000)
	}
	p := r.Policy
	fmt.Fprintf(w, "policy: max retries %d, base delay %s, max delay %s, command timeout %s, budget %s",
		p.MaxRetries, p.BaseDelay, p.MaxDelay, p.CommandTimeout, onOff(p.Budget))
	if p.Rules != "" {
		// crl rules override the retries and waits of the codes they name.
		fmt.Fprintf(w, "; rules: %s (they decide retries and waits for the codes they name)", p.Rules)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "%d operations (%.0f/s), %d retries, %d retries denied by the retry budget; latency p50 %.1f ms, p99 %.1f ms\n",
		r.Operations, r.OpsPerSec, r.Retries, r.BudgetExhausted, r.Latency.P50MS, r.Latency.P99MS)
	fmt.Fprintf(w, "%d recurring tasks ran all %d of their runs (the checks for a run counted twice or a series ended early need some)\n\n",
		r.SeriesCompleted, r.SeriesMaxRuns)
	r.writeFleet(w)
	r.writeFaults(w)
	r.writeShapes(w)
	r.writeOutages(w)
	r.writeSettlement(w)
	r.writeCluster(w)
	r.writeInvariants(w)
}

// workersText says how many workers ran: "8 workers", or a fleet's
// "4 processes × 8 workers (32 in all)".
func (r *RunReport) workersText() string {
	if f := r.Fleet; f != nil {
		return fmt.Sprintf("%d processes × %d workers (%d in all)", f.Processes, f.WorkersPerProcess, f.Processes*f.WorkersPerProcess)
	}
	return fmt.Sprintf("%d workers", r.Workers)
}

// writeFaults writes the faults injected, by kind and on the wire.
func (r *RunReport) writeFaults(w io.Writer) {
	fmt.Fprintf(w, "faults injected:")
	for _, k := range reportedKinds {
		if k == faults.Outage {
			fmt.Fprintf(w, " (and %d calls failed by the simulated outage)", r.Faults[string(k)])
			continue
		}
		fmt.Fprintf(w, " %s %d", k, r.Faults[string(k)])
	}
	fmt.Fprintln(w)
	if r.Wire != nil {
		fmt.Fprintf(w, "wire faults through the proxy %s: %d resets, %d cuts after COMMIT (%d connections, %d COMMITs seen)\n",
			r.Wire.Proxy, r.Wire.Reset, r.Wire.CutCommit, r.Wire.Connections, r.Wire.Commits)
	}
	fmt.Fprintln(w)
}

// writeShapes writes the per-shape table, then why operations failed and
// which faults each shape met.
func (r *RunReport) writeShapes(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "shape\toperations\tok\tfailed\tambiguous\tinterrupted\tfaults seen\tretries\tverified applied/not\tp50 ms\tp99 ms\t")
	for _, name := range shapeNames {
		s := r.Shapes[name]
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d/%d\t%.1f\t%.1f\t\n", name, s.Operations, s.OK, s.Failed, s.Ambiguous, s.Canceled,
			sum(s.Faults), s.Retries, s.VerifiedApplied, s.VerifiedNotApplied, s.P50MS, s.P99MS)
	}
	tw.Flush()
	fmt.Fprintln(w, "  (ambiguous: told ErrAmbiguous, the outcome unknown; interrupted: cut off by the run's end;")
	fmt.Fprintln(w, "  verified: failures of unknown outcome a Verify settled as applied / not applied)")
	for _, name := range shapeNames {
		if f := r.Shapes[name].FailedBy; len(f) > 0 {
			fmt.Fprintf(w, "  %-10s failed: %s\n", name, causeList(f))
		}
	}
	if rd := r.Shapes[shapeRead.String()]; rd.Operations > 0 {
		// Reads follow failed writes: without this line a run's reads
		// read as failing for no reason.
		why := "a worker reads only to resynchronise after a write failed"
		if len(r.Outage.Windows) > 0 {
			why = fmt.Sprintf("%d of %d began in an outage: %s", rd.InOutage, rd.Operations, why)
		}
		fmt.Fprintf(w, "  %-10s %s\n", shapeRead, why)
	}
	for _, name := range shapeNames {
		if f := r.Shapes[name].Faults; len(f) > 0 {
			fmt.Fprintf(w, "  %-10s faults by kind: %s\n", name, kindList(f))
		}
	}
	fmt.Fprintln(w)
}

// causeList is failed operations by cause, in words, the largest first.
func causeList(m map[string]int) string {
	keys := slices.Collect(maps.Keys(m))
	slices.SortFunc(keys, func(a, b string) int { return cmp.Or(m[b]-m[a], strings.Compare(a, b)) })
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%d %s", m[k], cmp.Or(causeTitles[k], k))
	}
	return strings.Join(parts, "; ")
}

// writeOutages writes each outage that happened, and the ones an
// interrupted run never reached.
func (r *RunReport) writeOutages(w io.Writer) {
	o := r.Outage
	for _, ow := range o.Windows {
		rec := fmt.Sprintf("recovered %.0f ms after it ended", ow.RecoveryMS)
		switch {
		case ow.CutShort:
			rec = "the run was interrupted while it was on"
		case ow.RecoveryMS < 0:
			rec = "no operation succeeded after it"
		}
		fmt.Fprintf(w, "outage %s at %s: %d calls, %d attempts, amplification %.3f, %d calls failed by the outage (connection refused or reset), %s\n",
			time.Duration(ow.LengthMS)*time.Millisecond, time.Duration(ow.OffsetMS)*time.Millisecond,
			ow.Calls, ow.Attempts, ow.Amplification, ow.Refused, rec)
	}
	for _, ow := range o.NotReached {
		fmt.Fprintf(w, "outage planned at %s: did not happen (the run was interrupted first)\n", time.Duration(ow.OffsetMS)*time.Millisecond)
	}
	if len(o.Windows)+len(o.NotReached) > 0 {
		fmt.Fprintln(w)
	}
}

// writeSettlement writes what the commit verifier settled.
func (r *RunReport) writeSettlement(w io.Writer) {
	s := r.Settlement
	fmt.Fprintf(w, "commit verifier (%s): %d ambiguous COMMITs, %d settled applied, %d settled not applied, %d still ambiguous\n",
		s.Verifier, s.Ambiguous, s.Applied, s.NotApplied, s.StillAmbiguous)
	if s.Note != "" {
		fmt.Fprintln(w, "  "+s.Note)
	}
	fmt.Fprintln(w)
}

// shownProblems is how many problem lines the text report prints.
const shownProblems = 5

func (r *RunReport) writeInvariants(w io.Writer) {
	v := r.Invariants
	fmt.Fprintf(w, "invariants: lost %d, duplicated %d, double counted %d, audit mismatch %d, job attempts burned %d, lost claims %d",
		v.Lost, v.Duplicated, v.DoubleCounted, v.AuditMismatch, v.JobAttemptsBurned, v.LostClaims)
	if n := v.EndedEarly + v.UncountedStarts + v.Misreported; n > 0 {
		fmt.Fprintf(w, ", ended early %d, uncounted starts %d, misreported %d", v.EndedEarly, v.UncountedStarts, v.Misreported)
	}
	if v.Diverged > 0 {
		fmt.Fprintf(w, ", cluster nodes disagreeing %d", v.Diverged)
	}
	fmt.Fprintln(w)
	switch {
	case r.OK:
		fmt.Fprintln(w, "OK: nothing lost, nothing applied twice")
		return
	case v.Total() == 0:
		fmt.Fprintf(w, "INTERRUPTED after %.1f s: in what ran, nothing lost, nothing applied twice\n", float64(r.DurationMS)/1000)
		return
	}
	fmt.Fprintf(w, "VIOLATED (%s): %d violations in all (the counts above)\n", r.Mode, v.Total())
	if len(r.Problems) == 0 {
		return
	}
	n := min(len(r.Problems), shownProblems)
	fmt.Fprintf(w, "the first %d of %d problem lines (the check writes one per violation, up to 20; run with --json to see every line):\n", n, len(r.Problems))
	for _, p := range r.Problems[:n] {
		fmt.Fprintln(w, "  "+p)
	}
}

// WriteComparison writes ours and the naive run side by side.
func WriteComparison(w io.Writer, ours, naive *RunReport) {
	fmt.Fprintf(w, "\nthe same seeded workload (seed %d), side by side. Each run is timed (%s), not counted, so each does as many\n"+
		"operations as it finishes in that time: the seed fixes the fault plan and the mix of operations, not how many.\n",
		ours.Seed, time.Duration(ours.PlannedMS)*time.Millisecond)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "\tsqlretry\tnaive blind replay\t")
	row := func(name string, a, b any) { fmt.Fprintf(tw, "%s\t%v\t%v\t\n", name, a, b) }
	a, b := ours.Invariants, naive.Invariants
	row("operations", ours.Operations, naive.Operations)
	row("operations per second", fmt.Sprintf("%.0f", ours.OpsPerSec), fmt.Sprintf("%.0f", naive.OpsPerSec))
	row("faults injected", sum(ours.Faults)-ours.Faults[string(faults.Outage)], sum(naive.Faults)-naive.Faults[string(faults.Outage)])
	row("retries", ours.Retries, naive.Retries)
	row("lost", a.Lost, b.Lost)
	row("duplicated", a.Duplicated, b.Duplicated)
	row("double counted runs", a.DoubleCounted, b.DoubleCounted)
	row("ended early", a.EndedEarly, b.EndedEarly)
	row("audit mismatch", a.AuditMismatch, b.AuditMismatch)
	row("job attempts burned", a.JobAttemptsBurned, b.JobAttemptsBurned)
	row("uncounted starts", a.UncountedStarts, b.UncountedStarts)
	row("lost claims", a.LostClaims, b.LostClaims)
	row("misreported", a.Misreported, b.Misreported)
	row("violations in all", a.Total(), b.Total())
	row("ambiguous errors surfaced", ambiguous(ours), ambiguous(naive))
	row("outage amplification", fmt.Sprintf("%.3f", ours.Outage.Amplification), fmt.Sprintf("%.3f", naive.Outage.Amplification))
	tw.Flush()
	fmt.Fprintln(w, "(the naive run's violations are the comparison's point: the exit code is ours alone)")
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
