package graph_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/interrupt"
)

// docs/semantics.md §3.2: START→a→b writes an input checkpoint at step -1 and
// one loop checkpoint per superstep, each the parent of the next.
func TestLinearChainCheckpoints(t *testing.T) {
	ctx := context.Background()
	c := newCounter()
	g := graph.New[State]().
		AddNode("a", logNode(c, "a")).
		AddNode("b", logNode(c, "b")).
		AddEdge(graph.START, "a").AddEdge("a", "b")
	r := mustCompile(t, g, graph.WithSaver(checkpoint.NewMemorySaver(nil)))
	res, err := r.Invoke(ctx, "t", graph.Set(State{Count: 7}, "Count"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(State{Count: 7, Log: []string{"a", "b"}}, res.Values); diff != "" {
		t.Errorf("final values (-want +got):\n%s", diff)
	}
	want := []cpSummary{
		{checkpoint.SourceLoop, 2, []string{}, 1},
		{checkpoint.SourceLoop, 1, []string{"b"}, 2},
		{checkpoint.SourceLoop, 0, []string{"a"}, 3},
		{checkpoint.SourceInput, -1, []string{graph.START}, -1},
	}
	if diff := cmp.Diff(want, summarize(t, history(t, r, "t"))); diff != "" {
		t.Errorf("checkpoint chain (-want +got):\n%s", diff)
	}
	if c.get("a") != 1 || c.get("b") != 1 {
		t.Errorf("runs a=%d b=%d, want 1 each", c.get("a"), c.get("b"))
	}
	// A second input continues the thread's step numbering.
	if _, err := r.Invoke(ctx, "t", graph.Set(State{Count: 8}, "Count")); err != nil {
		t.Fatal(err)
	}
	h := history(t, r, "t")
	if got := []int{h[0].Metadata.Step, h[3].Metadata.Step}; !slices.Equal(got, []int{6, 3}) {
		t.Errorf("second run steps = %v, want newest 6 and input 3", got)
	}
}

// docs/semantics.md §2.2 step 8: writes are applied in node-name order whatever
// the completion order and the registration order.
func TestParallelWritesMergeInFixedOrder(t *testing.T) {
	ctx := context.Background()
	for i := range 20 {
		g := graph.New[State]()
		for _, name := range []string{"c", "a", "d", "b"} { // registration order is not name order
			g.AddNode(name, func(ctx context.Context, s State) (graph.Update[State], error) {
				time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond) // vary completion order
				return graph.Set(State{Log: []string{name}, Tags: map[string]string{"last": name}}, "Log", "Tags"), nil
			})
			g.AddEdge(graph.START, name)
		}
		r := mustCompile(t, g)
		res, err := r.Invoke(ctx, "t", graph.Update[State]{})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{"a", "b", "c", "d"}, res.Values.Log); diff != "" {
			t.Fatalf("run %d: append order (-want +got):\n%s", i, diff)
		}
		if got := res.Values.Tags["last"]; got != "d" {
			t.Fatalf("run %d: merge winner = %q, want d (applied last)", i, got)
		}
	}
}

// docs/semantics.md §1: a join edge waits for all its sources, even across
// supersteps, and runs the joined node once.
func TestJoinRunsOnce(t *testing.T) {
	tests := []struct {
		name  string
		build func(g *graph.Graph[State], c *counter)
		want  []string
	}{
		{
			name: "sources in the same step",
			build: func(g *graph.Graph[State], c *counter) {
				g.AddNode("a", logNode(c, "a")).AddNode("b", logNode(c, "b")).AddNode("j", logNode(c, "j"))
				g.AddEdge(graph.START, "a").AddEdge(graph.START, "b").AddJoin([]string{"a", "b"}, "j")
			},
			want: []string{"a", "b", "j"},
		},
		{
			name: "sources in different steps",
			build: func(g *graph.Graph[State], c *counter) {
				g.AddNode("a", logNode(c, "a")).AddNode("a2", logNode(c, "a2")).AddNode("b", logNode(c, "b")).AddNode("j", logNode(c, "j"))
				g.AddEdge(graph.START, "a").AddEdge("a", "a2").AddEdge(graph.START, "b").AddJoin([]string{"a2", "b"}, "j")
			},
			want: []string{"a", "b", "a2", "j"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newCounter()
			g := graph.New[State]()
			tc.build(g, c)
			r := mustCompile(t, g, graph.WithSaver(checkpoint.NewMemorySaver(nil)))
			res, err := r.Invoke(context.Background(), "t", graph.Update[State]{})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, res.Values.Log); diff != "" {
				t.Errorf("log (-want +got):\n%s", diff)
			}
			if c.get("j") != 1 {
				t.Errorf("joined node ran %d times, want 1", c.get("j"))
			}
		})
	}
}

