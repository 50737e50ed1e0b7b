package cli

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"encoding/xml"
	"errors"
	"image/png"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"
	_ "github.com/jackc/pgx/v5/stdlib" // registers "pgx"

	"github.com/sqlretry/sqlretry/cmd/sqlretry/internal/chaos"
	"github.com/sqlretry/sqlretry/internal/dbtest"
)

// The chaos tests run the command end to end for a couple of seconds with a
// fixed seed. They assert counts (invariant violations, faults injected,
// exit codes), never durations.

func runChaosCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = Main(context.Background(), append([]string{"chaos"}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

// chaosDoc is the part of the --json document the tests read.
type chaosDoc struct {
	Engine     string         `json:"engine"`
	Mode       string         `json:"mode"`
	Operations int            `json:"operations"`
	Faults     map[string]int `json:"faults"`
	// SeriesCompleted counts series that reached their MaxRuns.
	SeriesCompleted int `json:"series_completed"`
	Shapes          map[string]struct {
		Operations int            `json:"operations"`
		OK         int            `json:"ok"`
		Faults     map[string]int `json:"faults"`
		Retries    int            `json:"retries"`
	} `json:"shapes"`
	Invariants map[string]int `json:"invariants"`
	Outage     struct {
		Calls         int64   `json:"calls"`
		Attempts      int64   `json:"attempts"`
		Amplification float64 `json:"amplification"`
		RecoveryMS    float64 `json:"recovery_ms"`
		Refused       int     `json:"refused"`
	} `json:"outage"`
	Wire  *struct{ Connections, Faults int } `json:"wire"`
	OK    bool                               `json:"ok"`
	Naive *chaosDoc                          `json:"naive"`
}

func (d *chaosDoc) violations() int {
	n := 0
	for _, v := range d.Invariants {
		n += v
	}
	return n
}

func decodeChaos(t *testing.T, stdout string) *chaosDoc {
	t.Helper()
	var d chaosDoc
	if err := json.Unmarshal([]byte(stdout), &d); err != nil {
		t.Fatalf("--json output is not one JSON document: %v\n%s", err, stdout)
	}
	if !strings.Contains(stdout, `"ok": `) {
		t.Errorf(`--json output lacks the indented "ok": key CI greps for`)
	}
	return &d
}

// checkDoc asserts what every run's document must hold.
func checkDoc(t *testing.T, d *chaosDoc, engine string) {
	t.Helper()
	if d.Engine != engine {
		t.Errorf("engine: got %q, want %q", d.Engine, engine)
	}
	if d.Operations == 0 {
		t.Errorf("operations: got 0, want > 0")
	}
	for _, k := range []string{"before_send", "after_exec", "commit_not_applied", "commit_applied_reply_lost", "server_error", "hang", "outage"} {
		if _, ok := d.Faults[k]; !ok {
			t.Errorf("faults: key %q missing from %v", k, d.Faults)
		}
	}
	for _, k := range []string{"persist", "set_status", "advance", "claim"} {
		if s, ok := d.Shapes[k]; !ok || s.Operations == 0 {
			t.Errorf("shapes.%s: got %+v (present %t), want operations > 0", k, s, ok)
		}
	}
	for _, k := range []string{"lost", "duplicated", "double_counted", "audit_mismatch", "job_attempts_burned"} {
		if _, ok := d.Invariants[k]; !ok {
			t.Errorf("invariants: key %q missing from %v", k, d.Invariants)
		}
	}
	if d.Outage.Calls == 0 || d.Outage.Refused == 0 {
		t.Errorf("%s outage: got %d calls and %d refused, want both > 0: the outage tested nothing (faults %v)", d.Mode, d.Outage.Calls, d.Outage.Refused, d.Faults)
	}
	if d.Outage.Attempts < d.Outage.Calls {
		t.Errorf("outage: got %d attempts for %d calls, want attempts >= calls", d.Outage.Attempts, d.Outage.Calls)
	}
}

func TestChaosDefaultScenarioSQLite(t *testing.T) {
	t.Parallel()
	code, out, errs := runChaosCLI(t, "--duration", "2s", "--seed", "3", "--json")
	if code != ExitOK {
		t.Fatalf("exit: got %d, want %d\nstdout: %s\nstderr: %s", code, ExitOK, out, errs)
	}
	d := decodeChaos(t, out)
	checkDoc(t, d, "sqlite")
	if !d.OK || d.violations() != 0 {
		t.Errorf("ok %t with invariants %v: want ok and every invariant 0", d.OK, d.Invariants)
	}
	injected := 0
	for k, v := range d.Faults {
		if k != "outage" {
			injected += v
		}
	}
	if injected == 0 {
		t.Errorf("faults: got %v, want random faults besides the outage", d.Faults)
	}
	if d.Naive != nil {
		t.Errorf("naive: got a naive run without --compare naive")
	}
	// Not a terminal: plain progress lines on stderr.
	if !strings.Contains(errs, "ops ") || strings.Contains(errs, "\x1b[") {
		t.Errorf("stderr: want plain progress lines without escapes, got %q", errs)
	}
}

// TestChaosCompareNaive shows the damage blind replay does on the same
// seeded workload: the naive run violates at least one invariant, ours none,
// and the plot is written as a valid PNG. The faults are the two that
// separate the stores (a COMMIT whose reply is lost, a connection lost
// inside a transaction), at a rate that leaves no doubt in two seconds
// even under the race detector.
func TestChaosCompareNaive(t *testing.T) {
	t.Parallel()
	plotFile := filepath.Join(t.TempDir(), "chaos.png")
	code, out, errs := runChaosCLI(t, "--duration", "2s", "--seed", "7",
		"--faults", "commit_applied_reply_lost,after_exec", "--fault-rate", "0.3", "--base-delay", "5ms", "--max-delay", "20ms", "--no-budget", "--compare", "naive", "--plot", plotFile, "--json")
	if code != ExitOK {
		t.Fatalf("exit: got %d, want %d (ours held)\nstdout: %s\nstderr: %s", code, ExitOK, out, errs)
	}
	d := decodeChaos(t, out)
	checkDoc(t, d, "sqlite")
	if !d.OK || d.violations() != 0 {
		t.Errorf("ours: ok %t with invariants %v, want every invariant 0", d.OK, d.Invariants)
	}
	if d.Naive == nil {
		t.Fatalf("naive: missing from the --compare naive document")
	}
	checkDoc(t, d.Naive, "sqlite")
	if d.Naive.Mode != "naive" {
		t.Errorf("naive.mode: got %q, want naive", d.Naive.Mode)
	}
	if d.Naive.violations() == 0 || d.Naive.OK {
		t.Errorf("naive: got invariants %v (ok %t), want at least one violated: blind replay did no damage", d.Naive.Invariants, d.Naive.OK)
	}
	t.Logf("ours %v; naive %v", d.Invariants, d.Naive.Invariants)
	// ended_early and double_counted are live (the series have a MaxRuns):
	// ours must hold them; TestNaiveSeriesDamage in package chaos shows
	// blind replay breaking them on a single worker.
	if got := d.Invariants["ended_early"] + d.Invariants["double_counted"]; got != 0 {
		t.Errorf("ours: got ended_early %d and double_counted %d, want 0", d.Invariants["ended_early"], d.Invariants["double_counted"])
	}
	t.Logf("series completed: ours %d, naive %d", d.SeriesCompleted, d.Naive.SeriesCompleted)
	f, err := os.Open(plotFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("--plot %s is not a PNG: %v", plotFile, err)
	}
	if b := img.Bounds(); b.Dx() < 100 || b.Dy() < 100 {
		t.Errorf("plot: got %dx%d pixels, want at least 100x100", b.Dx(), b.Dy())
	}
}

// TestChaosNaiveExitsOne: a run whose invariants fail exits 1.
func TestChaosNaiveExitsOne(t *testing.T) {
	t.Parallel()
	plotFile := filepath.Join(t.TempDir(), "naive.svg")
	code, out, errs := runChaosCLI(t, "--naive", "--duration", "2s", "--seed", "7", "--outage", "none",
		"--faults", "commit_applied_reply_lost", "--fault-rate", "0.3", "--base-delay", "5ms", "--max-delay", "20ms", "--plot", plotFile)
	if code != ExitFailed {
		t.Fatalf("exit: got %d, want %d\nstdout: %s\nstderr: %s", code, ExitFailed, out, errs)
	}
	if !strings.Contains(out, "VIOLATED (naive)") {
		t.Errorf("report: want the violation named, got\n%s", out)
	}
	b, err := os.ReadFile(plotFile)
	if err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(bytes.NewReader(b))
	root := ""
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("--plot %s is not well-formed XML: %v", plotFile, err)
		}
		if se, ok := tok.(xml.StartElement); ok && root == "" {
			root = se.Name.Local
		}
	}
	if root != "svg" {
		t.Errorf("plot: root element %q, want svg", root)
	}
}

