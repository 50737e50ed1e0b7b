package cli

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/term"

	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/cmd/sqlretry/internal/chaos"
	"github.com/sqlretry/sqlretry/cmd/sqlretry/internal/engine"
)

func init() {
	register(command{name: "chaos", summary: "drive a task store under injected faults and an outage; check nothing was lost or applied twice", run: runChaos})
}

// chaosUsage is the short help, chaos --help: what the command does, how
// to start, and the essential flags (chaosEssentials); chaosUsageAll, for
// --help-all, says the rest and lists every flag.
var chaosUsage = `usage: sqlretry chaos [flags] [--json]

Drives the reference task store with concurrent workers while injecting faults and an
outage, then checks that nothing was lost, applied twice or told the wrong outcome.

  sqlretry chaos                                  20 s on a temporary SQLite database
  sqlretry chaos --dsn 'postgres://postgres@127.0.0.1:5432/test?sslmode=disable'
  sqlretry chaos --dsn 'root@tcp(127.0.0.1:3306)/test'
  sqlretry chaos --compare naive --plot run.png   the same seeded run with blind replay beside it
  sqlretry chaos --scenario contention            hot rows under three retry policies

` + wrap("--dsn is "+chaos.DSNForms+"; the run works in a schema or database of its own and drops it.", 88) + `
Exit 0: every check held; 1: a check failed; 2: bad input; 130: interrupted (Ctrl-C).
Run 'sqlretry chaos --help-all' for every flag: the retry policy, faults and outages,
fleets (--processes), clusters (--cluster galera, --failover) and the commit verifier.`

// chaosEssentials are the flags chaos --help lists.
var chaosEssentials = []string{"dsn", "duration", "seed", "workers", "scenario", "compare", "plot", "json", "help-all"}

var chaosUsageAll = `usage: sqlretry chaos [--scenario tasks|contention] [flags] [--json]

tasks (the default): drives the reference task store with concurrent workers while
injecting every kind of fault and a sustained outage, then checks that nothing was lost
or applied twice. The run is timed (--duration), not counted: it does as many operations
as it finishes in that time. Reads run only to resynchronise a worker after a write
failed, so most of them run in the outage. --compare naive runs the same seeded workload
again, for as long, with blind replay and sets the two side by side (with --plot, the
damage over time beside sqlretry's); the seed fixes the fault plan and the mix of
operations, not how many each run does.
contention: hot rows and opposite-order two-row transactions (deadlocks on a server,
several writers on one SQLite file), with a few COMMITs failing with the connection reset
(some had committed, some not: only a verifier can tell), run three times: under
sqlretry's policy (the policy flags), the old defaults (3 retries, contention drawing
from the budget) and a blind loop (every error retried, no budget); it reports success
rate, latency, attempts per call and budget refusals side by side.
` + wrap(chaos.VerifierScope+" --verifier auto (the default) is, on PostgreSQL, pg_xact_status, then "+
	"a marker table; on MariaDB and SQLite a marker table, created in the run's own schema. The report counts the "+
	"ambiguous COMMITs, settled applied, settled not applied and still ambiguous, and holds every verdict against the database.", 88) + `
` + wrap("--dsn is "+chaos.DSNForms+". Without one, a temporary SQLite database.", 88) + ` With a server's,
the run uses a schema or database of its own and drops it, and puts wire faults
through a proxy (tasks only); the proxy cannot see COMMITs inside TLS, so a run whose
connections are encrypted is refused: add sslmode=disable (postgres) or tls=false
(mysql), or --no-proxy. A DSN that looks like another engine's than --engine is refused.
--processes N (tasks only): a fleet. N worker processes (this command re-executed) share
the one database, each with --workers workers and its own policy, retry budget, fault plan
and proxy, with seeds derived from --seed; the report shows each process and the fleet's
totals (attempts per call overall and during the outage), and the invariants are checked
once over the database against every process's ledger. A worker that fails fails the run,
named; the workers stop with the parent. --scenario contention refuses --processes.
--cluster galera: the tasks scenario on a MariaDB Galera cluster: with no --dsn, a
throwaway 3-node cluster the run starts (and says how long that took), kills a node of
(SIGKILL) at 25 % of the run and rejoins at 40 %; or your cluster, every node in the DSN:
user@tcp(host1:3306,host2:3306,host3:3306)/db. --galera-routing sequential (default): every
connection goes to one writer node and fails over to the next live one in order (the
writer is the node killed); spread: connections start at each node in turn (multi-primary
writes). Reads wait for the cluster (wsrep_sync_wait=1).
--failover: the same on PostgreSQL: with no --dsn, a throwaway primary and synchronous
standby, the primary stopped (-m immediate) at 40 % and the standby promoted; or your
servers, a multi-host DSN with target_session_attrs=read-write. Its commit verifier is
the marker table alone (pg_xact_status cannot answer across a promote). Both report the
events, the recovery after each (first call told OK, ok/s back to 80 %), mark them on
--plot, and check the invariants on the surviving cluster (Galera: every live node must
agree).
On a terminal, progress is one line redrawn in place; piped, one line a second.
Exit 0: every check held; 1: a check failed (in a run cut short too), but not the
naive comparison run's violations, which --compare naive is there to show (the exit
code is sqlretry's alone; --naive alone exits 1 on them); 2: bad input; 130: interrupted
(Ctrl-C) before the end with no check failed in what ran: the report, the JSON
("interrupted": true, "ok": false, duration_ms the time run) and the checks cover what ran.`

