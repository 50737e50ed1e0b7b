package chaos

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/sqlretry/sqlretry/taskstore"
)

// MaxProcesses bounds Config.Processes: each process holds up to
// Workers+4 connections, and a server's connection limit (PostgreSQL's
// default max_connections is 100) is reached long before.
const MaxProcesses = 64

// fleetGrace is how long the parent waits for its workers past the run's
// duration (their last operations, their results) before it kills them
// and fails the run, and how long they have to get ready.
const fleetGrace = 2 * time.Minute

// validateFleet checks Processes against the rest of c (defaults applied).
func (c Config) validateFleet() error {
	switch {
	case c.Processes < 0 || c.Processes > MaxProcesses:
		return inputErr("--processes", fmt.Errorf("%d is outside 1..%d", c.Processes, MaxProcesses))
	case c.Processes <= 1:
		return nil
	case c.Scenario == ScenarioContention:
		return inputErr("--processes", errors.New("the contention scenario runs its three policies one after another "+
			"in one process, each on a database of its own; a fleet runs the tasks scenario"))
	case c.Cluster != "" || c.Failover:
		return inputErr("--processes", errors.New("--cluster and --failover run in one process, which starts "+
			"the cluster and plays its node losses; a fleet runs on one server (drop --processes or the cluster flag)"))
	case c.Naive || c.Damage:
		return inputErr("--processes", errors.New("a fleet runs sqlretry's task store; the naive blind-replay "+
			"comparison runs in one process (drop --naive and --compare, or --processes)"))
	}
	return nil
}

// workerCommand returns the command that starts a fleet's worker process
// i: this program again, as `sqlretry chaos` with [WorkerEnv] set, which
// runs [ServeWorker]. A variable so that a test binary, whose TestMain
// serves workers, can start itself, and a test can start a worker that
// crashes.
var workerCommand = func(i int) (*exec.Cmd, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find this program to start worker process %d: %w", i, err)
	}
	cmd := exec.Command(exe, "chaos")
	cmd.Env = append(os.Environ(), WorkerEnv+"=1")
	return cmd, nil
}

// proc is one worker process as the parent sees it.
type proc struct {
	spec   workerSpec
	cmd    *exec.Cmd
	stdin  io.WriteCloser // nil once closed: the worker stops
	stderr *tailWriter

	ready   bool
	exited  bool
	latest  *Sample // its last sample
	result  *workerResult
	failure string      // why it failed; "" while it has not
	input   *InputError // its setup's bad input, if that is why
	// interrupted: it said its context ended before its workload started.
	interrupted bool
}

// name is how a report and an error name the process.
func (p *proc) name() string {
	pid := 0
	if p.cmd.Process != nil {
		pid = p.cmd.Process.Pid
	}
	return fmt.Sprintf("worker process %d (pid %d, seed %d)", p.spec.Index, pid, p.spec.Seed)
}

// procEvent is a message from worker process i, or its exit.
type procEvent struct {
	i    int
	msg  *workerMsg
	exit bool
	err  error // the exit's error (exit status, signal), or the stream's
}

// fleet is a run's worker processes.
type fleet struct {
	cfg   Config
	procs []*proc
	// fresh: a process sent a sample since the fleet's last one.
	fresh  bool
	events chan procEvent
	done   chan struct{} // closed as the parent returns: readers stop sending
}

// runFleet runs the tasks scenario as cfg.Processes worker processes on
// one database the parent creates, migrates and, at the end, checks once
// against the merged ledgers of every process.
func runFleet(ctx context.Context, cfg Config) (*RunReport, error) {
	pcfg := cfg
	pcfg.NoProxy = true // the parent only migrates and checks: the workers have the proxies
	tgt, err := openTarget(ctx, pcfg, "ours")
	if err != nil {
		return nil, err
	}
	defer tgt.close()
	db := sql.OpenDB(tgt.inner)
	defer db.Close()
	ttl := max(time.Minute, 4*cfg.Duration) // as run's: no lease expires while the workload runs
	setup, err := taskstore.New(db, dialect(cfg.Engine), taskstore.Options{LeaseTTL: ttl, Now: cfg.Now})
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	err = setup.Migrate(sctx)
	cancel()
	if err != nil {
		return nil, inputErr("--dsn", fmt.Errorf("create the task store's tables: %w", err))
	}

	f := &fleet{cfg: cfg, events: make(chan procEvent, 4*cfg.Processes), done: make(chan struct{})}
	defer f.close()
	for i := range cfg.Processes {
		if err := f.start(i, tgt.name); err != nil {
			f.stopAll()
			f.drain(time.Now().Add(fleetGrace))
			return nil, err
		}
	}
	if err := f.waitReady(ctx); err != nil {
		return nil, err
	}
	for _, p := range f.procs {
		if _, err := io.WriteString(p.stdin, goLine+"\n"); err != nil {
			p.fail(fmt.Sprintf("did not take the start: %v", err))
		}
	}
	samples, ran := f.collect(ctx)
	if err := f.failed(); err != nil {
		return nil, err
	}
	var results []*workerResult
	for _, p := range f.procs {
		// A process without a result was interrupted (a signal of its
		// own) as the run started: it ran nothing, and told nothing.
		if p.result != nil {
			results = append(results, p.result)
		}
	}
	if len(results) == 0 {
		return nil, ErrInterrupted
	}
	return f.report(ctx, db, setup, results, samples, ran)
}