// Two plain edges into one node that fire at different steps run it twice
// (unlike a join).
func TestTwoPlainEdgesAtDifferentSteps(t *testing.T) {
	c := newCounter()
	g := graph.New[State]().
		AddNode("a", logNode(c, "a")).AddNode("b", logNode(c, "b")).AddNode("b2", logNode(c, "b2")).AddNode("c", logNode(c, "c")).
		AddEdge(graph.START, "a").AddEdge(graph.START, "b").AddEdge("b", "b2").
		AddEdge("a", "c").AddEdge("b2", "c")
	r := mustCompile(t, g)
	res, err := r.Invoke(context.Background(), "t", graph.Update[State]{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"a", "b", "b2", "c", "c"}, res.Values.Log); diff != "" {
		t.Errorf("log (-want +got):\n%s", diff)
	}
	if c.get("c") != 2 {
		t.Errorf("c ran %d times, want 2", c.get("c"))
	}
}

// docs/semantics.md §1: a router reads the state with its own node's writes
// applied, but not its siblings'.
func TestRouterSeesOwnWritesOnly(t *testing.T) {
	var seen State
	g := graph.New[State]().
		AddNode("a", func(ctx context.Context, s State) (graph.Update[State], error) {
			return graph.Set(State{X: "from a", Log: []string{"a"}}, "X", "Log"), nil
		}).
		AddNode("b", func(ctx context.Context, s State) (graph.Update[State], error) {
			return graph.Set(State{Y: "from b", Log: []string{"b"}}, "Y", "Log"), nil
		}).
		AddNode("done", logNode(nil, "done")).
		AddEdge(graph.START, "a").AddEdge(graph.START, "b").
		AddConditionalEdges("a", func(ctx context.Context, s State) ([]string, error) {
			seen = s
			return []string{"done"}, nil
		}, "done")
	r := mustCompile(t, g)
	res, err := r.Invoke(context.Background(), "t", graph.Update[State]{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(State{X: "from a", Log: []string{"a"}}, seen); diff != "" {
		t.Errorf("router saw (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"a", "b", "done"}, res.Values.Log); diff != "" {
		t.Errorf("log (-want +got):\n%s", diff)
	}
}

// docs/semantics.md §2.2: pull tasks' writes apply before push tasks', and push
// tasks in Send order.
func TestSendOrdering(t *testing.T) {
	g := graph.New[State]().
		AddNode("fan", logNode(nil, "fan")).
		AddNode("z", logNode(nil, "z")).
		AddNode("work", func(ctx context.Context, s State) (graph.Update[State], error) {
			time.Sleep(time.Duration(rand.IntN(200)) * time.Microsecond)
			return graph.Set(State{Log: []string{"work:" + s.X}}, "Log"), nil
		}).
		AddEdge(graph.START, "fan").AddEdge("fan", "z").
		AddSendEdges("fan", func(ctx context.Context, s State) ([]graph.Send[State], error) {
			var out []graph.Send[State]
			for _, x := range []string{"3", "1", "2"} {
				out = append(out, graph.Send[State]{Node: "work", Arg: State{X: x}})
			}
			return out, nil
		}, "work")
	r := mustCompile(t, g, graph.WithSaver(checkpoint.NewMemorySaver(nil)))
	res, err := r.Invoke(context.Background(), "t", graph.Update[State]{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"fan", "z", "work:3", "work:1", "work:2"}, res.Values.Log); diff != "" {
		t.Errorf("log (-want +got):\n%s", diff)
	}
	// The step-1 snapshot lists the pushes in order, then the pull task,
	// as LangGraph's prepare_next_tasks plans them.
	h := history(t, r, "t")
	var step1 graph.Snapshot[State]
	for _, s := range h {
		if s.Metadata.Step == 1 {
			step1 = s
		}
	}
	if diff := cmp.Diff([]string{"work", "work", "work", "z"}, step1.Next); diff != "" {
		t.Errorf("step 1 next (-want +got):\n%s", diff)
	}
	var paths []string
	for _, tk := range step1.Tasks {
		paths = append(paths, tk.Path)
	}
	if diff := cmp.Diff([]string{"push:0", "push:1", "push:2", "pull"}, paths); diff != "" {
		t.Errorf("task paths (-want +got):\n%s", diff)
	}
}

// TestNextOrder: a step with Sends and pull tasks of nodes registered in
// non-alphabetical order lists the pushes first (by Send index), then the
// pull tasks by node name, in Result.Next, GetState, History, Tasks,
// Interrupts and checkpoint.Inspect alike. LangGraph plans pushes first
// too; its get_state lists pull tasks by registration, which the stored
// data that Inspect (and the CLI) reads cannot reproduce, so pull tasks
// keep the order LangGraph's loop plans them in, by name.
func TestNextOrder(t *testing.T) {
	ctx := context.Background()
	ask := func(name string) graph.NodeFunc[State] {
		return func(ctx context.Context, s State) (graph.Update[State], error) {
			if _, err := interrupt.Ask[string](ctx, name+s.X); err != nil {
				return graph.Update[State]{}, err
			}
			return graph.Set(State{Log: []string{name + s.X}}, "Log"), nil
		}
	}
	build := func() *graph.Graph[State] {
		return graph.New[State]().
			AddNode("zeta", ask("zeta")).
			AddNode("work", ask("work")).
			AddNode("alpha", ask("alpha")).
			AddNode("fan", logNode(nil, "fan")).
			AddEdge(graph.START, "fan").AddEdge("fan", "zeta").AddEdge("fan", "alpha").
			AddSendEdges("fan", func(ctx context.Context, s State) ([]graph.Send[State], error) {
				return []graph.Send[State]{{Node: "work", Arg: State{X: "0"}}, {Node: "work", Arg: State{X: "1"}}}, nil
			}, "work")
	}
	wantNext := []string{"work", "work", "alpha", "zeta"}
	wantPaths := []string{"push:0", "push:1", "pull", "pull"}
	type view struct {
		Next, Names, Paths, Interrupts []string
	}
	tests := []struct {
		name           string
		opts           []graph.Option
		wantInterrupts []string
	}{
		{name: "interrupts", wantInterrupts: []string{`"work0"`, `"work1"`, `"alpha"`, `"zeta"`}},
		{name: "breakpoint before", opts: []graph.Option{graph.WithInterruptBefore("work", "alpha", "zeta")}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			saver := checkpoint.NewMemorySaver(nil)
			r := mustCompile(t, build(), append(tc.opts, graph.WithSaver(saver))...)
			res, err := r.Invoke(ctx, "t", graph.Update[State]{})
			if err != nil || res.Status != graph.StatusWaiting {
				t.Fatalf("Invoke = %s, %v; want waiting", res.Status, err)
			}
			var ivals []string
			for _, in := range res.Interrupts {
				ivals = append(ivals, string(in.Value))
			}
			if diff := cmp.Diff(view{Next: wantNext, Interrupts: tc.wantInterrupts}, view{Next: res.Next, Interrupts: ivals}, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Result (-want +got):\n%s", diff)
			}
			want := view{Next: wantNext, Names: wantNext, Paths: wantPaths, Interrupts: tc.wantInterrupts}
			head, err := r.GetState(ctx, "t")
			if err != nil {
				t.Fatal(err)
			}
			hist := history(t, r, "t")
			for _, s := range []struct {
				what string
				snap graph.Snapshot[State]
				head bool
			}{{"GetState", head, true}, {"History[0]", hist[0], true}} {
				got := view{Next: s.snap.Next}
				for _, tk := range s.snap.Tasks {
					got.Names = append(got.Names, tk.Name)
					got.Paths = append(got.Paths, tk.Path)
				}
				for _, in := range s.snap.Interrupts {
					got.Interrupts = append(got.Interrupts, string(in.Value))
				}
				if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
					t.Errorf("%s (-want +got):\n%s", s.what, diff)
				}
				tp, err := saver.Get(ctx, checkpoint.Ref{Thread: "t", ID: s.snap.Config.CheckpointID}, checkpoint.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				in, err := checkpoint.Inspect(tp, s.head)
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(wantNext, in.Next); diff != "" {
					t.Errorf("Inspect next of %s (-want +got):\n%s", s.what, diff)
				}
			}
		})
	}
}

// A node's Goto adds targets to its static edges.
func TestCommandGoto(t *testing.T) {
	g := graph.New[State]().
		AddNode("a", func(ctx context.Context, s State) (graph.Update[State], error) {
			return graph.Set(State{Log: []string{"a"}}, "Log").Goto("c"), nil
		}).
		AddNode("b", logNode(nil, "b")).AddNode("c", logNode(nil, "c")).
		AddEdge(graph.START, "a").AddEdge("a", "b")
	r := mustCompile(t, g)
	res, err := r.Invoke(context.Background(), "t", graph.Update[State]{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"a", "b", "c"}, res.Values.Log); diff != "" {
		t.Errorf("log (-want +got):\n%s", diff)
	}

	// An unknown Goto target is a typed error naming it.
	bad := graph.New[State]().
		AddNode("a", func(ctx context.Context, s State) (graph.Update[State], error) {
			return graph.Goto[State]("nosuch"), nil
		}).AddEdge(graph.START, "a")
	_, err = mustCompile(t, bad).Invoke(context.Background(), "t", graph.Update[State]{})
	var une *graph.UnknownNodeError
	if !errors.As(err, &une) || une.Name != "nosuch" || !errors.Is(err, graph.ErrUnknownNode) {
		t.Errorf("Goto(nosuch) error = %v, want *UnknownNodeError for nosuch", err)
	}
}

// docs/semantics.md §2.2 step 1: a graph needing S supersteps (the __start__
// step included) runs with limit S and fails with limit S-1.
func TestRecursionLimitBoundary(t *testing.T) {
	const nodes = 4 // START step + 4 nodes = 5 supersteps
	g := graph.New[State]()
	prev := graph.START
	for i := range nodes {
		name := string(rune('a' + i))
		g.AddNode(name, logNode(nil, name)).AddEdge(prev, name)
		prev = name
	}
	for _, tc := range []struct {
		limit int
		ok    bool
	}{{nodes + 1, true}, {nodes, false}, {nodes + 2, true}} {
		r := mustCompile(t, g, graph.WithRecursionLimit(tc.limit), graph.WithSaver(checkpoint.NewMemorySaver(nil)))
		_, err := r.Invoke(context.Background(), "t", graph.Update[State]{})
		var re *graph.RecursionError
		switch {
		case tc.ok && err != nil:
			t.Errorf("limit %d: %v, want success", tc.limit, err)
		case !tc.ok && (!errors.As(err, &re) || re.Limit != tc.limit):
			t.Errorf("limit %d: error %v, want *RecursionError", tc.limit, err)
		}
	}
}

// docs/semantics.md §2.2 step 9: two writes to a last-value field in one step
// fail the step; it is not committed and both tasks' writes stay pending.
func TestConflictingLastValueWrites(t *testing.T) {
	ctx := context.Background()
	saver := checkpoint.NewMemorySaver(nil)
	write := func(v int) graph.NodeFunc[State] {
		return func(ctx context.Context, s State) (graph.Update[State], error) {
			return graph.Set(State{Count: v}, "Count"), nil
		}
	}
	g := graph.New[State]().AddNode("a", write(1)).AddNode("b", write(2)).
		AddEdge(graph.START, "a").AddEdge(graph.START, "b")
	r := mustCompile(t, g, graph.WithSaver(saver))
	_, err := r.Invoke(ctx, "t", graph.Update[State]{})
	var ce *graph.ConflictError
	if !errors.As(err, &ce) || !errors.Is(err, graph.ErrConflictingWrites) {
		t.Fatalf("Invoke error = %v, want *ConflictError", err)
	}
	if diff := cmp.Diff(&graph.ConflictError{Field: "Count", Nodes: []string{"a", "b"}, Step: 1}, ce); diff != "" {
		t.Errorf("conflict (-want +got):\n%s", diff)
	}
	tp, err := saver.Get(ctx, checkpoint.Ref{Thread: "t"}, checkpoint.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if tp.Checkpoint.Metadata.Step != 0 {
		t.Errorf("head step = %d, want 0 (step 1 not committed)", tp.Checkpoint.Metadata.Step)
	}
	nodes := map[string]bool{}
	for _, w := range tp.Pending {
		if w.Channel == "Count" {
			nodes[w.Node] = true
		}
	}
	if !nodes["a"] || !nodes["b"] {
		t.Errorf("pending Count writes from %v, want a and b", nodes)
	}
	// Reading the latest state re-applies them and reports the same error.
	if _, err := r.GetState(ctx, "t"); !errors.As(err, &ce) {
		t.Errorf("GetState error = %v, want *ConflictError", err)
	}
}

// A panicking node becomes a *PanicError with its stack; a router's panic
// too.
func TestPanicBecomesTypedError(t *testing.T) {
	for _, where := range []string{"node", "router"} {
		t.Run(where, func(t *testing.T) {
			g := graph.New[State]().
				AddNode("p", func(ctx context.Context, s State) (graph.Update[State], error) {
					if where == "node" {
						panic("boom")
					}
					return graph.Update[State]{}, nil
				}).
				AddNode("q", logNode(nil, "q")).
				AddEdge(graph.START, "p").
				AddConditionalEdges("p", func(ctx context.Context, s State) ([]string, error) {
					panic("router boom")
				})
			_, err := mustCompile(t, g).Invoke(context.Background(), "t", graph.Update[State]{})
			var pe *graph.PanicError
			var ne *graph.NodeError
			if !errors.As(err, &pe) || !errors.As(err, &ne) || !errors.Is(err, graph.ErrNodePanic) {
				t.Fatalf("error = %v, want *NodeError wrapping *PanicError", err)
			}
			if ne.Node != "p" || !strings.Contains(string(pe.Stack), "goroutine") {
				t.Errorf("node %q, stack %d bytes; want node p and a stack", ne.Node, len(pe.Stack))
			}
		})
	}
}

// Cancellation is honoured at step boundaries and reaches nodes; the thread
// is left pending at its last checkpoint.
func TestCancellationStopsAtStepBoundary(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := newCounter()
	g := graph.New[State]().
		AddNode("a", func(ctx context.Context, s State) (graph.Update[State], error) {
			c.inc("a")
			cancel()
			return graph.Set(State{Log: []string{"a"}}, "Log"), nil
		}).
		AddNode("b", logNode(c, "b")).
		AddEdge(graph.START, "a").AddEdge("a", "b")
	r := mustCompile(t, g, graph.WithSaver(checkpoint.NewMemorySaver(nil)))
	_, err := r.Invoke(ctx, "t", graph.Update[State]{})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error = %v, want context.Canceled", err)
	}
	if c.get("b") != 0 {
		t.Errorf("b ran after cancellation")
	}
	s, err := r.GetState(context.Background(), "t")
	if err != nil {
		t.Fatal(err)
	}
	if s.Status != graph.StatusPending || !slices.Equal(s.Next, []string{"b"}) {
		t.Errorf("status %s next %v, want pending [b]", s.Status, s.Next)
	}
	res, err := r.Continue(context.Background(), "t")
	if err != nil || !slices.Equal(res.Values.Log, []string{"a", "b"}) || c.get("a") != 1 {
		t.Errorf("Continue = %v, %v (a ran %d times); want log [a b], a once", res.Values.Log, err, c.get("a"))
	}
}

func TestCompileValidation(t *testing.T) {
	noop := func(ctx context.Context, s State) (graph.Update[State], error) { return graph.Update[State]{}, nil }
	tests := []struct {
		name  string
		build func() *graph.Graph[State]
		want  string // a fragment of the problem, matched on CompileError.Problem or UnknownNodeError.Name
		field string
	}{
		{"missing entry", func() *graph.Graph[State] { return graph.New[State]().AddNode("a", noop) }, "no entry point", ""},
		{"unknown edge target", func() *graph.Graph[State] {
			return graph.New[State]().AddNode("a", noop).AddEdge(graph.START, "a").AddEdge("a", "ghost")
		}, "ghost", ""},
		{"unknown edge source", func() *graph.Graph[State] {
			return graph.New[State]().AddNode("a", noop).AddEdge(graph.START, "a").AddEdge("ghost", "a")
		}, "ghost", ""},
		{"duplicate node", func() *graph.Graph[State] {
			return graph.New[State]().AddNode("a", noop).AddNode("a", noop).AddEdge(graph.START, "a")
		}, "duplicate node", ""},
		{"unreachable END", func() *graph.Graph[State] {
			return graph.New[State]().AddNode("a", noop).AddNode("b", noop).AddEdge(graph.START, "a").AddEdge("a", "b").AddEdge("b", "a")
		}, "END is unreachable", ""},
		{"reducer on missing field", func() *graph.Graph[State] {
			return graph.New[State]().AddNode("a", noop).AddEdge(graph.START, "a").Reducer("Nope", graph.Append())
		}, "does not exist", "Nope"},
		{"reducer type mismatch", func() *graph.Graph[State] {
			return graph.New[State]().AddNode("a", noop).AddEdge(graph.START, "a").Reducer("Count", graph.Append())
		}, "append reducer on a int field", "Count"},
		{"reserved name", func() *graph.Graph[State] {
			return graph.New[State]().AddNode("__x", noop).AddEdge(graph.START, "__x")
		}, "reserved", ""},
		{"empty name", func() *graph.Graph[State] { return graph.New[State]().AddNode("", noop) }, "empty node name", ""},
		{"oversized name", func() *graph.Graph[State] { return graph.New[State]().AddNode(strings.Repeat("n", 300), noop) }, "300 bytes", ""},
		{"unknown breakpoint", func() *graph.Graph[State] { return graph.New[State]().AddNode("a", noop).AddEdge(graph.START, "a") }, "zzz", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var opts []graph.Option
			if tc.name == "unknown breakpoint" {
				opts = append(opts, graph.WithInterruptBefore("zzz"))
			}
			_, err := tc.build().Compile(opts...)
			if err == nil {
				t.Fatal("Compile succeeded, want an error")
			}
			var ce *graph.CompileError
			var ue *graph.UnknownNodeError
			switch {
			case errors.As(err, &ce) && strings.Contains(ce.Problem, tc.want):
				if ce.Field != tc.field {
					t.Errorf("field = %q, want %q", ce.Field, tc.field)
				}
				if !errors.Is(err, graph.ErrInvalidGraph) {
					t.Errorf("error does not match ErrInvalidGraph")
				}
			case errors.As(err, &ue) && ue.Name == tc.want:
			default:
				t.Errorf("Compile error = %v, want a problem mentioning %q", err, tc.want)
			}
		})
	}
	type notStruct int
	if _, err := graph.New[notStruct]().Compile(); !errors.Is(err, graph.ErrInvalidGraph) {
		t.Errorf("non-struct state: %v, want ErrInvalidGraph", err)
	}
}

// A node can write a field back to its zero value, and writes only the
// fields it names.
func TestWritesOnlyNamedFieldsIncludingZero(t *testing.T) {
	g := graph.New[State]().
		AddNode("reset", func(ctx context.Context, s State) (graph.Update[State], error) {
			return graph.Set(State{Count: 0, X: "ignored"}, "Count"), nil
		}).AddEdge(graph.START, "reset")
	res, err := mustCompile(t, g).Invoke(context.Background(), "t", graph.Set(State{Count: 5, X: "kept"}, "Count", "X"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(State{Count: 0, X: "kept"}, res.Values); diff != "" {
		t.Errorf("values (-want +got):\n%s", diff)
	}
	bad := graph.New[State]().
		AddNode("a", func(ctx context.Context, s State) (graph.Update[State], error) {
			return graph.Set(State{}, "Missing"), nil
		}).AddEdge(graph.START, "a")
	_, err = mustCompile(t, bad).Invoke(context.Background(), "t", graph.Update[State]{})
	var fe *graph.UnknownFieldError
	if !errors.As(err, &fe) || fe.Field != "Missing" || fe.Node != "a" {
		t.Errorf("error = %v, want *UnknownFieldError{Missing, a}", err)
	}
}

// Overwrite replaces an append field instead of appending.
func TestOverwrite(t *testing.T) {
	g := graph.New[State]().
		AddNode("trim", func(ctx context.Context, s State) (graph.Update[State], error) {
			return graph.Set(State{Log: s.Log[len(s.Log)-1:]}).Overwrite("Log"), nil
		}).AddEdge(graph.START, "trim")
	res, err := mustCompile(t, g).Invoke(context.Background(), "t", graph.Set(State{Log: []string{"x", "y", "z"}}, "Log"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"z"}, res.Values.Log); diff != "" {
		t.Errorf("log (-want +got):\n%s", diff)
	}
}

func TestCustomReducer(t *testing.T) {
	type Sum struct{ Total int }
	add := func(ctx context.Context, s Sum) (graph.Update[Sum], error) {
		return graph.Set(Sum{Total: 5}, "Total"), nil
	}
	g := graph.New[Sum]().Reducer("Total", graph.ReduceFunc(func(a, b int) int { return a + b })).
		AddNode("a", add).AddNode("b", add).AddEdge(graph.START, "a").AddEdge(graph.START, "b")
	res, err := mustCompile(t, g).Invoke(context.Background(), "t", graph.Set(Sum{Total: 1}, "Total"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Values.Total != 11 {
		t.Errorf("Total = %d, want 1+5+5", res.Values.Total)
	}
}

// TestCompileRefusesOptionsOutOfRange: an option value out of range is a
// *CompileError (ErrInvalidGraph) naming it, never replaced by a default;
// the values at the edge of the range compile.
func TestCompileRefusesOptionsOutOfRange(t *testing.T) {
	noop := func(ctx context.Context, s State) (graph.Update[State], error) { return graph.Update[State]{}, nil }
	build := func() *graph.Graph[State] { return graph.New[State]().AddNode("a", noop).AddEdge(graph.START, "a") }
	for _, tc := range []struct {
		name string
		opt  graph.Option
		want string // a fragment of CompileError.Problem; "" compiles
	}{
		{"negative state cache", graph.WithStateCache(-1), "state cache size -1"},
		{"state cache off", graph.WithStateCache(0), ""},
		{"zero lease TTL", graph.WithLeaseTTL(0), "lease TTL"},
		{"negative lease TTL", graph.WithLeaseTTL(-time.Second), "lease TTL"},
		{"zero recursion limit", graph.WithRecursionLimit(0), "recursion limit"},
		{"zero concurrency", graph.WithConcurrency(0), "concurrency"},
		{"zero max value bytes", graph.WithMaxValueBytes(0), "max value bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := build().Compile(tc.opt)
			var ce *graph.CompileError
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Compile: %v, want it to compile", err)
			case tc.want != "" && (!errors.As(err, &ce) || !strings.Contains(ce.Problem, tc.want) || !errors.Is(err, graph.ErrInvalidGraph)):
				t.Errorf("Compile: %v, want a *CompileError about %q", err, tc.want)
			}
		})
	}
}