// outageFlags collects repeated --outage values.
type outageFlags struct {
	list []chaos.Outage
	set  bool
}

func (o *outageFlags) String() string { return "" }

func (o *outageFlags) Set(s string) error {
	if !o.set {
		o.list, o.set = []chaos.Outage{}, true
	}
	if s == "none" {
		return nil
	}
	out, err := chaos.ParseOutage(s)
	if err != nil {
		return err
	}
	o.list = append(o.list, out)
	return nil
}

// runChaos runs the command with its output redacted line by line: no line
// it writes to stdout or stderr carries the --dsn password.
func runChaos(ctx context.Context, env Env, args []string) int {
	if os.Getenv(chaos.WorkerEnv) != "" {
		// A fleet's worker process: the parent speaks on stdin and stdout.
		return chaos.ServeWorker(ctx, os.Stdin, env.Stdout)
	}
	red := chaos.NewRedactor(dsnArg(args))
	out := &redactWriter{w: env.Stdout, red: red}
	errw := &redactWriter{w: env.Stderr, red: red}
	defer out.Flush()
	defer errw.Flush()
	return chaosMain(ctx, Env{Stdout: out, Stderr: errw}, terminalOf(env.Stderr), args)
}

// ExitInterrupted is the exit code of a chaos run interrupted (Ctrl-C,
// SIGTERM) before its end with no check failed in what ran: 128 + SIGINT,
// as a shell reports a command a Ctrl-C ended.
const ExitInterrupted = 130

// display is the terminal progress is shown on: tty false for a pipe or a
// file; width its columns, 0 if unknown.
type display struct {
	tty   bool
	width int
}

// terminalOf reports whether w is a terminal, for the live progress line,
// and its width.
func terminalOf(w any) display {
	f, ok := w.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return display{}
	}
	width, _, err := term.GetSize(int(f.Fd()))
	if err != nil {
		width = 0
	}
	return display{tty: true, width: width}
}

// newProgress returns the progress display for d.
func newProgress(w io.Writer, d display) *chaos.Progress {
	p := chaos.NewProgress(w, d.tty)
	p.Width = d.width
	return p
}

