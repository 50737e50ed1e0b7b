package cli

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"

	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/cmd/sqlretry/internal/chaos"
	"github.com/sqlretry/sqlretry/internal/dbtest"
)

// runAsCommand, set in the environment, makes the test binary the command
// (TestMain).
const runAsCommand = "SQLRETRY_TEST_RUN_AS_COMMAND"

// runCommandIn runs the command with args in directory dir, as a process of
// its own (this test binary, as TestMain runs it), and returns its exit code
// and output: what a user who typed the command in dir would see.
func runCommandIn(t *testing.T, dir string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), runAsCommand+"=1")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatalf("run %v: %v", args, err)
	}
	return code, out.String(), errb.String()
}

// checkBadInput asserts the contract for bad input: exit 2, nothing on
// standard output, one line "error: ..." on standard error that says want.
func checkBadInput(t *testing.T, code int, stdout, stderr, want string) {
	t.Helper()
	if code != ExitBadInput || stdout != "" {
		t.Errorf("exit %d, stdout %q; want exit %d and nothing on stdout (stderr %q)", code, stdout, ExitBadInput, stderr)
	}
	if !strings.HasPrefix(stderr, "error: ") || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, want) {
		t.Errorf("stderr: got %q, want one line starting with \"error: \" that says %q", stderr, want)
	}
}

// TestChaosRefusesADSNOfNoForm runs the command, in an empty directory,
// with DSNs that are none of the forms chaos takes or name an SQLite file
// it cannot create: each is bad input that says what to write instead, and
// the directory stays empty. (A mistyped --dsn 'garbage::://' was taken for
// an SQLite file: the run exited 0 and left a file garbage::: behind.)
func TestChaosRefusesADSNOfNoForm(t *testing.T) {
	t.Parallel()
	forms := "postgres://user@host:5432/db"
	cases := []struct {
		dsn, want string
	}{
		{"garbage::://", `--dsn: "garbage::://" is none of the forms chaos takes: ` + chaos.DSNForms},
		{"garbage", "is none of the forms chaos takes"},
		{"localhost:5432", forms},
		{"chaos", "a path ending .db, .sqlite or .sqlite3"},
		{"./chaos", `a plain path is an SQLite file only when its name ends .db, .sqlite or .sqlite3; name it so, or write file:./chaos`},
		{"run.dbx", "is none of the forms"},
		{"no-such-dir/run.db", "SQLite file no-such-dir/run.db: its directory no-such-dir does not exist"},
		{"file:", `"file:" names no file`},
		{"file::memory:", "is an in-memory database: the run needs a file"},
		{"file:run.db?mode=memory", "is an in-memory database"},
		{"file://server/share/run.db", "a file: URI names a local file"},
		{"sqlite:///tmp/run.db", "write file:/tmp/run.db"},
		{"sqlite3:run.db", "write file:run.db"},
		{"mysql://root:s3cr3t@127.0.0.1/test?tls=false", "--dsn: go-sql-driver/mysql takes no URL: write root:xxxxx@tcp(127.0.0.1:3306)/test?tls=false"},
		{"mariadb://app@db.example:3307/shop", "write app@tcp(db.example:3307)/shop"},
	}
	for _, c := range cases {
		t.Run(c.dsn, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			code, stdout, stderr := runCommandIn(t, dir, "chaos", "--dsn", c.dsn, "--duration", "1s")
			checkBadInput(t, code, stdout, stderr, c.want)
			if strings.Contains(stderr, "s3cr3t") {
				t.Errorf("stderr shows the DSN's password: %q", stderr)
			}
			if left, _ := os.ReadDir(dir); len(left) > 0 {
				t.Errorf("the refused run left %v behind in its directory", left)
			}
		})
	}
}

