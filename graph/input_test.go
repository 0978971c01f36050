package graph_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
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

func TestHookPoints(t *testing.T) {
	var mu sync.Mutex
	var points []string
	hook := func(p string) {
		mu.Lock()
		points = append(points, p)
		mu.Unlock()
	}
	g := graph.New[State]().AddNode("a", logNode(nil, "a")).AddEdge(graph.START, "a")
	r := mustCompile(t, g, graph.WithSaver(checkpoint.NewMemorySaver(nil)), graph.WithHook(hook))
	if _, err := r.Invoke(context.Background(), "t", graph.Update[State]{}); err != nil {
		t.Fatal(err)
	}
	want := []string{
		// The input checkpoint is saved with __start__'s, in one transaction.
		graph.HookAfterTask, graph.HookBeforeSave, graph.HookAfterSave, // __start__
		graph.HookAfterTask, graph.HookBeforeSave, graph.HookAfterSave, // a
	}
	if diff := cmp.Diff(want, points); diff != "" {
		t.Errorf("hook points (-want +got):\n%s", diff)
	}
}

// Strings that JSON cannot carry unchanged are refused, not silently
// replaced (RELIABILITY R20); a real U+FFFD and a literal backslash-u
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
