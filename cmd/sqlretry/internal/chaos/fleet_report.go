package chaos

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/sqlretry/sqlretry/taskstore"
)

// FleetReport is a fleet run's processes (Config.Processes > 1). The
// RunReport around it holds the fleet's totals: every count summed over
// the processes, percentiles over all their latencies, an outage's
// recovery its slowest process's.
type FleetReport struct {
	Processes         int `json:"processes"`
	WorkersPerProcess int `json:"workers_per_process"`
	// Calls and Attempts are the policies' counters summed: AttemptsPerCall
	// is the fleet's amplification over the whole run, as
	// OutageReport.Amplification is during the outages.
	Calls           int64           `json:"calls"`
	Attempts        int64           `json:"attempts"`
	AttemptsPerCall float64         `json:"attempts_per_call"`
	PerProcess      []ProcessReport `json:"per_process"`
}

// ProcessReport is one worker process of a fleet: its own counts.
type ProcessReport struct {
	Index           int     `json:"index"`
	PID             int     `json:"pid"`
	Seed            uint64  `json:"seed"`
	Operations      int     `json:"operations"`
	OpsPerSec       float64 `json:"ops_per_second"`
	Calls           int64   `json:"calls"`
	Attempts        int64   `json:"attempts"`
	AttemptsPerCall float64 `json:"attempts_per_call"`
	Retries         int64   `json:"retries"`
	BudgetExhausted int64   `json:"budget_exhausted"`
	// OutageCalls, OutageAttempts and OutageAmplification are its
	// OutageReport's Calls, Attempts and Amplification.
	OutageCalls         int64   `json:"outage_calls"`
	OutageAttempts      int64   `json:"outage_attempts"`
	OutageAmplification float64 `json:"outage_amplification"`
	RecoveryMS          float64 `json:"recovery_ms"`
	Interrupted         bool    `json:"interrupted"`
}

