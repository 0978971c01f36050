package status_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/internal/systemtest"
	"github.com/lockstepgo/lockstep/interrupt"
)

type statusState struct {
	Log  []string `lockstep:"append"`
	Fail bool
}

// TestStatusTableOnEverySaver checks docs/semantics.md §4.4 (the D7 status at a
// glance) on the memory and SQLite savers with one graph shape: START → a →
// {x, sib} → join → b, where x asks, fails, is stopped at a breakpoint, or
// just runs, and sib always completes.
func TestStatusTableOnEverySaver(t *testing.T) {
	savers := systemtest.EverySaver()
	step := func(name string) graph.NodeFunc[statusState] {
		return func(ctx context.Context, s statusState) (graph.Update[statusState], error) {
			return graph.Set(statusState{Log: []string{name}}, "Log"), nil
		}
	}
	x := func(ctx context.Context, s statusState) (graph.Update[statusState], error) {
		if s.Fail {
			return graph.Update[statusState]{}, errors.New("card declined")
		}
		if _, err := interrupt.Ask[string](ctx, "ok?"); err != nil {
			return graph.Update[statusState]{}, err
		}
		return graph.Set(statusState{Log: []string{"x"}}, "Log"), nil
	}
	type row struct {
		name       string
		input      graph.Update[statusState]
		opts       []graph.RunOption
		resume     bool // answer the interrupt afterwards
		cancelAt   string
		wantErr    bool
		wantStatus graph.Status
		wantNext   []string
	}
	rows := []row{
		{name: "waiting on an interrupt", wantStatus: graph.StatusWaiting, wantNext: []string{"x"}},
		{name: "failed", input: graph.Set(statusState{Fail: true}, "Fail"), wantErr: true, wantStatus: graph.StatusFailed, wantNext: []string{"x"}},
		{name: "waiting at a breakpoint", opts: []graph.RunOption{graph.InterruptBefore("x")}, wantStatus: graph.StatusWaiting, wantNext: []string{"sib", "x"}},
		{name: "pending after a stop between steps", cancelAt: "a", wantErr: true, wantStatus: graph.StatusPending, wantNext: []string{"sib", "x"}},
		{name: "done", resume: true, wantStatus: graph.StatusDone},
	}
	for saverName, open := range savers {
		for _, tc := range rows {
			t.Run(saverName+"/"+tc.name, func(t *testing.T) {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				a := step("a")
				if tc.cancelAt == "a" {
					a = func(ctx context.Context, s statusState) (graph.Update[statusState], error) {
						cancel() // the step finishes and is saved; the run stops before the next one
						return graph.Set(statusState{Log: []string{"a"}}, "Log"), nil
					}
				}
				g := graph.New[statusState]().
					AddNode("a", a).AddNode("x", x).AddNode("sib", step("sib")).AddNode("b", step("b")).
					AddEdge(graph.START, "a").AddEdge("a", "x").AddEdge("a", "sib").AddJoin([]string{"x", "sib"}, "b")
				saver := open(t)
				r, err := g.Compile(graph.WithSaver(saver))
				if err != nil {
					t.Fatal(err)
				}
				_, err = r.Invoke(ctx, "t", tc.input, tc.opts...)
				if tc.wantErr != (err != nil) {
					t.Fatalf("Invoke error = %v, want error %v", err, tc.wantErr)
				}
				if tc.resume {
					if _, err := r.Resume(context.Background(), "t", graph.Command[statusState]{Resume: "yes"}); err != nil {
						t.Fatal(err)
					}
				}
				s, err := r.GetState(context.Background(), "t")
				if err != nil {
					t.Fatal(err)
				}
				if s.Status != tc.wantStatus {
					t.Errorf("status = %s, want %s", s.Status, tc.wantStatus)
				}
				if diff := cmp.Diff(tc.wantNext, s.Next, cmpopts.EquateEmpty()); diff != "" {
					t.Errorf("next (-want +got):\n%s", diff)
				}
				// A sibling that completed in the interrupted or failed step
				// has its result and is out of Next.
				if tc.wantStatus == graph.StatusFailed || tc.name == "waiting on an interrupt" {
					for _, tk := range s.Tasks {
						if tk.Name == "sib" && (tk.Result == nil || slices.Contains(s.Next, "sib")) {
							t.Errorf("the completed sibling: result %v, next %v", tk.Result, s.Next)
						}
						if tk.Name == "x" && tc.wantStatus == graph.StatusFailed && tk.Error == nil {
							t.Errorf("the failed task has no error")
						}
						if tk.Name == "x" && tc.wantStatus == graph.StatusWaiting && len(tk.Interrupts) != 1 {
							t.Errorf("the waiting task has %d interrupts", len(tk.Interrupts))
						}
					}
				}
				// The CLI's reading (stored data only) agrees.
				tp, err := saver.Get(context.Background(), checkpoint.Ref{Thread: "t"}, checkpoint.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				in, err := checkpoint.Inspect(tp, true)
				if err != nil || in.Status != string(s.Status) {
					t.Errorf("Inspect status = %q (%v), want %q", in.Status, err, s.Status)
				}
			})
		}
	}
}
