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

func runVersion(ctx context.Context, env Env, args []string) int {
	fs := newFlagSet("version")
	asJSON := fs.Bool("json", false, "write JSON")
	if _, err := parseFlags(fs, args); err != nil {
		return badInput(env, "version: %v", err)
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
