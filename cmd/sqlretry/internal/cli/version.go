package cli

import (
	"context"
	"fmt"
	"io"
	"regexp"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"text/tabwriter"
)

// Version, when a release build sets it (-ldflags "-X
// github.com/sqlretry/sqlretry/cmd/sqlretry/internal/cli.Version=v0.3.1"),
// is the command's version; empty, the version is the module's, from the
// build info (go install ...@v0.3.1 records v0.3.1 there).
var Version = ""

// readBuildInfo is debug.ReadBuildInfo; tests replace it.
var readBuildInfo = debug.ReadBuildInfo

// commandModule is the command's module path.
const commandModule = "github.com/sqlretry/sqlretry/cmd/sqlretry"

// libraryModules are the modules whose versions `version` lists, the
// library first, then the drivers the command links (a module the binary
// was not built with is left out).
var libraryModules = []string{
	"github.com/sqlretry/sqlretry",
	"github.com/jackc/pgx/v5",
	"github.com/go-sql-driver/mysql",
	"modernc.org/sqlite",
	"github.com/microsoft/go-mssqldb",
}

func init() {
	register(command{name: "version", summary: "print the version, the build's revision and the library and driver versions", run: runVersion})
}

const versionUsage = `usage: sqlretry version [--json]

Prints the command's module version and, when the build recorded them, the
version control revision, its time and whether the tree had uncommitted
changes; then the Go release and the versions of the library and the drivers
it was built with.

A release has a version: go install github.com/sqlretry/sqlretry/cmd/sqlretry@v0.x.y.
Built from a source tree (go run ./cmd/sqlretry, go build), the version is
"(devel)", or a pseudo-version for an untagged commit: not a release.`

// versionInfo is the version subcommand's report; its JSON form is the
// --json document.
type versionInfo struct {
	Module string `json:"module"`
	// Version is the module's version: v0.3.1 for a release, "(devel)"
	// for a build from a source tree, or a pseudo-version
	// (v0.0.0-20261202095644-cfa25b6fbe02) for an untagged commit.
	Version string `json:"version"`
	// Release says Version names a tagged release.
	Release bool `json:"release"`
	// Revision, Time and Modified are the version control settings the
	// build recorded (vcs.revision, vcs.time, vcs.modified); empty when
	// it recorded none (-buildvcs=false, or no checkout).
	Revision string        `json:"revision,omitempty"`
	Time     string        `json:"time,omitempty"`
	Modified bool          `json:"modified,omitempty"`
	Go       string        `json:"go"`
	Modules  []moduleBuilt `json:"modules"`
}

// moduleBuilt is one module the command was built with.
type moduleBuilt struct {
	Path    string `json:"path"`
	Version string `json:"version"`
	// Replace is the path or module that replaced it (a workspace's
	// directory, a go.mod replace), if any.
	Replace string `json:"replace,omitempty"`
}

// pseudoVersion matches a Go pseudo-version's tail: a timestamp and a
// commit hash (v0.0.0-20261202095644-cfa25b6fbe02).
var pseudoVersion = regexp.MustCompile(`(^|[-.])\d{14}-[0-9a-f]{12}(\+|$)`)

// buildVersion reads what the build recorded about the command.
func buildVersion() versionInfo {
	v := versionInfo{Module: commandModule, Version: "(devel)", Go: runtime.Version()}
	bi, ok := readBuildInfo()
	if ok {
		if bi.Main.Path != "" {
			v.Module = bi.Main.Path
		}
		if bi.Main.Version != "" {
			v.Version = bi.Main.Version
		}
		if bi.GoVersion != "" {
			v.Go = bi.GoVersion
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				v.Revision = s.Value
			case "vcs.time":
				v.Time = s.Value
			case "vcs.modified":
				v.Modified = s.Value == "true"
			}
		}
		v.Modules = builtWith(bi)
	}
	if Version != "" {
		v.Version = Version
	}
	v.Modified = v.Modified || strings.HasSuffix(v.Version, "+dirty")
	v.Release = v.Version != "(devel)" && !pseudoVersion.MatchString(v.Version) && !strings.HasSuffix(v.Version, "+dirty")
	if v.Modules == nil {
		v.Modules = []moduleBuilt{}
	}
	return v
}

// builtWith lists libraryModules as bi records them.
func builtWith(bi *debug.BuildInfo) []moduleBuilt {
	out := []moduleBuilt{}
	for _, path := range libraryModules {
		i := slices.IndexFunc(bi.Deps, func(m *debug.Module) bool { return m.Path == path })
		if i < 0 {
			continue
		}
		m := bi.Deps[i]
		mb := moduleBuilt{Path: m.Path, Version: m.Version}
		if r := m.Replace; r != nil {
			mb.Replace = r.Path
			if r.Version != "" && r.Version != "(devel)" {
				mb.Replace += " " + r.Version
			}
			if mb.Version == "" {
				mb.Version = r.Version
			}
		}
		if mb.Version == "" {
			mb.Version = "(devel)"
		}
		out = append(out, mb)
	}
	return out
}

func runVersion(ctx context.Context, env Env, args []string) int {
	fs := newFlagSet("version")
	asJSON := fs.Bool("json", false, "write JSON")
	if exit, done := parseNoArgs(env, fs, versionUsage, args); done {
		return exit
	}
	v := buildVersion()
	if *asJSON {
		if err := writeJSON(env.Stdout, v); err != nil {
			return ExitFailed
		}
		return ExitOK
	}
	v.writeText(env.Stdout)
	return ExitOK
}

// writeText writes v as the version subcommand's text.
func (v versionInfo) writeText(w io.Writer) {
	switch {
	case v.Release:
		fmt.Fprintf(w, "sqlretry %s\n", v.Version)
	case v.Version == "(devel)":
		fmt.Fprintln(w, "sqlretry (devel): built from a source tree, not a release (go install "+commandModule+"@VERSION installs one)")
	default:
		fmt.Fprintf(w, "sqlretry %s: a pseudo-version, built from an untagged commit, not a release\n", v.Version)
	}
	switch {
	case v.Revision != "":
		rev := "revision " + v.Revision
		if v.Time != "" {
			rev += " of " + v.Time
		}
		if v.Modified {
			rev += ", with uncommitted changes"
		}
		fmt.Fprintln(w, "  "+rev)
	case !v.Release:
		fmt.Fprintln(w, "  no revision recorded (the build ran with -buildvcs=false, or outside a git checkout)")
	}
	fmt.Fprintf(w, "  built with %s\n", v.Go)
	if len(v.Modules) == 0 {
		return
	}
	fmt.Fprintln(w, "library and drivers:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, m := range v.Modules {
		line := "  " + m.Path + "\t" + m.Version
		if m.Replace != "" {
			line += "\treplaced by " + m.Replace
		}
		fmt.Fprintln(tw, line)
	}
	tw.Flush()
}