func TestChaosBadInput(t *testing.T) {
	const secret = "s3cr3t-pw"
	cases := []struct {
		name string
		args []string
		want string // in the one-line error
	}{
		{"engine", []string{"--engine", "oracle"}, "--engine"},
		{"outage syntax", []string{"--outage", "3s"}, "DURATION@OFFSET"},
		{"outage past the end", []string{"--duration", "2s", "--outage", "3s@1s"}, "--outage"},
		{"duration", []string{"--duration", "-1s"}, "--duration"},
		{"duration overflows", []string{"--duration", "2000000h"}, "--duration"},
		{"fault rate", []string{"--fault-rate", "2"}, "--fault-rate"},
		{"workers", []string{"--workers", "0"}, "--workers"},
		{"compare", []string{"--compare", "ef"}, "--compare"},
		{"plot format", []string{"--plot", "x.gif"}, "--plot"},
		{"plot directory missing", []string{"--duration", "1s", "--plot", filepath.Join(os.TempDir(), "sqlretry-no-such-dir", "x.png")}, "--plot"},
		{"rules", []string{"--rules", "1205:x"}, "--rules"},
		{"fault kind", []string{"--faults", "before_send,meteor"}, "--faults"},
		{"unknown flag", []string{"--colour"}, "colour"},
		{"positional", []string{"now"}, "now"},
		{"postgres needs a dsn", []string{"--engine", "postgres"}, "--dsn"},
		{"unreachable postgres", []string{"--dsn", "postgres://app:" + secret + "@127.0.0.1:1/db?sslmode=disable&connect_timeout=2"}, "--dsn"},
		{"malformed mysql", []string{"--engine", "mysql", "--dsn", "app:" + secret + "@tcp(127.0.0.1:1/db"}, "--dsn"},
		{"unreachable mysql", []string{"--dsn", "app:" + secret + "@tcp(127.0.0.1:1)/db?timeout=2s"}, "--dsn"},
		{"password in a bad flag", []string{"--dsn", "postgres://app:" + secret + "@x/db", "--duration", "x" + secret}, "duration"},
		{"spaced password, unparsable dsn", []string{"--dsn", "host=127.0.0.1 port=bad password = " + secret}, "--dsn"},
		{"quoted password, unparsable dsn", []string{"--dsn", "host=127.0.0.1 port=bad password='a " + secret + "' user=app"}, "--dsn"},
		{"quoted password, unreachable", []string{"--dsn", "host=127.0.0.1 port=1 password='a " + secret + "' connect_timeout=2 sslmode=disable"}, "--dsn"},
		{"escaped password in a URL", []string{"--dsn", "postgres://app:a%20" + secret + "%40@127.0.0.1:1/db?sslmode=disable&connect_timeout=2"}, "--dsn"},
		{"spaced password in a bad flag", []string{"--dsn", "host=x password = " + secret, "--workers", "x" + secret}, "workers"},
		{"scenario", []string{"--scenario", "meteor"}, "--scenario"},
		{"hot rows in the tasks scenario", []string{"--hot-rows", "4"}, "--hot-rows"},
		{"one hot row", []string{"--scenario", "contention", "--hot-rows", "1"}, "--hot-rows"},
		{"zero hot rows", []string{"--scenario", "contention", "--hot-rows", "0"}, "--hot-rows"},
		{"contention with an outage", []string{"--scenario", "contention", "--outage", "1s@1s"}, "--outage"},
		{"contention with --compare", []string{"--scenario", "Contention", "--compare", "naive"}, "--compare"},
		{"contention with --naive", []string{"--scenario", "contention", "--naive"}, "--naive"},
		{"contention with a fault not on COMMIT", []string{"--scenario", "contention", "--faults", "hang"}, "--faults"},
		{"contention needs a dsn for postgres", []string{"--scenario", "contention", "--engine", "postgres"}, "--dsn"},
		{"mysql engine, postgres dsn", []string{"--engine", "mysql", "--dsn", "postgres://app:" + secret + "@127.0.0.1:5432/test"}, "the DSN looks like PostgreSQL's (a postgres:// URL) and --engine says mysql"},
		{"postgres engine, mysql dsn", []string{"--engine", "postgres", "--dsn", "app:" + secret + "@tcp(127.0.0.1:3306)/test"}, "looks like MySQL/MariaDB's"},
		{"sqlserver dsn", []string{"--dsn", "sqlserver://sa:" + secret + "@127.0.0.1"}, "--engine"},
		{"mysql engine, sqlite file", []string{"--engine", "mysql", "--dsn", "/tmp/chaos.db"}, "looks like SQLite's (a file path)"},
		{"verifier", []string{"--verifier", "psychic"}, "--verifier"},
		{"xact verifier on sqlite", []string{"--verifier", "xact"}, "--verifier"},
		{"contention, unreachable postgres", []string{"--scenario", "contention", "--dsn", "postgres://app:" + secret + "@127.0.0.1:1/db?sslmode=disable&connect_timeout=2"}, "--dsn"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, out, errs := runChaosCLI(t, c.args...)
			if code != ExitBadInput {
				t.Fatalf("exit: got %d, want %d\nstdout: %s\nstderr: %s", code, ExitBadInput, out, errs)
			}
			if !strings.HasPrefix(errs, "error: ") || strings.Count(errs, "\n") != 1 {
				t.Errorf("stderr: got %q, want one line starting with \"error: \"", errs)
			}
			if !strings.Contains(errs, c.want) {
				t.Errorf("stderr: got %q, want it to name %q", errs, c.want)
			}
			if strings.Contains(errs+out, secret) {
				t.Errorf("the DSN's password appears in the output: %q", errs+out)
			}
		})
	}
}

