package chaos

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/cmd/sqlretry/internal/engine"
	"github.com/sqlretry/sqlretry/crl"
	"github.com/sqlretry/sqlretry/faults"
	"github.com/sqlretry/sqlretry/taskstore"
)

// Engines are the engines a run can drive: SQLite (modernc.org/sqlite; a
// temporary file unless DSN names one), PostgreSQL (pgx) and MySQL or
// MariaDB (go-sql-driver/mysql); the last two need a DSN.
var Engines = []engine.Engine{engine.SQLite, engine.Postgres, engine.MySQL}

// EngineOf reads the engine from a DSN ([DSNEngine]); SQLite for none, and
// for a DSN that looks like no engine's (which [Config.Validate] refuses).
func EngineOf(dsn string) engine.Engine {
	if e, _, ok := DSNEngine(dsn); ok {
		return e
	}
	return engine.SQLite
}

// mysqlAt matches go-sql-driver/mysql's [user[:pw]]@[net[(addr)]]/db.
var mysqlAt = regexp.MustCompile(`@(tcp|tcp6|unix)?(\(.*\))?/`)

// DSNEngine reads which engine's DSN dsn looks like, and what gives it
// away (for an error message); ok is false when it cannot tell.
func DSNEngine(dsn string) (e engine.Engine, form string, ok bool) {
	l := strings.ToLower(strings.TrimSpace(dsn))
	switch {
	case l == "":
		return 0, "", false
	case strings.HasPrefix(l, "postgres://") || strings.HasPrefix(l, "postgresql://"):
		return engine.Postgres, "a postgres:// URL", true
	case strings.HasPrefix(l, "sqlserver://") || strings.HasPrefix(l, "mssql://"):
		return engine.SQLServer, "a sqlserver:// URL", true
	case strings.HasPrefix(l, "mysql://") || strings.HasPrefix(l, "mariadb://"):
		return engine.MySQL, "a mysql:// URL", true
	case strings.HasPrefix(l, "file:") || strings.HasPrefix(l, "sqlite:"):
		return engine.SQLite, "a file: name", true
	case strings.Contains(l, ";") && (strings.Contains(l, "server=") || strings.Contains(l, "data source=")):
		return engine.SQLServer, "an ADO connection string (server=...;)", true
	case mysqlAt.MatchString(l):
		return engine.MySQL, "go-sql-driver's user@tcp(host)/db form", true
	case libpqKey.MatchString(l):
		return engine.Postgres, "libpq key=value settings (host=, dbname=)", true
	case !strings.Contains(l, "=") && (strings.HasPrefix(l, "/") || strings.HasPrefix(l, ".") ||
		strings.HasSuffix(l, ".db") || strings.HasSuffix(l, ".sqlite") || strings.HasSuffix(l, ".sqlite3")):
		return engine.SQLite, "a file path", true
	}
	return 0, "", false
}

// engineTitles are the engines' names in prose.
var engineTitles = map[engine.Engine]string{engine.Postgres: "PostgreSQL", engine.MySQL: "MySQL/MariaDB",
	engine.SQLServer: "SQL Server", engine.SQLite: "SQLite", engine.Cockroach: "CockroachDB"}

// validateDSN refuses a DSN that looks like another engine's than c.Engine
// (defaults applied): a driver would fail on it with an error that names
// neither (go-sql-driver on a postgres:// URL: "default addr for network
// '127.0.0.1:5432' unknown").
func (c Config) validateDSN() error {
	e, form, ok := DSNEngine(c.DSN)
	if !ok || e == c.Engine {
		return nil
	}
	return inputErr("--dsn", fmt.Errorf("the DSN looks like %s's (%s) and --engine says %s", engineTitles[e], form, c.Engine))
}

func dialect(e engine.Engine) taskstore.Dialect {
	switch e {
	case engine.Postgres:
		return taskstore.Postgres
	case engine.MySQL:
		return taskstore.MariaDB
	}
	return taskstore.SQLite
}

