package main

import (
	"context"
	"flag"
	"io"
	"os"

	"github.com/lockstepgo/lockstep/examples/hotelbooking/booking"
	"github.com/lockstepgo/lockstep/examples/internal/demo"
)

// config is what the flags say.
type config struct {
	db     string
	resume bool
}

// command is the program, its -resume flag bound to c.resume.
func command(c *config) demo.Command {
	return demo.Command{
		Name: "hotelbooking", DefaultDB: booking.DefaultDB,
		Flags: func(fs *flag.FlagSet) {
			fs.BoolVar(&c.resume, "resume", false, "only resume the threads whose approvals were decided (lockstep approve/reject)")
		},
		Run: func(ctx context.Context, db string, out io.Writer) error {
			_, err := booking.Run(ctx, booking.Config{DB: db, Out: out, Resume: c.resume})
			return err
		},
	}
}

// parseFlags reads the command line (without the program name).
func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	db, err := command(&c).Parse(args, stderr)
	if err != nil {
		return config{}, err
	}
	c.db = db
	return c, nil
}

// run is main without the exit: it returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var c config
	return command(&c).Main(ctx, args, stdout, stderr)
}

func main() { os.Exit(demo.Exec(run)) }