// redactWriter writes what it is given at once, redacted, except for an
// end that could be the start of the password (Redactor.Pending): that is
// held until the next write or Flush. It must not wait for a line's end: a
// progress frame follows a carriage return and ends with no line end, and
// a writer that held lines showed each frame only as the next one arrived
// (with the old progress bar, which wiped the line first: never; issue 18,
// finding 1).
type redactWriter struct {
	w   io.Writer
	red *chaos.Redactor
	buf string
}

func (r *redactWriter) Write(p []byte) (int, error) {
	s := r.red.String(r.buf + string(p))
	keep := r.red.Pending(s)
	r.buf = s[len(s)-keep:]
	if _, err := io.WriteString(r.w, s[:len(s)-keep]); err != nil {
		return len(p), err
	}
	return len(p), nil
}

// Flush writes what was held back.
func (r *redactWriter) Flush() {
	if r.buf != "" {
		_, _ = io.WriteString(r.w, r.red.String(r.buf))
		r.buf = ""
	}
}

// chaosOpts are the flags of `sqlretry chaos`: Validate checks them,
// changing nothing, and config builds the run's chaos.Config from them.
type chaosOpts struct {
	cfg        chaos.Config
	scenario   string
	engine     string
	kinds      string
	outages    outageFlags
	maxRetries int
	faultRate  float64
	budget     bool
	noBudget   bool
	compare    string
	naive      bool
	plot       string
	json       bool
	helpAll    bool
	set        map[string]bool // the flags given on the command line
}

func (o *chaosOpts) register(fs *flag.FlagSet) {
	def := sqlretry.Config{}.WithDefaults() // the library's defaults, shown as the flags' own
	fs.StringVar(&o.scenario, "scenario", string(chaos.ScenarioTasks), "the workload: tasks (the task store, faults and an outage) or contention (hot rows under three policies)")
	fs.IntVar(&o.cfg.HotRows, "hot-rows", 0, fmt.Sprintf("contention: the rows each transaction picks its two from (default %d)", chaos.DefaultHotRows))
	fs.StringVar(&o.engine, "engine", "", engine.Help(chaos.Engines...)+" (default: from --dsn, else sqlite)")
	fs.StringVar(&o.cfg.DSN, "dsn", "", "the database: a PostgreSQL URL or libpq key=value settings, a go-sql-driver MySQL/MariaDB DSN (user:pw@tcp(host:3306)/db), "+
		"or a new SQLite file (file:PATH, or a path ending .db, .sqlite or .sqlite3); default: a temporary SQLite file")
	fs.DurationVar(&o.cfg.Duration, "duration", 20*time.Second, "how long the workload runs (contention: under each policy)")
	fs.IntVar(&o.cfg.Workers, "workers", 8, "concurrent workers (with --processes: in each process)")
	fs.IntVar(&o.cfg.Processes, "processes", 1, fmt.Sprintf("tasks: run a fleet of N worker processes (this command again) on one database, "+
		"each with its own policy, retry budget and proxy, as service replicas do; the checks run once over the database (1..%d)", chaos.MaxProcesses))
	fs.Float64Var(&o.faultRate, "fault-rate", 0.02, "probability that a statement or COMMIT gets a fault, shared by the kinds that apply (0: none)")
	fs.StringVar(&o.kinds, "faults", "", "limit the random faults to these kinds, comma-separated: before_send, after_exec, applied_reply_lost, commit_not_applied, commit_applied_reply_lost, server_error, hang (default: all)")
	fs.Var(&o.outages, "outage", "an outage DURATION@OFFSET, such as 3s@8s; repeat for more, none for none (default: a few seconds in the middle)")
	fs.Uint64Var(&o.cfg.Seed, "seed", 1, "seeds the fault plan and the workload: same seed, same plan")
	fs.IntVar(&o.maxRetries, "max-retries", def.MaxRetries, "retries after the first attempt (0: none)")
	fs.DurationVar(&o.cfg.Policy.BaseDelay, "base-delay", def.BaseDelay, "first backoff step")
	fs.DurationVar(&o.cfg.Policy.MaxDelay, "max-delay", def.MaxDelay, "backoff cap")
	fs.DurationVar(&o.cfg.Policy.CommandTimeout, "command-timeout", chaos.DefaultCommandTimeout, "per-attempt timeout")
	fs.BoolVar(&o.budget, "budget", true, "draw retries from the retry budget")
	fs.BoolVar(&o.noBudget, "no-budget", false, "disable the retry budget (same as --budget=false)")
	fs.StringVar(&o.cfg.Policy.Rules, "rules", "", "retryExec rules in the JDBC rule language, in the engine's code syntax: 40001,40P01:3,2*2 (postgres), 1213:3,2*2 (mysql)")
	fs.StringVar(&o.compare, "compare", "", "naive: run the same seeded workload again with blind replay and show both; the exit code is sqlretry's run's alone")
	fs.BoolVar(&o.naive, "naive", false, "run only the blind-replay store, to see its damage (exits 1 when it does any)")
	fs.StringVar(&o.plot, "plot", "", "write the run over time to FILE (.png or .svg): throughput, attempts, budget, and the damage done (beside a naive run; contention: per policy)")
	fs.BoolVar(&o.cfg.NoProxy, "no-proxy", false, "with --dsn, inject driver-level faults only, without the wire proxy")
	fs.StringVar(&o.cfg.Verifier, "verifier", chaos.VerifierAuto, "the commit verifier that settles an ambiguous COMMIT of a transaction without a Verify of its own: "+
		"auto (postgres: pg_xact_status, then a marker table; mysql, sqlite: a marker table), xact (pg_xact_status; postgres only), marker, or none")
	fs.BoolVar(&o.json, "json", false, "write one JSON document to standard output")
	fs.BoolVar(&o.helpAll, "help-all", false, "print the whole help: what every scenario and kind of run does, and every flag")
	fs.StringVar(&o.cfg.Cluster, "cluster", "", "galera: run on a MariaDB Galera cluster: every node in --dsn, or with no --dsn a throwaway 3-node cluster, a node killed and rejoined")
	fs.StringVar(&o.cfg.GaleraRouting, "galera-routing", "", "--cluster galera: sequential (default: every connection to one writer node, the next in order when it fails) or spread (each connection starts at the next node: multi-primary writes)")
	fs.BoolVar(&o.cfg.Failover, "failover", false, "run on a PostgreSQL primary and standby: a multi-host --dsn with target_session_attrs=read-write, or with no --dsn a throwaway pair, the primary stopped and the standby promoted")
}