// An Outage is a window during which the database is unreachable: every
// call fails and no connection can be opened.
type Outage struct {
	Offset time.Duration // from the start of the run
	Length time.Duration
}

func (o Outage) String() string { return o.Length.String() + "@" + o.Offset.String() }

// ParseOutage parses the command's --outage syntax, DURATION@OFFSET: "3s@8s"
// is an outage of 3 s starting 8 s into the run.
func ParseOutage(s string) (Outage, error) {
	l, off, ok := strings.Cut(s, "@")
	if !ok {
		return Outage{}, fmt.Errorf("outage %q: want DURATION@OFFSET, such as 3s@8s", s)
	}
	var o Outage
	var err error
	if o.Length, err = time.ParseDuration(l); err != nil || o.Length <= 0 {
		return Outage{}, fmt.Errorf("outage %q: length %q is not a positive duration", s, l)
	}
	if o.Offset, err = time.ParseDuration(off); err != nil || o.Offset < 0 {
		return Outage{}, fmt.Errorf("outage %q: offset %q is not a duration >= 0", s, off)
	}
	return o, nil
}

// DefaultOutage returns the default scenario's outage for a run of length d:
// about a sixth of the run (at most 4 s, at least 200 ms), centred on its middle.
func DefaultOutage(d time.Duration) Outage {
	l := min(max(d/6, 200*time.Millisecond), 4*time.Second)
	return Outage{Offset: max(d/2-l/2, 0), Length: l}
}

// FaultKinds are the kinds of random fault a run injects, besides outages.
var FaultKinds = []faults.Kind{faults.BeforeSend, faults.AfterExec, faults.AppliedReplyLost, faults.CommitNotApplied,
	faults.CommitAppliedReplyLost, faults.ServerError, faults.Hang}

func kindNames() string {
	s := make([]string, len(FaultKinds))
	for i, k := range FaultKinds {
		s[i] = string(k)
	}
	return strings.Join(s, ", ")
}

// ParseKinds parses the command's --faults list: fault kind names separated
// by commas.
func ParseKinds(s string) ([]faults.Kind, error) {
	var out []faults.Kind
	for _, f := range strings.Split(s, ",") {
		k := faults.Kind(strings.TrimSpace(f))
		if !slices.Contains(FaultKinds, k) {
			return nil, fmt.Errorf("unknown fault kind %q (want some of %s)", k, kindNames())
		}
		out = append(out, k)
	}
	return out, nil
}

// Scenario is a workload the command can run.
type Scenario string

const (
	// ScenarioTasks is the default: the task store under injected faults
	// and an outage ([Run]).
	ScenarioTasks Scenario = "tasks"
	// ScenarioContention is hot rows and opposite-order two-row
	// transactions, run under three policies one after another
	// ([RunContention]).
	ScenarioContention Scenario = "contention"
)

// Scenarios lists the scenarios, the default first.
var Scenarios = []Scenario{ScenarioTasks, ScenarioContention}

// ParseScenario reads a --scenario value.
func ParseScenario(s string) (Scenario, error) {
	for _, sc := range Scenarios {
		if strings.EqualFold(s, string(sc)) {
			return sc, nil
		}
	}
	return "", fmt.Errorf("unknown scenario %q (want %s or %s)", s, ScenarioTasks, ScenarioContention)
}

// DefaultHotRows is how many rows the contention scenario's transactions
// pick their two rows from: with 2, every pair of concurrent transactions
// conflicts, and half of them in opposite order.
const DefaultHotRows = 2

// MaxHotRows bounds --hot-rows: the rows are created one statement each.
const MaxHotRows = 10000

