package cli

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"golang.org/x/term"

	"github.com/sqlretry/sqlretry/cmd/sqlretry/internal/chaos"
)

func init() {
	register(command{name: "chaos", summary: "drive a task store under injected faults and an outage; check nothing was lost or applied twice", run: runChaos})
}

const chaosUsage = `usage: sqlretry chaos [flags] [--json]

Drives the reference task store with concurrent workers while injecting every kind of
fault and a sustained outage, then checks that nothing was lost or applied twice.
Default: a temporary SQLite database. With --dsn, your PostgreSQL or MariaDB (the run
uses a schema or database of its own and drops it), with wire faults through a proxy.
Exit 0: every invariant held; 1: one was violated; 2: bad input.`

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
	red := chaos.NewRedactor(dsnArg(args))
	out := &redactWriter{w: env.Stdout, red: red}
	errw := &redactWriter{w: env.Stderr, red: red}
	defer out.Flush()
	defer errw.Flush()
	return chaosMain(ctx, Env{Stdout: out, Stderr: errw}, isTerminal(env.Stderr), args)
}

// redactWriter writes what it is given a line at a time (ended by a
// newline or a carriage return, for the progress bar), redacted.
type redactWriter struct {
	w   io.Writer
	red *chaos.Redactor
	buf []byte
}

func (r *redactWriter) Write(p []byte) (int, error) {
	r.buf = append(r.buf, p...)
	for {
		i := bytes.IndexAny(r.buf, "\n\r")
		if i < 0 {
			return len(p), nil
		}
		line := r.red.String(string(r.buf[:i+1]))
		r.buf = r.buf[i+1:]
		if _, err := io.WriteString(r.w, line); err != nil {
			return len(p), err
		}
	}
}

// Flush writes what is left of an unfinished line.
func (r *redactWriter) Flush() {
	if len(r.buf) > 0 {
		_, _ = io.WriteString(r.w, r.red.String(string(r.buf)))
		r.buf = nil
	}
}

