package main

import (
	"context"
	"io"
	"os"

	"github.com/lockstepgo/lockstep/examples/internal/demo"
	"github.com/lockstepgo/lockstep/examples/supervisor/desk"
)

// run is main without the exit: it returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return demo.Command{
		Name: "supervisor", DefaultDB: desk.DefaultDB,
		Run: func(ctx context.Context, db string, out io.Writer) error {
			_, err := desk.Run(ctx, desk.Config{DB: db, Out: out})
			return err
		},
	}.Main(ctx, args, stdout, stderr)
}

func main() { os.Exit(demo.Exec(run)) }
