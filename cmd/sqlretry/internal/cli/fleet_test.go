package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"

	"github.com/sqlretry/sqlretry/cmd/sqlretry/internal/chaos"
)

// TestMain serves a chaos fleet's worker processes: `chaos --processes N`
// starts this test binary again with chaos.WorkerEnv set, as the command
// starts itself. With runAsCommand set, the binary is the command: it runs
// its arguments as main.go does (see runCommandIn).
func TestMain(m *testing.M) {
	if os.Getenv(runAsCommand) != "" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	if os.Getenv(chaos.WorkerEnv) != "" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := Main(ctx, []string{"chaos"}, os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// TestChaosFleet runs `chaos --processes 2 --json` on SQLite: the document
// holds the fleet's processes beside its totals, and every check held.
func TestChaosFleet(t *testing.T) {
	code, out, errs := runChaosCLI(t, "--processes", "2", "--duration", "2s", "--outage", "600ms@700ms",
		"--base-delay", "5ms", "--max-delay", "50ms", "--seed", "3", "--json")
	if code != ExitOK {
		t.Fatalf("exit: got %d, want %d\nstdout: %s\nstderr: %s", code, ExitOK, out, errs)
	}
	d := decodeChaos(t, out)
	checkDoc(t, d, "sqlite")
	var doc struct {
		Fleet *struct {
			Processes       int     `json:"processes"`
			Calls           int64   `json:"calls"`
			Attempts        int64   `json:"attempts"`
			AttemptsPerCall float64 `json:"attempts_per_call"`
			PerProcess      []struct {
				Operations int `json:"operations"`
			} `json:"per_process"`
		} `json:"fleet"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	if f := doc.Fleet; f == nil || f.Processes != 2 || len(f.PerProcess) != 2 || f.Attempts < f.Calls || f.Calls == 0 {
		t.Errorf("fleet: got %+v, want 2 processes with attempts >= calls > 0", f)
	}
	if !d.OK || d.violations() != 0 {
		t.Errorf("ok %t with invariants %v: want every invariant 0", d.OK, d.Invariants)
	}
}

// TestChaosFleetBadInput: the settings a fleet cannot run exit 2, naming
// the flag.
func TestChaosFleetBadInput(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--processes", "0"}, "--processes 0: must be positive"},
		{[]string{"--processes", "65"}, "--processes: 65 is outside 1..64"},
		{[]string{"--processes", "2", "--scenario", "contention"}, "--processes: the contention scenario"},
		{[]string{"--processes", "2", "--compare", "naive"}, "--compare naive runs in one process"},
		{[]string{"--processes", "2", "--naive"}, "--processes: a fleet runs sqlretry's task store"},
	} {
		code, _, errs := runChaosCLI(t, c.args...)
		if code != ExitBadInput || !strings.Contains(errs, c.want) {
			t.Errorf("%v: got exit %d, stderr %q; want %d and %q", c.args, code, errs, ExitBadInput, c.want)
		}
	}
}

// TestChaosFleetInterrupted: Ctrl-C once a fleet's run shows progress (its
// planned length is ten minutes) stops every worker process, each of which
// reports what it ran; the command exits 130 with the JSON interrupted,
// not ok, the time actually run, and both processes' lines.
func TestChaosFleetInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errw := &cancelOnWrite{marker: "ops ", cancel: cancel}
	var out bytes.Buffer
	code := Main(ctx, []string{"chaos", "--processes", "2", "--workers", "2", "--duration", "10m", "--seed", "2", "--json"}, &out, errw)
	if code != ExitInterrupted {
		t.Fatalf("exit: got %d, want %d\nstdout: %s\nstderr: %s", code, ExitInterrupted, out.String(), errw.buf.String())
	}
	checkInterruptedJSON(t, out.Bytes())
	var doc struct {
		Fleet *struct {
			PerProcess []struct {
				Interrupted bool `json:"interrupted"`
			} `json:"per_process"`
		} `json:"fleet"`
	}
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil || doc.Fleet == nil || len(doc.Fleet.PerProcess) != 2 ||
		!doc.Fleet.PerProcess[0].Interrupted || !doc.Fleet.PerProcess[1].Interrupted {
		t.Errorf("fleet: got %+v (%v), want both processes' reports, interrupted", doc.Fleet, err)
	}
}
