package cli

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"
)

func runMain(args ...string) (exit int, stdout, stderr string) {
	var out, errw bytes.Buffer
	exit = Main(context.Background(), args, &out, &errw)
	return exit, out.String(), errw.String()
}

// TestEverySubcommandHasHelp asks every registered subcommand, and each of
// its own subcommands, for help in every way a user might: each must print
// its usage on standard output, nothing on standard error, and exit 0. The
// list comes from the registry, so a new subcommand is held to it too.
func TestEverySubcommandHasHelp(t *testing.T) {
	var paths [][]string
	for _, name := range commandNames() {
		paths = append(paths, []string{name})
		for _, s := range commands[name].subs {
			paths = append(paths, []string{name, s.name})
		}
	}
	for _, want := range []string{"chaos", "classify", "proxy", "rules", "rules explain", "rules test", "version"} {
		found := false
		for _, p := range paths {
			found = found || strings.Join(p, " ") == want
		}
		if !found {
			t.Errorf("subcommand %q is not registered", want)
		}
	}
	for _, path := range paths {
		for _, args := range [][]string{
			append(append([]string{}, path...), "--help"),
			append(append([]string{}, path...), "-h"),
			append([]string{"help"}, path...),
		} {
			exit, stdout, stderr := runMain(args...)
			if exit != ExitOK || stderr != "" || !strings.HasPrefix(stdout, "usage:") || !strings.Contains(stdout, "sqlretry "+strings.Join(path, " ")) {
				t.Errorf("sqlretry %s: got exit %d, stderr %q, stdout %q; want exit 0 and a usage naming 'sqlretry %s' on stdout only",
					strings.Join(args, " "), exit, stderr, firstLine(stdout), strings.Join(path, " "))
			}
		}
	}
}

// TestTopLevelHelpListsSubcommands checks that "sqlretry help" and its
// flag forms list every subcommand and sub-subcommand.
func TestTopLevelHelpListsSubcommands(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"--help"}, {"-h"}} {
		exit, stdout, stderr := runMain(args...)
		if exit != ExitOK || stderr != "" {
			t.Errorf("sqlretry %v: got exit %d, stderr %q; want 0 and nothing", args, exit, stderr)
		}
		for _, want := range []string{"\n  chaos ", "\n  classify ", "\n  proxy ", "\n  rules ", "\n  rules explain ", "\n  rules test ", "\n  version ", "--help"} {
			if !strings.Contains(stdout, want) {
				t.Errorf("sqlretry %v: the list lacks %q:\n%s", args, strings.TrimSpace(want), stdout)
			}
		}
	}
}

func TestMainBadInput(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{nil, "want a subcommand: chaos, classify, proxy, rules, version"},
		{[]string{"explode"}, `unknown subcommand "explode"`},
		{[]string{"help", "explode"}, `help: unknown subcommand "explode"`},
		{[]string{"version", "extra"}, `version: unexpected argument "extra"`},
		{[]string{"version", "--bogus"}, "version: unknown flag --bogus (run 'sqlretry version --help' for the flags)"},
		{[]string{"chaos", "--seed", "-1"}, `chaos: --seed "-1": want a whole number >= 0`},
		{[]string{"chaos", "--duration", "fast"}, `chaos: --duration "fast": want a duration, such as 500ms, 2s or 1m30s`},
		{[]string{"chaos", "--json=maybe"}, `chaos: --json "maybe": want true or false`},
		{[]string{"chaos", "--outage", "0s@1s"}, `chaos: --outage "0s@1s": outage "0s@1s": length "0s" is not a positive duration`},
		{[]string{"chaos", "--dsn"}, "chaos: --dsn needs a value"},
		{[]string{"chaos", "now"}, `chaos: unexpected argument "now"`},
		{[]string{"classify", "--engine", "mysql", "--wat", "1213"}, "classify: unknown flag --wat"},
		{[]string{"proxy", "--target", "127.0.0.1:1", "--listen", "999.1.1.1:0"}, "proxy: --listen"},
	}
	for _, tt := range tests {
		exit, stdout, stderr := runMain(tt.args...)
		if exit != ExitBadInput || stdout != "" || !strings.HasPrefix(stderr, "error: ") || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, tt.want) {
			t.Errorf("sqlretry %v: got exit %d, stdout %q, stderr %q; want exit 2 and one error line with %q", tt.args, exit, stdout, stderr, tt.want)
		}
	}
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// privateCitation matches references to files only this project's authors
// have (the reference notes, the seed specifications, the design page): a
// user must be pointed at public sources instead.
// (A public file named *.md, such as the SQL Server error catalogue's
// pages in MicrosoftDocs/sql-docs, is fine.)
var privateCitation = regexp.MustCompile(`(?i)\bsql-errors\.md|\bclassification-vs-peers\.md|\bpeers\.md|\bseed 0\d\d|\bseeds/|shared/|\bDESIGN(\.md| rule)`)

// TestHelpCitesNoPrivateFiles reads every usage text the command prints.
func TestHelpCitesNoPrivateFiles(t *testing.T) {
	pages := [][]string{{"help"}}
	for _, name := range commandNames() {
		pages = append(pages, []string{name, "--help"})
		for _, s := range commands[name].subs {
			pages = append(pages, []string{name, s.name, "--help"})
		}
	}
	for _, args := range pages {
		_, stdout, _ := runMain(args...)
		if m := privateCitation.FindString(stdout); m != "" {
			t.Errorf("sqlretry %s cites %q, a file users do not have", strings.Join(args, " "), m)
		}
	}
}
