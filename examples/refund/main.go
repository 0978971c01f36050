package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"

	"github.com/lockstepgo/lockstep/examples/refund/refunds"
)

// config is what the flags say.
type config struct {
	db string
}

// parseFlags reads the command line (without the program name).
func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("refund", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.db, "db", refunds.DefaultDB, "the SQLite database `PATH` (created if missing)")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected argument %q (see -h)", fs.Arg(0))
	}
	return c, nil
}

// run is main without the exit: it returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c, err := parseFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "refund:", err)
		return 2
	}
	if _, err := refunds.Run(ctx, refunds.Config{DB: c.db, Out: stdout}); err != nil {
		fmt.Fprintln(stderr, "refund:", err)
		return 1
	}
	return 0
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