// TestChaosServers runs the command against the local PostgreSQL and
// MariaDB, with wire faults through the proxy.
func TestChaosServers(t *testing.T) {
	cases := []struct {
		engine string
		dsn    func(testing.TB) string
	}{
		{"postgres", dbtest.PostgresDSN},
		{"mysql", dbtest.MySQLDSN},
	}
	for _, c := range cases {
		t.Run(c.engine, func(t *testing.T) {
			t.Parallel()
			dsn := c.dsn(t)
			code, out, errs := runChaosCLI(t, "--dsn", dsn, "--duration", "2s", "--seed", "5", "--json")
			if code != ExitOK {
				t.Fatalf("exit: got %d, want %d\nstdout: %s\nstderr: %s", code, ExitOK, out, errs)
			}
			d := decodeChaos(t, out)
			checkDoc(t, d, c.engine)
			if !d.OK || d.violations() != 0 {
				t.Errorf("ok %t with invariants %v: want every invariant 0", d.OK, d.Invariants)
			}
			if d.Wire == nil || d.Wire.Connections == 0 {
				t.Errorf("wire: got %+v, want connections through the proxy", d.Wire)
			}
		})
	}
}

// TestChaosPlotWriteFailsAfterRun: a plot that cannot be written once the
// run is over (here a file on a full device) still leaves the report on
// stdout and the invariants' exit code, with the plot's error on stderr.
func TestChaosPlotWriteFailsAfterRun(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full on this system")
	}
	plotFile := filepath.Join(t.TempDir(), "full.png")
	if err := os.Symlink("/dev/full", plotFile); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runChaosCLI(t, "--duration", "1s", "--seed", "3", "--outage", "none", "--plot", plotFile, "--json")
	if code != ExitOK {
		t.Fatalf("exit: got %d, want %d (the invariants held)\nstdout: %s\nstderr: %s", code, ExitOK, out, errs)
	}
	d := decodeChaos(t, out)
	if !d.OK || d.Operations == 0 {
		t.Errorf("report: got ok %t with %d operations, want the run's report", d.OK, d.Operations)
	}
	if !strings.Contains(errs, "error: chaos: --plot "+plotFile) {
		t.Errorf("stderr: got %q, want the plot's error", errs)
	}
}

