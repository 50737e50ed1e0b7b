package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/cmd/sqlretry/internal/engine"
)

func init() {
	register(command{name: "classify", summary: "say whether an engine's error code is retryable, and in which phase", run: runClassify})
}

var classifyUsage = `usage:
  sqlretry classify --engine ENGINE CODE [--json]
  sqlretry classify --engine ENGINE --list [--json]

ENGINE is ` + engine.Help() + `.

CODE is the engine's error code: a SQL Server or MySQL error number (1205, -2), a SQLSTATE
(40001, 40P01), or an SQLite result code by number or name (517, SQLITE_BUSY_SNAPSHOT).
A well-formed code the engine's table does not list is not retryable (exit 0); an unknown
engine or a malformed code is bad input (exit 2).`

// classifyJSON is one code's verdict, the document `classify --json` writes.
type classifyJSON struct {
	Engine     string `json:"engine"`
	Code       string `json:"code"`
	Name       string `json:"name,omitempty"` // SQLite: the result code's name
	Listed     bool   `json:"listed"`
	Retryable  bool   `json:"retryable"`
	Phase      string `json:"phase"`
	Reason     string `json:"reason"`
	MinDelayMS int64  `json:"min_delay_ms"`
	Source     string `json:"source,omitempty"`
}

// listJSON is the document `classify --list --json` writes.
type listJSON struct {
	Engine string         `json:"engine"`
	Codes  []classifyJSON `json:"codes"`
}

func runClassify(ctx context.Context, env Env, args []string) int {
	fs := newFlagSet("classify")
	engineName := fs.String("engine", "", engine.Help())
	asJSON := fs.Bool("json", false, "write JSON")
	list := fs.Bool("list", false, "print the engine's whole table")
	help := fs.Bool("help", false, "print usage")
	// A negative error number (SQL Server's -2) would read as a flag.
	args, negatives := splitNegatives(args)
	pos, err := parseFlags(fs, args)
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		return badInput(env, "classify: %s", flagError(fs, err))
	}
	if *help || err != nil {
		return printHelp(env, classifyUsage, fs)
	}
	pos = append(pos, negatives...)
	if *engineName == "" {
		return badInput(env, "classify: --engine is required (one of %s)", engine.Names())
	}
	eng, err := engine.Parse(*engineName)
	if err != nil {
		return badInput(env, "classify: --engine: %v", err)
	}
	name := eng.String()

	if *list {
		if len(pos) > 0 {
			return badInput(env, "classify: --list takes no CODE, got %q", strings.Join(pos, " "))
		}
		rows := eng.Table()
		if *asJSON {
			doc := listJSON{Engine: name, Codes: make([]classifyJSON, len(rows))}
			for i, r := range rows {
				doc.Codes[i] = verdictJSON(name, r.Code, r.Class, true, r.Source)
			}
			if err := writeJSON(env.Stdout, doc); err != nil {
				return badInput(env, "classify: writing JSON: %v", err)
			}
			return ExitOK
		}
		writeList(env.Stdout, name, rows)
		return ExitOK
	}

	switch len(pos) {
	case 0:
		return badInput(env, "classify: want one CODE after --engine %s (or --list)", name)
	case 1:
	default:
		return badInput(env, "classify: want one CODE, got %d: %q", len(pos), strings.Join(pos, " "))
	}
	code := pos[0]
	if err := eng.ValidCode(code); err != nil {
		return badInput(env, "classify --engine %s: %v", name, err)
	}
	class, listed := eng.Lookup(code)
	source := ""
	if listed {
		source = sourceOf(eng, class.Code, code)
	}
	v := verdictJSON(name, code, class, listed, source)
	if *asJSON {
		if err := writeJSON(env.Stdout, v); err != nil {
			return badInput(env, "classify: writing JSON: %v", err)
		}
		return ExitOK
	}
	writeVerdict(env.Stdout, v)
	return ExitOK
}

// splitNegatives takes out the arguments that are negative numbers, which
// the flag package would read as flags.
func splitNegatives(args []string) (rest, negatives []string) {
	for _, a := range args {
		if len(a) > 1 && a[0] == '-' && strings.Trim(a[1:], "0123456789") == "" {
			negatives = append(negatives, a)
			continue
		}
		rest = append(rest, a)
	}
	return rest, negatives
}

// sourceOf finds the table row a verdict came from: the exact row, else the
// class or primary-code row it was read through.
func sourceOf(eng engine.Engine, classCode, input string) string {
	rows := eng.Table()
	for _, r := range rows {
		if r.Class.Code == classCode || strings.EqualFold(r.Code, input) {
			return r.Source
		}
	}
	for _, r := range rows {
		if len(r.Code) == 5 && strings.HasSuffix(r.Code, "xxx") && len(input) == 5 && strings.EqualFold(r.Code[:2], input[:2]) {
			return r.Source
		}
	}
	return ""
}

func verdictJSON(engineName, code string, c sqlretry.Class, listed bool, source string) classifyJSON {
	v := classifyJSON{
		Engine:     engineName,
		Code:       c.Code,
		Listed:     listed,
		Retryable:  c.Retryable,
		Phase:      c.Phase.String(),
		Reason:     c.Reason,
		MinDelayMS: c.MinDelay.Milliseconds(),
		Source:     source,
	}
	if engineName == "sqlite" {
		v.Code, v.Name = code, c.Code
	}
	if v.Code == "" {
		v.Code = code
	}
	return v
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func writeVerdict(w io.Writer, v classifyJSON) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "engine:\t%s\n", v.Engine)
	if v.Name != "" {
		fmt.Fprintf(tw, "code:\t%s (%s)\n", v.Code, v.Name)
	} else {
		fmt.Fprintf(tw, "code:\t%s\n", v.Code)
	}
	listed := "yes"
	if !v.Listed {
		listed = "no (not retried)"
	}
	fmt.Fprintf(tw, "listed:\t%s\n", listed)
	fmt.Fprintf(tw, "retryable:\t%s\n", yesNo(v.Retryable))
	fmt.Fprintf(tw, "phase:\t%s\n", v.Phase)
	fmt.Fprintf(tw, "reason:\t%s\n", v.Reason)
	fmt.Fprintf(tw, "min delay:\t%dms\n", v.MinDelayMS)
	if v.Source != "" {
		fmt.Fprintf(tw, "source:\t%s\n", v.Source)
	}
	tw.Flush()
}

func writeList(w io.Writer, engineName string, rows []engine.Row) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "CODE\tRETRYABLE\tPHASE\tMIN DELAY\tREASON\n")
	for _, r := range rows {
		code := r.Code
		if engineName == "sqlite" {
			code += " " + r.Class.Code
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%dms\t%s\n", code, yesNo(r.Class.Retryable), r.Class.Phase, r.Class.MinDelay.Milliseconds(), r.Class.Reason)
	}
	tw.Flush()
}
