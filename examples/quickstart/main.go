package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/examples/quickstart/order"
	"github.com/lockstepgo/lockstep/graph"
)

// Order is the state of the demo graph (see package order).
type Order = order.Order

// Counts records the side effects of a run, so tests can check them.
type Counts = order.Counts

// run executes the demo on saver and writes a narrative to out.
func run(ctx context.Context, saver checkpoint.Saver, out io.Writer, counts *Counts) error {
	r, err := order.Graph(counts).Compile(graph.WithSaver(saver), graph.WithName(order.GraphName))
	if err != nil {
		return err
	}
	const thread = "order-42"
	res, err := r.Invoke(ctx, thread, graph.Set(Order{Item: "lamp"}, "Item"))
	if err != nil {
		return err
	}
	if res.Status != graph.StatusWaiting || len(res.Interrupts) != 1 {
		return fmt.Errorf("quickstart: thread %s is %s with %d interrupt(s); want it waiting on one question", thread, res.Status, len(res.Interrupts))
	}
	var question string
	if err := res.Interrupts[0].Decode(&question); err != nil {
		return err
	}
	fmt.Fprintf(out, "run 1: %s, waiting at %v: %q\n", res.Status, res.Next, question)

	snap, err := r.GetState(ctx, thread)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "state: status=%s next=%v log=%v\n", snap.Status, snap.Next, snap.Values.Log)

	res, err = r.Resume(ctx, thread, graph.Command[Order]{Resume: true})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "run 2: %s, log=%v, charges=%d\n", res.Status, res.Values.Log, counts.Charges)
	return nil
}

// command is main without the exit: it takes no arguments but -h, runs
// the demo on an in-memory saver and returns the exit code: 0 done, 1 the
// run failed, 2 usage.
func command(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("quickstart", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: quickstart\n\nRuns a three-node graph in memory that pauses for a human, then resumes it. It takes no flags.")
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "quickstart: unexpected argument %q (see -h)\n", fs.Arg(0))
		return 2
	}
	var counts Counts
	if err := run(ctx, checkpoint.NewMemorySaver(nil), stdout, &counts); err != nil {
		fmt.Fprintln(stderr, "quickstart:", err)
		return 1
	}
	return 0
}

func main() { os.Exit(command(context.Background(), os.Args[1:], os.Stdout, os.Stderr)) }
