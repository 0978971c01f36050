package demo

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
)

// Command is the command line the example programs share: a -db flag
// naming the SQLite file, the example's own flags, and exit codes 0 (done),
// 1 (the run failed), 2 (usage) and 130 (interrupted: the context was
// cancelled, by Ctrl-C under Exec), every error line starting with the
// program's name.
type Command struct {
	Name      string
	DefaultDB string
	// Flags, if set, declares the example's own flags on fs.
	Flags func(fs *flag.FlagSet)
	// Run runs the example on the database at db, telling its story on
	// out.
	Run func(ctx context.Context, db string, out io.Writer) error
}

// Parse reads the command line (without the program name) and returns the
// database path. It returns flag.ErrHelp for -h, and an error for an
// unknown flag or an argument that is not a flag.
func (c Command) Parse(args []string, stderr io.Writer) (string, error) {
	fs := flag.NewFlagSet(c.Name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // Main reports a bad flag once; -h prints the usage below
	db := fs.String("db", c.DefaultDB, "the SQLite database `PATH` (created if missing)")
	if c.Flags != nil {
		c.Flags(fs)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stderr)
			fs.Usage()
		}
		return "", err
	}
	if fs.NArg() > 0 {
		return "", fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	return *db, nil
}

// Main is main without the exit: it parses args, runs the example and
// returns the exit code. When ctx is cancelled during the run, it says
// that running the program again continues where this run stopped, and
// returns 130.
func (c Command) Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	db, err := c.Parse(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "%s: %v (see -h)\n", c.Name, err)
		return 2
	}
	if err := c.Run(ctx, db, stdout); err != nil {
		if ctx.Err() != nil {
			fmt.Fprintf(stderr, "%s: interrupted (%v); run it again to continue where it stopped\n", c.Name, err)
			return 130
		}
		fmt.Fprintln(stderr, c.Name+":", err)
		return 1
	}
	return 0
}

// Exec calls run with the process's arguments and standard streams and a
// context that an interrupt (Ctrl-C) cancels, and returns its exit code
// for os.Exit. A second Ctrl-C, while the run winds down, kills the
// process as usual.
func Exec(run func(ctx context.Context, args []string, stdout, stderr io.Writer) int) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	context.AfterFunc(ctx, stop) // the first Ctrl-C cancels ctx; restore the default for the next
	return run(ctx, os.Args[1:], os.Stdout, os.Stderr)
}