// contentionDoc is the part of the contention scenario's --json document
// the tests read.
type contentionDoc struct {
	Scenario string   `json:"scenario"`
	Engine   string   `json:"engine"`
	Settings []string `json:"settings"`
	Modes    []struct {
		Mode                     string           `json:"mode"`
		Calls                    int64            `json:"calls"`
		Succeeded                int64            `json:"succeeded"`
		SuccessRate              float64          `json:"success_rate"`
		Failed                   map[string]int64 `json:"failed"`
		AttemptsPerCall          float64          `json:"attempts_per_call"`
		BudgetRefusals           int64            `json:"budget_refusals"`
		ContentionBudgetRefusals int64            `json:"contention_budget_refusals"`
		Latency                  struct {
			P50MS float64 `json:"p50_ms"`
			P99MS float64 `json:"p99_ms"`
		} `json:"latency"`
		Invariants map[string]int64 `json:"invariants"`
	} `json:"modes"`
	Problems []string `json:"problems"`
	OK       bool     `json:"ok"`
}

// checkContention asserts what every contention document must hold: the
// three modes in order, each with calls, and sqlretry's checks passed.
func checkContention(t *testing.T, stdout, engine string) *contentionDoc {
	t.Helper()
	var d contentionDoc
	if err := json.Unmarshal([]byte(stdout), &d); err != nil {
		t.Fatalf("--json output is not one JSON document: %v\n%s", err, stdout)
	}
	if !strings.Contains(stdout, `"ok": true`) {
		t.Errorf(`--json output lacks the "ok": true CI greps for`)
	}
	if d.Scenario != "contention" || d.Engine != engine || !d.OK || len(d.Problems) != 0 {
		t.Errorf("got scenario %q, engine %q, ok %t, problems %q; want contention, %s, ok", d.Scenario, d.Engine, d.OK, d.Problems, engine)
	}
	modes := []string{"sqlretry", "old_defaults", "blind_loop"}
	if len(d.Modes) != len(modes) {
		t.Fatalf("modes: got %d, want %d", len(d.Modes), len(modes))
	}
	for i, m := range d.Modes {
		if m.Mode != modes[i] || m.Calls == 0 || m.AttemptsPerCall < 1 {
			t.Errorf("mode %d: got %s with %d calls, %.3f attempts per call; want %s with calls", i, m.Mode, m.Calls, m.AttemptsPerCall, modes[i])
		}
	}
	ours := d.Modes[0]
	for k, v := range ours.Invariants {
		if v != 0 {
			t.Errorf("sqlretry: invariant %s = %d, want 0", k, v)
		}
	}
	if ours.ContentionBudgetRefusals != 0 {
		t.Errorf("sqlretry: %d budget refusals of contention, want 0", ours.ContentionBudgetRefusals)
	}
	t.Logf("%s: %+v", engine, d.Modes)
	return &d
}

