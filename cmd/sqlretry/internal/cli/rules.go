package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/cmd/sqlretry/internal/engine"
	"github.com/sqlretry/sqlretry/crl"
)

func init() {
	register(command{name: "rules", summary: "explain or test JDBC retryExec/retryConn rules (crl)", run: runRules, subs: []sub{
		{"explain", "expand rules into the errors they retry, how often, with which waits"},
		{"test", "say whether the rules would retry one failure (exit 0 yes, 1 no)"},
	}})
}

var rulesUsage = `usage:
  sqlretry rules explain [--conn] [--query-timeout SECONDS] [--filter-mode jdbc|verb] [--engine ENGINE]
                         [--connect-retry-count N] [--connect-retry-interval SECONDS] [--login-timeout SECONDS] RULES [--json]
  sqlretry rules test RULES --error CODE --sql STATEMENT [--attempt N] [--filter-mode jdbc|verb] [--query-timeout SECONDS]
                      [--engine ENGINE] [--conn [--elapsed SECONDS] [--retryable]] [--json]

RULES is a retryExec value (with --conn, a retryConn value). --query-timeout has the JDBC meaning:
-1 (the default) skips the check, 0 rejects every positive wait. "rules test" exits 0 when the failure
would be retried by the rules, 1 when not (stopped, or left to the Policy), 2 on bad input.

ENGINE (default sqlserver) sets the codes' syntax: SQLSTATEs for postgres and cockroach, error
numbers for the others; the built-in connection list and the authentication failures of error
numbers are SQL Server's (the JDBC driver's). Engines: ` + engine.Help() + `.`

func runRules(ctx context.Context, env Env, args []string) int {
	if len(args) == 0 {
		return badInput(env, "rules: want a subcommand, explain or test (run 'sqlretry rules help')")
	}
	switch args[0] {
	case "explain":
		return rulesExplain(env, args[1:])
	case "test":
		return rulesTest(env, args[1:])
	case "help", "-h", "--help":
		fmt.Fprintln(env.Stdout, rulesUsage)
		return ExitOK
	}
	return badInput(env, "rules: unknown subcommand %q (want explain or test)", args[0])
}

// rulesFlags are the flags both subcommands share.
type rulesFlags struct {
	conn                bool
	asJSON              bool
	queryTimeout        int
	filterMode, engine  string
	connectRetryCount   int
	connectRetryIntervl int
	loginTimeout        int
}

func (r *rulesFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&r.conn, "conn", false, "RULES is a retryConn value")
	fs.BoolVar(&r.asJSON, "json", false, "write JSON")
	fs.IntVar(&r.queryTimeout, "query-timeout", -1, "JDBC queryTimeout in seconds: -1 skips the check, 0 rejects every positive wait")
	fs.StringVar(&r.filterMode, "filter-mode", "jdbc", "how query filters match: jdbc (first token) or verb")
	fs.StringVar(&r.engine, "engine", engine.SQLServer.String(), engine.Help()+": whose error codes the rules name")
	fs.IntVar(&r.connectRetryCount, "connect-retry-count", 1, "JDBC connectRetryCount, 0 to 255 (0 disables)")
	fs.IntVar(&r.connectRetryIntervl, "connect-retry-interval", 10, "JDBC connectRetryInterval in seconds, 1 to 60")
	fs.IntVar(&r.loginTimeout, "login-timeout", 30, "JDBC loginTimeout in seconds (0: the default 30)")
}

// parsed is RULES parsed under the flags.
type parsed struct {
	engine engine.Engine
	syntax crl.Syntax
	mode   crl.FilterMode
	exec   crl.Exec
	conn   crl.Conn
	cs     *crl.ConnSchedule
}