// Validate reports the first bad flag, naming it; it changes nothing. It
// checks what only the command line can get wrong — a flag set to zero
// where chaos.Config would read zero as its default, flags that contradict
// each other, the plot file — then the Config that config builds
// (chaos.Config.Validate), and for --compare naive the naive run's too.
func (o *chaosOpts) Validate() error {
	positive := []struct {
		flag string
		bad  bool
	}{
		{"--duration", o.cfg.Duration == 0}, {"--workers", o.cfg.Workers == 0}, {"--processes", o.cfg.Processes == 0}, {"--seed", o.cfg.Seed == 0},
		{"--base-delay", o.cfg.Policy.BaseDelay == 0}, {"--max-delay", o.cfg.Policy.MaxDelay == 0},
		{"--command-timeout", o.cfg.Policy.CommandTimeout == 0},
	}
	for _, p := range positive {
		if p.bad {
			return fmt.Errorf("%s 0: must be positive", p.flag)
		}
	}
	switch {
	case o.maxRetries < 0:
		return fmt.Errorf("--max-retries %d: must be >= 0", o.maxRetries)
	case o.faultRate < 0:
		return fmt.Errorf("--fault-rate %v: want a probability in [0, 1]", o.faultRate)
	case o.set["budget"] && o.set["no-budget"] && o.budget == o.noBudget:
		return fmt.Errorf("--budget=%t contradicts --no-budget=%t", o.budget, o.noBudget)
	case o.compare != "" && o.compare != "naive":
		return fmt.Errorf("--compare %q: the only comparison is naive", o.compare)
	case o.compare != "" && o.naive:
		return errors.New("--compare naive and --naive: choose one")
	case o.compare != "" && (o.cfg.Cluster != "" || o.cfg.Failover):
		return errors.New("--compare: a cluster run (--cluster, --failover) has no naive comparison")
	case o.compare != "" && strings.EqualFold(o.scenario, string(chaos.ScenarioContention)):
		return errors.New("--compare: the contention scenario compares its three policies itself")
	case o.compare != "" && o.cfg.Processes > 1:
		return errors.New("--compare naive runs in one process: drop --compare or --processes")
	case o.set["hot-rows"] && o.cfg.HotRows == 0:
		return errors.New("--hot-rows 0: must be positive")
	case o.plot != "" && !strings.HasSuffix(strings.ToLower(o.plot), ".png") && !strings.HasSuffix(strings.ToLower(o.plot), ".svg"):
		return fmt.Errorf("--plot %s: want a .png or .svg file name", o.plot)
	}
	cfg, err := o.config()
	if err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	if o.compare == "naive" {
		// The comparison's own database: an SQLite file beside ours.
		cfg.Naive = true
		return cfg.Validate()
	}
	return nil
}