// TestChaosSQLiteFileForms: the forms of an SQLite DSN chaos takes, each
// a file it creates and removes afterwards, and the refusal of one whose
// file (or the comparison run's beside it) exists.
func TestChaosSQLiteFileForms(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, dsn := range []string{dir + "/run.db", dir + "/RUN.SQLITE", dir + "/./run.sqlite3", "file:" + dir + "/run.db?_pragma=busy_timeout(500)",
		"file:" + dir + "/chaos-file", "file://" + dir + "/uri.db", "file://localhost" + dir + "/uri.db"} {
		if err := (chaos.Config{DSN: dsn, Duration: time.Second}).Validate(); err != nil {
			t.Errorf("--dsn %q: got %v, want it taken", dsn, err)
		}
	}
	code, stdout, stderr := runCommandIn(t, dir, "chaos", "--dsn", "file:chaos-file", "--duration", "1s", "--outage", "none", "--json")
	if code != ExitOK || !strings.Contains(stdout, `"ok": true`) {
		t.Errorf("--dsn file:chaos-file: exit %d, stderr %q; want a run that held", code, stderr)
	}
	if left, _ := os.ReadDir(dir); len(left) > 0 {
		t.Errorf("the run left %v behind", left)
	}
	if err := os.WriteFile(filepath.Join(dir, "taken.db.naive"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr = runCommandIn(t, dir, "chaos", "--dsn", "taken.db", "--compare", "naive", "--duration", "1s")
	checkBadInput(t, code, stdout, stderr, "SQLite file taken.db.naive exists")
	if _, err := os.Stat(filepath.Join(dir, "taken.db")); err == nil {
		t.Errorf("the refused run created taken.db: the comparison's file was checked only after sqlretry's run")
	}
}

// TestChaosRefusesAMissingDatabase: a server DSN naming a database the
// server does not have is bad input that says so. The run works in a
// schema or database of its own; on MariaDB its admin connection dropped
// the DSN's database, and a mistyped name ran anyway.
func TestChaosRefusesAMissingDatabase(t *testing.T) {
	t.Parallel()
	t.Run("mysql", func(t *testing.T) {
		t.Parallel()
		cfg, err := gomysql.ParseDSN(dbtest.MySQLDSN(t))
		if err != nil {
			t.Fatal(err)
		}
		cfg.DBName = "sqlretry_no_such_database"
		code, stdout, stderr := runChaosCLI(t, "--dsn", cfg.FormatDSN(), "--duration", "1s")
		checkBadInput(t, code, stdout, stderr, `--dsn: database "sqlretry_no_such_database" does not exist on the server`)
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		cfg, err := pgx.ParseConfig(dbtest.PostgresDSN(t))
		if err != nil {
			t.Fatal(err)
		}
		dsn := "postgres://" + cfg.User + "@" + cfg.Host + ":" + strconv.Itoa(int(cfg.Port)) + "/sqlretry_no_such_database?sslmode=disable"
		code, stdout, stderr := runChaosCLI(t, "--dsn", dsn, "--duration", "1s")
		checkBadInput(t, code, stdout, stderr, "the database the DSN names does not exist on the server")
	})
}

// TestChaosRulesErrorInTheRulesCommandsWords: a bad --rules is reported as
// `rules explain` reports it, where and what, without the JDBC driver's
// resource key (R_InvalidRuleFormat).
func TestChaosRulesErrorInTheRulesCommandsWords(t *testing.T) {
	for _, rules := range []string{"bad", "1205:x", "1205:3,2*2:select:x"} {
		code, stdout, stderr := runChaosCLI(t, "--rules", rules)
		checkBadInput(t, code, stdout, stderr, "chaos: --rules: rule 1, token ")
		if strings.Contains(stderr, "R_") {
			t.Errorf("--rules %q: %q names a JDBC resource key", rules, stderr)
		}
	}
}

// TestChaosShortDurationNamesTheDuration: a run too short for the default
// outage is the --duration's fault, not an --outage the user never gave.
func TestChaosShortDurationNamesTheDuration(t *testing.T) {
	code, stdout, stderr := runChaosCLI(t, "--duration", "50ms")
	checkBadInput(t, code, stdout, stderr, "--duration: 50ms is shorter than the default outage")
}

// parseChaosOpts parses args into chaosOpts as chaosMain does.
func parseChaosOpts(t *testing.T, args ...string) *chaosOpts {
	t.Helper()
	fs := newFlagSet("chaos")
	o := &chaosOpts{set: map[string]bool{}}
	o.register(fs)
	if _, err := parseFlags(fs, args); err != nil {
		t.Fatalf("parse %v: %v", args, err)
	}
	fs.Visit(func(f *flag.Flag) { o.set[f.Name] = true })
	return o
}

// TestChaosOptsValidateChangesNothing: Validate checks the flags and
// leaves them as they were, whether they pass or not (it used to fill in
// the config it checked: the scenario, the engine, the policy's retries).
func TestChaosOptsValidateChangesNothing(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"--max-retries", "0", "--fault-rate", "0", "--no-budget", "--outage", "1s@2s", "--faults", "hang", "--engine", "sqlite"},
		{"--scenario", "contention", "--hot-rows", "4", "--plot", "x.png"},
		{"--compare", "naive", "--plot", "x.svg", "--outage", "none"},
		{"--engine", "postgres"}, // fails: no DSN
	} {
		o := parseChaosOpts(t, args...)
		before := *o
		before.set = maps(o.set)
		before.outages.list = slices.Clone(o.outages.list)
		_ = o.Validate()
		_ = o.Validate()
		if !reflect.DeepEqual(*o, before) {
			t.Errorf("chaos %v: Validate changed the options:\n got %+v\nwant %+v", args, *o, before)
		}
	}
}

