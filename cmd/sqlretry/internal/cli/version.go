package cli

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
)

// Version is the command's version; release builds set it with -ldflags.
var Version = "dev"

func init() {
	register(command{name: "version", summary: "print the version", run: runVersion})
}

const versionUsage = `usage: sqlretry version [--json]

Prints the command's version and the Go release it was built with.`

func runVersion(ctx context.Context, env Env, args []string) int {
	fs := newFlagSet("version")
	asJSON := fs.Bool("json", false, "write JSON")
	if exit, done := parseNoArgs(env, fs, versionUsage, args); done {
		return exit
	}
	v := Version
	if bi, ok := debug.ReadBuildInfo(); ok && v == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		v = bi.Main.Version
	}
	if *asJSON {
		writeJSON(env.Stdout, map[string]string{"version": v, "go": runtime.Version()})
		return ExitOK
	}
	fmt.Fprintf(env.Stdout, "sqlretry %s (%s)\n", v, runtime.Version())
	return ExitOK
}
