package runstream_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/checkpoint/sqlite"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/interrupt"
	"github.com/lockstepgo/lockstep/runstream"
)

type order struct {
	Log    []string `lockstep:"append"`
	Answer string
}

// orderGraph drafts (streaming two chunks and a custom event), waits at
// review's gate the first time, asks a human, and ships.
func orderGraph(g *gate) *graph.Graph[order] {
	return graph.New[order]().
		AddNode("draft", func(ctx context.Context, s order) (graph.Update[order], error) {
			graph.EmitMessage(ctx, "hel")
			graph.EmitMessage(ctx, "lo")
			graph.Emit(ctx, map[string]int{"progress": 100})
			return graph.Set(order{Log: []string{"draft"}}, "Log"), nil
		}).
		AddNode("review", func(ctx context.Context, s order) (graph.Update[order], error) {
			if err := g.pass(ctx); err != nil {
				return graph.Update[order]{}, err
			}
			a, err := interrupt.Ask[string](ctx, "ship it?")
			if err != nil {
				return graph.Update[order]{}, err
			}
			return graph.Set(order{Log: []string{"review"}, Answer: a}, "Log", "Answer"), nil
		}).
		AddNode("ship", func(ctx context.Context, s order) (graph.Update[order], error) {
			return graph.Set(order{Log: []string{"ship"}}, "Log"), nil
		}).
		AddEdge(graph.START, "draft").AddEdge("draft", "review").AddEdge("review", "ship")
}

// openProcess opens what one process on the shared database has: a
// saver, a Runnable and its Hub.
func openProcess(t *testing.T, path string, g *gate) (*graph.Runnable[order], *runstream.Hub[order]) {
	t.Helper()
	s, err := sqlite.Open(path, sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	r, err := orderGraph(g).Compile(graph.WithSaver(s))
	if err != nil {
		t.Fatal(err)
	}
	return r, newHub(t, r, runstream.Options{})
}

// TestRejoin: a client that disconnects mid-run and reconnects with its
// last event ID, to the same handler or to a handler of a second process
// on the same database, gets no event twice and misses no durable one:
// together its two connections got exactly the durable events of a
// client that never left. The interrupt raised while it was away arrives
// once, and does not come again to a client that rejoins after it.
func TestRejoin(t *testing.T) {
	for _, tc := range []struct {
		second bool
		leave  string // the client leaves after draft's update, or after the values of its step
	}{{false, runstream.EventUpdates}, {false, runstream.EventValues}, {true, runstream.EventUpdates}, {true, runstream.EventValues}} {
		second := tc.second
		t.Run(fmt.Sprintf("second_process=%v/leave_after=%s", second, tc.leave), func(t *testing.T) {
			ctx := context.Background()
			path := filepath.Join(t.TempDir(), "lockstep.db")
			g := newGate()
			ra, hubA := openProcess(t, path, g)
			srvA := serve(t, hubA)
			srvB := srvA
			if second {
				_, hubB := openProcess(t, path, g)
				srvB = serve(t, hubB)
			}
			const thread = "order-7"

			// watcher never leaves; away disconnects mid-run.
			watcher := connect(t, srvA, thread, "")
			away := connect(t, srvA, thread, "")
			runErr := make(chan error, 1)
			go func() { runErr <- hubA.Run(ctx, thread, graph.StartWith(graph.Update[order]{})) }()
			g.waitEntered(t)
			first := away.until(func(e sseEvent) bool { return e.Name == runstream.EventUpdates && nodeOf(t, e) == "draft" })
			if tc.leave == runstream.EventValues {
				first = append(first, away.until(named(runstream.EventValues))...)
			}
			away.close()
			close(g.open)
			if err := <-runErr; err != nil {
				t.Fatalf("run: %v", err)
			}
			if s, _ := ra.GetState(ctx, thread); s.Status != graph.StatusWaiting {
				t.Fatalf("thread status %s, want waiting", s.Status)
			}

			last := durable(first)[len(durable(first))-1].ID
			back := connect(t, srvB, thread, last)
			second1 := back.until(named(runstream.EventInterrupt))
			in := second1[len(second1)-1]

			// Rejoining after the interrupt does not bring it again: the
			// next event is the resumed step's.
			back.close()
			again := connect(t, srvB, thread, in.ID)
			if err := hubA.Run(ctx, thread, graph.ResumeWith(graph.Command[order]{Resume: "yes"})); err != nil {
				t.Fatalf("resume: %v", err)
			}
			rest := again.until(named(runstream.EventDone))
			if e := rest[0]; e.Name != runstream.EventUpdates || nodeOf(t, e) != "review" {
				t.Errorf("first event after rejoining at the interrupt: %s %s, want the update of review", e.Name, e.Data)
			}
			all := watcher.until(named(runstream.EventDone))

			got := append(append(durable(first), durable(second1)...), durable(rest)...)
			want := durable(all)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("durable events of the rejoining client (-watcher +rejoined):\n%s", diff)
			}
			seen := map[string]bool{}
			interrupts := 0
			for _, e := range got {
				if seen[e.ID] {
					t.Errorf("event %s sent twice", e.ID)
				}
				seen[e.ID] = true
				if e.Name == runstream.EventInterrupt {
					interrupts++
				}
			}
			if interrupts != 1 {
				t.Errorf("the rejoining client got %d interrupt events, want 1", interrupts)
			}
			if n := count(durable(first), runstream.EventInterrupt); n != 0 {
				t.Errorf("the client got %d interrupt events before it left, want 0", n)
			}
			// The watcher, in the process that ran the draft, got its
			// model output live; the durable events carry every node.
			if n := count(all, runstream.EventMessages); n != 2 {
				t.Errorf("watcher got %d messages events, want 2: %v", n, all)
			}
			if n := count(all, runstream.EventCustom); n != 1 {
				t.Errorf("watcher got %d custom events, want 1", n)
			}
			var nodes []string
			for _, e := range want {
				if e.Name == runstream.EventUpdates {
					nodes = append(nodes, nodeOf(t, e))
				}
			}
			if diff := cmp.Diff([]string{"draft", "review", "ship"}, nodes); diff != "" {
				t.Errorf("updates (-want +got):\n%s", diff)
			}
		})
	}
}

func count(es []sseEvent, name string) int {
	n := 0
	for _, e := range es {
		if e.Name == name {
			n++
		}
	}
	return n
}

func nodeOf(t *testing.T, e sseEvent) string {
	t.Helper()
	var d struct{ Node string }
	if err := json.Unmarshal([]byte(e.Data), &d); err != nil {
		t.Fatalf("event %s data %q: %v", e.Name, e.Data, err)
	}
	return d.Node
}
