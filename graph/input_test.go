package graph_test

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/internal/testhook"
	"github.com/lockstepgo/lockstep/interrupt"
)

func TestBadThreadIDs(t *testing.T) {
	saver := checkpoint.NewMemorySaver(nil)
	g := graph.New[State]().AddNode("a", logNode(nil, "a")).AddEdge(graph.START, "a")
	r := mustCompile(t, g, graph.WithSaver(saver))
	for _, id := range []string{"", strings.Repeat("x", graph.MaxNameBytes+1), "a\x00b", "tab\there", "\xff"} {
		_, err := r.Invoke(context.Background(), id, graph.Update[State]{})
		if !errors.Is(err, graph.ErrInvalidInput) {
			t.Errorf("Invoke(%q) error = %v, want ErrInvalidInput", id, err)
		}
		if _, err := r.GetState(context.Background(), id); !errors.Is(err, graph.ErrInvalidInput) {
			t.Errorf("GetState(%q) error = %v, want ErrInvalidInput", id, err)
		}
	}
	if ts, _ := saver.Threads(context.Background(), 0, 0); len(ts) != 0 {
		t.Errorf("bad input wrote threads: %v", ts)
	}
	// Unknown input fields and unknown per-run breakpoints are typed too.
	if _, err := r.Invoke(context.Background(), "t", graph.Set(State{}, "Nope")); !errors.Is(err, graph.ErrUnknownField) {
		t.Errorf("unknown input field: %v", err)
	}
	if _, err := r.Invoke(context.Background(), "t", graph.Update[State]{}, graph.InterruptBefore("ghost")); !errors.Is(err, graph.ErrUnknownNode) {
		t.Errorf("unknown breakpoint: %v", err)
	}
	if _, err := r.Invoke(context.Background(), "t", graph.Update[State]{}, graph.Metadata(map[string]any{"bad key!": 1})); !errors.Is(err, graph.ErrInvalidInput) {
		t.Errorf("bad metadata key: %v", err)
	}
}

// Breaking out of a stream stops the run at the next step boundary: the
// thread is pending, the lease is released, and Continue finishes it.
func TestStreamBreakLeavesThreadPending(t *testing.T) {
	ctx := context.Background()
	c := newCounter()
	g := graph.New[State]().
		AddNode("a", logNode(c, "a")).AddNode("b", logNode(c, "b")).AddNode("c", logNode(c, "c")).
		AddEdge(graph.START, "a").AddEdge("a", "b").AddEdge("b", "c")
	r := mustCompile(t, g, graph.WithSaver(checkpoint.NewMemorySaver(nil)))
	for ev, err := range r.Stream(ctx, "t", graph.StartWith(graph.Update[State]{})) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Kind == graph.EventUpdates && ev.Node == "a" {
			break
		}
	}
	s, err := r.GetState(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	if s.Status != graph.StatusPending || !slices.Equal(s.Next, []string{"b"}) {
		t.Errorf("after break: status %s next %v, want pending [b]", s.Status, s.Next)
	}
	res, err := r.Continue(ctx, "t") // would be ErrThreadBusy if the lease were kept
	if err != nil || !slices.Equal(res.Values.Log, []string{"a", "b", "c"}) || c.get("a") != 1 {
		t.Errorf("Continue = %v, %v (a ran %d)", res.Values.Log, err, c.get("a"))
	}
}

// TestHookPoints: the test hook the context carries (internal/testhook)
// is called at the runner's points, in order, by runs and by UpdateState;
// the other calls of the Runnable pass none.
func TestHookPoints(t *testing.T) {
	var mu sync.Mutex
	var points []string
	hook := func(p string) {
		mu.Lock()
		points = append(points, p)
		mu.Unlock()
	}
	ctx := testhook.With(context.Background(), hook)
	g := graph.New[State]().AddNode("a", logNode(nil, "a")).AddEdge(graph.START, "a")
	r := mustCompile(t, g, graph.WithSaver(checkpoint.NewMemorySaver(nil)))
	save := []string{testhook.GraphBeforeSave, testhook.GraphAfterSave}
	step := append([]string{testhook.GraphAfterTask}, save...)
	for _, tc := range []struct {
		name string
		call func(ctx context.Context) error
		want []string
	}{
		{"Invoke", func(ctx context.Context) error { _, err := r.Invoke(ctx, "t", graph.Update[State]{}); return err },
			// The input checkpoint is saved with __start__'s, in one transaction.
			slices.Concat(step, step)}, // __start__, a
		{"UpdateState", func(ctx context.Context) error {
			_, err := r.UpdateState(ctx, "t", graph.Set(State{X: "x"}, "X"), graph.UpdateOptions{AsNode: "a"})
			return err
		}, save},
		{"GetState", func(ctx context.Context) error { _, err := r.GetState(ctx, "t"); return err }, nil},
		{"Invoke without a hook", func(context.Context) error {
			_, err := r.Invoke(context.Background(), "u", graph.Update[State]{})
			return err
		}, nil},
	} {
		points = nil
		if err := tc.call(ctx); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if diff := cmp.Diff(tc.want, points); diff != "" {
			t.Errorf("%s: hook points (-want +got):\n%s", tc.name, diff)
		}
	}
}

