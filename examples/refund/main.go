package main

import (
	"context"
	"io"
	"os"

	"github.com/lockstepgo/lockstep/examples/internal/demo"
	"github.com/lockstepgo/lockstep/examples/refund/refunds"
)

// run is main without the exit: it returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return demo.Command{
		Name: "refund", DefaultDB: refunds.DefaultDB,
		Run: func(ctx context.Context, db string, out io.Writer) error {
			_, err := refunds.Run(ctx, refunds.Config{DB: db, Out: out})
			return err
		},
	}.Main(ctx, args, stdout, stderr)
}

func main() { os.Exit(demo.Exec(run)) }
