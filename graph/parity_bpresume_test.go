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

// TestResumeAtBreakpointAnswersFirstAsk: a resume value given while the
// thread stands at a static breakpoint (no interrupt pending yet) is kept,
// as LangGraph keeps it, and is the answer of the held task's first Ask,
// which then does not pause. A node that never asks ignores it; two held
// tasks are ambiguous; an answer Ask cannot decode is taken back (the
// task fails, as no interrupt was raised to wait on) and the task asks
// again when it runs again.
func TestResumeAtBreakpointAnswersFirstAsk(t *testing.T) {
	ctx := context.Background()
	type outcome struct {
		Status  graph.Status
		Answer  string
		Log     []string
		AskRuns int
	}
	intAsk := func(c *counter) graph.NodeFunc[State] {
		return func(ctx context.Context, s State) (graph.Update[State], error) {
			c.inc("ask")
			n, err := interrupt.Ask[int](ctx, "how many?")
			if err != nil {
				return graph.Update[State]{}, err
			}
			return graph.Set(State{Count: n}, "Count"), nil
		}
	}
	for _, tc := range []struct {
		name    string
		build   func(g *graph.Graph[State], c *counter)
		opt     graph.RunOption
		resume  any
		want    outcome
		wantErr error
	}{
		{
			name: "before the asking node",
			build: func(g *graph.Graph[State], c *counter) {
				g.AddNode("a", logNode(nil, "a")).AddNode("ask", askNode(c, "ask", "ok?")).
					AddEdge(graph.START, "a").AddEdge("a", "ask")
			},
			opt:    graph.InterruptBefore("ask"),
			resume: "yes",
			want:   outcome{graph.StatusDone, "yes", []string{"a", "ask:yes"}, 1},
		},
		{
			name: "after the node before it",
			build: func(g *graph.Graph[State], c *counter) {
				g.AddNode("a", logNode(nil, "a")).AddNode("ask", askNode(c, "ask", "ok?")).
					AddEdge(graph.START, "a").AddEdge("a", "ask")
			},
			opt:    graph.InterruptAfter("a"),
			resume: "sure",
			want:   outcome{graph.StatusDone, "sure", []string{"a", "ask:sure"}, 1},
		},
		{
			name: "a node that never asks",
			build: func(g *graph.Graph[State], c *counter) {
				g.AddNode("a", logNode(nil, "a")).AddNode("b", logNode(nil, "b")).
					AddEdge(graph.START, "a").AddEdge("a", "b")
			},
			opt:    graph.InterruptBefore("b"),
			resume: "unused",
			want:   outcome{graph.StatusDone, "", []string{"a", "b"}, 0},
		},
		{
			name: "two held tasks",
			build: func(g *graph.Graph[State], c *counter) {
				g.AddNode("ask", askNode(c, "ask", "ok?")).AddNode("b", logNode(nil, "b")).
					AddEdge(graph.START, "ask").AddEdge(graph.START, "b")
			},
			opt:     graph.InterruptBefore("*"),
			resume:  "yes",
			wantErr: graph.ErrAmbiguousResume,
			want:    outcome{graph.StatusWaiting, "", nil, 0},
		},
		{
			name: "an answer Ask cannot decode",
			build: func(g *graph.Graph[State], c *counter) {
				g.AddNode("ask", intAsk(c)).AddEdge(graph.START, "ask")
			},
			opt:     graph.InterruptBefore("ask"),
			resume:  "not a number",
			wantErr: &interrupt.AnswerError{},
			// No interrupt was raised to wait on: the task failed, and
			// the answer was taken back (checked below with Continue).
			want: outcome{graph.StatusFailed, "", nil, 1},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCounter()
			g := graph.New[State]()
			tc.build(g, c)
			r := mustCompile(t, g, graph.WithSaver(checkpoint.NewMemorySaver(nil)))
			res, err := r.Invoke(ctx, "t", graph.Update[State]{}, tc.opt)
			if err != nil || res.Status != graph.StatusWaiting || len(res.Interrupts) != 0 {
				t.Fatalf("Invoke = %+v, %v; want waiting at the breakpoint", res, err)
			}
			_, err = r.Resume(ctx, "t", graph.Command[State]{Resume: tc.resume})
			switch want := tc.wantErr.(type) {
			case nil:
				if err != nil {
					t.Fatalf("Resume: %v", err)
				}
			case *interrupt.AnswerError:
				if !errors.As(err, &want) {
					t.Fatalf("Resume = %v, want an *interrupt.AnswerError", err)
				}
			default:
				if !errors.Is(err, want) {
					t.Fatalf("Resume = %v, want %v", err, want)
				}
			}
			s, err := r.GetState(ctx, "t")
			if err != nil {
				t.Fatal(err)
			}
			got := outcome{s.Status, s.Values.Answer, s.Values.Log, c.get("ask")}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if got.Status != graph.StatusFailed {
				return
			}
			// The refused answer is gone: the task runs again and asks.
			res, err = r.Continue(ctx, "t")
			if err != nil || res.Status != graph.StatusWaiting || len(res.Interrupts) != 1 {
				t.Errorf("Continue after a refused answer = %+v, %v; want waiting on one Ask", res, err)
			}
		})
	}
}

// TestResumeWithNothingPendingStillFails: without a breakpoint or an
// interrupt, a resume value is still refused.
func TestResumeWithNothingPendingStillFails(t *testing.T) {
	ctx := context.Background()
	g := graph.New[State]().AddNode("a", logNode(nil, "a")).AddEdge(graph.START, "a")
	r := mustCompile(t, g, graph.WithSaver(checkpoint.NewMemorySaver(nil)))
	if _, err := r.Invoke(ctx, "t", graph.Update[State]{}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Resume(ctx, "t", graph.Command[State]{Resume: "x"}); !errors.Is(err, graph.ErrNothingToResume) {
		t.Errorf("Resume on a done thread = %v, want ErrNothingToResume", err)
	}
}