// start starts worker process i and hands it its spec.
func (f *fleet) start(i int, name string) error {
	cmd, err := workerCommand(i)
	if err != nil {
		return err
	}
	p := &proc{spec: newWorkerSpec(f.cfg, i, name), cmd: cmd, stderr: &tailWriter{max: 4096}}
	cmd.Stderr = p.stderr
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start worker process %d: %w", i, err)
	}
	f.procs = append(f.procs, p)
	spec, err := json.Marshal(p.spec)
	if err == nil {
		_, err = p.stdin.Write(append(spec, '\n'))
	}
	go f.read(i, cmd, stdout)
	if err != nil {
		return fmt.Errorf("%s: hand it its spec: %w", p.name(), err)
	}
	return nil
}

// read turns worker process i's output into events, then waits for it to
// exit.
func (f *fleet) read(i int, cmd *exec.Cmd, stdout io.Reader) {
	send := func(e procEvent) {
		select {
		case f.events <- e:
		case <-f.done:
		}
	}
	dec := json.NewDecoder(stdout)
	var streamErr error
	for {
		var m workerMsg
		if err := dec.Decode(&m); err != nil {
			if !errors.Is(err, io.EOF) {
				streamErr = fmt.Errorf("its output is not the fleet's messages: %w", err)
				_, _ = io.Copy(io.Discard, stdout) // let it finish writing, and exit
			}
			break
		}
		send(procEvent{i: i, msg: &m})
	}
	err := cmd.Wait()
	if streamErr != nil {
		err = streamErr
	}
	send(procEvent{i: i, exit: true, err: err})
}

// handle applies one event to its process.
func (f *fleet) handle(e procEvent) {
	p := f.procs[e.i]
	if e.exit {
		p.exited = true
		if p.result == nil && p.failure == "" && !p.interrupted {
			why := "exited"
			if e.err != nil {
				why += " (" + e.err.Error() + ")"
			}
			p.fail(why + " without a result")
		}
		return
	}
	m := e.msg
	switch {
	case m.Ready:
		p.ready = true
	case m.Sample != nil:
		p.latest = m.Sample
		f.fresh = true
	case m.Result != nil:
		p.result = m.Result
	case m.Interrupted:
		p.interrupted = true
	case m.Error != "":
		if m.InputWhat != "" {
			p.input = &InputError{What: m.InputWhat, Err: errors.New(m.Error)}
		}
		p.fail("failed: " + m.Error)
	}
}

// fail records why p failed, with the end of its standard error (a
// panic's trace, a runtime's fatal error).
func (p *proc) fail(why string) {
	if p.failure != "" {
		return
	}
	p.failure = why
	if tail := strings.TrimSpace(p.stderr.String()); tail != "" {
		p.failure += "; its standard error ends: " + strings.Join(strings.Fields(tail), " ")
	}
}

// failed is the run's error when a worker process failed, naming each
// that did; an *InputError (exit 2) when each failed on bad input (the
// setup's: an encrypted connection the proxy cannot read).
func (f *fleet) failed() error {
	var lines []string
	var input *InputError
	allInput := true
	for _, p := range f.procs {
		if p.failure == "" {
			continue
		}
		lines = append(lines, p.name()+" "+p.failure)
		if p.input == nil {
			allInput = false
		} else if input == nil {
			input = p.input
		}
	}
	if len(lines) == 0 {
		return nil
	}
	if allInput {
		return &InputError{What: input.What, Err: errors.New(strings.Join(lines, "; "))}
	}
	return fmt.Errorf("the fleet failed: %s", strings.Join(lines, "; "))
}

// waitReady waits until every worker process is ready. A process that
// fails or exits first fails the run; ctx ending first interrupts it.
func (f *fleet) waitReady(ctx context.Context) error {
	deadline := time.NewTimer(fleetGrace)
	defer deadline.Stop()
	for {
		ready := 0
		for _, p := range f.procs {
			if p.ready {
				ready++
			}
		}
		if ready == len(f.procs) {
			return nil
		}
		select {
		case e := <-f.events:
			f.handle(e)
			if p := f.procs[e.i]; p.failure != "" || p.exited {
				f.stopAll()
				f.drain(time.Now().Add(fleetGrace))
				if err := f.failed(); err != nil {
					return err
				}
				return ErrInterrupted // it was interrupted (a signal of its own) before the start
			}
		case <-ctx.Done():
			f.stopAll()
			f.drain(time.Now().Add(fleetGrace))
			return ErrInterrupted
		case <-deadline.C:
			for _, p := range f.procs {
				if !p.ready {
					p.fail(fmt.Sprintf("was not ready after %s", fleetGrace))
				}
			}
			return f.failed()
		}
	}
}

