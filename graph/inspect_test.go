package graph_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/interrupt"
)

// checkpoint.Inspect reads stored data without the graph's code (the CLI
// relies on it); it must agree with GetState and History on every task ID,
// next list, interrupt and status.
func TestInspectAgreesWithSnapshots(t *testing.T) {
	ctx := context.Background()
	type scenario struct {
		name string
		run  func(r *graph.Runnable[State]) // drives thread "t"
		opts []graph.Option
	}
	fail := errors.New("boom")
	g := func() *graph.Graph[State] {
		return graph.New[State]().
			AddNode("a", logNode(nil, "a")).
			AddNode("ask", func(ctx context.Context, s State) (graph.Update[State], error) {
				v, err := interrupt.Ask[string](ctx, "q1")
				if err != nil {
					return graph.Update[State]{}, err
				}
				if _, err := interrupt.Ask[string](ctx, "q2"); err != nil {
					return graph.Update[State]{}, err
				}
				return graph.Set(State{Log: []string{"ask:" + v}}, "Log"), nil
			}).
			AddNode("sib", logNode(nil, "sib")).
			AddNode("bad", func(ctx context.Context, s State) (graph.Update[State], error) {
				if s.X == "fail" {
					return graph.Update[State]{}, fail
				}
				return graph.Set(State{Log: []string{"bad"}}, "Log"), nil
			}).
			AddNode("w", logNode(nil, "w")).
			AddEdge(graph.START, "a").AddEdge("a", "ask").AddEdge("a", "sib").AddEdge("a", "bad").
			AddJoin([]string{"sib", "bad"}, "w").
			AddSendEdges("w", func(ctx context.Context, s State) ([]graph.Send[State], error) {
				return []graph.Send[State]{{Node: "sib", Arg: State{X: "1"}}, {Node: "sib", Arg: State{X: "2"}}}, nil
			}, "sib")
	}
	scenarios := []scenario{
		{name: "waiting on first ask", run: func(r *graph.Runnable[State]) { r.Invoke(ctx, "t", graph.Update[State]{}) }},
		{name: "waiting on second ask", run: func(r *graph.Runnable[State]) {
			r.Invoke(ctx, "t", graph.Update[State]{})
			r.Resume(ctx, "t", graph.Command[State]{Resume: "yes"})
		}},
		{name: "done", run: func(r *graph.Runnable[State]) {
			r.Invoke(ctx, "t", graph.Update[State]{})
			r.Resume(ctx, "t", graph.Command[State]{Resume: "yes"})
			r.Resume(ctx, "t", graph.Command[State]{Resume: "yes"})
		}},
		{name: "failed", run: func(r *graph.Runnable[State]) { r.Invoke(ctx, "t", graph.Set(State{X: "fail"}, "X")) }},
		{name: "breakpoint", run: func(r *graph.Runnable[State]) { r.Invoke(ctx, "t", graph.Update[State]{}) },
			opts: []graph.Option{graph.WithInterruptBefore("a")}},
		{name: "resume with goto", run: func(r *graph.Runnable[State]) {
			r.Invoke(ctx, "t", graph.Update[State]{})
			r.Resume(ctx, "t", graph.Command[State]{Update: graph.Goto[State]("w")})
		}, opts: []graph.Option{graph.WithInterruptBefore("a")}},
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			saver := checkpoint.NewMemorySaver(nil)
			r := mustCompile(t, g(), append(sc.opts, graph.WithSaver(saver))...)
			sc.run(r)
			hist := history(t, r, "t")
			head, err := r.GetState(ctx, "t")
			if err != nil {
				t.Fatal(err)
			}
			for i, s := range append([]graph.Snapshot[State]{head}, hist...) {
				latest := i == 0
				tp, err := saver.Get(ctx, checkpoint.Ref{Thread: "t", ID: s.Config.CheckpointID}, checkpoint.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				in, err := checkpoint.Inspect(tp, latest)
				if err != nil {
					t.Fatal(err)
				}
				type view struct {
					Status     string
					Next       []string
					IDs        []string
					Interrupts []string
				}
				want := view{Status: string(s.Status), Next: s.Next}
				for _, tk := range s.Tasks {
					want.IDs = append(want.IDs, tk.ID)
				}
				for _, it := range s.Interrupts {
					want.Interrupts = append(want.Interrupts, it.ID)
				}
				got := view{Status: in.Status, Next: in.Next}
				for _, tk := range in.Tasks {
					got.IDs = append(got.IDs, tk.ID)
				}
				for _, it := range in.Interrupts {
					got.Interrupts = append(got.Interrupts, it.ID)
				}
				if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
					t.Errorf("checkpoint %d (latest %v, %s step %d): snapshot vs Inspect (-snapshot +inspect):\n%s",
						i, latest, s.Metadata.Source, s.Metadata.Step, diff)
				}
			}
		})
	}
}
