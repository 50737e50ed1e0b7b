package crl

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sqlretry/sqlretry"
)

// clock is an injected clock for File.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

var base = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func writeRules(t *testing.T, path, text string, mod time.Time) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, mod, mod); err != nil {
		t.Fatal(err)
	}
}

func decide(s sqlretry.Schedule, code string) sqlretry.Decision {
	d, _ := s.Decide(sqlretry.Failure{Class: sqlretry.Class{Code: code}, Statement: "select 1", Retry: 1})
	return d
}

func TestFileReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mssql-jdbc.properties")
	writeRules(t, path, "retryExec=1205:1\nretryConn=+50000\n", base)
	clk := &clock{t: base}
	f, err := NewFile(path, Config{}, clk.now)
	if err != nil {
		t.Fatal(err)
	}
	conn := f.ConnectSchedule()
	step := func(name string, want map[string]sqlretry.Decision) {
		t.Helper()
		for code, d := range want {
			s := sqlretry.Schedule(f)
			if strings.HasPrefix(code, "conn:") {
				s, code = conn, strings.TrimPrefix(code, "conn:")
			}
			if got := decide(s, code); got != d {
				t.Errorf("%s: Decide(%s) = %v, want %v", name, code, got, d)
			}
		}
	}
	step("initial", map[string]sqlretry.Decision{"1205": sqlretry.Retry, "1222": sqlretry.Defer, "conn:50000": sqlretry.Retry})

	writeRules(t, path, "retryExec=1222:1\n", base.Add(time.Minute))
	clk.advance(29 * time.Second)
	step("changed, before the interval", map[string]sqlretry.Decision{"1205": sqlretry.Retry, "1222": sqlretry.Defer})

	clk.advance(time.Second)
	step("changed, interval passed", map[string]sqlretry.Decision{"1205": sqlretry.Defer, "1222": sqlretry.Retry, "conn:50000": sqlretry.Stop})

	// New content under the same modification time is not read.
	writeRules(t, path, "retryExec=2714:1\n", base.Add(time.Minute))
	clk.advance(31 * time.Second)
	step("same mtime", map[string]sqlretry.Decision{"1222": sqlretry.Retry, "2714": sqlretry.Defer})

	// A broken file keeps the last good rules and says why.
	writeRules(t, path, "# comment\nretryExec=1205:x\n", base.Add(2*time.Minute))
	clk.advance(31 * time.Second)
	step("broken", map[string]sqlretry.Decision{"1222": sqlretry.Retry, "1205": sqlretry.Defer})
	st := f.Status()
	if st.Err == nil || !strings.Contains(st.Err.Error(), ":2: retryExec: R_invalidParameterNumber") || st.Exec != "1222:1" {
		t.Errorf("broken: Status() = %+v, want the last good rules 1222:1 and an error naming line 2 and R_invalidParameterNumber", st)
	}

	writeRules(t, path, "retryExec=1205:2\n", base.Add(3*time.Minute))
	clk.advance(31 * time.Second)
	step("fixed", map[string]sqlretry.Decision{"1205": sqlretry.Retry, "1222": sqlretry.Defer})
	if st := f.Status(); st.Err != nil || !st.ModTime.Equal(base.Add(3*time.Minute)) || !st.Exists {
		t.Errorf("fixed: Status() = %+v, want no error and the new mtime", st)
	}

	// A removed file means no file rules, as in the driver.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	clk.advance(31 * time.Second)
	step("removed", map[string]sqlretry.Decision{"1205": sqlretry.Defer, "conn:40613": sqlretry.Retry})
	if st := f.Status(); st.Exists || st.Err != nil {
		t.Errorf("removed: Status() = %+v, want Exists false, no error", st)
	}
}

func TestFileCodeValuesWin(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mssql-jdbc.properties")
	writeRules(t, path, "retryExec=1205:1\nretryConn=4060\n", base)
	f, err := NewFile(path, Config{Exec: "3960:1"}, func() time.Time { return base })
	if err != nil {
		t.Fatal(err)
	}
	if d := decide(f, "3960"); d != sqlretry.Retry {
		t.Errorf("code rule 3960: %v, want retry", d)
	}
	if d := decide(f, "1205"); d != sqlretry.Defer {
		t.Errorf("file rule 1205 with code retryExec set: %v, want defer", d)
	}
	// retryConn was not set in code: the file's replace rule applies.
	if d := decide(f.ConnectSchedule(), "40613"); d != sqlretry.Stop {
		t.Errorf("file retryConn=4060, 40613: %v, want stop", d)
	}
	if d := decide(f.ConnectSchedule(), "4060"); d != sqlretry.Retry {
		t.Errorf("file retryConn=4060, 4060: %v, want retry", d)
	}
}

func TestNewFileErrors(t *testing.T) {
	dir := t.TempDir()
	f, err := NewFile(filepath.Join(dir, "missing.properties"), Config{}, nil)
	if err != nil {
		t.Fatalf("missing file: %v, want no error", err)
	}
	if st := f.Status(); st.Exists || st.Exec != "" {
		t.Errorf("missing file: Status() = %+v", st)
	}
	broken := filepath.Join(dir, "broken.properties")
	writeRules(t, broken, "retryConn=+4060:3\n", base)
	if _, err := NewFile(broken, Config{}, nil); err == nil || !strings.Contains(err.Error(), "R_InvalidRuleFormat") {
		t.Errorf("broken file at start: %v, want R_InvalidRuleFormat", err)
	}
	tooLong := filepath.Join(dir, "slow.properties")
	writeRules(t, tooLong, "retryExec=1205:3,5+5\n", base)
	if _, err := NewFile(tooLong, Config{QueryTimeout: 10}, nil); err == nil || !strings.Contains(err.Error(), "R_InvalidRetryInterval") {
		t.Errorf("file wait above QueryTimeout: %v, want R_InvalidRetryInterval", err)
	}
	if _, err := NewFile(broken, Config{Exec: "x"}, nil); err == nil {
		t.Errorf("invalid code Config: no error")
	}
}

// Many goroutines deciding while the file changes: run with -race.
func TestFileConcurrent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mssql-jdbc.properties")
	writeRules(t, path, "retryExec=1205:1\n", base)
	clk := &clock{t: base}
	f, err := NewFile(path, Config{}, clk.now)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				d := decide(f, "1205")
				if d != sqlretry.Retry && d != sqlretry.Defer {
					t.Errorf("Decide = %v", d)
					return
				}
				f.ConsentsToReplay("select 1", "1205")
			}
		}()
	}
	for i := 0; i < 5; i++ {
		writeRules(t, path, "retryExec=1222:1\n", base.Add(time.Duration(i+1)*time.Minute))
		clk.advance(31 * time.Second)
	}
	wg.Wait()
	clk.advance(31 * time.Second)
	if d := decide(f, "1222"); d != sqlretry.Retry {
		t.Errorf("after the changes: Decide(1222) = %v, want retry", d)
	}
}
