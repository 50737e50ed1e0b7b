package chaos

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/internal/dbtest"
	"github.com/sqlretry/sqlretry/taskstore"
)

// The fleet tests start worker processes: this test binary again, whose
// TestMain serves them (as the command's chaos does with WorkerEnv set).
// Two more variables script a worker for the tests that need it to go
// wrong: testWorkerLie has it report one write as told failed when its
// caller was told OK, and testWorkerCrash has it die as it sends its
// first sample.
const (
	testWorkerLie   = "SQLRETRY_CHAOS_TEST_WORKER_LIE"
	testWorkerCrash = "SQLRETRY_CHAOS_TEST_WORKER_CRASH"
)

func TestMain(m *testing.M) {
	if os.Getenv(WorkerEnv) != "" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		var out io.Writer = os.Stdout
		switch {
		case os.Getenv(testWorkerLie) != "":
			out = &lyingWriter{w: os.Stdout}
		case os.Getenv(testWorkerCrash) != "":
			out = crashingWriter{w: os.Stdout}
		}
		code := ServeWorker(ctx, os.Stdin, out)
		stop()
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// lyingWriter passes a worker's messages on, with one change to its
// result: the first write its caller was told OK is reported as told
// failed, a wrong outcome the parent's check must catch.
type lyingWriter struct {
	w   io.Writer
	buf bytes.Buffer
}

func (l *lyingWriter) Write(p []byte) (int, error) {
	l.buf.Write(p)
	for {
		line, err := l.buf.ReadBytes('\n')
		if err != nil {
			l.buf.Write(line) // an incomplete message: wait for its end
			return len(p), nil
		}
		var m workerMsg
		if json.Unmarshal(line, &m) == nil && m.Result != nil {
			for i, e := range m.Result.Entries {
				if e.Outcome == taskstore.ToldOK && e.Kind == taskstore.OpSetStatus {
					m.Result.Entries[i].Outcome, m.Result.Entries[i].Err = taskstore.ToldFailed, "injected: a wrong outcome"
					break
				}
			}
			line, _ = json.Marshal(m)
			line = append(line, '\n')
		}
		if _, err := l.w.Write(line); err != nil {
			return len(p), err
		}
	}
}

// crashingWriter passes a worker's messages on until its first sample,
// then kills the process as a crash would, with a word on stderr.
type crashingWriter struct{ w io.Writer }

func (c crashingWriter) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte(`"sample"`)) {
		fmt.Fprintln(os.Stderr, "worker crashed on purpose")
		os.Exit(3)
	}
	return c.w.Write(p)
}

// withWorkerEnv has workerCommand add env to process i's environment for
// the test's duration.
func withWorkerEnv(t *testing.T, i int, env string) {
	t.Helper()
	orig := workerCommand
	workerCommand = func(n int) (*exec.Cmd, error) {
		cmd, err := orig(n)
		if err == nil && n == i {
			cmd.Env = append(cmd.Env, env)
		}
		return cmd, err
	}
	t.Cleanup(func() { workerCommand = orig })
}

// fleetConfig is a short fleet run: 2 processes of 3 workers for 2 s,
// with an outage in the middle.
func fleetConfig(dsn string) Config {
	return Config{DSN: dsn, Processes: 2, Duration: 2 * time.Second, Workers: 3, Seed: 7,
		Outages: []Outage{{Offset: 800 * time.Millisecond, Length: 400 * time.Millisecond}},
		Policy:  PolicyConfig{BaseDelay: 5 * time.Millisecond, MaxDelay: 50 * time.Millisecond}}
}

