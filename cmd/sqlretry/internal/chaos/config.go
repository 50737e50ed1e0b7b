package chaos

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/crl"
	"github.com/sqlretry/sqlretry/faults"
	"github.com/sqlretry/sqlretry/mysql"
	"github.com/sqlretry/sqlretry/postgres"
	"github.com/sqlretry/sqlretry/sqlite"
	"github.com/sqlretry/sqlretry/taskstore"
)

// Engine names the database a run drives.
type Engine string

// The engines a run can drive.
const (
	SQLite   Engine = "sqlite"   // modernc.org/sqlite; a temporary file unless DSN names one
	Postgres Engine = "postgres" // pgx; DSN required
	MySQL    Engine = "mysql"    // go-sql-driver/mysql against MariaDB or MySQL; DSN required
)

// ParseEngine parses "sqlite", "postgres" (or "postgresql", "pg") and
// "mysql" (or "mariadb").
func ParseEngine(s string) (Engine, error) {
	switch strings.ToLower(s) {
	case "sqlite", "sqlite3":
		return SQLite, nil
	case "postgres", "postgresql", "pg":
		return Postgres, nil
	case "mysql", "mariadb":
		return MySQL, nil
	}
	return "", fmt.Errorf("unknown engine %q (want sqlite, postgres or mysql)", s)
}

func (e Engine) dialect() taskstore.Dialect {
	switch e {
	case Postgres:
		return taskstore.Postgres
	case MySQL:
		return taskstore.MariaDB
	}
	return taskstore.SQLite
}