func maps(m map[string]bool) map[string]bool {
	out := make(map[string]bool, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// TestChaosOptsConfig: config builds the run's chaos.Config from the
// flags, reading the command line's zeros as "none" where chaos.Config
// reads zero as its default.
func TestChaosOptsConfig(t *testing.T) {
	cfg, err := parseChaosOpts(t, "--max-retries", "0", "--fault-rate", "0", "--no-budget", "--outage", "none",
		"--faults", "hang,before_send", "--engine", "mariadb", "--dsn", "root@tcp(db:3306)/test", "--scenario", "Tasks").config()
	if err != nil {
		t.Fatal(err)
	}
	want := chaos.Config{Scenario: chaos.ScenarioTasks, Engine: cfg.Engine, DSN: "root@tcp(db:3306)/test", Duration: 20 * time.Second,
		Workers: 8, Processes: 1, FaultRate: -1, Outages: []chaos.Outage{}, Seed: 1, Kinds: cfg.Kinds, Verifier: chaos.VerifierAuto,
		Policy: chaos.PolicyConfig{MaxRetries: sqlretry.NoRetries, BaseDelay: cfg.Policy.BaseDelay, MaxDelay: cfg.Policy.MaxDelay,
			CommandTimeout: chaos.DefaultCommandTimeout, NoBudget: true}}
	if cfg.Engine.String() != "mysql" || len(cfg.Kinds) != 2 || cfg.Policy.BaseDelay == 0 || !reflect.DeepEqual(cfg, want) {
		t.Errorf("config:\n got %+v\nwant %+v", cfg, want)
	}
	cfg, err = parseChaosOpts(t, "--compare", "naive", "--plot", "run.png").config()
	if err != nil || !cfg.Damage || cfg.Naive || cfg.Outages != nil || cfg.FaultRate != 0.02 || cfg.Policy.MaxRetries != 3 {
		t.Errorf("--compare naive --plot: got %+v, %v; want the damage counted, the default outage, fault rate and retries", cfg, err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--scenario", "meteor"}, "--scenario"},
		{[]string{"--engine", "oracle"}, "--engine"},
		{[]string{"--faults", "flood"}, "--faults"},
	} {
		if _, err := parseChaosOpts(t, c.args...).config(); err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("chaos %v: config() error %v, want one naming %s", c.args, err, c.want)
		}
	}
}

// TestChaosHelpIsShortAndHelpAllComplete: chaos --help fits a screen with
// the essentials and points at --help-all, which documents every flag.
func TestChaosHelpIsShortAndHelpAllComplete(t *testing.T) {
	code, short, _ := runChaosCLI(t, "--help")
	if code != ExitOK || strings.Count(short, "\n") > 40 {
		t.Errorf("chaos --help: exit %d, %d lines; want 0 and at most 40", code, strings.Count(short, "\n"))
	}
	for _, want := range append([]string{"--help-all", "postgres://", "tcp(", "file:PATH"}, prefixed(chaosEssentials)...) {
		if !strings.Contains(short, want) {
			t.Errorf("chaos --help lacks %q:\n%s", want, short)
		}
	}
	code, all, _ := runChaosCLI(t, "--help-all")
	if code != ExitOK {
		t.Errorf("chaos --help-all: exit %d", code)
	}
	fs := newFlagSet("chaos")
	(&chaosOpts{}).register(fs)
	fs.VisitAll(func(f *flag.Flag) {
		if !strings.Contains(all, "\n  -"+f.Name+" ") && !strings.Contains(all, "\n  -"+f.Name+"\n") {
			t.Errorf("chaos --help-all does not document --%s", f.Name)
		}
	})
	for _, want := range []string{chaos.VerifierScope[:60], "timed", "resynchronise"} {
		if !strings.Contains(strings.Join(strings.Fields(all), " "), want) {
			t.Errorf("chaos --help-all lacks %q", want)
		}
	}
}

func prefixed(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = "  -" + n
	}
	return out
}