// collect runs the fleet until every worker process has exited: it merges
// their samples into the fleet's every SampleEvery (for the progress view
// and the plot), stops them all when ctx ends or one fails, and kills
// those still running fleetGrace after the run's end. It returns the
// samples and how long the workload ran. A tick with no process's sample
// since the last is skipped (and so is every tick before the first): the processes sample on clocks of their own,
// and a merge of the same samples again read as a second in which the
// fleet did nothing (0 ok/s), then one in which it did twice as much.
func (f *fleet) collect(ctx context.Context) ([]Sample, time.Duration) {
	cfg := f.cfg
	start := cfg.Now()
	tick := time.NewTicker(cfg.SampleEvery)
	defer tick.Stop()
	deadline := time.NewTimer(cfg.Duration + fleetGrace)
	defer deadline.Stop()
	var samples []Sample
	sample := func() {
		f.fresh = false
		s := f.merged(min(cfg.Now().Sub(start), cfg.Duration))
		samples = append(samples, s)
		if cfg.Progress != nil {
			cfg.Progress(s)
		}
	}
	// No sample before one is heard: a merge of no process's sample read
	// as a fleet with an empty retry budget.
	stopped := false
	for !f.allExited() {
		select {
		case e := <-f.events:
			f.handle(e)
			if f.procs[e.i].failure != "" && !stopped {
				stopped = true
				f.stopAll()
			}
		case <-tick.C:
			if f.fresh {
				sample()
			}
		case <-ctx.Done():
			if !stopped {
				stopped = true
				f.stopAll()
			}
			ctx = context.Background() // stop once; wait for the results
		case <-deadline.C:
			for _, p := range f.procs {
				if !p.exited {
					p.fail(fmt.Sprintf("had not finished %s after the run's end", fleetGrace))
				}
			}
			f.kill()
			f.drain(time.Now().Add(fleetGrace))
		}
	}
	sample()
	var ran time.Duration
	for _, p := range f.procs {
		if p.result != nil {
			ran = max(ran, time.Duration(p.result.Report.DurationMS)*time.Millisecond)
		}
	}
	return samples, ran
}

// merged is the fleet's sample at elapsed: the sum of every process's
// last one. Budget is the sum of the processes' tokens (-1 without
// budgets).
func (f *fleet) merged(elapsed time.Duration) Sample {
	s := Sample{Elapsed: elapsed, Total: f.cfg.Duration}
	if f.cfg.Policy.NoBudget {
		s.Budget = -1
	}
	for _, p := range f.procs {
		l := p.latest
		if l == nil {
			continue
		}
		s.Ops += l.Ops
		s.OK += l.OK
		s.Attempts += l.Attempts
		s.Retries += l.Retries
		s.Faults += l.Faults
		s.Outage = s.Outage || l.Outage
		if l.Budget >= 0 {
			s.Budget += l.Budget
		}
	}
	return s
}

func (f *fleet) allExited() bool {
	for _, p := range f.procs {
		if !p.exited {
			return false
		}
	}
	return true
}

// stopAll closes every worker process's standard input: each stops
// after the operations in flight and writes its result.
func (f *fleet) stopAll() {
	for _, p := range f.procs {
		if p.stdin != nil {
			_ = p.stdin.Close()
			p.stdin = nil
		}
	}
}

// drain handles events until every worker process has exited, killing
// those still running at deadline.
func (f *fleet) drain(deadline time.Time) {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	for !f.allExited() {
		select {
		case e := <-f.events:
			f.handle(e)
		case <-t.C:
			f.kill()
			t.Reset(time.Hour)
		}
	}
}

// kill kills every worker process still running: one that overran, or
// all of them as the parent returns early.
func (f *fleet) kill() {
	for _, p := range f.procs {
		if !p.exited && p.cmd.Process != nil {
			_ = p.cmd.Process.Kill()
		}
	}
}

// close kills the worker processes still running and stops the readers'
// sends: the parent is returning.
func (f *fleet) close() {
	f.kill()
	close(f.done)
}

// tailWriter keeps the last max bytes written to it. It is safe for
// concurrent use.
type tailWriter struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tailWriter) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = bytes.Clone(t.buf[over:])
	}
	return len(p), nil
}

func (t *tailWriter) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