// config builds the run's chaos.Config from the flags, reading what
// chaos.Config keeps apart from the command line (0 retries, a fault rate of
// 0, --no-budget, --outage none); its error names a flag that does not
// parse. It changes nothing: the caller sets the run's Progress and Notify.
func (o *chaosOpts) config() (chaos.Config, error) {
	cfg := o.cfg
	var err error
	if cfg.Scenario, err = chaos.ParseScenario(o.scenario); err != nil {
		return chaos.Config{}, fmt.Errorf("--scenario: %w", err)
	}
	if o.engine != "" {
		if cfg.Engine, err = engine.Parse(o.engine, chaos.Engines...); err != nil {
			return chaos.Config{}, fmt.Errorf("--engine: %w", err)
		}
	}
	if o.kinds != "" {
		if cfg.Kinds, err = chaos.ParseKinds(o.kinds); err != nil {
			return chaos.Config{}, fmt.Errorf("--faults: %w", err)
		}
	}
	if o.outages.set {
		cfg.Outages = slices.Clone(o.outages.list)
	}
	cfg.Policy.MaxRetries = cmp.Or(o.maxRetries, sqlretry.NoRetries) // 0 on the command line: none
	cfg.FaultRate = cmp.Or(o.faultRate, -1)                          // 0 on the command line: none
	cfg.Policy.NoBudget = o.noBudget || !o.budget
	cfg.Naive = o.naive
	// The damage over time is drawn only beside a naive run.
	cfg.Damage = o.plot != "" && (o.compare == "naive" || o.naive)
	return cfg, nil
}

func chaosMain(ctx context.Context, env Env, tty display, args []string) int {
	fs := newFlagSet("chaos")
	o := chaosOpts{set: map[string]bool{}}
	o.register(fs)
	red := chaos.NewRedactor(dsnArg(args))
	pos, err := parseFlags(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return printHelp(env, chaosUsage, essentialFlags(fs, chaosEssentials))
	}
	if err == nil && len(pos) > 0 {
		err = fmt.Errorf("unexpected argument %q (chaos takes flags only)", pos[0])
	}
	if err != nil {
		return badInput(env, "chaos: %s", red.String(flagError(fs, err)))
	}
	if o.helpAll {
		return printHelp(env, chaosUsageAll, fs)
	}
	red = chaos.NewRedactor(o.cfg.DSN)
	fs.Visit(func(f *flag.Flag) { o.set[f.Name] = true })
	if err := o.Validate(); err != nil {
		return badInput(env, "chaos: %s", red.String(err.Error()))
	}
	cfg, _ := o.config() // Validate built it once already
	removePlot, err := touchPlot(o.plot)
	if err != nil {
		return badInput(env, "chaos: --plot %s: %v", o.plot, err)
	}
	if cfg.Scenario == chaos.ScenarioContention {
		return runContention(ctx, env, tty, &o, cfg, red, removePlot)
	}
	return runTasks(ctx, env, tty, &o, cfg, red, removePlot)
}

