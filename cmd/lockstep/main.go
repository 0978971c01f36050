package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"time"
)

// defaultDB is the database file used when --db is not given.
const defaultDB = "./lockstep.db"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, time.Now)
	stop()
	os.Exit(code)
}

// run runs the command line args (without the program name), writing
// results to stdout and diagnostics to stderr, and returns the exit code
// (see the package documentation). now is the clock for ages, expiry and
// the time of decisions.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, now func() time.Time) int {
	e := &env{stdout: stdout, stderr: stderr, now: now, opts: options{db: defaultDB}}
	if err := e.dispatch(ctx, args); err != nil {
		return e.fail(err)
	}
	return exitOK
}

// options are the global flags. Every command's flag set accepts them too,
// so they may come before or after the command.
type options struct {
	db   string
	json bool
}

// env is what a command runs with: the global options, the output streams
// and the clock.
type env struct {
	opts   options
	stdout io.Writer
	stderr io.Writer
	now    func() time.Time
	// readOnly says that openSaver found the database read-only to the
	// user: nothing a command observes can be recorded in it.
	readOnly bool
}

// runner runs a command with its positional arguments, after its flags
// were parsed.
type runner func(ctx context.Context, e *env, args []string) error

// command is one subcommand of lockstep.
type command struct {
	name     string
	synopsis string // the arguments after the name, for usage lines
	summary  string // one line for lockstep help
	about    string // what lockstep help NAME adds
	minArgs  int    // positional arguments
	maxArgs  int
	// setup registers the command's flags on fs and returns the runner
	// that reads them.
	setup func(fs *flag.FlagSet) runner
}

// commands returns the subcommands, in the order lockstep help lists them.
func commands() []command {
	return []command{
		{name: "threads", synopsis: "[--limit N] [--cursor C]", minArgs: 0, maxArgs: 0, setup: threadsCommand,
			summary: "list threads with their status, newest first",
			about:   "Lists every thread with its status (done, waiting, failed or pending), head checkpoint,\nstep, next tasks and the age of its last update, most recently updated first, 50 to a page\n(--limit 0 for all; the next page's --cursor is printed below the table)."},
		{name: "state", synopsis: "THREAD [--checkpoint ID]", minArgs: 1, maxArgs: 1, setup: stateCommand,
			summary: "show a thread's status, next tasks, interrupts, errors and values",
			about:   "Shows the status of a thread at its head (or at --checkpoint), the next tasks with their\ninterrupts or errors, the breakpoint if any, the graph it was saved under (with a warning\nand what changed when the newest version of that graph stored differs), the state values\nas JSON, and what to do next."},
		{name: "history", synopsis: "THREAD [--limit N] [--before ID | --cursor C] [--values]", minArgs: 1, maxArgs: 1, setup: historyCommand,
			summary: "list a thread's checkpoints, newest first",
			about:   "Lists the checkpoints of a thread, newest first: ID, step, source, next tasks and creation time,\n50 to a page (--limit 0 for all; --before or --cursor, the last checkpoint ID shown, continues)."},
		{name: "approvals", synopsis: "[--tool T] [--owner O] [--thread T] [--older-than D] [--expiring-within D] [--limit N] [--cursor C]", minArgs: 0, maxArgs: 0, setup: approvalsCommand,
			summary: "list pending approvals across threads, oldest first",
			about:   "Lists the approval requests that wait for a decision in paused threads, oldest first: ID,\ntool, thread, arguments, rationale, risk, owner, age and time to expiry. Expired requests\nare not listed: an expired request is rejected, and seeing it expired records the rejection\n(when the database is writable to you). Durations are Go durations or days: 90s, 30m, 2h, 1d.\n50 to a page (--limit 0 for all; the next page's --cursor is printed below the table)."},
		{name: "approve", synopsis: "ID --reviewer NAME [--note TEXT] [--args JSON]", minArgs: 1, maxArgs: 1, setup: approveCommand,
			summary: "approve a pending approval (or approve edited arguments with --args)",
			about:   "Records an approval by the reviewer. With --args the call runs with these arguments instead,\nchecked against the tool's schema stored in the request. The first decision wins; a later one\nis refused and names the winner. The thread is not resumed here: a process running\napproval.Worker with the graph resumes it."},
		{name: "reject", synopsis: "ID --reviewer NAME [--note TEXT]", minArgs: 1, maxArgs: 1, setup: rejectCommand,
			summary: "reject a pending approval",
			about:   "Records a rejection by the reviewer; the note reaches the model with it. The first decision\nwins. The thread is not resumed here: a process running approval.Worker resumes it."},
		{name: "serve", synopsis: "[--addr HOST:PORT] [--reviewer NAME]", minArgs: 0, maxArgs: 0, setup: serveCommand,
			summary: "serve the reviewers' web inbox on the database, with a one-time login",
			about:   "Serves the pending approvals of the database as web pages and a JSON API (package\napproval/reviewweb) until Ctrl-C, and prints the URL with a one-time login token. Decisions\nare the same first-wins transition as approve and reject; a process running approval.Worker\nresumes the threads."},
		{name: "graph", synopsis: "THREAD [--checkpoint ID]", minArgs: 1, maxArgs: 1, setup: graphCommand,
			summary: "draw the graph a thread was saved under as Mermaid, its waiting nodes marked",
			about:   "Prints the Mermaid flowchart of the graph the thread's head (or --checkpoint) was saved under,\nas Runnable.Mermaid draws it, from the topology the graph stored in the database: no\napplication code is needed. The nodes the thread waits in are marked (class waiting)."},
		{name: "version", synopsis: "", minArgs: 0, maxArgs: 0, setup: versionCommand,
			summary: "print the version, VCS revision and Go version of this binary",
			about:   "Prints the module version of this binary, the VCS revision and commit time it was built\nfrom (with whether the checkout had uncommitted changes), and the Go version and platform.\nIt does not read the database."},
	}
}

