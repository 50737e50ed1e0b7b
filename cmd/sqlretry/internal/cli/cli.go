// Package cli implements the sqlretry command. Each subcommand lives in its
// own file and registers itself in init; cmd/sqlretry/main.go only parses the
// process's arguments and signals and hands them to Main.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"
	"text/tabwriter"
)

// Exit codes, part of the command's contract.
const (
	ExitOK       = 0 // success
	ExitFailed   = 1 // a check the command ran failed
	ExitBadInput = 2 // bad input: a one-line "error: ..." on standard error
)

// Env is what a subcommand gets to run with.
type Env struct {
	Stdout, Stderr io.Writer
}

// A command is one subcommand.
type command struct {
	name    string
	summary string
	// subs are its own subcommands ("rules explain"), each with a
	// summary, for the top-level usage; empty for most.
	subs []sub
	run  func(ctx context.Context, env Env, args []string) int
}

// sub is a subcommand's subcommand, for the top-level usage.
type sub struct{ name, summary string }

var commands = map[string]command{}

// register adds a subcommand; each subcommand's file calls it from init.
func register(c command) {
	if _, dup := commands[c.name]; dup {
		panic("cli: subcommand " + c.name + " registered twice")
	}
	commands[c.name] = c
}

// Main runs the command line args (without the program name) and returns the
// process exit code.
//
// "sqlretry help", --help and -h print the list of subcommands; "sqlretry
// help SUBCOMMAND [SUBCOMMAND]" runs that subcommand with --help, so that
// every subcommand answers help in one way: its usage and flags on
// standard output, exit 0.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	env := Env{Stdout: stdout, Stderr: stderr}
	if len(args) == 0 {
		return badInput(env, "want a subcommand: %s (run 'sqlretry help')", strings.Join(commandNames(), ", "))
	}
	switch args[0] {
	case "-h", "--help":
		usage(stdout)
		return ExitOK
	case "help":
		if len(args) == 1 {
			usage(stdout)
			return ExitOK
		}
		if _, ok := commands[args[1]]; !ok {
			return badInput(env, "help: unknown subcommand %q (run 'sqlretry help')", args[1])
		}
		// "help rules explain" is "rules explain --help".
		args = append(append([]string{}, args[1:]...), "--help")
	}
	c, ok := commands[args[0]]
	if !ok {
		return badInput(env, "unknown subcommand %q (run 'sqlretry help')", args[0])
	}
	return c.run(ctx, env, args[1:])
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: sqlretry <subcommand> [flags] [--json]")
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, n := range commandNames() {
		c := commands[n]
		fmt.Fprintf(tw, "  %s\t%s\n", n, c.summary)
		for _, s := range c.subs {
			fmt.Fprintf(tw, "  %s %s\t%s\n", n, s.name, s.summary)
		}
	}
	tw.Flush()
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run 'sqlretry <subcommand> --help' (or 'sqlretry help <subcommand>') for its usage and flags.")
	fmt.Fprintln(w, "Exit codes: 0 success, 1 a check the command ran failed, 2 bad input.")
}

// commandNames returns the subcommands' names, sorted.
func commandNames() []string {
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// badInput writes the one-line "error: ..." the contract promises and returns
// ExitBadInput.
func badInput(env Env, format string, a ...any) int {
	msg := fmt.Sprintf(format, a...)
	fmt.Fprintln(env.Stderr, "error: "+strings.ReplaceAll(msg, "\n", " "))
	return ExitBadInput
}

// writeJSON writes v as one indented JSON document.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// newFlagSet returns a FlagSet that reports errors through the return value
// only, so the subcommand can print the contract's one-line error.
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

// printHelp writes a subcommand's usage and its flags to standard output,
// for --help, and returns ExitOK.
func printHelp(env Env, usage string, fs *flag.FlagSet) int {
	fmt.Fprintf(env.Stdout, "%s\n\nflags:\n", usage)
	fs.SetOutput(env.Stdout)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
	return ExitOK
}

// parseArgs parses a subcommand's args with parseFlags. On --help it prints
// the usage and the flags; on a bad flag, the contract's one-line error
// (prefixed with fs's name). done says the subcommand is over, exiting exit.
func parseArgs(env Env, fs *flag.FlagSet, usage string, args []string) (pos []string, exit int, done bool) {
	pos, err := parseFlags(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return nil, printHelp(env, usage, fs), true
	}
	if err != nil {
		return nil, badInput(env, "%s: %s", fs.Name(), flagError(fs, err)), true
	}
	return pos, ExitOK, false
}

// flagError rewrites a flag package error in the command's words: the flag
// as --name, with the value given and what the flag wants ("--seed "-1":
// want a whole number >= 0", not "invalid value "-1" for flag -seed: parse
// error").
func flagError(fs *flag.FlagSet, err error) string {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		return fmt.Sprintf("unknown flag --%s (run 'sqlretry %s --help' for the flags)", strings.TrimLeft(name, "-"), fs.Name())
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: -"); ok {
		return fmt.Sprintf("--%s needs a value", strings.TrimLeft(name, "-"))
	}
	m := invalidFlagValue.FindStringSubmatch(msg)
	if m == nil {
		return msg
	}
	value, name, why := m[1], m[2], m[3]
	if why == "parse error" || why == "value out of range" {
		if f := fs.Lookup(name); f != nil {
			if want, ok := flagWants[fmt.Sprintf("%T", f.Value)]; ok {
				why = "want " + want
			}
		}
	}
	return fmt.Sprintf("--%s %s: %s", name, value, why)
}

// invalidFlagValue matches the flag package's error for a value that does
// not parse: the value (quoted), the flag and why.
var invalidFlagValue = regexp.MustCompile(`^invalid (?:boolean )?value ("(?:[^"\\]|\\.)*") for (?:flag )?-([^:]+): (.*)$`)

// flagWants says what a flag of each of the flag package's value types
// takes.
var flagWants = map[string]string{
	"*flag.intValue":      "a whole number",
	"*flag.int64Value":    "a whole number",
	"*flag.uintValue":     "a whole number >= 0",
	"*flag.uint64Value":   "a whole number >= 0",
	"*flag.float64Value":  "a number",
	"*flag.durationValue": "a duration, such as 500ms, 2s or 1m30s",
	"*flag.boolValue":     "true or false",
}

// parseNoArgs is parseArgs for a subcommand that takes flags only: a
// positional argument is bad input (prefixed with fs's name).
func parseNoArgs(env Env, fs *flag.FlagSet, usage string, args []string) (exit int, done bool) {
	pos, exit, done := parseArgs(env, fs, usage, args)
	if !done && len(pos) > 0 {
		return badInput(env, "%s: unexpected argument %q", fs.Name(), pos[0]), true
	}
	return exit, done
}

// parseFlags parses args allowing flags after positional arguments
// ("classify 1205 --json"), and returns the positional ones.
func parseFlags(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}
