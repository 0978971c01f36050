package graph_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
)

// TestRunnerNames: a Runnable's runner name is random by default (two
// Compiles differ), WithRunner sets it, and a name that is empty or longer
// than 256 bytes does not compile. Every lease of its runs names it, and
// TaskInfo names the run and says it holds the thread's lease.
func TestRunnerNames(t *testing.T) {
	build := func(opts ...graph.Option) (*graph.Runnable[State], error) {
		g := graph.New[State]()
		g.AddNode("a", func(ctx context.Context, s State) (graph.Update[State], error) {
			info, _ := graph.TaskFrom(ctx)
			return graph.Set(State{X: info.Run, Y: map[bool]string{true: "leased", false: "unleased"}[info.Leased]}, "X", "Y"), nil
		})
		g.AddEdge(graph.START, "a").AddEdge("a", graph.END)
		return g.Compile(opts...)
	}
	a, _ := build()
	b, _ := build()
	if a.Runner() == "" || a.Runner() == b.Runner() {
		t.Errorf("default runners %q and %q: want two different names", a.Runner(), b.Runner())
	}
	for _, bad := range []string{"", strings.Repeat("r", 257)} {
		if _, err := build(graph.WithRunner(bad)); !errors.Is(err, graph.ErrInvalidGraph) {
			t.Errorf("WithRunner(%d bytes): %v, want ErrInvalidGraph", len(bad), err)
		}
	}
	s := checkpoint.NewMemorySaver(nil)
	runs := 0
	r, err := build(graph.WithSaver(s), graph.WithRunner("worker-1"), graph.WithRunIDs(func() string { runs++; return "run-" + string(rune('0'+runs)) }))
	if err != nil || r.Runner() != "worker-1" {
		t.Fatalf("WithRunner: %v, runner %q", err, r.Runner())
	}
	res, err := r.Invoke(t.Context(), "t", graph.Set(State{}, "Count"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Values.X != "run-1" || res.Values.Y != "leased" {
		t.Errorf("TaskInfo: run %q, %s; want run-1, leased", res.Values.X, res.Values.Y)
	}
	lease, err := s.Lease(t.Context(), "t", "")
	if err != nil || lease.Epoch != 1 || lease.Owner != "" {
		t.Errorf("lease after the run: %+v, %v; want released at epoch 1", lease, err)
	}
	res, _ = a.Invoke(t.Context(), "t", graph.Set(State{}, "Count"))
	if res.Values.Y != "unleased" {
		t.Errorf("TaskInfo without a saver: %s, want unleased", res.Values.Y)
	}
}

// TestSameRunnerLiveRunBusy: while one run of a Runnable holds a thread,
// another run of the same Runnable on it does not take the lease back: it
// gets a *checkpoint.BusyError that names the run and says it belongs to
// this runner and is still running. Once the first run ends, the second
// goes on.
func TestSameRunnerLiveRunBusy(t *testing.T) {
	s := checkpoint.NewMemorySaver(nil)
	entered, release := make(chan struct{}), make(chan struct{})
	g := graph.New[State]()
	g.AddNode("slow", func(ctx context.Context, st State) (graph.Update[State], error) {
		if st.Count == 0 {
			close(entered)
			<-release
		}
		return graph.Set(State{Count: st.Count + 1}, "Count"), nil
	})
	g.AddEdge(graph.START, "slow").AddEdge("slow", graph.END)
	r, err := g.Compile(graph.WithSaver(s), graph.WithLeaseTTL(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := r.Invoke(context.Background(), "t", graph.Set(State{}, "Count"))
		done <- err
	}()
	<-entered
	lease, err := s.Lease(t.Context(), "t", "")
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.Continue(t.Context(), "t")
	var be *checkpoint.BusyError
	if !errors.As(err, &be) || be.Owner != lease.Owner || be.Runner != r.Runner() || !be.SameRunner {
		t.Errorf("a second run of the same Runnable: %v, want a *BusyError naming the live run of this runner", err)
	} else if !strings.Contains(err.Error(), "belongs to this runner and is still running") {
		t.Errorf("message %q does not say the run is this runner's and still running", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := r.Invoke(t.Context(), "t", graph.Set(State{Count: 5}, "Count")); err != nil {
		t.Errorf("a run after the first ended: %v", err)
	}
}