// PolicyConfig is the retry policy under test: the command's policy flags.
// Zero fields take sqlretry.Config's defaults ([sqlretry.Config.WithDefaults]).
type PolicyConfig struct {
	MaxRetries     int           // 0: the library's default; negative: no retries
	BaseDelay      time.Duration // 0: the library's default
	MaxDelay       time.Duration // 0: the library's default
	CommandTimeout time.Duration // 0: DefaultCommandTimeout (hang faults need one)
	NoBudget       bool          // disable the retry budget
	Rules          string        // retryExec rules (package crl) in the engine's code syntax, "" for none
}

// MaxDuration is the longest run: a run's leases last 4 × its duration,
// which must fit a time.Duration.
const MaxDuration = 10000 * time.Hour

// DefaultCommandTimeout is the per-attempt timeout of a run whose
// PolicyConfig leaves it 0: without one, a hung call would hang its worker.
const DefaultCommandTimeout = time.Second

// Config is one chaos run. The zero value, after defaults, is the README's
// scenario: 20 s on a temporary SQLite database, 8 workers, a 2% fault rate
// per kind and one outage in the middle.
type Config struct {
	// Scenario is the workload; the zero value is ScenarioTasks.
	Scenario Scenario
	// HotRows is the contention scenario's number of hot rows; 0 means
	// DefaultHotRows. The tasks scenario has none.
	HotRows int
	// Engine is one of [Engines]. The zero value means the engine the DSN
	// names ([EngineOf]): SQLite without one.
	Engine engine.Engine
	// DSN is the database to run against, in one of the forms [DSNForms]
	// lists. Required for PostgreSQL and MySQL; for SQLite, "" means a
	// temporary file removed afterwards. The run
	// creates its tables in a schema (PostgreSQL) or database (MySQL) of its
	// own and drops it afterwards.
	DSN       string
	Duration  time.Duration // 0: 20 s
	Workers   int           // 0: 8
	FaultRate float64       // the probability that a statement or COMMIT gets a fault; 0: 0.02; negative: none
	// Outages are the outage windows. nil means one DefaultOutage (none in
	// the contention scenario); an empty non-nil slice means none.
	Outages []Outage
	Seed    uint64 // seeds the fault plan and the workload; 0 means 1
	// Kinds limits the random faults to these kinds (see [FaultKinds]);
	// nil means all of them.
	Kinds  []faults.Kind
	Policy PolicyConfig
	// Naive runs the unsafe blind-replay store (internal/naivestore): the
	// comparison run of --compare naive.
	Naive bool
	// NoProxy turns off the wire-level proxy a run against a server puts
	// between the driver and the server.
	NoProxy bool
	// Verifier chooses the commit verifier of the policy under test (see
	// [VerifierAuto]); "" means VerifierAuto.
	Verifier string
	// Damage, in the tasks scenario, has the report count the invariants'
	// violations over time (RunReport.Damage), for the plot of a naive run
	// beside ours. It costs one check of the tables per point.
	Damage bool
	// Now is the clock outage windows, fault windows, sampling and the run's
	// end are read on. nil means time.Now.
	Now func() time.Time
	// Progress, if set, is called with a Sample about every SampleEvery.
	Progress    func(Sample)
	SampleEvery time.Duration // 0: 100 ms
	// Cluster, "galera" ([ClusterGalera]), runs the tasks scenario on a
	// MariaDB Galera cluster: the DSN's nodes, or with no DSN a throwaway
	// three-node cluster the run starts, kills a node of and rejoins
	// (cluster.go). Failover does the same with a PostgreSQL primary and
	// standby: the primary stopped, the standby promoted.
	Cluster  string
	Failover bool
	// GaleraRouting is how a Galera run's connections pick their node:
	// RoutingSequential (the default) or RoutingSpread.
	GaleraRouting string
	// Notify, if set, is told what a cluster run does before its workload
	// starts (starting the throwaway cluster takes seconds).
	Notify func(string)
	// Processes, in the tasks scenario, runs the workload as a fleet: that
	// many worker processes (the command itself, see [ServeWorker]) on one
	// shared database, each with Workers workers and a policy, a retry
	// budget and a fault plan of its own; the parent checks the invariants
	// once over the database. 0 or 1: one process, this one.
	Processes int
}

