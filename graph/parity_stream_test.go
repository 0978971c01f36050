package graph_test

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
)

// kindNode is what TestStartTaskIsHidden compares about a streamed event.
type kindNode struct {
	Kind graph.EventKind
	Node string
}

// TestStartTaskIsHidden: as in LangGraph (where __start__ is tagged
// hidden), the __start__ task streams no updates, task or task result
// events, whether START has a plain edge or a router, on a new thread
// and on one with checkpoints.
func TestStartTaskIsHidden(t *testing.T) {
	ctx := context.Background()
	build := func(routed bool) *graph.Runnable[State] {
		g := graph.New[State]().AddNode("a", logNode(nil, "a")).AddEdge("a", graph.END)
		if routed {
			g.AddConditionalEdges(graph.START, func(ctx context.Context, s State) ([]string, error) { return []string{"a"}, nil })
		} else {
			g.AddEdge(graph.START, "a")
		}
		return mustCompile(t, g, graph.WithSaver(checkpoint.NewMemorySaver(nil)))
	}
	want := []kindNode{
		{graph.EventTask, "a"},
		{graph.EventTaskResult, "a"},
		{graph.EventUpdates, "a"},
	}
	for _, tc := range []struct {
		name   string
		routed bool
		runs   int // the events of the last run are compared
	}{
		{"edge", false, 1},
		{"router", true, 1},
		{"second input", false, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := build(tc.routed)
			var got []kindNode
			for range tc.runs {
				got = nil
				for ev, err := range r.Stream(ctx, "t", graph.StartWith(graph.Set(State{X: "in"}, "X"))) {
					if err != nil {
						t.Fatal(err)
					}
					switch ev.Kind {
					case graph.EventUpdates, graph.EventTask, graph.EventTaskResult:
						got = append(got, kindNode{ev.Kind, ev.Node})
					}
				}
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("task events (-want +got):\n%s", diff)
			}
		})
	}
}
