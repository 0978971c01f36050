package graph_test

import (
	"context"
	"os"
	"sync"
	"testing"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv(envDurChild) != "" {
		os.Exit(durabilityChild()) // a child of TestDurabilityCrashLoop
	}
	goleak.VerifyTestMain(m)
}

// State is the state most tests use.
type State struct {
	Count  int
	Log    []string          `lockstep:"append"`
	Tags   map[string]string `lockstep:"merge"`
	X, Y   string
	Answer string
}

// counter counts node executions by name; safe for concurrent use.
type counter struct {
	mu sync.Mutex
	n  map[string]int
}

func newCounter() *counter { return &counter{n: map[string]int{}} }

func (c *counter) inc(name string) {
	c.mu.Lock()
	c.n[name]++
	c.mu.Unlock()
}

func (c *counter) get(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[name]
}

// logNode appends its name to Log and counts its runs.
func logNode(c *counter, name string) graph.NodeFunc[State] {
	return func(ctx context.Context, s State) (graph.Update[State], error) {
		if c != nil {
			c.inc(name)
		}
		return graph.Set(State{Log: []string{name}}, "Log"), nil
	}
}

func mustCompile[S any](t testing.TB, g *graph.Graph[S], opts ...graph.Option) *graph.Runnable[S] {
	t.Helper()
	r, err := g.Compile(opts...)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	return r
}

// cpSummary is what the semantics tests compare about a checkpoint.
type cpSummary struct {
	Source checkpoint.Source
	Step   int
	Next   []string
	Parent int // index of the parent in the same history (newest first), -1 for none
}

func summarize[S any](t testing.TB, hist []graph.Snapshot[S]) []cpSummary {
	t.Helper()
	idx := map[string]int{}
	for i, s := range hist {
		idx[s.Config.CheckpointID] = i
	}
	out := make([]cpSummary, len(hist))
	for i, s := range hist {
		p := -1
		if s.ParentConfig != nil {
			var ok bool
			if p, ok = idx[s.ParentConfig.CheckpointID]; !ok {
				t.Fatalf("checkpoint %s has parent %s outside the history", s.Config.CheckpointID, s.ParentConfig.CheckpointID)
			}
		}
		next := s.Next
		if next == nil {
			next = []string{}
		}
		out[i] = cpSummary{Source: s.Metadata.Source, Step: s.Metadata.Step, Next: next, Parent: p}
	}
	return out
}

func history[S any](t testing.TB, r *graph.Runnable[S], thread string) []graph.Snapshot[S] {
	t.Helper()
	h, err := r.History(context.Background(), thread, graph.HistoryOptions{})
	if err != nil {
		t.Fatalf("History(%q): %v", thread, err)
	}
	return h
}