func (e Engine) classifier() sqlretry.Classifier {
	switch e {
	case Postgres:
		return postgres.Classifier
	case MySQL:
		return mysql.Classifier
	}
	return sqlite.Classifier
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

// PolicyConfig is the retry policy under test: the command's policy flags.
type PolicyConfig struct {
	MaxRetries     int           // 0: the library's default, 3; negative: no retries
	BaseDelay      time.Duration // 0: the library's default, 100 ms
	MaxDelay       time.Duration // 0: the library's default, 5 s
	CommandTimeout time.Duration // 0: DefaultCommandTimeout (hang faults need one)
	NoBudget       bool          // disable the retry budget
	Rules          string        // retryExec rules (package crl), "" for none
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
	Engine Engine // "" means SQLite
	// DSN is the database to run against. Required for PostgreSQL and MySQL;
	// for SQLite, "" means a temporary file removed afterwards. The run
	// creates its tables in a schema (PostgreSQL) or database (MySQL) of its
	// own and drops it afterwards.
	DSN       string
	Duration  time.Duration // 0: 20 s
	Workers   int           // 0: 8
	FaultRate float64       // the probability that a statement or COMMIT gets a fault; 0: 0.02; negative: none
	// Outages are the outage windows. nil means one DefaultOutage; an empty
	// non-nil slice means none.
	Outages []Outage
	Seed    uint64 // seeds the fault plan and the workload; 0 means 1
	// Kinds limits the random faults to these kinds (see [FaultKinds]);
	// nil means all of them.
	Kinds  []faults.Kind
	Policy PolicyConfig
	// Naive runs the store in its unsafe blind-replay mode (taskstore
	// Options.Naive): the comparison run of --compare naive.
	Naive bool
	// NoProxy turns off the wire-level proxy a run against a server puts
	// between the driver and the server.
	NoProxy bool
	// Now is the clock outage windows, fault windows, sampling and the run's
	// end are read on. nil means time.Now.
	Now func() time.Time
	// Progress, if set, is called with a Sample about every SampleEvery.
	Progress    func(Sample)
	SampleEvery time.Duration // 0: 100 ms
}

// withDefaults returns c with its defaults filled in, or an error naming
// the first bad field.
func (c Config) withDefaults() (Config, error) {
	if c.Engine == "" {
		c.Engine = SQLite
	}
	if _, err := ParseEngine(string(c.Engine)); err != nil {
		return c, inputErr("--engine", err)
	}
	if c.DSN == "" && c.Engine != SQLite {
		return c, inputErr("--dsn", fmt.Errorf("engine %s needs a DSN", c.Engine))
	}
	switch {
	case c.Duration < 0:
		return c, inputErr("--duration", errors.New("must be > 0"))
	case c.Duration == 0:
		c.Duration = 20 * time.Second
	case c.Duration > MaxDuration:
		// Leases are sized from it (4 × Duration), which must not overflow.
		return c, inputErr("--duration", fmt.Errorf("%s is above the maximum, %s", c.Duration, MaxDuration))
	}
	switch {
	case c.Workers < 0 || c.Workers > 256:
		return c, inputErr("--workers", fmt.Errorf("%d is outside 1..256", c.Workers))
	case c.Workers == 0:
		c.Workers = 8
	}
	switch {
	case math.IsNaN(c.FaultRate) || c.FaultRate > 1:
		return c, inputErr("--fault-rate", fmt.Errorf("%v is outside [0, 1]", c.FaultRate))
	case c.FaultRate == 0:
		c.FaultRate = 0.02
	case c.FaultRate < 0:
		c.FaultRate = 0
	}
	if c.Outages == nil {
		c.Outages = []Outage{DefaultOutage(c.Duration)}
	}
	for _, o := range c.Outages {
		if o.Length <= 0 || o.Offset < 0 {
			return c, inputErr("--outage", fmt.Errorf("%s: want a positive length at an offset >= 0", o))
		}
		if o.Offset+o.Length > c.Duration {
			return c, inputErr("--outage", fmt.Errorf("%s ends after the run's %s", o, c.Duration))
		}
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
	for _, k := range c.Kinds {
		if !slices.Contains(FaultKinds, k) {
			return c, inputErr("--faults", fmt.Errorf("unknown fault kind %q (want some of %s)", k, kindNames()))
		}
	}
	if c.Policy.CommandTimeout < 0 {
		return c, inputErr("--command-timeout", errors.New("must be >= 0"))
	}
	if c.Policy.CommandTimeout == 0 {
		c.Policy.CommandTimeout = DefaultCommandTimeout
	}
	if _, err := c.policyConfig(nil); err != nil {
		return c, err
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.SampleEvery <= 0 {
		c.SampleEvery = 100 * time.Millisecond
	}
	return c, nil
}

// policyConfig builds the sqlretry.Config of the policy under test.
func (c Config) policyConfig(obs sqlretry.Observer) (sqlretry.Config, error) {
	pc := sqlretry.Config{
		MaxRetries:     c.Policy.MaxRetries,
		BaseDelay:      c.Policy.BaseDelay,
		MaxDelay:       c.Policy.MaxDelay,
		CommandTimeout: c.Policy.CommandTimeout,
		Classifier:     c.Engine.classifier(),
		CountCalls:     true,
		Observer:       obs,
	}
	if c.Policy.NoBudget {
		pc.Budget = sqlretry.NoBudget
	} else {
		pc.Budget = sqlretry.DefaultBudget()
	}
	if c.Policy.Rules != "" {
		// PostgreSQL rules name SQLSTATEs; MySQL's and SQLite's error
		// numbers are decimal integers like SQL Server's.
		eng := crl.SQLServer
		if c.Engine == Postgres {
			eng = crl.PostgreSQL
		}
		if err := (crl.Config{Engine: eng, Exec: c.Policy.Rules}).Apply(&pc); err != nil {
			return pc, inputErr("--rules", err)
		}
	}
	if _, err := sqlretry.New(pc); err != nil {
		name := "--max-delay"
		switch {
		case strings.Contains(err.Error(), "BaseDelay must"):
			name = "--base-delay"
		case strings.Contains(err.Error(), "CommandTimeout"):
			name = "--command-timeout"
		}
		return pc, inputErr(name, err)
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