// runTasks runs the tasks scenario (and its naive comparison) and writes
// its report and plot.
func runTasks(ctx context.Context, env Env, tty display, o *chaosOpts, cfg chaos.Config, red *chaos.Redactor, removePlot func()) int {
	prog := newProgress(env.Stderr, tty)
	cfg.Progress = prog.Update
	cfg.Notify = func(msg string) { fmt.Fprintln(env.Stderr, "chaos: "+msg) }
	ours, err := chaos.Run(ctx, cfg)
	var naive *chaos.RunReport
	if err == nil && o.compare == "naive" && !ours.Interrupted {
		ncfg := cfg
		ncfg.Naive = true
		naive, err = chaos.Run(ctx, ncfg)
		if errors.Is(err, chaos.ErrInterrupted) {
			naive, err = nil, nil // ours is the report: the comparison did not start
		}
	}
	prog.Finish()
	if errors.Is(err, chaos.ErrInterrupted) {
		removePlot()
		return interruptedBeforeStart(env, o, cfg)
	}
	if err != nil {
		removePlot()
		return chaosError(env, red, err)
	}
	// A plot that fails to write after the run costs the plot, not the
	// report: the error goes to stderr and the exit code stays the
	// invariants'.
	var plotErr error
	if o.plot != "" {
		if plotErr = chaos.WritePlot(o.plot, ours, naive); plotErr != nil {
			fmt.Fprintf(env.Stderr, "error: chaos: --plot %s: %s\n", o.plot, strings.ReplaceAll(plotErr.Error(), "\n", " "))
		}
	}
	if o.json {
		doc := struct {
			*chaos.RunReport
			Naive *chaos.RunReport `json:"naive,omitempty"`
		}{ours, naive}
		if err := writeJSON(env.Stdout, doc); err != nil {
			return ExitFailed
		}
	} else {
		ours.WriteText(env.Stdout)
		if naive != nil {
			fmt.Fprintln(env.Stdout)
			naive.WriteText(env.Stdout)
			chaos.WriteComparison(env.Stdout, ours, naive)
		}
		if o.plot != "" && plotErr == nil {
			fmt.Fprintf(env.Stdout, "\nplot written to %s\n", o.plot)
		}
	}
	return tasksExit(ctx, ours, naive)
}

// tasksExit is the tasks scenario's exit code: 1 when our run broke an
// invariant (even in a run cut short), else 130 when the run was
// interrupted, else 0. The naive comparison run's violations are what it
// is there to show: they never fail the command.
func tasksExit(ctx context.Context, ours, naive *chaos.RunReport) int {
	switch {
	case ours.Invariants.Total() > 0:
		return ExitFailed
	case ours.Interrupted || (naive != nil && naive.Interrupted) || (naive == nil && ctx.Err() != nil):
		return ExitInterrupted
	}
	return ExitOK
}