// report merges the worker processes' results into the fleet's report and
// checks the invariants once, over the shared database, against every
// process's ledger.
func (f *fleet) report(ctx context.Context, db *sql.DB, store *taskstore.Store, results []*workerResult, samples []Sample, ran time.Duration) (*RunReport, error) {
	r := mergeResults(f.cfg, results, ran)
	r.Samples = samples
	m := &harness{db: db, ledger: taskstore.NewLedger(), claimed: map[string]string{}}
	for _, res := range results {
		replay(m.ledger, res.Entries, res.Starts)
		maps.Copy(m.claimed, res.Claimed)
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	lostClaims, claimProblems, err := m.lostClaims(cctx)
	if err != nil {
		return nil, fmt.Errorf("check leases: %w", err)
	}
	chk, err := store.Check(cctx, m.ledger)
	if err != nil {
		return nil, fmt.Errorf("check invariants: %w", err)
	}
	r.Problems = append(claimProblems, chk.Problems...)
	r.Invariants = Invariants{Lost: chk.Lost, Duplicated: chk.Duplicated, DoubleCounted: chk.DoubleCounted,
		AuditMismatch: chk.AuditMismatch, JobAttemptsBurned: chk.JobAttemptsBurned, LostClaims: lostClaims,
		EndedEarly: chk.EndedEarly, UncountedStarts: chk.UncountedStarts, Misreported: chk.Misreported}
	r.OK = r.Invariants.Total() == 0 && !r.Interrupted
	return r, nil
}

// mergeResults is the fleet's report from its processes' results, the
// invariants not yet checked; ran is how long the workload ran.
func mergeResults(cfg Config, results []*workerResult, ran time.Duration) *RunReport {
	r := &RunReport{
		Scenario: string(ScenarioTasks), Engine: cfg.Engine.String(), Mode: "sqlretry", Seed: cfg.Seed,
		DurationMS: ran.Milliseconds(), PlannedMS: cfg.Duration.Milliseconds(), Workers: cfg.Workers,
		FaultRate: cfg.FaultRate, Policy: policyReport(cfg), Faults: map[string]int{}, Shapes: map[string]ShapeReport{},
		SeriesMaxRuns: seriesRuns,
	}
	fl := &FleetReport{Processes: len(results), WorkersPerProcess: cfg.Workers}
	var lat [numShapes][]time.Duration
	for i, res := range results {
		w := res.Report
		r.Operations += w.Operations
		r.Retries += w.Retries
		r.SeriesCompleted += w.SeriesCompleted
		r.BudgetExhausted += w.BudgetExhausted
		r.Interrupted = r.Interrupted || w.Interrupted
		for k, n := range w.Faults {
			r.Faults[k] += n
		}
		for _, name := range shapeNames {
			r.Shapes[name] = addShape(r.Shapes[name], w.Shapes[name])
		}
		for sh := range lat {
			lat[sh] = append(lat[sh], res.Latencies[sh]...)
		}
		r.Wire = addWire(r.Wire, w.Wire, len(results))
		r.Settlement = addSettlement(r.Settlement, w.Settlement, i == 0)
		fl.Calls += res.Calls
		fl.Attempts += res.Attempts
		fl.PerProcess = append(fl.PerProcess, ProcessReport{Index: res.Index, PID: res.PID, Seed: w.Seed, Operations: w.Operations,
			OpsPerSec: w.OpsPerSec, Calls: res.Calls, Attempts: res.Attempts, AttemptsPerCall: ratio(res.Attempts, res.Calls),
			Retries: w.Retries, BudgetExhausted: w.BudgetExhausted, OutageCalls: w.Outage.Calls, OutageAttempts: w.Outage.Attempts,
			OutageAmplification: w.Outage.Amplification, RecoveryMS: w.Outage.RecoveryMS, Interrupted: w.Interrupted})
	}
	fl.AttemptsPerCall = ratio(fl.Attempts, fl.Calls)
	r.Fleet = fl
	r.OpsPerSec = math.Round(float64(r.Operations)/max(ran, time.Millisecond).Seconds()*10) / 10
	var all []time.Duration
	for sh, l := range lat {
		slices.Sort(l)
		s := r.Shapes[shape(sh).String()]
		s.P50MS, s.P99MS = ms(percentile(l, 0.5)), ms(percentile(l, 0.99))
		r.Shapes[shape(sh).String()] = s
		all = append(all, l...)
	}
	slices.Sort(all)
	r.Latency = Latency{P50MS: ms(percentile(all, 0.5)), P99MS: ms(percentile(all, 0.99))}
	mergeOutages(r, cfg.Outages, results)
	return r
}

// mergeOutages fills in r.Outage and r.Windows from the processes'
// outages: each outage's counts summed over the processes that reached
// it, its recovery the slowest process's (-1 if one never recovered); an
// outage no process reached is NotReached.
func mergeOutages(r *RunReport, outages []Outage, results []*workerResult) {
	var worst float64
	never := false
	for _, o := range outages {
		mw := OutageWindow{OffsetMS: o.Offset.Milliseconds()}
		reached, recovery, lost := false, 0.0, false
		for _, res := range results {
			i := slices.IndexFunc(res.Report.Outage.Windows, func(w OutageWindow) bool { return w.OffsetMS == mw.OffsetMS })
			if i < 0 {
				continue
			}
			w := res.Report.Outage.Windows[i]
			reached = true
			mw.LengthMS = max(mw.LengthMS, w.LengthMS)
			mw.Calls += w.Calls
			mw.Attempts += w.Attempts
			mw.Refused += w.Refused
			mw.OKInside += w.OKInside
			mw.CutShort = mw.CutShort || w.CutShort
			if w.RecoveryMS < 0 {
				lost = true
			} else {
				recovery = max(recovery, w.RecoveryMS)
			}
		}
		if !reached {
			r.Outage.NotReached = append(r.Outage.NotReached, OutageWindow{OffsetMS: mw.OffsetMS, LengthMS: o.Length.Milliseconds()})
			continue
		}
		mw.Amplification = ratio(mw.Attempts, mw.Calls)
		mw.RecoveryMS = recovery
		switch {
		case lost || mw.CutShort:
			mw.RecoveryMS = -1
			never = never || !mw.CutShort
		default:
			worst = max(worst, recovery)
		}
		r.Outage.Windows = append(r.Outage.Windows, mw)
		r.Outage.Calls += mw.Calls
		r.Outage.Attempts += mw.Attempts
		r.Windows = append(r.Windows, Outage{Offset: o.Offset, Length: time.Duration(mw.LengthMS) * time.Millisecond})
	}
	for _, res := range results {
		r.Outage.Refused += res.Report.Outage.Refused
	}
	r.Outage.Amplification = ratio(r.Outage.Attempts, r.Outage.Calls)
	r.Outage.RecoveryMS = worst
	if never {
		r.Outage.RecoveryMS = -1
	}
}

// addShape is a + b, percentiles left out (they are recomputed).
func addShape(a, b ShapeReport) ShapeReport {
	a.Operations += b.Operations
	a.OK += b.OK
	a.Failed += b.Failed
	a.FailedBy = addCounts(a.FailedBy, b.FailedBy)
	a.Faults = addCounts(a.Faults, b.Faults)
	a.Retries += b.Retries
	a.VerifiedApplied += b.VerifiedApplied
	a.VerifiedNotApplied += b.VerifiedNotApplied
	a.Ambiguous += b.Ambiguous
	a.Canceled += b.Canceled
	a.InOutage += b.InOutage
	a.BudgetExhausted += b.BudgetExhausted
	return a
}

func addCounts(a, b map[string]int) map[string]int {
	if a == nil {
		a = map[string]int{}
	}
	for k, n := range b {
		a[k] += n
	}
	return a
}

// addWire adds one process's proxy counts to the fleet's; nil without
// proxies.
func addWire(a, b *WireReport, procs int) *WireReport {
	if b == nil {
		return a
	}
	if a == nil {
		a = &WireReport{Proxy: fmt.Sprintf("of each of the %d processes", procs)}
	}
	a.Connections += b.Connections
	a.Commits += b.Commits
	a.Faults += b.Faults
	a.Reset += b.Reset
	a.CutCommit += b.CutCommit
	a.TLS += b.TLS
	return a
}

// addSettlement adds one process's settlement counts; the first names
// the verifier and the note.
func addSettlement(a, b Settlement, first bool) Settlement {
	if first {
		a.Verifier, a.Note = b.Verifier, b.Note
	}
	a.Ambiguous += b.Ambiguous
	a.Applied += b.Applied
	a.NotApplied += b.NotApplied
	a.StillAmbiguous += b.StillAmbiguous
	a.Wrong += b.Wrong
	a.Checked += b.Checked
	return a
}

// writeFleet writes a fleet's per-process lines and its totals; nothing
// for a run in one process.
func (r *RunReport) writeFleet(w io.Writer) {
	fl := r.Fleet
	if fl == nil {
		return
	}
	own := "policy, retry budget and fault plan"
	if r.Wire != nil {
		own = "policy, retry budget, fault plan and wire proxy"
	}
	fmt.Fprintf(w, "fleet: %d processes × %d workers on one database, each process with its own %s (seeds derived from seed %d); "+
		"the figures outside this table are the fleet's totals, and the invariants were checked once over the database\n",
		fl.Processes, fl.WorkersPerProcess, own, r.Seed)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "process\tpid\toperations\tops/s\tcalls\tattempts/call\toutage calls\toutage attempts/call\tbudget refusals\trecovery ms\t")
	for _, p := range fl.PerProcess {
		fmt.Fprintf(tw, "%d\t%d\t%d\t%.0f\t%d\t%.3f\t%d\t%.3f\t%d\t%.0f\t\n", p.Index, p.PID, p.Operations, p.OpsPerSec, p.Calls,
			p.AttemptsPerCall, p.OutageCalls, p.OutageAmplification, p.BudgetExhausted, p.RecoveryMS)
	}
	fmt.Fprintf(tw, "all\t\t%d\t%.0f\t%d\t%.3f\t%d\t%.3f\t%d\t%.0f\t\n", r.Operations, r.OpsPerSec, fl.Calls, fl.AttemptsPerCall,
		r.Outage.Calls, r.Outage.Amplification, r.BudgetExhausted, r.Outage.RecoveryMS)
	tw.Flush()
	fmt.Fprintln(w)
}