// Strings that JSON cannot carry unchanged are refused, not silently
// replaced (docs/reliability.md R20); a real U+FFFD and a literal backslash-u
// sequence are fine.
func TestInvalidUTF8IsRefused(t *testing.T) {
	write := func(v string) graph.NodeFunc[State] {
		return func(ctx context.Context, s State) (graph.Update[State], error) {
			return graph.Set(State{X: v}, "X"), nil
		}
	}
	for _, tc := range []struct {
		name, value string
		ok          bool
	}{
		{"invalid byte", "caf\xe9", false},
		{"replacement char", "caf\ufffd", true},
		{"literal escape text", `a\ufffd b`, true},
		{"escaped backslash then invalid", "\\\xff", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := graph.New[State]().AddNode("w", write(tc.value)).AddEdge(graph.START, "w")
			res, err := mustCompile(t, g, graph.WithSaver(checkpoint.NewMemorySaver(nil))).Invoke(context.Background(), "t", graph.Update[State]{})
			if tc.ok {
				if err != nil || res.Values.X != tc.value {
					t.Errorf("got %q, %v; want %q", res.Values.X, err, tc.value)
				}
				return
			}
			if !errors.Is(err, graph.ErrNotSerializable) {
				t.Errorf("error = %v, want ErrNotSerializable", err)
			}
		})
	}
}

