package chaos

import (
	"context"
	"time"

	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/cmd/sqlretry/internal/engine"
	"github.com/sqlretry/sqlretry/faults"
	"github.com/sqlretry/sqlretry/taskstore"
)

// What a fleet's parent and its worker processes say to each other. The
// parent writes one workerSpec to a worker's standard input as JSON, then
// the line "go" once every worker is ready; closing the worker's standard
// input stops it early (Ctrl-C, another worker failed, or the parent
// died). The worker writes workerMsg values to its standard output as a
// stream of JSON documents: ready, samples as it runs, then its result or
// an error. The DSN travels on the pipe, never in the worker's arguments
// or environment, where any user's ps would show its password.

// WorkerEnv is the environment variable that makes the command a fleet's
// worker process: `sqlretry chaos` with it set runs [ServeWorker] on its
// standard input and output instead of parsing flags.
const WorkerEnv = "SQLRETRY_CHAOS_FLEET_WORKER"

// goLine is the parent's signal to start the workload.
const goLine = "go"

// workerSpec is one worker process's run: the parent's Config, defaults
// applied, with this process's seed, the first of its worker ids and where
// the shared database is.
type workerSpec struct {
	Index     int           `json:"index"`
	Processes int           `json:"processes"`
	Seed      uint64        `json:"seed"`
	Engine    engine.Engine `json:"engine"`
	DSN       string        `json:"dsn"`
	// Name is the shared database within DSN: the PostgreSQL schema, the
	// MySQL database or the SQLite file the parent created.
	Name string `json:"name"`
	// FirstWorker is this process's first worker id: process i's workers
	// are i×Workers … i×Workers+Workers-1, so task keys and lease owners
	// never collide across the fleet.
	FirstWorker int           `json:"first_worker"`
	Duration    time.Duration `json:"duration"`
	Workers     int           `json:"workers"`
	// FaultRate is the rate as run; 0 means none (not Config's default).
	FaultRate   float64       `json:"fault_rate"`
	Outages     []Outage      `json:"outages"`
	Kinds       []faults.Kind `json:"kinds,omitempty"`
	Policy      PolicyConfig  `json:"policy"`
	NoProxy     bool          `json:"no_proxy"`
	Verifier    string        `json:"verifier"`
	SampleEvery time.Duration `json:"sample_every"`
}

// newWorkerSpec is process i's spec for the parent's config c (defaults
// applied) on the shared database name.
func newWorkerSpec(c Config, i int, name string) workerSpec {
	return workerSpec{Index: i, Processes: c.Processes, Seed: ProcessSeed(c.Seed, i), Engine: c.Engine, DSN: c.DSN, Name: name,
		FirstWorker: i * c.Workers, Duration: c.Duration, Workers: c.Workers, FaultRate: c.FaultRate, Outages: c.Outages,
		Kinds: c.Kinds, Policy: c.Policy, NoProxy: c.NoProxy, Verifier: c.Verifier, SampleEvery: c.SampleEvery}
}

// config is the Config the worker process runs, defaults applied.
func (s workerSpec) config() Config {
	rate := s.FaultRate
	if rate == 0 {
		rate = -1 // none: Config reads 0 as its default rate
	}
	outages := s.Outages
	if outages == nil {
		outages = []Outage{} // none: Config reads nil as the default outage
	}
	return Config{Scenario: ScenarioTasks, Engine: s.Engine, DSN: s.DSN, Duration: s.Duration, Workers: s.Workers, FaultRate: rate,
		Outages: outages, Seed: s.Seed, Kinds: s.Kinds, Policy: s.Policy, NoProxy: s.NoProxy, Verifier: s.Verifier,
		SampleEvery: s.SampleEvery}.WithDefaults()
}

// ProcessSeed is the seed of process i of a fleet run with seed: each
// process's fault plan and workers draw from a sequence of their own,
// fixed by the run's seed (splitmix64 of seed and i). Never 0, which
// Config reads as 1.
func ProcessSeed(seed uint64, i int) uint64 {
	z := seed + uint64(i+1)*0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	z ^= z >> 31
	if z == 0 {
		z = 1
	}
	return z
}

// workerMsg is one message from a worker process; exactly one field is set.
type workerMsg struct {
	Ready  bool          `json:"ready,omitempty"`
	Sample *Sample       `json:"sample,omitempty"`
	Result *workerResult `json:"result,omitempty"`
	// Error is a failure before or after the workload: setting up (the
	// database, the proxy), or building the result. InputWhat names the
	// flag when it is an *InputError; Interrupted when the worker's context
	// ended before its workload started.
	Error       string `json:"error,omitempty"`
	InputWhat   string `json:"input_what,omitempty"`
	Interrupted bool   `json:"interrupted,omitempty"`
}

// workerResult is what one worker process did: its report (no invariants:
// the parent checks them once over the shared database), the raw material
// for the parent's merged figures, and its half of the invariant check —
// what every write told its caller, the handler starts, the claims it was
// told OK.
type workerResult struct {
	Index  int        `json:"index"` // the process's index in the fleet
	PID    int        `json:"pid"`
	Report *RunReport `json:"report"`
	// Calls and Attempts are the policy's counters (Config.CountCalls):
	// the process's attempts per call.
	Calls    int64 `json:"calls"`
	Attempts int64 `json:"attempts"`
	// Latencies are each shape's kept latencies, for the fleet's
	// percentiles.
	Latencies [numShapes][]time.Duration `json:"latencies"`
	Entries   []taskstore.Entry          `json:"entries"`
	Starts    map[string]int             `json:"starts"`
	Claimed   map[string]string          `json:"claimed"` // lease token → task id, for every claim told OK
}

// toldError is an error [taskstore.OutcomeOf] reads as outcome, with the
// text msg: a ledger entry a worker process recorded, recorded again into
// the parent's ledger with what its caller was told.
type toldError struct {
	outcome taskstore.Outcome
	msg     string
}

func (e *toldError) Error() string { return e.msg }

// Is makes an ambiguous outcome match sqlretry.ErrAmbiguous and a
// cancelled one context.Canceled, as the original errors did.
func (e *toldError) Is(target error) bool {
	switch e.outcome {
	case taskstore.ToldAmbiguous:
		return target == sqlretry.ErrAmbiguous
	case taskstore.ToldCanceled:
		return target == context.Canceled
	}
	return false
}

// replay records a worker process's ledger entries and handler starts into
// l, each with the outcome its caller was told.
func replay(l *taskstore.Ledger, entries []taskstore.Entry, starts map[string]int) {
	for _, e := range entries {
		var err error
		if e.Outcome != taskstore.ToldOK {
			err = &toldError{outcome: e.Outcome, msg: e.Err}
		}
		l.Record(e, err)
	}
	for id, n := range starts {
		for range n {
			l.HandlerStarted(id)
		}
	}
}