func (r *rulesFlags) parse(rules string) (parsed, error) {
	var p parsed
	var err error
	if p.engine, err = engine.Parse(r.engine); err != nil {
		return p, fmt.Errorf("--engine: %w", err)
	}
	p.syntax = p.engine.Syntax()
	if p.mode, err = crl.ParseFilterMode(r.filterMode); err != nil {
		return p, fmt.Errorf("--filter-mode: %w", err)
	}
	if r.conn {
		if p.conn, err = p.syntax.ParseConn(rules); err != nil {
			return p, err
		}
		count := r.connectRetryCount
		switch {
		case count < 0:
			return p, fmt.Errorf("--connect-retry-count must be 0 to 255, got %d", count)
		case count == 0:
			count = crl.NoConnectRetries // JDBC: 0 disables
		}
		if r.connectRetryIntervl < 1 {
			return p, fmt.Errorf("--connect-retry-interval must be 1 to 60 seconds, got %d", r.connectRetryIntervl)
		}
		if r.loginTimeout < 0 {
			return p, fmt.Errorf("--login-timeout must be >= 0 seconds, got %d", r.loginTimeout)
		}
		p.cs, err = p.conn.Schedule(crl.Connect{RetryCount: count, RetryInterval: r.connectRetryIntervl, LoginTimeout: r.loginTimeout})
		return p, err
	}
	if p.exec, err = p.syntax.ParseExec(rules); err != nil {
		return p, err
	}
	return p, p.exec.CheckQueryTimeout(r.queryTimeout)
}

type execRuleJSON struct {
	Error        string   `json:"error"`
	Retries      int      `json:"retries"`
	WaitsSeconds []int64  `json:"waits_seconds"`
	Filter       []string `json:"filter"`
}

type execJSON struct {
	Kind       string         `json:"kind"`
	Engine     string         `json:"engine"`
	Syntax     string         `json:"syntax"` // how the rules write codes: numbers or sqlstate
	FilterMode string         `json:"filter_mode"`
	Rules      []execRuleJSON `json:"rules"`
	Formatted  string         `json:"formatted"`
}

type connJSON struct {
	Kind                 string   `json:"kind"`
	Engine               string   `json:"engine"`
	Syntax               string   `json:"syntax"`
	Mode                 string   `json:"mode"`
	Errors               []string `json:"errors"`
	Effective            []string `json:"effective"`
	NeverRetried         []string `json:"never_retried"`
	ConnectRetryCount    int      `json:"connect_retry_count"`
	ConnectRetryInterval int      `json:"connect_retry_interval_seconds"`
	LoginTimeout         int      `json:"login_timeout_seconds"`
	Formatted            string   `json:"formatted"`
}