// TestChaosContentionSQLite runs the contention scenario for a second per
// policy on SQLite, with its plot.
func TestChaosContentionSQLite(t *testing.T) {
	t.Parallel()
	plotFile := filepath.Join(t.TempDir(), "contention.png")
	code, out, errs := runChaosCLI(t, "--scenario", "contention", "--duration", "1s", "--workers", "6", "--seed", "2", "--plot", plotFile, "--json")
	if code != ExitOK {
		t.Fatalf("exit: got %d, want %d\nstdout: %s\nstderr: %s", code, ExitOK, out, errs)
	}
	d := checkContention(t, out, "sqlite")
	if len(d.Settings) != 1 || !strings.Contains(d.Settings[0], "busy_timeout 500ms") {
		t.Errorf("settings: got %q, want the busy timeout (half the 1 s command timeout)", d.Settings)
	}
	for _, mode := range []string{"sqlretry", "old_defaults", "blind_loop"} {
		if !strings.Contains(errs, "contention: "+mode+"\n") {
			t.Errorf("stderr: want a progress header for %s, got %q", mode, errs)
		}
	}
	f, err := os.Open(plotFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := png.Decode(f); err != nil {
		t.Fatalf("--plot %s is not a PNG: %v", plotFile, err)
	}
}

// TestChaosInterruptedBeforeStart: a run whose context ends before its
// workload starts says so and exits 130, in text and in JSON, in both
// scenarios.
func TestChaosInterruptedBeforeStart(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--scenario", "contention"}, "INTERRUPTED before any policy ran"},
		{nil, "INTERRUPTED before the workload started"},
	} {
		for _, asJSON := range []bool{false, true} {
			var out, errb bytes.Buffer
			args := append([]string{"chaos", "--duration", "1s"}, c.args...)
			if asJSON {
				args = append(args, "--json")
			}
			code := Main(ctx, args, &out, &errb)
			if code != ExitInterrupted {
				t.Fatalf("%q: exit: got %d, want %d\nstdout: %s\nstderr: %s", args, code, ExitInterrupted, out.String(), errb.String())
			}
			switch {
			case asJSON:
				var d struct{ Interrupted, OK bool }
				if err := json.Unmarshal(out.Bytes(), &d); err != nil || !d.Interrupted || d.OK {
					t.Errorf("%q: got %s (%v), want one document, interrupted and not ok", args, out.String(), err)
				}
			case !strings.Contains(out.String(), c.want) || strings.Contains(out.String(), "success rate"):
				t.Errorf("%q: want %q and no empty table, got\n%s", args, c.want, out.String())
			}
		}
	}
}

// TestChaosContentionServers runs the contention scenario for a second per
// policy against the local PostgreSQL and MariaDB.
func TestChaosContentionServers(t *testing.T) {
	cases := []struct {
		engine  string
		dsn     func(testing.TB) string
		setting string
	}{
		{"postgres", dbtest.PostgresDSN, "deadlock_timeout"},
		{"mysql", dbtest.MySQLDSN, ""},
	}
	for _, c := range cases {
		t.Run(c.engine, func(t *testing.T) {
			t.Parallel()
			code, out, errs := runChaosCLI(t, "--scenario", "contention", "--dsn", c.dsn(t), "--duration", "1s", "--seed", "4", "--json")
			if code != ExitOK {
				t.Fatalf("exit: got %d, want %d\nstdout: %s\nstderr: %s", code, ExitOK, out, errs)
			}
			d := checkContention(t, out, c.engine)
			if c.setting != "" && (len(d.Settings) != 1 || !strings.Contains(d.Settings[0], c.setting)) {
				t.Errorf("settings: got %q, want %s", d.Settings, c.setting)
			}
		})
	}
}

// recordWriter keeps each Write it is given apart.
type recordWriter struct{ writes []string }

func (r *recordWriter) Write(p []byte) (int, error) {
	r.writes = append(r.writes, string(p))
	return len(p), nil
}

// TestRedactWriterPassesFramesAtOnce: a progress frame (a carriage return,
// the frame, no line end) reaches the terminal in the Write that carries
// it, not when the next frame arrives (issue 18, finding 1: every frame
// was wiped the moment it showed).
func TestRedactWriterPassesFramesAtOnce(t *testing.T) {
	rec := &recordWriter{}
	w := &redactWriter{w: rec, red: chaos.NewRedactor("postgres://app:hunter2@db/x")}
	for i, frame := range []string{"\r[>   ]   0% ops 1\x1b[K", "\r[=>  ]  25% ops 9\x1b[K"} {
		if _, err := w.Write([]byte(frame)); err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(rec.writes, ""); !strings.HasSuffix(got, frame) {
			t.Errorf("after frame %d: the terminal got %q, want it to end with the frame %q", i, got, frame)
		}
	}
}