func chaosMain(ctx context.Context, env Env, tty bool, args []string) int {
	fs := newFlagSet("chaos")
	var (
		cfg                 chaos.Config
		engine, compare     string
		kinds               string
		plotFile            string
		asJSON, noBudget    bool
		naiveOnly           bool
		budget              = true
		outages             outageFlags
		seed                uint64
		faultRate           float64
		maxRetries, workers int
	)
	fs.StringVar(&engine, "engine", "", "sqlite, postgres or mysql (default: from --dsn, else sqlite)")
	fs.StringVar(&cfg.DSN, "dsn", "", "the database: a PostgreSQL URL or key=value DSN, a go-sql-driver MySQL DSN, or an SQLite file to create")
	fs.DurationVar(&cfg.Duration, "duration", 20*time.Second, "how long the workload runs")
	fs.IntVar(&workers, "workers", 8, "concurrent workers")
	fs.Float64Var(&faultRate, "fault-rate", 0.02, "probability that a statement or COMMIT gets a fault, shared by the kinds that apply (0: none)")
	fs.StringVar(&kinds, "faults", "", "limit the random faults to these kinds, comma-separated: before_send, after_exec, applied_reply_lost, commit_not_applied, commit_applied_reply_lost, server_error, hang (default: all)")
	fs.Var(&outages, "outage", "an outage DURATION@OFFSET, such as 3s@8s; repeat for more, none for none (default: a few seconds in the middle)")
	fs.Uint64Var(&seed, "seed", 1, "seeds the fault plan and the workload: same seed, same plan")
	fs.IntVar(&maxRetries, "max-retries", 3, "retries after the first attempt (0: none)")
	fs.DurationVar(&cfg.Policy.BaseDelay, "base-delay", 100*time.Millisecond, "first backoff step")
	fs.DurationVar(&cfg.Policy.MaxDelay, "max-delay", 5*time.Second, "backoff cap")
	fs.DurationVar(&cfg.Policy.CommandTimeout, "command-timeout", chaos.DefaultCommandTimeout, "per-attempt timeout")
	fs.BoolVar(&budget, "budget", true, "draw retries from the retry budget")
	fs.BoolVar(&noBudget, "no-budget", false, "disable the retry budget (same as --budget=false)")
	fs.StringVar(&cfg.Policy.Rules, "rules", "", "retryExec rules in the JDBC rule language, such as 40001,40P01:3,2*2")
	fs.StringVar(&compare, "compare", "", "naive: run the same seeded workload again with blind replay and show both")
	fs.BoolVar(&naiveOnly, "naive", false, "run only the blind-replay store, to see its damage (exits 1 when it does any)")
	fs.StringVar(&plotFile, "plot", "", "write throughput, attempts and budget over time to FILE (.png or .svg)")
	fs.BoolVar(&cfg.NoProxy, "no-proxy", false, "with --dsn, inject driver-level faults only, without the wire proxy")
	fs.BoolVar(&asJSON, "json", false, "write one JSON document to standard output")
	red := chaos.NewRedactor(dsnArg(args))
	pos, err := parseFlags(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(env.Stdout, chaosUsage)
		fmt.Fprintln(env.Stdout)
		fs.SetOutput(env.Stdout)
		fs.PrintDefaults()
		return ExitOK
	}
	if err != nil {
		return badInput(env, "chaos: %s", red.String(err.Error()))
	}
	if len(pos) > 0 {
		return badInput(env, "chaos: unexpected argument %q", red.String(pos[0]))
	}
	red = chaos.NewRedactor(cfg.DSN)
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	switch {
	case engine != "":
		e, err := chaos.ParseEngine(engine)
		if err != nil {
			return badInput(env, "chaos: --engine: %v", err)
		}
		cfg.Engine = e
	case strings.HasPrefix(cfg.DSN, "postgres://") || strings.HasPrefix(cfg.DSN, "postgresql://") || strings.Contains(cfg.DSN, "host="):
		cfg.Engine = chaos.Postgres
	case strings.Contains(cfg.DSN, "@tcp(") || strings.Contains(cfg.DSN, "@unix("):
		cfg.Engine = chaos.MySQL
	default:
		cfg.Engine = chaos.SQLite
	}
	if cfg.Duration <= 0 {
		return badInput(env, "chaos: --duration %s: must be positive", cfg.Duration)
	}
	if workers <= 0 {
		return badInput(env, "chaos: --workers %d: must be positive", workers)
	}
	cfg.Workers = workers
	switch {
	case faultRate < 0 || faultRate > 1:
		return badInput(env, "chaos: --fault-rate %v: want a probability in [0, 1]", faultRate)
	case faultRate == 0:
		cfg.FaultRate = -1 // none
	default:
		cfg.FaultRate = faultRate
	}
	switch {
	case maxRetries < 0:
		return badInput(env, "chaos: --max-retries %d: must be >= 0", maxRetries)
	case maxRetries == 0:
		cfg.Policy.MaxRetries = -1 // sqlretry.NoRetries
	default:
		cfg.Policy.MaxRetries = maxRetries
	}
	if cfg.Policy.BaseDelay <= 0 || cfg.Policy.MaxDelay <= 0 {
		return badInput(env, "chaos: --base-delay and --max-delay must be positive")
	}
	if set["command-timeout"] && cfg.Policy.CommandTimeout <= 0 {
		return badInput(env, "chaos: --command-timeout %s: must be positive (hang faults need one)", cfg.Policy.CommandTimeout)
	}
	if set["budget"] && set["no-budget"] && budget == noBudget {
		return badInput(env, "chaos: --budget=%t contradicts --no-budget=%t", budget, noBudget)
	}
	cfg.Policy.NoBudget = noBudget || !budget
	if kinds != "" {
		if cfg.Kinds, err = chaos.ParseKinds(kinds); err != nil {
			return badInput(env, "chaos: --faults: %v", err)
		}
	}
	if outages.set {
		cfg.Outages = outages.list
	}
	cfg.Seed = seed
	if seed == 0 {
		return badInput(env, "chaos: --seed 0: use a positive seed")
	}
	if compare != "" && compare != "naive" {
		return badInput(env, "chaos: --compare %q: the only comparison is naive", compare)
	}
	if compare != "" && naiveOnly {
		return badInput(env, "chaos: --compare naive and --naive: choose one")
	}
	cfg.Naive = naiveOnly
	if plotFile != "" && !strings.HasSuffix(strings.ToLower(plotFile), ".png") && !strings.HasSuffix(strings.ToLower(plotFile), ".svg") {
		return badInput(env, "chaos: --plot %s: want a .png or .svg file name", plotFile)
	}

	// A plot file that cannot be written fails now, not after the run.
	removePlot := func() {}
	if plotFile != "" {
		_, statErr := os.Stat(plotFile)
		f, err := os.OpenFile(plotFile, os.O_WRONLY|os.O_CREATE, 0o644)
		if err != nil {
			return badInput(env, "chaos: --plot %s: %v", plotFile, err)
		}
		_ = f.Close()
		if errors.Is(statErr, os.ErrNotExist) {
			removePlot = func() { _ = os.Remove(plotFile) }
		}
	}

	prog := chaos.NewProgress(env.Stderr, tty)
	cfg.Progress = prog.Update
	ours, err := chaos.Run(ctx, cfg)
	if err != nil {
		prog.Finish()
		removePlot()
		return chaosError(env, red, err)
	}
	var naive *chaos.RunReport
	if compare == "naive" && ctx.Err() == nil {
		ncfg := cfg
		ncfg.Naive = true
		if naive, err = chaos.Run(ctx, ncfg); err != nil {
			prog.Finish()
			removePlot()
			return chaosError(env, red, err)
		}
	}
	prog.Finish()
	// A plot that fails to write after the run costs the plot, not the
	// report: the error goes to stderr and the exit code stays the
	// invariants'.
	var plotErr error
	if plotFile != "" {
		if plotErr = chaos.WritePlot(plotFile, ours, naive); plotErr != nil {
			fmt.Fprintf(env.Stderr, "error: chaos: --plot %s: %s\n", plotFile, strings.ReplaceAll(plotErr.Error(), "\n", " "))
		}
	}
	if asJSON {
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
		if plotFile != "" && plotErr == nil {
			fmt.Fprintf(env.Stdout, "\nplot written to %s\n", plotFile)
		}
	}
	if !ours.OK || ours.Interrupted {
		return ExitFailed
	}
	return ExitOK
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

// isTerminal reports whether w is a terminal, for the live progress bar.
func isTerminal(w any) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
