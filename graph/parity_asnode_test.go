package graph_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/interrupt"
)

// TestUpdateStateDefaultAsNodeRerunsInterrupted: UpdateState without
// AsNode on a thread whose node raised a NodeInterrupt acts as LangGraph's
// update_state(as_node=None): as the node that wrote last (START when the
// interrupted node is the first, and on a thread with no checkpoint), so
// the interrupted node is due again and Continue runs it with the
// corrected state. Two nodes that wrote in the same step are ambiguous.
func TestUpdateStateDefaultAsNodeRerunsInterrupted(t *testing.T) {
	ctx := context.Background()
	type outcome struct {
		NextAfterUpdate []string
		Status          graph.Status
		Answer          string
		GuardRuns       int
	}
	for _, tc := range []struct {
		name    string
		shape   func(g *graph.Graph[State]) // adds the nodes and edges before guard
		invoke  bool                        // run the graph before the update
		want    outcome
		wantErr error
	}{
		{
			name:   "first node",
			shape:  func(g *graph.Graph[State]) { g.AddEdge(graph.START, "guard") },
			invoke: true,
			want:   outcome{[]string{"guard"}, graph.StatusDone, "done:ok", 2},
		},
		{
			name: "after a node",
			shape: func(g *graph.Graph[State]) {
				g.AddNode("prep", logNode(nil, "prep")).AddEdge(graph.START, "prep").AddEdge("prep", "guard")
			},
			invoke: true,
			want:   outcome{[]string{"guard"}, graph.StatusDone, "done:ok", 2},
		},
		{
			name:  "fresh thread",
			shape: func(g *graph.Graph[State]) { g.AddEdge(graph.START, "guard") },
			want:  outcome{[]string{"guard"}, graph.StatusDone, "done:ok", 1},
		},
		{
			name: "two writers in the last step",
			shape: func(g *graph.Graph[State]) {
				g.AddNode("a", logNode(nil, "a")).AddNode("b", logNode(nil, "b")).
					AddEdge(graph.START, "a").AddEdge(graph.START, "b").AddJoin([]string{"a", "b"}, "guard")
			},
			invoke:  true,
			wantErr: graph.ErrAmbiguousUpdate,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCounter()
			g := graph.New[State]().AddNode("guard", func(ctx context.Context, s State) (graph.Update[State], error) {
				c.inc("guard")
				if s.Y != "ok" {
					return graph.Update[State]{}, &interrupt.NodeInterrupt{Value: "Y must be ok, not " + s.Y}
				}
				return graph.Set(State{Answer: "done:" + s.Y}, "Answer"), nil
			})
			tc.shape(g)
			r := mustCompile(t, g, graph.WithSaver(checkpoint.NewMemorySaver(nil)))
			if tc.invoke {
				res, err := r.Invoke(ctx, "t", graph.Set(State{Y: "bad"}, "Y"))
				if err != nil || res.Status != graph.StatusWaiting {
					t.Fatalf("Invoke = %v, %v; want waiting on the NodeInterrupt", res.Status, err)
				}
			}
			_, err := r.UpdateState(ctx, "t", graph.Set(State{Y: "ok"}, "Y"), graph.UpdateOptions{})
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("UpdateState = %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("UpdateState: %v", err)
			}
			s, err := r.GetState(ctx, "t")
			if err != nil {
				t.Fatal(err)
			}
			got := outcome{NextAfterUpdate: s.Next}
			res, err := r.Continue(ctx, "t")
			if err != nil {
				t.Fatalf("Continue: %v", err)
			}
			got.Status, got.Answer, got.GuardRuns = res.Status, res.Values.Answer, c.get("guard")
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