// TestRedactWriterSplitSecret: a password split across writes, at every
// byte, never reaches the terminal, and the text around it arrives whole.
func TestRedactWriterSplitSecret(t *testing.T) {
	const secret = "hunter2"
	text := "\rdial app:" + secret + "@db failed; again " + secret + "\n"
	for cut := 0; cut <= len(text); cut++ {
		var out bytes.Buffer
		w := &redactWriter{w: &out, red: chaos.NewRedactor("postgres://app:" + secret + "@db/x")}
		_, _ = w.Write([]byte(text[:cut]))
		_, _ = w.Write([]byte(text[cut:]))
		w.Flush()
		want := strings.ReplaceAll(text, secret, "xxxxx")
		if out.String() != want {
			t.Errorf("cut at %d: got %q, want %q", cut, out.String(), want)
		}
	}
	// Byte by byte, the secret is never written, even in part at the end.
	var out bytes.Buffer
	w := &redactWriter{w: &out, red: chaos.NewRedactor("postgres://app:" + secret + "@db/x")}
	for i := range len(text) {
		_, _ = w.Write([]byte{text[i]})
		if strings.Contains(out.String(), "hunter") {
			t.Fatalf("after byte %d the terminal holds %q: part of the password", i, out.String())
		}
	}
}

// screen is what a terminal shows of a byte stream: lines, a carriage
// return back to the line's start, "erase to the end of the line"
// (ESC [ K); other escape sequences are dropped.
type screen struct {
	lines []string
	col   int
}

func (s *screen) write(b []byte) {
	if len(s.lines) == 0 {
		s.lines = []string{""}
	}
	for i := 0; i < len(b); i++ {
		cur := &s.lines[len(s.lines)-1]
		switch c := b[i]; {
		case c == '\r':
			s.col = 0
		case c == '\n':
			s.lines, s.col = append(s.lines, ""), 0
		case c == 0x1b && i+1 < len(b) && b[i+1] == '[':
			j := i + 2
			for j < len(b) && (b[j] < 0x40 || b[j] > 0x7e) {
				j++
			}
			if j < len(b) && b[j] == 'K' {
				*cur = (*cur)[:min(s.col, len(*cur))]
			}
			i = j
		default:
			line := []byte(*cur)
			for len(line) < s.col {
				line = append(line, ' ')
			}
			if s.col < len(line) {
				line[s.col] = c
			} else {
				line = append(line, c)
			}
			*cur, s.col = string(line), s.col+1
		}
	}
}

// current is the line the cursor is on.
func (s *screen) current() string {
	if len(s.lines) == 0 {
		return ""
	}
	return s.lines[len(s.lines)-1]
}

// TestChaosProgressOnATerminal runs the command with its standard error on
// a pseudo-terminal, as a person sees it: the progress line shows frames
// while the run goes on (the run is interrupted once two different frames
// have been seen on the screen; it would otherwise last 20 s), and
// after the interrupt the last frame stays where the run was, not at 100 %,
// and the terminal shows nothing stray.
func TestChaosProgressOnATerminal(t *testing.T) {
	t.Parallel()
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Skipf("no pseudo-terminal here: %v", err)
	}
	defer ptmx.Close()
	defer tty.Close()
	if err := pty.Setsize(ptmx, &pty.Winsize{Rows: 50, Cols: 160}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	scr := &screen{}
	seen := map[string]bool{}
	read := make(chan struct{})
	go func() {
		defer close(read)
		buf := make([]byte, 4096)
		for {
			n, err := ptmx.Read(buf)
			scr.write(buf[:n])
			if line := scr.current(); strings.Contains(line, "ops ") && strings.Contains(line, "budget") {
				seen[line] = true
				if len(seen) >= 2 {
					cancel() // two frames showed during the run: Ctrl-C
				}
			}
			if err != nil {
				return
			}
		}
	}()
	var out bytes.Buffer
	code := Main(ctx, []string{"chaos", "--duration", "20s", "--outage", "none", "--seed", "3"}, &out, tty)
	_ = tty.Close()
	<-read
	if len(seen) < 2 {
		t.Fatalf("the terminal showed %d progress frames during the run, want at least 2; screen:\n%s", len(seen), strings.Join(scr.lines, "\n"))
	}
	if code != ExitInterrupted {
		t.Errorf("exit: got %d, want %d (interrupted)\nstdout: %s", code, ExitInterrupted, out.String())
	}
	var last string
	for _, l := range scr.lines {
		if strings.Contains(l, "ops ") {
			last = l
		}
	}
	if strings.Contains(last, "100%") || !strings.Contains(last, "/20s") || !strings.HasPrefix(last, "[") {
		t.Errorf("last frame on the screen: got %q, want the bar where the run stopped, short of 100%%", last)
	}
	if rest := strings.TrimSpace(scr.current()); rest != "" {
		t.Errorf("after the run the terminal's line holds %q, want nothing stray", rest)
	}
	if !strings.Contains(out.String(), "INTERRUPTED after ") {
		t.Errorf("report: want the interruption named, got\n%s", out.String())
	}
}

