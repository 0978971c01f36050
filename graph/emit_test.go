package graph_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
)

// emitGraph: START → (a, b) → END, where a and b emit three custom values
// each, b a message chunk too, and report what Emit and Streaming said.
func emitGraph(said chan<- string) *graph.Graph[State] {
	node := func(name string) graph.NodeFunc[State] {
		return func(ctx context.Context, s State) (graph.Update[State], error) {
			ok := graph.Streaming(ctx)
			for i := range 3 {
				ok = graph.Emit(ctx, fmt.Sprintf("%s-%d", name, i)) && ok
			}
			if name == "b" {
				ok = graph.EmitMessage(ctx, "chunk") && ok
			}
			said <- fmt.Sprintf("%s %v", name, ok)
			return graph.Set(State{Log: []string{name}}, "Log"), nil
		}
	}
	g := graph.New[State]()
	g.AddNode("a", node("a")).AddNode("b", node("b"))
	g.AddEdge(graph.START, "a").AddEdge(graph.START, "b").AddEdge("a", graph.END).AddEdge("b", graph.END)
	return g
}

func TestEmit(t *testing.T) {
	said := make(chan string, 8)
	r := mustCompile(t, emitGraph(said), graph.WithSaver(checkpoint.NewMemorySaver(nil)))
	ctx := context.Background()

	// Streamed: every value arrives once, in its task's order, with the
	// task's node and ID; parallel tasks' events one at a time.
	got := map[string][]string{}
	tasks := map[string]string{}
	for e, err := range r.Stream(ctx, "t1", graph.StartWith(graph.Set(State{Count: 1}, "Count"))) {
		if err != nil {
			t.Fatal(err)
		}
		switch e.Kind {
		case graph.EventCustom, graph.EventMessages:
			got[e.Node] = append(got[e.Node], fmt.Sprintf("%s %v", e.Kind, e.Data))
			if e.TaskID == "" || (tasks[e.Node] != "" && tasks[e.Node] != e.TaskID) || e.Config.Thread != "t1" {
				t.Errorf("event %+v: want its task's ID and the thread", e)
			}
			tasks[e.Node] = e.TaskID
		}
	}
	want := map[string][]string{
		"a": {"custom a-0", "custom a-1", "custom a-2"},
		"b": {"custom b-0", "custom b-1", "custom b-2", "messages chunk"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("emitted events (-want +got):\n%s", diff)
	}
	if s := sorted(<-said, <-said); !slices.Equal(s, []string{"a true", "b true"}) {
		t.Errorf("streamed: nodes saw %v, want Streaming and every Emit true", s)
	}

	// Not streamed: Emit does nothing and says so.
	if _, err := r.Invoke(ctx, "t2", graph.Set(State{Count: 1}, "Count")); err != nil {
		t.Fatal(err)
	}
	if s := sorted(<-said, <-said); !slices.Equal(s, []string{"a false", "b false"}) {
		t.Errorf("invoked: nodes saw %v, want false", s)
	}
	// Outside a task.
	if graph.Emit(ctx, "x") || graph.Streaming(ctx) {
		t.Error("Emit outside a task reports delivery")
	}
}

// TestEmitAfterStop: a consumer that stops reading gets nothing more, and
// a node's goroutine that emits after the run returned reaches nobody
// (the iterator is not called after it returned).
func TestEmitAfterStop(t *testing.T) {
	late, done := make(chan context.Context, 1), make(chan bool, 1)
	g := graph.New[State]()
	g.AddNode("a", func(ctx context.Context, s State) (graph.Update[State], error) {
		late <- ctx
		return graph.Set(State{Log: []string{"a"}}, "Log"), nil
	}).AddEdge(graph.START, "a").AddEdge("a", graph.END)
	r := mustCompile(t, g, graph.WithSaver(checkpoint.NewMemorySaver(nil)))
	for e, err := range r.Stream(context.Background(), "t", graph.StartWith(graph.Set(State{Count: 1}, "Count"))) {
		if err != nil {
			t.Fatal(err)
		}
		_ = e
	}
	ctx := <-late
	go func() { done <- graph.Emit(ctx, "too late") }()
	if <-done {
		t.Error("Emit after the run returned reports delivery")
	}
}

func sorted(s ...string) []string { slices.Sort(s); return s }