// runContention runs the contention scenario and writes its report and
// plot. Each mode's run gets a progress display of its own.
func runContention(ctx context.Context, env Env, tty display, o *chaosOpts, cfg chaos.Config, red *chaos.Redactor, removePlot func()) int {
	var prog *chaos.Progress
	mode := ""
	cfg.Progress = func(s chaos.Sample) {
		if prog == nil || s.Mode != mode {
			if prog != nil {
				prog.Finish()
			}
			mode = s.Mode
			fmt.Fprintf(env.Stderr, "contention: %s\n", mode)
			prog = newProgress(env.Stderr, tty)
		}
		prog.Update(s)
	}
	r, err := chaos.RunContention(ctx, cfg)
	if prog != nil {
		prog.Finish()
	}
	if err != nil {
		removePlot()
		return chaosError(env, red, err)
	}
	var plotErr error
	if o.plot != "" {
		if plotErr = chaos.WriteContentionPlot(o.plot, r); plotErr != nil {
			fmt.Fprintf(env.Stderr, "error: chaos: --plot %s: %s\n", o.plot, strings.ReplaceAll(plotErr.Error(), "\n", " "))
		}
	}
	if o.json {
		if err := writeJSON(env.Stdout, r); err != nil {
			return ExitFailed
		}
	} else {
		r.WriteText(env.Stdout)
		if o.plot != "" && plotErr == nil {
			fmt.Fprintf(env.Stdout, "\nplot written to %s\n", o.plot)
		}
	}
	switch {
	case len(r.Problems) > 0:
		return ExitFailed
	case r.Interrupted:
		return ExitInterrupted
	}
	return ExitOK
}

// wrap breaks text into lines of at most width columns, at spaces.
func wrap(text string, width int) string {
	var b strings.Builder
	n := 0
	for i, w := range strings.Fields(text) {
		if i > 0 && n+1+len(w) > width {
			b.WriteByte('\n')
			n = 0
		} else if i > 0 {
			b.WriteByte(' ')
			n++
		}
		b.WriteString(w)
		n += len(w)
	}
	return b.String()
}

// essentialFlags is a FlagSet of fs's flags named in names, in that
// order's sorted form (as PrintDefaults lists them), for a short help.
func essentialFlags(fs *flag.FlagSet, names []string) *flag.FlagSet {
	short := newFlagSet(fs.Name())
	for _, n := range names {
		if f := fs.Lookup(n); f != nil {
			short.Var(f.Value, f.Name, f.Usage)
		}
	}
	return short
}

// touchPlot makes sure the plot file can be written before the run, not
// after it. The function it returns removes the file again if touchPlot
// created it (the run failed).
func touchPlot(file string) (remove func(), err error) {
	remove = func() {}
	if file == "" {
		return remove, nil
	}
	_, statErr := os.Stat(file)
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return remove, err
	}
	_ = f.Close()
	if errors.Is(statErr, os.ErrNotExist) {
		remove = func() { _ = os.Remove(file) }
	}
	return remove, nil
}

// interruptedBeforeStart reports a tasks run interrupted before its
// workload started: nothing ran, so nothing was checked. --json still gets
// its one document.
func interruptedBeforeStart(env Env, o *chaosOpts, cfg chaos.Config) int {
	if o.json {
		doc := struct {
			Scenario    string `json:"scenario"`
			DurationMS  int64  `json:"duration_ms"`
			PlannedMS   int64  `json:"planned_duration_ms"`
			Interrupted bool   `json:"interrupted"`
			OK          bool   `json:"ok"`
		}{string(chaos.ScenarioTasks), 0, cfg.WithDefaults().Duration.Milliseconds(), true, false}
		_ = writeJSON(env.Stdout, doc)
	} else {
		fmt.Fprintln(env.Stdout, "INTERRUPTED before the workload started: nothing ran, nothing to check")
	}
	return ExitInterrupted
}

func chaosError(env Env, red *chaos.Redactor, err error) int {
	msg := red.String(err.Error())
	var ie *chaos.InputError
	if errors.As(err, &ie) {
		return badInput(env, "chaos: %s", msg)
	}
	fmt.Fprintln(env.Stderr, "error: chaos: "+strings.ReplaceAll(msg, "\n", " "))
	return ExitFailed
}

// dsnArg returns the --dsn value in args, before the flags are parsed, so
// that a flag error cannot echo its password.
func dsnArg(args []string) string {
	dsn := ""
	for i, a := range args {
		if a == "--" {
			break
		}
		name, v, hasV := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || name != "dsn" {
			continue
		}
		switch {
		case hasV:
			dsn = v
		case i+1 < len(args):
			dsn = args[i+1]
		}
	}
	return dsn
}