func findCommand(name string) (command, bool) {
	cmds := commands()
	i := slices.IndexFunc(cmds, func(c command) bool { return c.name == name })
	if i < 0 {
		return command{}, false
	}
	return cmds[i], true
}

// globalFlags registers --db and --json on fs, defaulting to their current
// values (so that a command's flag set keeps what came before the command).
func (e *env) globalFlags(fs *flag.FlagSet) {
	fs.StringVar(&e.opts.db, "db", e.opts.db, "the lockstep database: a SQLite file `PATH` or a postgres:// URL (never created by this tool)")
	fs.BoolVar(&e.opts.json, "json", e.opts.json, "print one JSON document instead of a table")
}

func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported by fail, help by usage
	return fs
}

// dispatch parses the global flags, finds the command and runs it.
func (e *env) dispatch(ctx context.Context, args []string) error {
	gfs := newFlagSet("lockstep")
	e.globalFlags(gfs)
	if err := gfs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return e.usage(e.stdout)
		}
		return usageError(err.Error(), "run `lockstep help` for usage")
	}
	rest := gfs.Args()
	if len(rest) == 0 {
		e.usage(e.stderr)
		return usageError("no command given", "run `lockstep help` for usage")
	}
	name, rest := rest[0], rest[1:]
	if name == "help" {
		return e.help(rest)
	}
	cmd, ok := findCommand(name)
	if !ok {
		return usageError(fmt.Sprintf("unknown command %s", quote(name)), "run `lockstep help` for the list of commands")
	}
	fs := newFlagSet("lockstep " + name)
	e.globalFlags(fs)
	runCmd := cmd.setup(fs)
	pos, err := parseInterleaved(fs, rest)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return e.commandUsage(e.stdout, cmd)
		}
		return usageError(fmt.Sprintf("%s: %v", name, err), fmt.Sprintf("run `lockstep help %s` for its flags", name))
	}
	usage := fmt.Sprintf("usage: lockstep %s %s", name, cmd.synopsis)
	switch {
	case len(pos) < cmd.minArgs:
		return usageError(fmt.Sprintf("%s needs %s", name, strings.Fields(cmd.synopsis)[0]), usage)
	case len(pos) > cmd.maxArgs:
		return usageError(fmt.Sprintf("%s: unexpected argument %s", name, quote(pos[cmd.maxArgs])), usage)
	}
	return runCmd(ctx, e, pos)
}

