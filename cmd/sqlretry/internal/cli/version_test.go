package cli

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"
)

// TestGoLinesDeclareALanguageVersion reads the go lines of the repository's
// go.mod files and go.work. A go line is a floor every module that requires
// ours inherits (go mod tidy raises a user's line to it), so it names the
// lowest release the code and its dependencies need (go 1.26.0: errors.AsType,
// and modernc.org/sqlite's own floor), never the patch release of whoever
// last ran go mod tidy; and the modules of one workspace agree.
func TestGoLinesDeclareALanguageVersion(t *testing.T) {
	root := filepath.Join("..", "..", "..", "..")
	files := []string{"go.mod", "go.work", filepath.Join("cmd", "sqlretry", "go.mod")}
	// bench/ and the integration modules beside the library (pgxretry/...).
	more, err := filepath.Glob(filepath.Join(root, "*", "go.mod"))
	if err != nil || len(more) == 0 {
		t.Fatalf("no go.mod one level below the root: %v", err)
	}
	for _, m := range more {
		rel, _ := filepath.Rel(root, m)
		files = append(files, rel)
	}
	goLine := regexp.MustCompile(`(?m)^go (\S+)\s*$`)
	versions := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		m := goLine.FindSubmatch(b)
		if m == nil {
			t.Errorf("%s has no go line", f)
			continue
		}
		v := string(m[1])
		versions[f] = v
		if parts := strings.Split(v, "."); len(parts) != 3 || parts[2] != "0" {
			t.Errorf("%s: go %s; want a release's first version (1.N.0), not a patch", f, v)
		}
	}
	for f, v := range versions {
		if v != versions["go.mod"] {
			t.Errorf("%s: go %s, but the library's go.mod says go %s", f, v, versions["go.mod"])
		}
	}
}

// fakeBuild makes `version` read bi, and Version be ldflags, for the test.
func fakeBuild(t *testing.T, bi *debug.BuildInfo, ldflags string) {
	t.Helper()
	oldRead, oldVersion := readBuildInfo, Version
	readBuildInfo = func() (*debug.BuildInfo, bool) { return bi, bi != nil }
	Version = ldflags
	t.Cleanup(func() { readBuildInfo, Version = oldRead, oldVersion })
}

// builtDeps are the modules of a build from the tree, as go version -m
// lists them: the library, the drivers and a module version does not list.
func builtDeps(library string) []*debug.Module {
	return []*debug.Module{
		{Path: "gonum.org/v1/plot", Version: "v0.17.0"},
		{Path: "modernc.org/sqlite", Version: "v1.62.0"},
		{Path: "github.com/go-sql-driver/mysql", Version: "v1.10.1"},
		{Path: "github.com/jackc/pgx/v5", Version: "v5.13.0"},
		{Path: "github.com/sqlretry/sqlretry", Version: library},
	}
}

// versionDoc is the --json document of sqlretry version.
type versionDoc struct {
	Module   string `json:"module"`
	Version  string `json:"version"`
	Release  bool   `json:"release"`
	Revision string `json:"revision"`
	Time     string `json:"time"`
	Modified bool   `json:"modified"`
	Go       string `json:"go"`
	Modules  []struct {
		Path, Version, Replace string
	} `json:"modules"`
}

func runVersionJSON(t *testing.T) versionDoc {
	t.Helper()
	exit, stdout, stderr := runMain("version", "--json")
	if exit != ExitOK || stderr != "" {
		t.Fatalf("version --json: exit %d, stderr %q", exit, stderr)
	}
	var d versionDoc
	if err := json.Unmarshal([]byte(stdout), &d); err != nil {
		t.Fatalf("version --json is not one JSON document: %v\n%s", err, stdout)
	}
	return d
}

// TestVersionOfARelease: a binary go install ...@v0.3.1 built records
// v0.3.1 as the main module's version; version prints it, then the library
// and the drivers in a fixed order (the library first), and nothing else.
func TestVersionOfARelease(t *testing.T) {
	fakeBuild(t, &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: commandModule, Version: "v0.3.1"},
		Deps: builtDeps("v0.3.1")}, "")
	exit, stdout, _ := runMain("version")
	want := "sqlretry v0.3.1\n" +
		"  built with go1.26.0\n" +
		"library and drivers:\n" +
		"  github.com/sqlretry/sqlretry    v0.3.1\n" +
		"  github.com/jackc/pgx/v5         v5.13.0\n" +
		"  github.com/go-sql-driver/mysql  v1.10.1\n" +
		"  modernc.org/sqlite              v1.62.0\n"
	if exit != ExitOK || stdout != want {
		t.Errorf("version: exit %d, got\n%s\nwant\n%s", exit, stdout, want)
	}
	d := runVersionJSON(t)
	if d.Version != "v0.3.1" || !d.Release || d.Go != "go1.26.0" || d.Module != commandModule || len(d.Modules) != 4 ||
		d.Modules[0].Path != "github.com/sqlretry/sqlretry" || d.Modules[0].Version != "v0.3.1" {
		t.Errorf("version --json: got %+v, want release v0.3.1 with the library first among 4 modules", d)
	}
}