// checkFleet asserts what every fleet run's report must hold: each
// process's line, totals that are the sum of them, an outage that tested
// something, and every invariant.
func checkFleet(t *testing.T, r *RunReport, procs int) {
	t.Helper()
	if r.Fleet == nil || len(r.Fleet.PerProcess) != procs {
		t.Fatalf("fleet: got %+v, want %d processes", r.Fleet, procs)
	}
	ops, calls, outageCalls := 0, int64(0), int64(0)
	pids := map[int]bool{}
	for i, p := range r.Fleet.PerProcess {
		if p.Index != i || p.Operations == 0 || p.Seed != ProcessSeed(r.Seed, i) || p.PID == 0 || p.PID == os.Getpid() || pids[p.PID] {
			t.Errorf("process %d: got %+v, want index %d, operations, seed %d and a pid of its own", i, p, i, ProcessSeed(r.Seed, i))
		}
		pids[p.PID] = true
		ops += p.Operations
		calls += p.Calls
		outageCalls += p.OutageCalls
	}
	if ops != r.Operations || calls != r.Fleet.Calls || outageCalls != r.Outage.Calls {
		t.Errorf("totals: got %d operations, %d calls, %d outage calls; want the processes' sums %d, %d, %d",
			r.Operations, r.Fleet.Calls, r.Outage.Calls, ops, calls, outageCalls)
	}
	if r.Outage.Calls == 0 || r.Outage.Refused == 0 {
		t.Errorf("outage: got %d calls and %d refused, want both > 0", r.Outage.Calls, r.Outage.Refused)
	}
	if !r.OK || r.Invariants.Total() != 0 {
		t.Errorf("ok %t, invariants %+v: want every invariant 0\n%v", r.OK, r.Invariants, r.Problems)
	}
}

// TestFleetSQLite runs a fleet of two processes on one SQLite file.
func TestFleetSQLite(t *testing.T) {
	r, err := Run(context.Background(), fleetConfig(""))
	if err != nil {
		t.Fatal(err)
	}
	checkFleet(t, r, 2)
	var buf bytes.Buffer
	r.WriteText(&buf)
	for _, want := range []string{"fleet: 2 processes × 3 workers on one database", "\n      all ", "OK: nothing lost"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("report: want %q in\n%s", want, buf.String())
		}
	}
}

// TestFleetServers runs a fleet of two processes on the local PostgreSQL
// and MariaDB, each process with its own wire proxy.
func TestFleetServers(t *testing.T) {
	for _, c := range []struct {
		engine string
		dsn    func(testing.TB) string
	}{{"postgres", dbtest.PostgresDSN}, {"mysql", dbtest.MySQLDSN}} {
		t.Run(c.engine, func(t *testing.T) {
			r, err := Run(context.Background(), fleetConfig(c.dsn(t)))
			if err != nil {
				t.Fatal(err)
			}
			checkFleet(t, r, 2)
			if r.Engine != c.engine || r.Wire == nil || r.Wire.Connections == 0 {
				t.Errorf("engine %s, wire %+v: want %s through the processes' proxies", r.Engine, r.Wire, c.engine)
			}
		})
	}
}

// TestFleetCatchesAWrongOutcome: the parent merges every process's ledger
// and checks it against the database, so a process that reports a write
// as told failed when it was applied (process 1 lies about one
// transition) makes the run fail, with that write named.
func TestFleetCatchesAWrongOutcome(t *testing.T) {
	withWorkerEnv(t, 1, testWorkerLie+"=1")
	r, err := Run(context.Background(), fleetConfig(""))
	if err != nil {
		t.Fatal(err)
	}
	if r.OK || r.Invariants.Misreported != 1 || r.Invariants.Total() != 1 {
		t.Errorf("ok %t, invariants %+v: want the one misreported write caught", r.OK, r.Invariants)
	}
	if !strings.Contains(strings.Join(r.Problems, "\n"), "injected: a wrong outcome") {
		t.Errorf("problems: want the injected outcome named, got %v", r.Problems)
	}
}

// TestFleetWorkerCrashFailsTheRun: a worker process that dies mid-run
// fails the run, with an error that names it and quotes its stderr.
func TestFleetWorkerCrashFailsTheRun(t *testing.T) {
	withWorkerEnv(t, 1, testWorkerCrash+"=1")
	r, err := Run(context.Background(), fleetConfig(""))
	if err == nil {
		t.Fatalf("got a report (ok %t), want an error", r.OK)
	}
	t.Logf("the run's error: %v", err)
	var ie *InputError
	for _, want := range []string{"worker process 1 (pid ", "exit status 3", "worker crashed on purpose"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error: want %q in %q", want, err)
		}
	}
	if strings.Contains(err.Error(), "worker process 0") || errors.As(err, &ie) {
		t.Errorf("error %q: want only process 1 named, and not as bad input", err)
	}
}

