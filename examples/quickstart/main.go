// Command quickstart runs a three-node graph that pauses for a human and
// resumes, printing what happens at each stage.
//
//	go run ./examples/quickstart
package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"os"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/interrupt"
)

// Order is the state of the demo graph.
type Order struct {
	Item     string
	Total    int
	Approved bool
	Log      []string `lockstep:"append"`
}

// Counts records the side effects of a run, so tests can check them.
type Counts struct {
	Charges int
}

// build returns the graph: price → approve (pauses for a human) → charge.
func build(counts *Counts) *graph.Graph[Order] {
	return graph.New[Order]().
		AddNode("price", func(ctx context.Context, o Order) (graph.Update[Order], error) {
			return graph.Set(Order{Total: 120, Log: []string{"priced " + o.Item}}, "Total", "Log"), nil
		}).
		AddNode("approve", func(ctx context.Context, o Order) (graph.Update[Order], error) {
			ok, err := interrupt.Ask[bool](ctx, fmt.Sprintf("charge %d for %s?", o.Total, o.Item))
			if err != nil {
				return graph.Update[Order]{}, err // pauses the run
			}
			return graph.Set(Order{Approved: ok, Log: []string{fmt.Sprintf("approved=%v", ok)}}, "Approved", "Log"), nil
		}).
		AddNode("charge", func(ctx context.Context, o Order) (graph.Update[Order], error) {
			if !o.Approved {
				return graph.Set(Order{Log: []string{"not charged"}}, "Log"), nil
			}
			counts.Charges++
			return graph.Set(Order{Log: []string{fmt.Sprintf("charged %d", o.Total)}}, "Log"), nil
		}).
		AddEdge(graph.START, "price").AddEdge("price", "approve").AddEdge("approve", "charge")
}

// run executes the demo on saver and writes a narrative to out.
func run(ctx context.Context, saver checkpoint.Saver, out io.Writer, counts *Counts) error {
	r, err := build(counts).Compile(graph.WithSaver(saver))
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