// TestVersionFromASourceTree: go run and go build in a checkout record
// "(devel)" (and the revision, unless -buildvcs=false): version says
// plainly that this is no release, with the revision, its time and the
// uncommitted changes; the library, built from the tree beside the
// command, is "(devel)" and replaced by it outside the workspace.
func TestVersionFromASourceTree(t *testing.T) {
	deps := builtDeps("(devel)")
	deps[4].Replace = &debug.Module{Path: "../..", Version: "(devel)"}
	fakeBuild(t, &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: commandModule, Version: "(devel)"}, Deps: deps,
		Settings: []debug.BuildSetting{{Key: "-buildmode", Value: "exe"}, {Key: "vcs", Value: "git"},
			{Key: "vcs.revision", Value: "cfa25b6fbe02e94dc2f6c0df104a1809263cbbbf"}, {Key: "vcs.time", Value: "2026-12-02T09:56:44Z"},
			{Key: "vcs.modified", Value: "true"}}}, "")
	_, stdout, _ := runMain("version")
	for _, want := range []string{"sqlretry (devel): built from a source tree, not a release",
		"revision cfa25b6fbe02e94dc2f6c0df104a1809263cbbbf of 2026-12-02T09:56:44Z, with uncommitted changes",
		"github.com/sqlretry/sqlretry    (devel)  replaced by ../..\n"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("version: got\n%s\nwant it to contain %q", stdout, want)
		}
	}
	d := runVersionJSON(t)
	if d.Version != "(devel)" || d.Release || d.Revision != "cfa25b6fbe02e94dc2f6c0df104a1809263cbbbf" || !d.Modified ||
		d.Time != "2026-12-02T09:56:44Z" || d.Modules[0].Replace != "../.." {
		t.Errorf("version --json: got %+v, want (devel), no release, the revision, modified, the library replaced by ../..", d)
	}

	// -buildvcs=false (this machine's GOFLAGS) records no revision: say so.
	fakeBuild(t, &debug.BuildInfo{Main: debug.Module{Path: commandModule, Version: "(devel)"}, Deps: deps}, "")
	if _, stdout, _ = runMain("version"); !strings.Contains(stdout, "no revision recorded") {
		t.Errorf("version without vcs settings: got\n%s\nwant it to say no revision was recorded", stdout)
	}
}

// TestVersionPseudoVersionIsNoRelease: Go 1.24 and later stamp an untagged
// commit with a pseudo-version (+dirty with uncommitted changes): a version,
// but not a release.
func TestVersionPseudoVersionIsNoRelease(t *testing.T) {
	fakeBuild(t, &debug.BuildInfo{Main: debug.Module{Path: commandModule, Version: "v0.0.0-20261202095644-cfa25b6fbe02+dirty"}}, "")
	_, stdout, _ := runMain("version")
	if !strings.HasPrefix(stdout, "sqlretry v0.0.0-20261202095644-cfa25b6fbe02+dirty: a pseudo-version, built from an untagged commit, not a release\n") {
		t.Errorf("version: got\n%s", stdout)
	}
	if d := runVersionJSON(t); d.Release || !d.Modified || d.Modules == nil {
		t.Errorf("version --json: got %+v, want no release, modified, an empty (not null) module list", d)
	}
}

// TestVersionSetByLdflags: a release build that sets Version with -ldflags
// -X prints it over the build info's "(devel)".
func TestVersionSetByLdflags(t *testing.T) {
	fakeBuild(t, &debug.BuildInfo{Main: debug.Module{Path: commandModule, Version: "(devel)"}, Deps: builtDeps("(devel)")}, "v0.4.0")
	if _, stdout, _ := runMain("version"); !strings.HasPrefix(stdout, "sqlretry v0.4.0\n") {
		t.Errorf("version: got\n%s\nwant sqlretry v0.4.0", stdout)
	}
}

// TestVersionOfTheBuiltBinary builds the command as go build does in the
// workspace, once with -ldflags -X setting Version, and reads what the real
// build info gives: the version set, and the library and drivers it linked.
func TestVersionOfTheBuiltBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the command")
	}
	bin := filepath.Join(t.TempDir(), "sqlretry")
	build := exec.Command("go", "build", "-ldflags", "-X "+commandModule+"/internal/cli.Version=v9.8.7", "-o", bin, commandModule)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("sqlretry version: %v\n%s", err, out)
	}
	for _, want := range []string{"sqlretry v9.8.7\n", "github.com/sqlretry/sqlretry ", "github.com/jackc/pgx/v5 ", "github.com/go-sql-driver/mysql ", "modernc.org/sqlite "} {
		if !strings.Contains(string(out), want) {
			t.Errorf("sqlretry version: got\n%s\nwant it to contain %q", out, want)
		}
	}
}
