package graph_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
)

// tagged is a state whose fields have json keys, as a LangGraph user's
// state keys would be named.
type tagged struct {
	Count int      `json:"count"`
	Items []string `json:"items" lockstep:"append"`
	Plain string
	Same  string `json:"Same,omitempty"`
}

// TestChannelNamesGoOrJSON: wherever a channel is named (Set, Overwrite,
// input, UpdateState, Command.Update, Reducer), its Go field name and its
// json key both work; it is stored and shown (Task.Result, Fields, the
// saved channels the CLI reads) by its Go name.
func TestChannelNamesGoOrJSON(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name              string
		count, items, pln string // the names the update uses
	}{
		{"go names", "Count", "Items", "Plain"},
		{"json keys", "count", "items", "Plain"},
		{"mixed", "count", "Items", "Plain"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			saver := checkpoint.NewMemorySaver(nil)
			g := graph.New[tagged]().
				AddNode("a", func(ctx context.Context, s tagged) (graph.Update[tagged], error) {
					return graph.Set(tagged{Count: s.Count + 1, Items: []string{"a"}}, tc.count, tc.items), nil
				}).
				AddNode("ask", func(ctx context.Context, s tagged) (graph.Update[tagged], error) {
					return graph.Set(tagged{Items: []string{"z"}}, tc.items).Overwrite(tc.items), nil
				}).
				AddEdge(graph.START, "a").AddEdge("a", "ask")
			r := mustCompile(t, g, graph.WithSaver(saver), graph.WithInterruptBefore("ask"))
			res, err := r.Invoke(ctx, "t", graph.Set(tagged{Count: 1, Plain: "p"}, tc.count, tc.pln))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tagged{Count: 2, Items: []string{"a"}, Plain: "p"}, res.Values); diff != "" {
				t.Errorf("after a (-want +got):\n%s", diff)
			}
			if _, err := r.UpdateState(ctx, "t", graph.Set(tagged{Items: []string{"u"}}, tc.items), graph.UpdateOptions{AsNode: "a"}); err != nil {
				t.Fatalf("UpdateState: %v", err)
			}
			res, err = r.Continue(ctx, "t")
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tagged{Count: 2, Items: []string{"z"}, Plain: "p"}, res.Values); diff != "" {
				t.Errorf("after ask's overwrite (-want +got):\n%s", diff)
			}
			// Shown and stored by the Go name.
			var resultKeys []string
			for _, s := range history(t, r, "t") {
				for _, task := range s.Tasks {
					for k := range task.Result {
						if !slices.Contains(resultKeys, k) {
							resultKeys = append(resultKeys, k)
						}
					}
				}
			}
			slices.Sort(resultKeys)
			if diff := cmp.Diff([]string{"Count", "Items", "Plain"}, resultKeys); diff != "" {
				t.Errorf("Task.Result keys (-want +got):\n%s", diff)
			}
			tp, err := saver.Get(ctx, checkpoint.Ref{Thread: "t"}, checkpoint.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			in, err := checkpoint.Inspect(tp, true)
			if err != nil {
				t.Fatal(err)
			}
			var stored []string
			for k := range in.Values {
				stored = append(stored, k)
			}
			slices.Sort(stored)
			if diff := cmp.Diff([]string{"Count", "Items", "Plain"}, stored); diff != "" {
				t.Errorf("stored channels (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]string{"Count", "Items", "Plain", "Same"}, r.Fields()); diff != "" {
				t.Errorf("Fields (-want +got):\n%s", diff)
			}
		})
	}
}

// TestChannelNamesCommandAndReducer: a resume's Command.Update and
// Graph.Reducer take the json key too; an unknown name is still an
// *UnknownFieldError; a json key that is another field's name does not
// compile.
func TestChannelNamesCommandAndReducer(t *testing.T) {
	ctx := context.Background()
	g := graph.New[tagged]().
		AddNode("a", func(ctx context.Context, s tagged) (graph.Update[tagged], error) {
			return graph.Set(tagged{Count: 5}, "count"), nil
		}).
		AddEdge(graph.START, "a").
		Reducer("count", graph.ReduceFunc(func(old, n int) int { return old + n }))
	r := mustCompile(t, g, graph.WithSaver(checkpoint.NewMemorySaver(nil)), graph.WithInterruptBefore("a"))
	if _, err := r.Invoke(ctx, "t", graph.Set(tagged{Count: 1}, "count")); err != nil {
		t.Fatal(err)
	}
	res, err := r.Resume(ctx, "t", graph.Command[tagged]{Update: graph.Set(tagged{Count: 10}, "count")})
	if err != nil {
		t.Fatal(err)
	}
	if res.Values.Count != 16 {
		t.Errorf("Count = %d, want 1 + 10 + 5 through the reducer set by json key", res.Values.Count)
	}
	_, err = r.UpdateState(ctx, "t", graph.Set(tagged{}, "nosuch"), graph.UpdateOptions{AsNode: "a"})
	var fe *graph.UnknownFieldError
	if !errors.As(err, &fe) || fe.Field != "nosuch" {
		t.Errorf("unknown name: %v, want an *UnknownFieldError", err)
	}
	type clash struct {
		A int `json:"B"`
		B int
	}
	noop := func(ctx context.Context, s clash) (graph.Update[clash], error) { return graph.Update[clash]{}, nil }
	if _, err := graph.New[clash]().AddNode("n", noop).AddEdge(graph.START, "n").Compile(); !errors.Is(err, graph.ErrInvalidGraph) {
		t.Errorf("json key naming another field: Compile = %v, want ErrInvalidGraph", err)
	}
}
