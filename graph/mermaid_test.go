package graph_test

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden files in testdata")

type shapeState struct{ N int }

func noopNode(context.Context, shapeState) (graph.Update[shapeState], error) {
	return graph.Update[shapeState]{}, nil
}

func routeTo(dests ...string) graph.Router[shapeState] {
	return func(context.Context, shapeState) ([]string, error) { return dests, nil }
}

func sendNone(context.Context, shapeState) ([]graph.Send[shapeState], error) { return nil, nil }

// shapes are graphs of every kind of edge Mermaid draws, built in a
// scrambled order: their drawings are golden files, so that a change in
// what Runnable.Mermaid writes (it renders the graph's Topology) fails.
func shapes() map[string]func() *graph.Graph[shapeState] {
	nodes := func(g *graph.Graph[shapeState], names ...string) *graph.Graph[shapeState] {
		for _, n := range names {
			g.AddNode(n, noopNode)
		}
		return g
	}
	return map[string]func() *graph.Graph[shapeState]{
		"linear": func() *graph.Graph[shapeState] {
			return nodes(graph.New[shapeState](), "c", "a", "b").
				AddEdge("b", "c").AddEdge(graph.START, "a").AddEdge("a", "b").AddEdge("c", graph.END)
		},
		"conditional": func() *graph.Graph[shapeState] {
			return nodes(graph.New[shapeState](), "model", "tools").
				AddEdge(graph.START, "model").
				AddConditionalEdges("model", routeTo(graph.END), "tools", graph.END).
				AddEdge("tools", "model")
		},
		"open-router": func() *graph.Graph[shapeState] {
			return nodes(graph.New[shapeState](), "a", "b", "c").
				AddEdge(graph.START, "a").AddConditionalEdges("a", routeTo(graph.END)).AddEdge("b", "c")
		},
		"send": func() *graph.Graph[shapeState] {
			return nodes(graph.New[shapeState](), "split", "work", "other", "merge").
				AddEdge(graph.START, "split").
				AddSendEdges("split", sendNone, "work").
				AddSendEdges("other", sendNone).
				AddEdge("work", "merge")
		},
		"join": func() *graph.Graph[shapeState] {
			return nodes(graph.New[shapeState](), "src", "p1", "p2", "p3", "join").
				AddEdge(graph.START, "src").AddEdge("src", "p1").AddEdge("src", "p2").AddEdge("src", "p3").
				AddJoin([]string{"p3", "p1", "p2"}, "join").AddJoin([]string{"p1", "p2", "p3"}, "join").AddEdge("join", graph.END)
		},
		"start-router": func() *graph.Graph[shapeState] {
			return nodes(graph.New[shapeState](), "left", "right").
				AddConditionalEdges(graph.START, routeTo("left"), "right", "left").
				AddEdge("left", graph.END).AddEdge("left", graph.END)
		},
		"odd-names": func() *graph.Graph[shapeState] {
			return nodes(graph.New[shapeState](), "model (v2)", `tools "x"`, "café", "a<b>[c]").
				AddEdge(graph.START, "café").AddEdge("café", "model (v2)").
				AddConditionalEdges("model (v2)", routeTo(graph.END), `tools "x"`, graph.END, "a<b>[c]").
				AddEdge(`tools "x"`, "model (v2)")
		},
		"two-routers": func() *graph.Graph[shapeState] {
			return nodes(graph.New[shapeState](), "a", "b", "c").
				AddEdge(graph.START, "a").
				AddConditionalEdges("a", routeTo("b"), "b").
				AddConditionalEdges("a", routeTo("c"), "c", "b").
				AddEdge("a", "b")
		},
	}
}

// TestMermaidGolden: the drawing of every shape, with and without
// breakpoints (which it does not draw), is its golden file.
func TestMermaidGolden(t *testing.T) {
	for name, build := range shapes() {
		t.Run(name, func(t *testing.T) {
			r, err := build().Compile()
			if err != nil {
				t.Fatal(err)
			}
			got := r.Mermaid()
			withBreakpoints, err := build().Compile(graph.WithSaver(checkpoint.NewMemorySaver(nil)),
				graph.WithInterruptBefore("*"), graph.WithInterruptAfter(r.Nodes()[0]))
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(got, withBreakpoints.Mermaid()); d != "" {
				t.Errorf("Mermaid with breakpoints (-without +with):\n%s", d)
			}
			if d := cmp.Diff(got, r.Topology().Mermaid()); d != "" {
				t.Errorf("Topology().Mermaid() (-Runnable.Mermaid +Topology.Mermaid):\n%s", d)
			}
			path := filepath.Join("testdata", "mermaid", name+".golden")
			if *updateGolden {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(string(want), got); d != "" {
				t.Errorf("Mermaid (-golden +got):\n%s", d)
			}
		})
	}
}
