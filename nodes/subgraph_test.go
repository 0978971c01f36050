package nodes_test

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/internal/canon"
	"github.com/lockstepgo/lockstep/interrupt"
	"github.com/lockstepgo/lockstep/nodes"
)

type subState struct {
	Keys []string `lockstep:"append"`
}

// A write scoped by the thread (the default) inside a subgraph is keyed
// by the subgraph's namespace too: the same write in two subgraph tasks is
// two operations, and the same task resumed after a pause replays its
// own. At the root, the key is what it always was.
func TestIdempotencyKeyPerSubgraphTask(t *testing.T) {
	ctx := context.Background()
	p := &payments{}
	ex, err := nodes.NewExecutor([]*nodes.Tool{p.tool(t)}, nodes.WithLedger(newMemLedger(t, nil)))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	byNS := map[string]string{} // namespace → key
	write := func(ctx context.Context, s subState) (graph.Update[subState], error) {
		res, err := ex.Execute(ctx, charge("O-1", 5, ""))
		if err != nil {
			return graph.Update[subState]{}, err
		}
		info, _ := graph.TaskFrom(ctx)
		mu.Lock()
		byNS[info.NS] = res.Key
		mu.Unlock()
		if info.NS != "" {
			// Paused after the write: the resumed task writes again,
			// with the same key, and replays.
			if _, err := interrupt.Ask[string](ctx, "go on?"); err != nil {
				return graph.Update[subState]{}, err
			}
		}
		return graph.Set(subState{Keys: []string{res.Key}}, "Keys"), nil
	}
	cg := graph.New[subState]().AddNode("write", write)
	cg.AddEdge(graph.START, "write").AddEdge("write", graph.END)
	child, err := cg.Compile(graph.WithName("child"))
	if err != nil {
		t.Fatal(err)
	}
	g := graph.New[subState]().AddNode("root", write).
		AddSubgraph("s1", graph.Subgraph(child)).AddSubgraph("s2", graph.Subgraph(child))
	g.AddEdge(graph.START, "root").AddEdge("root", "s1").AddEdge("root", "s2")
	r, err := g.Compile(graph.WithSaver(checkpoint.NewMemorySaver(nil)))
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Invoke(ctx, "th", graph.Update[subState]{})
	if err != nil || len(res.Interrupts) != 2 {
		t.Fatalf("Invoke: %v, %d interrupts, want 2", err, len(res.Interrupts))
	}
	for _, in := range res.Interrupts {
		if res, err = r.Resume(ctx, "th", graph.Command[subState]{ResumeByID: map[string]any{in.ID: "yes"}}); err != nil {
			t.Fatalf("Resume %s: %v", in.ID, err)
		}
	}
	if res.Status != graph.StatusDone {
		t.Fatalf("status %s, want done", res.Status)
	}
	if got := p.calls.get("charge"); got != 3 {
		t.Errorf("the write ran %d times, want 3 (root, s1, s2)", got)
	}
	args, _ := canon.JSON(json.RawMessage(charge("O-1", 5, "").Args))
	want := map[string]string{"": nodes.IdempotencyKey("th", "charge", args)}
	for ns := range byNS {
		if ns != "" {
			want[ns] = nodes.IdempotencyKeyNS("th", ns, "charge", args)
		}
	}
	if diff := cmp.Diff(want, byNS); diff != "" || len(byNS) != 3 {
		t.Errorf("keys by namespace (-want +got):\n%s", diff)
	}
	keys := slices.Clone(res.Values.Keys)
	slices.Sort(keys)
	if len(slices.Compact(keys)) != 3 {
		t.Errorf("keys %v: want three distinct", res.Values.Keys)
	}
}