// WithDefaults returns c with every zero field that has a default set to it.
func (c Config) WithDefaults() Config {
	c = c.clusterDefaults()
	if c.Scenario == "" {
		c.Scenario = ScenarioTasks
	}
	if c.Scenario == ScenarioContention {
		if c.HotRows == 0 {
			c.HotRows = DefaultHotRows
		}
		if c.Outages == nil {
			c.Outages = []Outage{}
		}
	}
	if c.Engine == 0 {
		c.Engine = EngineOf(c.DSN)
	}
	if c.Verifier == "" {
		c.Verifier = VerifierAuto
	}
	if c.Duration == 0 {
		c.Duration = 20 * time.Second
	}
	if c.Workers == 0 {
		c.Workers = 8
	}
	switch {
	case c.FaultRate == 0:
		c.FaultRate = 0.02
	case c.FaultRate < 0:
		c.FaultRate = 0
	}
	if c.Outages == nil {
		c.Outages = []Outage{DefaultOutage(c.Duration)}
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
	if c.Policy.CommandTimeout == 0 {
		c.Policy.CommandTimeout = DefaultCommandTimeout
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.SampleEvery <= 0 {
		c.SampleEvery = 100 * time.Millisecond
	}
	return c
}

// Validate reports the first bad setting of c, its defaults applied, as an
// [*InputError] that names the command's flag for it; nil if there is none.
func (c Config) Validate() error {
	defaultOutage := c.Outages == nil // the outage is the run's choice, not the user's
	c = c.WithDefaults()
	if err := c.validateDSNForm(); err != nil {
		return err
	}
	if err := c.validateScenario(); err != nil {
		return err
	}
	if err := c.validateCluster(); err != nil {
		return err
	}
	if err := c.validateFleet(); err != nil {
		return err
	}
	switch {
	case !slices.Contains(Engines, c.Engine):
		return inputErr("--engine", fmt.Errorf("chaos drives %s, not %s", engine.Names(Engines...), c.Engine))
	case c.DSN == "" && c.Engine != engine.SQLite && !c.clustered():
		return inputErr("--dsn", fmt.Errorf("engine %s needs a DSN", c.Engine))
	case c.Duration < 0:
		return inputErr("--duration", errors.New("must be > 0"))
	case c.Duration > MaxDuration:
		// Leases are sized from it (4 × Duration), which must not overflow.
		return inputErr("--duration", fmt.Errorf("%s is above the maximum, %s", c.Duration, MaxDuration))
	case c.Workers < 0 || c.Workers > 256:
		return inputErr("--workers", fmt.Errorf("%d is outside 1..256", c.Workers))
	case math.IsNaN(c.FaultRate) || c.FaultRate > 1:
		return inputErr("--fault-rate", fmt.Errorf("%v is outside [0, 1]", c.FaultRate))
	}
	if err := c.validateDSN(); err != nil {
		return err
	}
	if err := c.validateVerifier(); err != nil {
		return err
	}
	for _, o := range c.Outages {
		if o.Length <= 0 || o.Offset < 0 {
			return inputErr("--outage", fmt.Errorf("%s: want a positive length at an offset >= 0", o))
		}
		if o.Offset+o.Length > c.Duration && defaultOutage && c.Duration > 0 {
			return inputErr("--duration", fmt.Errorf("%s is shorter than the default outage (%s): give a longer run, or --outage none", c.Duration, o.Length))
		}
		if o.Offset+o.Length > c.Duration {
			return inputErr("--outage", fmt.Errorf("%s ends after the run's %s", o, c.Duration))
		}
	}
	for _, k := range c.Kinds {
		if !slices.Contains(FaultKinds, k) {
			return inputErr("--faults", fmt.Errorf("unknown fault kind %q (want some of %s)", k, kindNames()))
		}
	}
	pc, err := c.policyConfig(nil)
	if err != nil {
		return err
	}
	var ce *sqlretry.ConfigError
	if err := pc.Validate(); errors.As(err, &ce) {
		return inputErr(policyFlag(ce.Field), err)
	} else if err != nil {
		return inputErr("policy", err)
	}
	return nil
}

// ContentionKinds are the fault kinds the contention scenario injects: on
// COMMIT only, so that the workload's own failures are contention, and an
// ambiguous COMMIT shows what each policy does with it.
var ContentionKinds = []faults.Kind{faults.CommitNotApplied, faults.CommitAppliedReplyLost}

// validateScenario checks the settings that depend on the scenario; c has
// its defaults applied.
func (c Config) validateScenario() error {
	switch c.Scenario {
	case ScenarioTasks:
		if c.HotRows != 0 {
			return inputErr("--hot-rows", errors.New("only the contention scenario has hot rows"))
		}
		return nil
	case ScenarioContention:
	default:
		return inputErr("--scenario", fmt.Errorf("unknown scenario %q (want %s or %s)", c.Scenario, ScenarioTasks, ScenarioContention))
	}
	switch {
	case c.HotRows < 2 || c.HotRows > MaxHotRows:
		return inputErr("--hot-rows", fmt.Errorf("%d is outside 2..%d (a transaction updates two of them)", c.HotRows, MaxHotRows))
	case len(c.Outages) > 0:
		return inputErr("--outage", errors.New("the contention scenario has no outage"))
	case c.Naive:
		return inputErr("--naive", errors.New("the contention scenario runs the blind loop beside sqlretry itself"))
	}
	for _, k := range c.Kinds {
		if !slices.Contains(ContentionKinds, k) {
			return inputErr("--faults", fmt.Errorf("the contention scenario injects only %s and %s, not %s", ContentionKinds[0], ContentionKinds[1], k))
		}
	}
	return nil
}

// policyFlag names the command's flag for a sqlretry.Config field.
func policyFlag(field string) string {
	switch field {
	case "MaxRetries":
		return "--max-retries"
	case "BaseDelay":
		return "--base-delay"
	case "MaxDelay":
		return "--max-delay"
	case "CommandTimeout":
		return "--command-timeout"
	case "Budget":
		return "--budget"
	case "Schedule", "ConnectSchedule":
		return "--rules"
	}
	return "policy (Config." + field + ")"
}

// policyConfig builds the sqlretry.Config of the policy under test; its
// error is an *InputError for bad --rules.
func (c Config) policyConfig(obs sqlretry.Observer) (sqlretry.Config, error) {
	pc := sqlretry.Config{
		MaxRetries:     c.Policy.MaxRetries,
		BaseDelay:      c.Policy.BaseDelay,
		MaxDelay:       c.Policy.MaxDelay,
		CommandTimeout: c.Policy.CommandTimeout,
		Classifier:     c.Engine.Classifier(),
		CountCalls:     true,
		Observer:       obs,
	}
	if c.Policy.NoBudget {
		pc.Budget = sqlretry.NoBudget
	} else {
		pc.Budget = sqlretry.DefaultBudget()
	}
	if c.Policy.Rules != "" {
		if err := (crl.Config{Syntax: c.Engine.Syntax(), Exec: c.Policy.Rules}).Apply(&pc); err != nil {
			// The rules command's wording: where and what, without the
			// JDBC driver's resource key (R_InvalidRuleFormat).
			return pc, inputErr("--rules", engine.RuleError(err))
		}
	}
	return pc, nil
}

// InputError is a bad setting or an unusable database: the command exits 2.
type InputError struct {
	What string // the flag or setting: "--dsn", "--outage"
	Err  error
}

func (e *InputError) Error() string { return e.What + ": " + e.Err.Error() }
func (e *InputError) Unwrap() error { return e.Err }

func inputErr(what string, err error) error { return &InputError{What: what, Err: err} }
