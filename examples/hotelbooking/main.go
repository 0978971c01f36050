package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"

	"github.com/lockstepgo/lockstep/examples/hotelbooking/booking"
)

// config is what the flags say.
type config struct {
	db     string
	resume bool
}

// parseFlags reads the command line (without the program name).
func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("hotelbooking", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.db, "db", booking.DefaultDB, "the SQLite database `PATH` (created if missing)")
	fs.BoolVar(&c.resume, "resume", false, "only resume the threads whose approvals were decided (lockstep approve/reject)")
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
		fmt.Fprintln(stderr, "hotelbooking:", err)
		return 2
	}
	if _, err := booking.Run(ctx, booking.Config{DB: c.db, Out: stdout, Resume: c.resume}); err != nil {
		fmt.Fprintln(stderr, "hotelbooking:", err)
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