// parseInterleaved parses fs from args, allowing flags after positional
// arguments ("state THREAD --json"), and returns the positional arguments.
// Everything after "--" is positional.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if used := len(args) - len(rest); used > 0 && args[used-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// help prints the usage, or a command's usage.
func (e *env) help(args []string) error {
	switch len(args) {
	case 0:
		return e.usage(e.stdout)
	case 1:
		if args[0] == "help" {
			return e.usage(e.stdout)
		}
		cmd, ok := findCommand(args[0])
		if !ok {
			return usageError(fmt.Sprintf("unknown command %s", quote(args[0])), "run `lockstep help` for the list of commands")
		}
		return e.commandUsage(e.stdout, cmd)
	}
	return usageError("usage: lockstep help [COMMAND]", "")
}

// usageText is the help of lockstep, also in the package documentation.
const usageText = `lockstep inspects the threads of a lockstep database and records approval decisions.

Usage:
  lockstep [--db PATH] [--json] COMMAND [ARGS]

Commands:
%s
Global flags (before or after the command):
  --db PATH   the database file (default ./lockstep.db); it is never created
  --json      print one JSON document instead of a table

Exit codes:
  0  ok
  1  internal or database error (no database file at --db, unreadable data)
  2  usage error: unknown command, bad flags or arguments, malformed --args JSON
  3  not found: unknown thread, checkpoint or approval, or no stored graph to draw
  4  refused: already decided, expired, invalid decision or edited arguments

approve and reject only record the decision: a process running approval.Worker
with the graph resumes the thread. Run 'lockstep help COMMAND' for its flags.
`

func (e *env) usage(w io.Writer) error {
	var b strings.Builder
	tw := newTable(&b)
	for _, c := range commands() {
		tw.row("  "+c.name, c.summary)
	}
	tw.row("  help", "show this help, or a command's flags (lockstep help COMMAND)")
	tw.flush()
	_, err := fmt.Fprintf(w, usageText, b.String())
	return err
}

func (e *env) commandUsage(w io.Writer, cmd command) error {
	fs := newFlagSet("lockstep " + cmd.name)
	probe := &env{opts: options{db: defaultDB}}
	cmd.setup(fs)
	probe.globalFlags(fs)
	var b strings.Builder
	fmt.Fprintf(&b, "Usage: lockstep %s %s\n\n%s\n\nFlags:\n", cmd.name, cmd.synopsis, cmd.about)
	fs.VisitAll(func(f *flag.Flag) {
		name, usage := flag.UnquoteUsage(f)
		fmt.Fprintf(&b, "  --%s", f.Name)
		if name != "" {
			fmt.Fprintf(&b, " %s", name)
		}
		fmt.Fprintf(&b, "\n    \t%s", strings.ReplaceAll(usage, "\n", "\n    \t"))
		switch g, _ := f.Value.(flag.Getter); {
		case f.DefValue == "" || f.DefValue == "0" || f.DefValue == "0s" || f.DefValue == "false":
		case g != nil && isString(g.Get()):
			fmt.Fprintf(&b, " (default %q)", f.DefValue)
		default:
			fmt.Fprintf(&b, " (default %s)", f.DefValue)
		}
		b.WriteString("\n")
	})
	_, err := io.WriteString(w, b.String())
	return err
}

func isString(v any) bool {
	_, ok := v.(string)
	return ok
}