func waitSeconds(ws []time.Duration) []int64 {
	out := make([]int64, len(ws))
	for i, w := range ws {
		out[i] = int64(w / time.Second)
	}
	return out
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func rulesExplain(env Env, args []string) int {
	fs := newFlagSet("rules explain")
	var rf rulesFlags
	rf.register(fs)
	pos, exit, done := parseArgs(env, fs, rulesUsage, args)
	if done {
		return exit
	}
	if len(pos) != 1 {
		return badInput(env, "rules explain: want one RULES argument, got %d", len(pos))
	}
	p, err := rf.parse(pos[0])
	if err != nil {
		return badInput(env, "rules explain: %v", rf.ruleErr(pos[0], p.syntax, err))
	}
	if rf.conn {
		return explainConn(env, rf.asJSON, p)
	}
	return explainExec(env, rf.asJSON, p)
}

// explainConn writes what retryConn rules p retry, and how often.
func explainConn(env Env, asJSON bool, p parsed) int {
	c := p.cs.Connect()
	out := connJSON{
		Kind: "conn", Engine: p.engine.String(), Syntax: p.syntax.String(), Mode: p.conn.Mode().String(),
		Errors: nonNil(p.conn.Errors()), Effective: nonNil(p.conn.Effective()), NeverRetried: []string{},
		ConnectRetryCount: c.RetryCount, ConnectRetryInterval: c.RetryInterval, LoginTimeout: c.LoginTimeout,
		Formatted: p.conn.String(),
	}
	for _, code := range crl.NeverRetried(p.syntax) {
		for _, named := range out.Effective {
			if named == code {
				out.NeverRetried = append(out.NeverRetried, code)
			}
		}
	}
	if asJSON {
		writeJSON(env.Stdout, out)
		return ExitOK
	}
	w := env.Stdout
	if out.Mode == "replace" {
		fmt.Fprintf(w, "mode replace: only the listed errors are retried: %s\n", strings.Join(out.Errors, " "))
	} else if len(out.Errors) > 0 {
		fmt.Fprintf(w, "mode append: the built-in list plus %s\n", strings.Join(out.Errors, " "))
	} else {
		fmt.Fprintln(w, "no rules: the built-in list")
	}
	fmt.Fprintf(w, "effective: %s\n", strings.Join(out.Effective, " "))
	if len(out.NeverRetried) > 0 {
		fmt.Fprintf(w, "never retried (authentication failures): %s\n", strings.Join(out.NeverRetried, " "))
	}
	if c.RetryCount == 0 {
		fmt.Fprintln(w, "connect retries disabled (connectRetryCount 0): the rules have no effect")
	} else {
		fmt.Fprintf(w, "up to %d connect retries: the first at once, then every %d s, within loginTimeout %d s\n", c.RetryCount, c.RetryInterval, c.LoginTimeout)
	}
	return ExitOK
}

// explainExec writes what retryExec rules p retry, with their waits.
func explainExec(env Env, asJSON bool, p parsed) int {
	out := execJSON{Kind: "exec", Engine: p.engine.String(), Syntax: p.syntax.String(), FilterMode: p.mode.String(), Rules: []execRuleJSON{}, Formatted: p.exec.String()}
	for _, e := range p.exec.Entries() {
		out.Rules = append(out.Rules, execRuleJSON{Error: e.Error, Retries: e.Retries, WaitsSeconds: waitSeconds(e.Waits), Filter: nonNil(e.Filter)})
	}
	if asJSON {
		writeJSON(env.Stdout, out)
		return ExitOK
	}
	w := env.Stdout
	if len(out.Rules) == 0 {
		fmt.Fprintln(w, "no statement rules: every failure is left to the Policy")
	}
	for _, r := range out.Rules {
		if r.Retries == 0 {
			fmt.Fprintf(w, "error %s: not retried (retryCount 0)\n", r.Error)
			continue
		}
		waits := make([]string, len(r.WaitsSeconds))
		for i, s := range r.WaitsSeconds {
			waits[i] = strconv.FormatInt(s, 10) + "s"
		}
		fmt.Fprintf(w, "error %s: up to %d retries, waits %s", r.Error, r.Retries, strings.Join(waits, " "))
		if len(r.Filter) > 0 {
			what := "first token"
			if p.mode == crl.FilterVerb {
				what = "verb"
			}
			fmt.Fprintf(w, ", only when the statement's %s is %s", what, strings.Join(r.Filter, ", "))
		}
		fmt.Fprintln(w)
	}
	return ExitOK
}

type testJSON struct {
	Retry       bool    `json:"retry"`
	WaitSeconds float64 `json:"wait_seconds"`
	Decision    string  `json:"decision"`
	Reason      string  `json:"reason"`
}

func rulesTest(env Env, args []string) int {
	fs := newFlagSet("rules test")
	var rf rulesFlags
	rf.register(fs)
	code := fs.String("error", "", "the error code the classifier reports")
	stmt := fs.String("sql", "", "the failed statement")
	attempt := fs.Int("attempt", 1, "the retry being considered: 1 for the first retry")
	elapsed := fs.Float64("elapsed", 0, "with --conn: seconds since the first connect attempt started")
	retryable := fs.Bool("retryable", false, "with --conn: the classifier's verdict, for codes the rules cannot name (dial, conn-reset…)")
	pos, exit, done := parseArgs(env, fs, rulesUsage, args)
	if done {
		return exit
	}
	switch {
	case len(pos) != 1:
		return badInput(env, "rules test: want one RULES argument, got %d", len(pos))
	case *code == "":
		return badInput(env, "rules test: --error CODE is required")
	case *stmt == "" && !rf.conn:
		return badInput(env, "rules test: --sql STATEMENT is required")
	case *attempt < 1:
		return badInput(env, "rules test: --attempt must be >= 1, got %d", *attempt)
	case *elapsed < 0:
		return badInput(env, "rules test: --elapsed must be >= 0, got %v", *elapsed)
	}
	p, err := rf.parse(pos[0])
	if err != nil {
		return badInput(env, "rules test: %v", rf.ruleErr(pos[0], p.syntax, err))
	}
	if err := checkCode(p.engine, *code); err != nil {
		return badInput(env, "rules test: --error: %v", err)
	}
	f := sqlretry.Failure{
		Op:        "rules test",
		Statement: *stmt,
		Class:     sqlretry.Class{Code: canonicalCode(p.syntax, *code), Retryable: *retryable},
		Retry:     *attempt,
		Elapsed:   time.Duration(*elapsed * float64(time.Second)),
	}
	var (
		d   sqlretry.Decision
		w   time.Duration
		why string
	)
	if rf.conn {
		d, w, why = p.cs.Explain(f)
	} else {
		d, w, why = p.exec.Schedule(p.mode).Explain(f)
	}
	out := testJSON{Retry: d == sqlretry.Retry, WaitSeconds: w.Seconds(), Decision: d.String(), Reason: why}
	if rf.asJSON {
		writeJSON(env.Stdout, out)
	} else {
		fmt.Fprintf(env.Stdout, "%s: %s\n", d, why)
	}
	if out.Retry {
		return ExitOK
	}
	return ExitFailed
}

// ruleErr rewrites an error about RULES for the command's user: the rule,
// token and offset say where and crl's message says what, without the JDBC
// driver's resource key (engine.RuleError), and a hint says which flags
// would read RULES when the ones given cannot.
func (r *rulesFlags) ruleErr(rules string, syntax crl.Syntax, err error) error {
	var ce *crl.Error
	if !errors.As(err, &ce) {
		return err
	}
	msg := "RULES " + engine.RuleError(err).Error()
	if hint := r.hint(rules, syntax, ce); hint != "" {
		msg += "; " + hint
	}
	return errors.New(msg)
}

// hint names what would make RULES parse: retryConn's + outside --conn, or
// the other code syntax (--engine) or kind of rules (--conn), found by
// parsing RULES under them. It is empty when RULES parse as given (the
// error is about validation: the query timeout, the connect settings).
func (r *rulesFlags) hint(rules string, syntax crl.Syntax, ce *crl.Error) string {
	if !r.conn && strings.HasPrefix(strings.TrimSpace(ce.Token), "+") {
		return "a leading + (add to the built-in list) belongs to retryConn rules (--conn), which list error codes without timings"
	}
	if parses(syntax, r.conn, rules) {
		return ""
	}
	other := crl.SQLState
	if syntax == crl.SQLState {
		other = crl.Numbers
	}
	for _, alt := range []struct {
		syntax crl.Syntax
		conn   bool
	}{{syntax, !r.conn}, {other, r.conn}, {other, !r.conn}} {
		if !parses(alt.syntax, alt.conn, rules) {
			continue
		}
		var with []string
		switch {
		case alt.syntax == syntax:
		case alt.syntax == crl.SQLState:
			with = append(with, "with --engine postgres or cockroach (rules that name SQLSTATEs, such as 40P01)")
		default:
			with = append(with, "with --engine sqlserver or mysql (rules that name error numbers, such as 1205)")
		}
		switch {
		case alt.conn == r.conn:
		case alt.conn:
			with = append(with, "with --conn (as retryConn rules: error codes only)")
		default:
			with = append(with, "without --conn (as retryExec rules: errors:timings[:filter])")
		}
		return "RULES parse " + strings.Join(with, " and ")
	}
	return ""
}

// parses reports whether rules parse in syntax, as retryConn rules or
// retryExec rules.
func parses(syntax crl.Syntax, conn bool, rules string) bool {
	var err error
	if conn {
		_, err = syntax.ParseConn(rules)
	} else {
		_, err = syntax.ParseExec(rules)
	}
	return err == nil
}

// checkCode checks --error as classify checks CODE: a code the engine's
// classifier could report (or the engine-neutral classifier, which every
// engine falls back to), else bad input, with the engine whose syntax it
// has when that is another.
func checkCode(eng engine.Engine, code string) error {
	if slices.Contains(engine.NeutralCodes, code) {
		return nil
	}
	err := eng.ValidCode(code)
	if err == nil {
		return nil
	}
	hint := ""
	switch {
	case eng.Syntax() == crl.Numbers && engine.Postgres.ValidCode(code) == nil && strings.Trim(code, "0123456789") != "":
		hint = "; " + code + " is a SQLSTATE: pass --engine postgres or cockroach"
	case eng.Syntax() == crl.SQLState && engine.SQLServer.ValidCode(code) == nil:
		hint = "; " + code + " is an error number: pass --engine sqlserver or mysql"
	}
	return fmt.Errorf("%v (or an engine-neutral code: %s)%s", err, strings.Join(engine.NeutralCodes, ", "), hint)
}

// canonicalCode writes a code as classifiers report it: a number without
// leading zeros, a SQLSTATE upper-cased.
func canonicalCode(s crl.Syntax, code string) string {
	if s == crl.SQLState {
		return strings.ToUpper(code)
	}
	if n, err := strconv.ParseUint(code, 10, 31); err == nil {
		return strconv.FormatUint(n, 10)
	}
	return code
}
