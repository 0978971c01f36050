package main

import (
	"context"
	"fmt"
	"io"
	"log"
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
	r, err := order.Graph(counts).Compile(graph.WithSaver(saver))
	if err != nil {
		return err
	}
	const thread = "order-42"
	res, err := r.Invoke(ctx, thread, graph.Set(Order{Item: "lamp"}, "Item"))
	if err != nil {
		return err
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

func main() {
	var counts Counts
	if err := run(context.Background(), checkpoint.NewMemorySaver(nil), os.Stdout, &counts); err != nil {
		log.Fatal(err)
	}
}