// cancelOnWrite calls cancel on the first write that contains marker: a
// Ctrl-C injected once the run shows progress.
type cancelOnWrite struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	marker string
	cancel context.CancelFunc
}

func (w *cancelOnWrite) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.marker) {
		w.cancel()
	}
	return len(p), nil
}

// TestChaosInterrupted interrupts each scenario once it shows progress (its
// planned length is ten minutes): the command exits 130, the JSON says
// interrupted, not ok, with the time actually run, and lists no outage
// that did not start; the text names the interruption.
func TestChaosInterrupted(t *testing.T) {
	cases := []struct {
		name string
		args []string
	}{
		{"tasks", nil},
		{"contention", []string{"--scenario", "contention"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			for _, format := range []string{"json", "text"} {
				ctx, cancel := context.WithCancel(context.Background())
				errw := &cancelOnWrite{marker: "ops ", cancel: cancel}
				var out bytes.Buffer
				args := append([]string{"chaos", "--duration", "10m", "--seed", "2"}, c.args...)
				if format == "json" {
					args = append(args, "--json")
				}
				code := Main(ctx, args, &out, errw)
				cancel()
				if code != ExitInterrupted {
					t.Fatalf("%s: exit: got %d, want %d\nstdout: %s\nstderr: %s", format, code, ExitInterrupted, out.String(), errw.buf.String())
				}
				if format == "text" {
					if !strings.Contains(out.String(), "INTERRUPTED") || strings.Contains(out.String(), "\nOK: ") {
						t.Errorf("text: want the interruption named and no OK, got\n%s", out.String())
					}
					continue
				}
				checkInterruptedJSON(t, out.Bytes())
			}
		})
	}
}

