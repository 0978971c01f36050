package graph_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
)

// bulkGraph is LangGraph's test_bulk_state_updates graph: START → a → b,
// a writing X and b writing Y.
func bulkGraph(t *testing.T) *graph.Runnable[State] {
	t.Helper()
	g := graph.New[State]().
		AddNode("a", func(ctx context.Context, s State) (graph.Update[State], error) {
			return graph.Set(State{X: "bar"}, "X"), nil
		}).
		AddNode("b", func(ctx context.Context, s State) (graph.Update[State], error) {
			return graph.Set(State{Y: "qux"}, "Y"), nil
		}).
		AddEdge(graph.START, "a").AddEdge("a", "b")
	return mustCompile(t, g, graph.WithSaver(checkpoint.NewMemorySaver(nil)))
}

// TestBulkUpdateState: as LangGraph's bulk_update_state, each step of a
// bulk update writes one "update" checkpoint (the parent of the next), the
// updates of one step apply together, and the whole call is all or
// nothing.
func TestBulkUpdateState(t *testing.T) {
	ctx := context.Background()
	type outcome struct {
		X, Y  string
		Log   []string
		Chain []cpSummary
	}
	up := func(node string, u graph.Update[State]) graph.StateUpdate[State] {
		return graph.StateUpdate[State]{Update: u, AsNode: node}
	}
	for _, tc := range []struct {
		name  string
		calls [][][]graph.StateUpdate[State] // one bulk update per element
		want  outcome
	}{
		{
			name: "two calls", // LangGraph: thread 1
			calls: [][][]graph.StateUpdate[State]{
				{{up("a", graph.Set(State{X: "bar"}, "X"))}},
				{{up("a", graph.Set(State{X: "updated"}, "X")), up("b", graph.Set(State{Y: "new"}, "Y"))}},
			},
			want: outcome{X: "updated", Y: "new", Chain: []cpSummary{
				{checkpoint.SourceUpdate, 1, []string{"b"}, 1},
				{checkpoint.SourceUpdate, 0, []string{"b"}, -1},
			}},
		},
		{
			name: "two steps in one call", // LangGraph: thread 2
			calls: [][][]graph.StateUpdate[State]{{
				{up("a", graph.Set(State{X: "bar"}, "X"))},
				{up("a", graph.Set(State{X: "updated"}, "X")), up("b", graph.Set(State{Y: "new"}, "Y"))},
			}},
			want: outcome{X: "updated", Y: "new", Chain: []cpSummary{
				{checkpoint.SourceUpdate, 1, []string{"b"}, 1},
				{checkpoint.SourceUpdate, 0, []string{"b"}, -1},
			}},
		},
		{
			name: "reducers across steps, default AsNode carried on",
			calls: [][][]graph.StateUpdate[State]{{
				{up("a", graph.Set(State{Log: []string{"1"}}, "Log"))},
				{up("", graph.Set(State{Log: []string{"2"}}, "Log"))},
				{up("b", graph.Set(State{Log: []string{"3"}}, "Log")), up("a", graph.Set(State{Log: []string{"4"}}, "Log"))},
			}},
			// The step's writes apply in node-name order: a's, then b's.
			want: outcome{Log: []string{"1", "2", "4", "3"}, Chain: []cpSummary{
				{checkpoint.SourceUpdate, 2, []string{"b"}, 1},
				{checkpoint.SourceUpdate, 1, []string{"b"}, 2},
				{checkpoint.SourceUpdate, 0, []string{"b"}, -1},
			}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := bulkGraph(t)
			for i, steps := range tc.calls {
				if _, err := r.BulkUpdateState(ctx, "t", steps, graph.BulkUpdateOptions{}); err != nil {
					t.Fatalf("call %d: %v", i, err)
				}
			}
			s, err := r.GetState(ctx, "t")
			if err != nil {
				t.Fatal(err)
			}
			got := outcome{X: s.Values.X, Y: s.Values.Y, Log: s.Values.Log, Chain: summarize(t, history(t, r, "t"))}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestBulkUpdateStateAllOrNothing: a bulk update that fails in any step,
// or is malformed, saves nothing; LangGraph's refusals (no steps, an
// empty step, several updates without AsNode) are ErrInvalidInput.
func TestBulkUpdateStateAllOrNothing(t *testing.T) {
	ctx := context.Background()
	up := func(node string, u graph.Update[State]) graph.StateUpdate[State] {
		return graph.StateUpdate[State]{Update: u, AsNode: node}
	}
	ok := []graph.StateUpdate[State]{up("a", graph.Set(State{X: "ok"}, "X"))}
	for _, tc := range []struct {
		name    string
		steps   [][]graph.StateUpdate[State]
		wantErr error
	}{
		{"no steps", nil, graph.ErrInvalidInput},
		{"an empty step", [][]graph.StateUpdate[State]{ok, {}}, graph.ErrInvalidInput},
		{"several updates without AsNode", [][]graph.StateUpdate[State]{{up("", graph.Set(State{X: "e"}, "X")), up("", graph.Set(State{Y: "e"}, "Y"))}}, graph.ErrInvalidInput},
		{"AsCopy", [][]graph.StateUpdate[State]{{up(graph.AsCopy, graph.Update[State]{})}}, graph.ErrInvalidInput},
		{"END", [][]graph.StateUpdate[State]{ok, {up(graph.END, graph.Update[State]{})}}, graph.ErrInvalidInput},
		{"unknown node", [][]graph.StateUpdate[State]{ok, {up("nosuch", graph.Update[State]{})}}, graph.ErrUnknownNode},
		{"unknown field in the last step", [][]graph.StateUpdate[State]{ok, ok, {up("b", graph.Set(State{}, "Nosuch"))}}, graph.ErrUnknownField},
		{"a conflict in one step", [][]graph.StateUpdate[State]{ok, {up("a", graph.Set(State{X: "1"}, "X")), up("b", graph.Set(State{X: "2"}, "X"))}}, graph.ErrConflictingWrites},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := bulkGraph(t)
			res, err := r.Invoke(ctx, "t", graph.Set(State{X: "in"}, "X"), graph.InterruptBefore("b"))
			if err != nil || res.Status != graph.StatusWaiting {
				t.Fatalf("Invoke = %v, %v", res.Status, err)
			}
			before := history(t, r, "t")
			_, err = r.BulkUpdateState(ctx, "t", tc.steps, graph.BulkUpdateOptions{})
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("BulkUpdateState = %v, want %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(summarize(t, before), summarize(t, history(t, r, "t"))); diff != "" {
				t.Errorf("the failed bulk update changed the history (-before +after):\n%s", diff)
			}
		})
	}
}