// TestOptionsFailClosed: options that cannot work are refused with their
// typed errors instead of being ignored or panicking later: breakpoints
// without a saver (at Compile and per run), a nil saver of a concrete
// type, unknown nodes at Compile (which are invalid graphs too), a
// recursion limit of 0, a negative History limit, a History filter the
// saver refuses, and a resume answer that does not encode.
func TestOptionsFailClosed(t *testing.T) {
	ctx := context.Background()
	g := func() *graph.Graph[State] {
		return graph.New[State]().AddNode("a", logNode(nil, "a")).AddEdge(graph.START, "a")
	}
	var nilSaver *checkpoint.MemorySaver
	compileCases := []struct {
		name string
		g    *graph.Graph[State]
		opts []graph.Option
		want []error
	}{
		{"breakpoint before without a saver", g(), []graph.Option{graph.WithInterruptBefore("a")}, []error{graph.ErrInvalidGraph}},
		{"breakpoint after without a saver", g(), []graph.Option{graph.WithInterruptAfter("*")}, []error{graph.ErrInvalidGraph}},
		{"typed nil saver", g(), []graph.Option{graph.WithSaver(nilSaver)}, []error{graph.ErrInvalidGraph}},
		{"unknown edge target", g().AddEdge("a", "zz"), nil, []error{graph.ErrInvalidGraph, graph.ErrUnknownNode}},
		{"unknown breakpoint", g(), []graph.Option{graph.WithSaver(checkpoint.NewMemorySaver(nil)), graph.WithInterruptBefore("nope")}, []error{graph.ErrInvalidGraph, graph.ErrUnknownNode}},
	}
	for _, tc := range compileCases {
		_, err := tc.g.Compile(tc.opts...)
		for _, want := range tc.want {
			if !errors.Is(err, want) {
				t.Errorf("%s: Compile: %v, want it to match %v", tc.name, err, want)
			}
		}
	}

	noSaver := mustCompile(t, g())
	if _, err := noSaver.Invoke(ctx, "t", graph.Update[State]{}, graph.InterruptAfter("a")); !errors.Is(err, graph.ErrNoSaver) {
		t.Errorf("per-run breakpoint without a saver: %v, want ErrNoSaver", err)
	}
	saver := checkpoint.NewMemorySaver(nil)
	r := mustCompile(t, g(), graph.WithSaver(saver))
	if _, err := r.Invoke(ctx, "t0", graph.Update[State]{}, graph.RecursionLimit(0)); !errors.Is(err, graph.ErrInvalidInput) {
		t.Errorf("RecursionLimit(0): %v, want ErrInvalidInput", err)
	}
	if _, err := r.Invoke(ctx, "t", graph.Update[State]{}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.History(ctx, "t", graph.HistoryOptions{Limit: -1}); !errors.Is(err, graph.ErrInvalidInput) {
		t.Errorf("History Limit -1: %v, want ErrInvalidInput", err)
	}
	if _, err := r.History(ctx, "t", graph.HistoryOptions{Filter: map[string]any{"bad key!": 1}}); !errors.Is(err, graph.ErrInvalidInput) || !errors.Is(err, checkpoint.ErrInvalid) {
		t.Errorf("History with a bad filter: %v, want ErrInvalidInput and checkpoint.ErrInvalid", err)
	}

	asking := mustCompile(t, graph.New[State]().AddNode("ask", askNode(newCounter(), "ask", "ok?")).AddEdge(graph.START, "ask"), graph.WithSaver(saver))
	if _, err := asking.Invoke(ctx, "w", graph.Update[State]{}); err != nil {
		t.Fatal(err)
	}
	_, err := asking.Resume(ctx, "w", graph.Command[State]{Resume: math.Inf(1)})
	var ee *graph.EncodeError
	var ve *interrupt.ValueError
	if !errors.Is(err, graph.ErrNotSerializable) || !errors.As(err, &ee) || !errors.As(err, &ve) || !strings.Contains(err.Error(), `thread "w"`) {
		t.Errorf("an answer that does not encode: %v, want an *EncodeError naming the thread around the *interrupt.ValueError", err)
	}
}

// TestErrorsNameTheThread: failures of an operation on a thread say which
// thread, whatever part of the input was wrong.
func TestErrorsNameTheThread(t *testing.T) {
	ctx := context.Background()
	g := func() *graph.Graph[State] {
		return graph.New[State]().AddNode("a", logNode(nil, "a")).AddEdge(graph.START, "a")
	}
	noSaver := mustCompile(t, g())
	r := mustCompile(t, g(), graph.WithSaver(checkpoint.NewMemorySaver(nil)))
	if _, err := r.Invoke(ctx, "th-x", graph.Update[State]{}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"GetState without a saver", func() error { _, err := noSaver.GetState(ctx, "th-x"); return err }},
		{"History without a saver", func() error { _, err := noSaver.History(ctx, "th-x", graph.HistoryOptions{}); return err }},
		{"input names an unknown field", func() error {
			_, err := r.Invoke(ctx, "th-x", graph.Set(State{}, "Ghost"))
			return err
		}},
		{"UpdateState as an unknown node", func() error {
			_, err := r.UpdateState(ctx, "th-x", graph.Set(State{X: "1"}, "X"), graph.UpdateOptions{AsNode: "zz"})
			return err
		}},
	} {
		err := tc.call()
		if err == nil || !strings.Contains(err.Error(), `"th-x"`) {
			t.Errorf("%s: %v, want an error naming the thread", tc.name, err)
		}
	}
}

// TestUpdateAsInputIsARunsInput (docs/semantics.md §6, test_update_as_input):
// an update as the input of a new thread, then Continue, writes the same
// history as Invoke with that input: the input checkpoint at step -1, then
// the steps from 0, with the same values and next tasks.
func TestUpdateAsInputIsARunsInput(t *testing.T) {
	ctx := context.Background()
	g := graph.New[State]().AddNode("a", logNode(nil, "a")).AddNode("b", logNode(nil, "b")).
		AddEdge(graph.START, "a").AddEdge("a", "b")
	r := mustCompile(t, g, graph.WithSaver(checkpoint.NewMemorySaver(nil)))
	in := graph.Set(State{X: "in"}, "X")
	if _, err := r.Invoke(ctx, "run", in); err != nil {
		t.Fatal(err)
	}
	if _, err := r.UpdateState(ctx, "upd", in, graph.UpdateOptions{AsNode: graph.AsInput}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Continue(ctx, "upd"); err != nil {
		t.Fatal(err)
	}
	type point struct {
		Source checkpoint.Source
		Step   int
		Next   []string
		Values State
	}
	trace := func(thread string) []point {
		h, err := r.History(ctx, thread, graph.HistoryOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var out []point
		for _, s := range h {
			out = append(out, point{s.Metadata.Source, s.Metadata.Step, s.Next, s.Values})
		}
		return out
	}
	if d := cmp.Diff(trace("run"), trace("upd")); d != "" {
		t.Errorf("history (-Invoke +UpdateState AsInput, Continue):\n%s", d)
	}
}