// checkInterruptedJSON asserts an interrupted run's document.
func checkInterruptedJSON(t *testing.T, doc []byte) {
	t.Helper()
	var d struct {
		Interrupted bool  `json:"interrupted"`
		OK          bool  `json:"ok"`
		DurationMS  int64 `json:"duration_ms"`
		PlannedMS   int64 `json:"planned_duration_ms"`
		Outage      struct {
			Windows []struct {
				OffsetMS int64 `json:"offset_ms"`
			} `json:"windows"`
		} `json:"outage"`
		Modes []struct {
			DurationMS int64 `json:"duration_ms"`
		} `json:"modes"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, doc)
	}
	if !d.Interrupted || d.OK {
		t.Errorf("got interrupted %t, ok %t; want interrupted, not ok", d.Interrupted, d.OK)
	}
	ran := d.DurationMS
	for _, m := range d.Modes {
		ran = m.DurationMS // contention: the mode that was interrupted
	}
	if ran >= (10 * time.Minute).Milliseconds() {
		t.Errorf("duration: got %d ms, want the time actually run, less than the 10 min planned", ran)
	}
	for _, w := range d.Outage.Windows {
		if w.OffsetMS > ran {
			t.Errorf("outage at %d ms reported as happened, in a run that stopped at %d ms", w.OffsetMS, ran)
		}
	}
}

// settlementDoc is a mode's commit_settlement in the --json document.
type settlementDoc struct {
	Verifier       string `json:"verifier"`
	Ambiguous      int64  `json:"ambiguous_commits"`
	Applied        int64  `json:"settled_applied"`
	NotApplied     int64  `json:"settled_not_applied"`
	StillAmbiguous int64  `json:"still_ambiguous"`
	Wrong          int64  `json:"wrong"`
	Checked        int64  `json:"checked"`
}

// TestChaosContentionSettlesCommits runs the contention scenario on each
// engine with many ambiguous COMMITs (four in ten fail with the connection
// reset, half of those after committing): with the default verifier,
// sqlretry and the old defaults settle every one, both ways, and the
// database bears out every verdict; with --verifier none they are left
// ambiguous, and nothing is settled.
func TestChaosContentionSettlesCommits(t *testing.T) {
	cases := []struct {
		engine string
		dsn    func(testing.TB) string
	}{
		{"sqlite", func(testing.TB) string { return "" }},
		{"postgres", dbtest.PostgresDSN},
		{"mysql", dbtest.MySQLDSN},
	}
	for _, c := range cases {
		t.Run(c.engine, func(t *testing.T) {
			t.Parallel()
			for _, verifier := range []string{"auto", "none"} {
				args := []string{"--scenario", "contention", "--engine", c.engine, "--duration", "1s", "--workers", "4", "--seed", "6", "--fault-rate", "0.4", "--verifier", verifier, "--json"}
				if dsn := c.dsn(t); dsn != "" {
					args = append(args, "--dsn", dsn)
				}
				code, out, errs := runChaosCLI(t, args...)
				if code != ExitOK {
					t.Fatalf("--verifier %s: exit %d, want 0\nstdout: %s\nstderr: %s", verifier, code, out, errs)
				}
				var d struct {
					Modes []struct {
						Mode       string        `json:"mode"`
						Settlement settlementDoc `json:"commit_settlement"`
					} `json:"modes"`
				}
				if err := json.Unmarshal([]byte(out), &d); err != nil || len(d.Modes) != 3 {
					t.Fatalf("--json: %v, %d modes\n%s", err, len(d.Modes), out)
				}
				var both settlementDoc
				for _, m := range d.Modes[:2] { // sqlretry, old defaults
					checkSettlement(t, c.engine+" "+m.Mode+" --verifier "+verifier, m.Settlement, verifier == "none")
					both.Ambiguous += m.Settlement.Ambiguous
					both.Applied += m.Settlement.Applied
					both.NotApplied += m.Settlement.NotApplied
				}
				// Each ambiguous COMMIT had committed or not, at even odds: with
				// ten or more, both verdicts must have come up (a machine too
				// loaded to make ten leaves this to the counts above).
				if verifier == "auto" && both.Ambiguous >= 10 && (both.Applied == 0 || both.NotApplied == 0) {
					t.Errorf("%s: %d ambiguous COMMITs settled %d applied, %d not applied; want both verdicts", c.engine, both.Ambiguous, both.Applied, both.NotApplied)
				}
				if s := d.Modes[2].Settlement; s.Applied+s.NotApplied+s.StillAmbiguous != 0 || s.Ambiguous == 0 {
					t.Errorf("blind loop: got %+v, want ambiguous COMMITs replayed, none settled", s)
				}
			}
		})
	}
}

// checkSettlement asserts one mode's settlement: every ambiguous COMMIT
// accounted for, each verdict checked and none wrong; settled both ways
// with a verifier, left ambiguous without one.
func checkSettlement(t *testing.T, name string, s settlementDoc, none bool) {
	t.Helper()
	t.Logf("%s: %+v", name, s)
	if s.Ambiguous == 0 || s.Applied+s.NotApplied+s.StillAmbiguous != s.Ambiguous {
		t.Errorf("%s: got %+v, want ambiguous COMMITs, each settled or left ambiguous", name, s)
	}
	if s.Wrong != 0 || s.Checked != s.Applied+s.NotApplied {
		t.Errorf("%s: %d of %d verdicts wrong (%d given); want every verdict checked, none wrong", name, s.Wrong, s.Checked, s.Applied+s.NotApplied)
	}
	switch {
	case none && (s.Verifier != "none" || s.Applied+s.NotApplied != 0 || s.StillAmbiguous != s.Ambiguous):
		t.Errorf("%s: got %+v, want nothing settled and every ambiguous COMMIT told ErrAmbiguous", name, s)
	case !none && s.StillAmbiguous != 0:
		t.Errorf("%s: got %+v, want every ambiguous COMMIT settled", name, s)
	}
}

// TestChaosRefusesTLSThroughTheProxy: a run whose DSN asks for TLS, on a
// server that offers it, is refused as bad input before the workload
// starts: the proxy cannot see COMMITs inside TLS.
func TestChaosRefusesTLSThroughTheProxy(t *testing.T) {
	t.Parallel()
	dsn := dbtest.PostgresDSN(t)
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	var ssl string
	err = db.QueryRowContext(context.Background(), "SHOW ssl").Scan(&ssl)
	db.Close()
	if err != nil || ssl != "on" {
		t.Skipf("the local PostgreSQL offers no TLS (SHOW ssl: %q, %v)", ssl, err)
	}
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("sslmode", "require")
	u.RawQuery = q.Encode()
	code, out, errs := runChaosCLI(t, "--dsn", u.String(), "--duration", "1s")
	if code != ExitBadInput {
		t.Fatalf("exit: got %d, want %d\nstdout: %s\nstderr: %s", code, ExitBadInput, out, errs)
	}
	for _, want := range []string{"--dsn", "TLS", "cannot see COMMITs", "sslmode=disable", "--no-proxy"} {
		if !strings.Contains(errs, want) {
			t.Errorf("stderr: got %q, want it to say %q", errs, want)
		}
	}
	// With --no-proxy there is no proxy to blind: the run goes ahead.
	if code, out, errs := runChaosCLI(t, "--dsn", u.String(), "--duration", "1s", "--no-proxy", "--outage", "none", "--json"); code != ExitOK {
		t.Errorf("--no-proxy: exit %d, want 0\nstdout: %s\nstderr: %s", code, out, errs)
	}
}
