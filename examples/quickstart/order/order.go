package order

import (
	"context"
	"fmt"

	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/interrupt"
)

// Order is the state of the graph.
type Order struct {
	Item     string
	Total    int
	Approved bool
	Log      []string `lockstep:"append"`
}

// Counts records the side effects of runs, so tests can check them.
type Counts struct {
	Charges int
}

// GraphName is the name the quickstart compiles the graph with
// (graph.WithName): the lockstep CLI tells its versions apart by it.
const GraphName = "quickstart"

// Graph returns the graph: price → approve → charge. The approve node asks
// a yes/no question with interrupt.Ask, pausing the run until a human
// answers; charge counts a charge in counts when the order was approved.
// counts may be nil when the graph is only drawn, never run.
func Graph(counts *Counts) *graph.Graph[Order] {
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