// TestFleetInterrupted: the parent's context ending (Ctrl-C) stops every
// worker process, which reports what it ran: the fleet's report is
// interrupted, with the invariants checked over what ran.
func TestFleetInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := fleetConfig("")
	cfg.Duration = 10 * time.Minute
	cfg.Outages = []Outage{}
	cfg.Progress = func(s Sample) {
		if s.Ops > 0 {
			cancel()
		}
	}
	r, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Interrupted || r.OK || r.Invariants.Total() != 0 {
		t.Errorf("got interrupted %t, ok %t, invariants %+v: want interrupted, not ok, nothing violated\n%v", r.Interrupted, r.OK, r.Invariants, r.Problems)
	}
	for _, p := range r.Fleet.PerProcess {
		if !p.Interrupted {
			t.Errorf("process %d: not interrupted", p.Index)
		}
	}
	if r.DurationMS >= cfg.Duration.Milliseconds() {
		t.Errorf("duration: got %d ms, want the time run", r.DurationMS)
	}
}

// TestWorkerStopsWhenItsInputEnds: a worker process whose parent is gone
// (its standard input ends) stops its workload and exits, reporting what
// it ran as interrupted, as a worker must not outlive its parent.
func TestWorkerStopsWhenItsInputEnds(t *testing.T) {
	dir := t.TempDir()
	cfg := fleetConfig("").WithDefaults()
	cfg.Duration = 10 * time.Minute
	cfg.Processes = 1
	db := dir + "/w.db"
	tgt, err := openTarget(context.Background(), Config{DSN: db, Engine: cfg.Engine}, "ours")
	if err != nil {
		t.Fatal(err)
	}
	defer tgt.close()
	db2 := sql.OpenDB(tgt.inner)
	defer db2.Close()
	st, err := taskstore.New(db2, dialect(cfg.Engine), taskstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	cmd, err := workerCommand(0)
	if err != nil {
		t.Fatal(err)
	}
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	spec, _ := json.Marshal(newWorkerSpec(cfg, 0, db))
	fmt.Fprintf(in, "%s\n%s\n", spec, goLine)
	dec := json.NewDecoder(bufio.NewReader(out))
	var res *workerResult
	closed := false
	for {
		var m workerMsg
		if err := dec.Decode(&m); err != nil {
			break
		}
		if m.Sample != nil && m.Sample.Ops > 0 && !closed {
			in.Close() // the parent is gone
			closed = true
		}
		if m.Result != nil {
			res = m.Result
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("worker: %v", err)
	}
	if res == nil || !res.Report.Interrupted || res.Report.Operations == 0 {
		t.Fatalf("result: got %+v, want an interrupted run's", res)
	}
}

// TestReplayKeepsOutcomes: a worker's ledger, recorded again into the
// parent's, keeps what each caller was told, and the handler starts.
func TestReplayKeepsOutcomes(t *testing.T) {
	src := taskstore.NewLedger()
	src.Record(taskstore.Entry{Kind: taskstore.OpPersist, ID: "a"}, nil)
	src.Record(taskstore.Entry{Kind: taskstore.OpClaim, ID: "b"}, fmt.Errorf("lost reply: %w", sqlretry.ErrAmbiguous))
	src.Record(taskstore.Entry{Kind: taskstore.OpStart, ID: "c"}, context.Canceled)
	src.Record(taskstore.Entry{Kind: taskstore.OpAdvance, ID: "d"}, taskstore.ErrVersionConflict)
	src.HandlerStarted("t1")
	src.HandlerStarted("t1")
	var wire workerResult
	b, _ := json.Marshal(workerResult{Entries: src.Entries(), Starts: src.Starts()})
	if err := json.Unmarshal(b, &wire); err != nil {
		t.Fatal(err)
	}
	dst := taskstore.NewLedger()
	replay(dst, wire.Entries, wire.Starts)
	got, want := dst.Entries(), src.Entries()
	if len(got) != len(want) {
		t.Fatalf("entries: got %d, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("entry %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
	if s := dst.Starts(); s["t1"] != 2 || len(s) != 1 {
		t.Errorf("starts: got %v, want t1 twice", s)
	}
}

// TestProcessSeed: each process's seed is fixed by the run's seed and
// differs from the others'.
func TestProcessSeed(t *testing.T) {
	seen := map[uint64]bool{}
	for _, seed := range []uint64{1, 2, 3} {
		for i := range 8 {
			s := ProcessSeed(seed, i)
			if s == 0 || seen[s] || s != ProcessSeed(seed, i) {
				t.Errorf("ProcessSeed(%d, %d) = %d: want nonzero, stable, unlike the others", seed, i, s)
			}
			seen[s] = true
		}
	}
}

// TestMergeOutages: a fleet's outage sums its processes' counts, takes
// its slowest process's recovery, and counts an outage as reached if any
// process reached it.
func TestMergeOutages(t *testing.T) {
	outages := []Outage{{Offset: time.Second, Length: time.Second}, {Offset: 5 * time.Second, Length: time.Second}}
	res := func(calls, attempts int64, recovery float64, reachedSecond bool) *workerResult {
		o := OutageReport{Refused: 3, Windows: []OutageWindow{{OffsetMS: 1000, LengthMS: 1000, Calls: calls, Attempts: attempts, RecoveryMS: recovery, Refused: 3}}}
		if reachedSecond {
			o.Windows = append(o.Windows, OutageWindow{OffsetMS: 5000, LengthMS: 300, Calls: 1, Attempts: 1, CutShort: true, RecoveryMS: -1})
		} else {
			o.NotReached = []OutageWindow{{OffsetMS: 5000, LengthMS: 1000}}
		}
		return &workerResult{Report: &RunReport{Outage: o}}
	}
	r := &RunReport{}
	mergeOutages(r, outages, []*workerResult{res(10, 11, 40, false), res(20, 20, 90, true)})
	o := r.Outage
	if len(o.Windows) != 2 || o.Windows[0].Calls != 30 || o.Windows[0].Attempts != 31 || o.Windows[0].RecoveryMS != 90 || o.Windows[0].Refused != 6 {
		t.Fatalf("windows: got %+v, want the first summed (30 calls, 31 attempts, 6 refused) with the slowest recovery, 90 ms", o.Windows)
	}
	if w := o.Windows[1]; !w.CutShort || w.LengthMS != 300 || w.RecoveryMS != -1 || len(o.NotReached) != 0 {
		t.Errorf("second window: got %+v, not reached %+v; want it reached, cut short after 300 ms", w, o.NotReached)
	}
	if o.Calls != 31 || o.Attempts != 32 || o.Amplification != 1.032 || o.RecoveryMS != 90 || o.Refused != 6 {
		t.Errorf("totals: got %+v", o)
	}
}

// TestFleetConfigErrors: the settings a fleet cannot run are refused,
// naming --processes.
func TestFleetConfigErrors(t *testing.T) {
	for _, c := range []Config{
		{Processes: -1},
		{Processes: MaxProcesses + 1},
		{Processes: 2, Scenario: ScenarioContention},
		{Processes: 2, Naive: true},
		{Processes: 2, Failover: true},
		{Processes: 2, Cluster: ClusterGalera},
	} {
		var ie *InputError
		if err := c.Validate(); !errors.As(err, &ie) || ie.What != "--processes" {
			t.Errorf("%+v: got %v, want an error naming --processes", c, err)
		}
	}
	if err := (Config{Processes: 8}).Validate(); err != nil {
		t.Errorf("8 processes: %v", err)
	}
}

// TestFleetSamplesOnlyWhatItHeard: the fleet merges its processes' samples
// on a tick of its own; a tick with no sample heard since the last merge
// adds none (it read as a tenth of a second with 0 ok/s, then one with
// twice the rate: dips to 0 in every fleet plot), nor does one before the
// first sample is heard.
func TestFleetSamplesOnlyWhatItHeard(t *testing.T) {
	f := &fleet{cfg: Config{Duration: time.Minute, SampleEvery: 5 * time.Millisecond}.WithDefaults(),
		procs: []*proc{{}}, events: make(chan procEvent), done: make(chan struct{})}
	got := make(chan []Sample)
	go func() {
		samples, _ := f.collect(context.Background())
		got <- samples
	}()
	time.Sleep(100 * time.Millisecond) // twenty ticks with nothing heard
	f.events <- procEvent{i: 0, msg: &workerMsg{Sample: &Sample{Ops: 10, OK: 10}}}
	time.Sleep(50 * time.Millisecond) // ten more
	f.events <- procEvent{i: 0, msg: &workerMsg{Result: &workerResult{Report: &RunReport{}}}}
	f.events <- procEvent{i: 0, exit: true}
	samples := <-got
	// At most one merge of the one sample heard, and the last; none
	// before it (a merge of nothing read as an empty budget).
	if len(samples) > 2 || samples[0].OK != 10 {
		t.Errorf("got %d samples from one sample heard, the first %+v; want at most 2 (the one heard, the last)", len(samples), samples[0])
	}
	if last := samples[len(samples)-1]; last.OK != 10 {
		t.Errorf("last sample: got %+v, want the one heard", last)
	}
}
