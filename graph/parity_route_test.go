package graph_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
)

// TestRouteEdgesNamesAndSends: one router may return node names and Sends
// together (LangGraph's [Send(...), "z"]): all of them run in the next
// superstep, planned Sends first, and their writes are applied pull tasks
// first, then Sends by index, as LangGraph applies them.
func TestRouteEdgesNamesAndSends(t *testing.T) {
	ctx := context.Background()
	sends := []graph.Send[State]{{Node: "work", Arg: State{X: "1"}}, {Node: "work", Arg: State{X: "2"}}}
	for _, tc := range []struct {
		name     string
		route    graph.Route[State]
		dests    []string
		wantLog  []string
		wantNext []string // of the checkpoint after fan's step
		wantErr  error
	}{
		{
			name:     "names and sends",
			route:    graph.Route[State]{Nodes: []string{"z"}, Sends: sends},
			dests:    []string{"z", "work", graph.END},
			wantLog:  []string{"fan", "z", "work:1", "work:2"},
			wantNext: []string{"work", "work", "z"},
		},
		{
			name:     "END and sends",
			route:    graph.Route[State]{Nodes: []string{graph.END}, Sends: sends[:1]},
			wantLog:  []string{"fan", "work:1"},
			wantNext: []string{"work"},
		},
		{
			name:     "nothing",
			wantLog:  []string{"fan"},
			wantNext: []string{},
		},
		{
			name:    "a send outside the destinations",
			route:   graph.Route[State]{Nodes: []string{"z"}, Sends: sends},
			dests:   []string{"z", graph.END},
			wantErr: &graph.UnknownNodeError{},
		},
		{
			name:    "a send to END",
			route:   graph.Route[State]{Sends: []graph.Send[State]{{Node: graph.END}}},
			wantErr: &graph.UnknownNodeError{},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := graph.New[State]().
				AddNode("fan", logNode(nil, "fan")).
				AddNode("z", logNode(nil, "z")).
				AddNode("work", func(ctx context.Context, s State) (graph.Update[State], error) {
					return graph.Set(State{Log: []string{"work:" + s.X}}, "Log"), nil
				}).
				AddEdge(graph.START, "fan").
				AddRouteEdges("fan", func(ctx context.Context, s State) (graph.Route[State], error) { return tc.route, nil }, tc.dests...)
			r := mustCompile(t, g, graph.WithSaver(checkpoint.NewMemorySaver(nil)))
			res, err := r.Invoke(ctx, "t", graph.Update[State]{})
			if tc.wantErr != nil {
				var ue *graph.UnknownNodeError
				if !errors.As(err, &ue) {
					t.Fatalf("Invoke = %v, want an *UnknownNodeError", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.wantLog, res.Values.Log); diff != "" {
				t.Errorf("log (-want +got):\n%s", diff)
			}
			var next []string
			for _, s := range history(t, r, "t") {
				if s.Metadata.Step == 1 {
					next = s.Next
				}
			}
			if next == nil {
				next = []string{}
			}
			if diff := cmp.Diff(tc.wantNext, next); diff != "" {
				t.Errorf("next after fan (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRouteEdgesCompile: a nil route function and an unknown destination
// are compile errors; the router is drawn as a conditional edge.
func TestRouteEdgesCompile(t *testing.T) {
	noop := func(ctx context.Context, s State) (graph.Update[State], error) { return graph.Update[State]{}, nil }
	_, err := graph.New[State]().AddNode("a", noop).AddEdge(graph.START, "a").AddRouteEdges("a", nil).Compile()
	if !errors.Is(err, graph.ErrInvalidGraph) {
		t.Errorf("nil route function: Compile = %v, want ErrInvalidGraph", err)
	}
	route := func(ctx context.Context, s State) (graph.Route[State], error) { return graph.Route[State]{}, nil }
	_, err = graph.New[State]().AddNode("a", noop).AddEdge(graph.START, "a").AddRouteEdges("a", route, "nosuch").Compile()
	var ue *graph.UnknownNodeError
	if !errors.As(err, &ue) || ue.Name != "nosuch" {
		t.Errorf("unknown destination: Compile = %v, want an *UnknownNodeError for nosuch", err)
	}
	r := mustCompile(t, graph.New[State]().AddNode("a", noop).AddNode("b", noop).AddEdge(graph.START, "a").AddRouteEdges("a", route, "b", graph.END))
	want := []graph.Branch{{From: "a", Destinations: []string{graph.END, "b"}}}
	if diff := cmp.Diff(want, r.Topology().Branches); diff != "" {
		t.Errorf("topology branches (-want +got):\n%s", diff)
	}
}
