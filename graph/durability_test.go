package graph_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
)

var modes = []graph.DurabilityMode{graph.DurabilitySync, graph.DurabilityAsync, graph.DurabilityExit}

// watchSaver wraps a saver: it counts the puts in progress, can hold the
// put of a step until release is closed, and fails the first put of
// failStep with failErr. It hides the saver's optional interfaces, so a
// chain is saved one Put at a time.
type watchSaver struct {
	checkpoint.Saver
	inflight atomic.Int32
	delay    time.Duration

	mu       sync.Mutex
	failStep int // -2: none
	failErr  error
	holdStep int // -2: none
	release  chan struct{}
	held     bool // the held put was released by release, not by its bound
}

func newWatchSaver(s checkpoint.Saver) *watchSaver {
	return &watchSaver{Saver: s, failStep: -2, holdStep: -2}
}

func (w *watchSaver) Put(ctx context.Context, req checkpoint.PutRequest) error {
	w.inflight.Add(1)
	defer w.inflight.Add(-1)
	if w.delay > 0 {
		time.Sleep(w.delay)
	}
	step := req.Checkpoint.Metadata.Step
	w.mu.Lock()
	fail := step == w.failStep
	if fail {
		w.failStep = -2
	}
	hold, release := step == w.holdStep, w.release
	w.mu.Unlock()
	if fail {
		return w.failErr
	}
	if hold {
		select {
		case <-release:
			w.mu.Lock()
			w.held = true
			w.mu.Unlock()
		case <-time.After(30 * time.Second):
		}
	}
	return w.Saver.Put(ctx, req)
}

// linear is START → a → b → c → d, each node appending its name.
func linear(c *counter, opts ...graph.Option) func(s checkpoint.Saver) *graph.Runnable[State] {
	return func(s checkpoint.Saver) *graph.Runnable[State] {
		g := graph.New[State]()
		prev := graph.START
		for _, n := range []string{"a", "b", "c", "d"} {
			g.AddNode(n, logNode(c, n)).AddEdge(prev, n)
			prev = n
		}
		r, err := g.Compile(append([]graph.Option{graph.WithSaver(s)}, opts...)...)
		if err != nil {
			panic(err)
		}
		return r
	}
}

func steps[S any](hist []graph.Snapshot[S]) []int {
	out := []int{}
	for _, h := range hist {
		out = append(out, h.Metadata.Step)
	}
	return out
}

// What each mode saves: sync and async every step, exit the checkpoint
// the run ends on with its input; the state is the same in all three.
func TestDurabilitySaves(t *testing.T) {
	want := map[graph.DurabilityMode][]int{
		graph.DurabilitySync:  {10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, -1},
		graph.DurabilityAsync: {10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, -1},
		graph.DurabilityExit:  {10, 5, 4, -1},
	}
	for _, sf := range saverFactories {
		for _, mode := range modes {
			for _, how := range []string{"compiled", "run option"} {
				t.Run(sf.name+"/"+string(mode)+"/"+how, func(t *testing.T) {
					ctx := context.Background()
					c := newCounter()
					w := newWatchSaver(sf.open(t, nil))
					w.delay = time.Millisecond // puts take a while: async has them in flight
					var copts []graph.Option
					var ropts []graph.RunOption
					if how == "compiled" {
						copts = append(copts, graph.WithDurability(mode))
					} else {
						copts = append(copts, graph.WithDurability(graph.DurabilityExit)) // overridden
						ropts = append(ropts, graph.Durability(mode))
					}
					r := linear(c, copts...)(w)
					for i := range 2 {
						res, err := r.Invoke(ctx, "t", graph.Update[State]{}, ropts...)
						if err != nil {
							t.Fatalf("Invoke %d: %v", i, err)
						}
						if n := w.inflight.Load(); n != 0 {
							t.Fatalf("Invoke %d returned with %d puts in progress", i, n)
						}
						if res.Status != graph.StatusDone {
							t.Fatalf("Invoke %d: status %s, want done", i, res.Status)
						}
					}
					hist := history(t, r, "t")
					if diff := cmp.Diff(want[mode], steps(hist)); diff != "" {
						t.Errorf("steps of the saved checkpoints, newest first (-want +got):\n%s", diff)
					}
					for _, h := range hist {
						// The mode that wrote each checkpoint is in its metadata.
						if got := h.Metadata.Durability; got != string(mode) {
							t.Errorf("checkpoint of step %d: Metadata.Durability %q, want %q", h.Metadata.Step, got, mode)
						}
					}
					for i, h := range hist {
						if i+1 < len(hist) && (h.ParentConfig == nil || h.ParentConfig.CheckpointID != hist[i+1].Config.CheckpointID) {
							t.Errorf("checkpoint %d (step %d): parent %v, want the next older one %s", i, h.Metadata.Step, h.ParentConfig, hist[i+1].Config.CheckpointID)
						}
					}
					snap, err := r.GetState(ctx, "t")
					if err != nil {
						t.Fatal(err)
					}
					if diff := cmp.Diff([]string{"a", "b", "c", "d", "a", "b", "c", "d"}, snap.Values.Log); diff != "" {
						t.Errorf("Log (-want +got):\n%s", diff)
					}
					if snap.Status != graph.StatusDone {
						t.Errorf("status %s, want done", snap.Status)
					}
					// An update commits at once, whatever the graph's mode.
					cfg, err := r.UpdateState(ctx, "t", graph.Update[State]{}, graph.UpdateOptions{AsNode: "d"})
					if err != nil {
						t.Fatal(err)
					}
					up, err := r.GetStateAt(ctx, "t", cfg.CheckpointID)
					if err != nil {
						t.Fatal(err)
					}
					if got := up.Metadata.Durability; up.Metadata.Source != checkpoint.SourceUpdate || got != string(graph.DurabilitySync) {
						t.Errorf("UpdateState's checkpoint: source %s, Metadata.Durability %q, want update and sync", up.Metadata.Source, got)
					}
				})
			}
		}
	}
}

// An invalid mode is a typed error at compile and at run, and a run with
// one writes nothing.
func TestDurabilityInvalid(t *testing.T) {
	c := newCounter()
	g := graph.New[State]().AddNode("a", logNode(c, "a")).AddEdge(graph.START, "a")
	_, err := g.Compile(graph.WithSaver(checkpoint.NewMemorySaver(nil)), graph.WithDurability("fast"))
	var ce *graph.CompileError
	if !errors.Is(err, graph.ErrInvalidGraph) || !errors.As(err, &ce) {
		t.Fatalf("Compile with durability %q: %v, want a *CompileError", "fast", err)
	}
	r := mustCompile(t, g, graph.WithSaver(checkpoint.NewMemorySaver(nil)))
	_, err = r.Invoke(context.Background(), "t", graph.Update[State]{}, graph.Durability(""))
	if !errors.Is(err, graph.ErrInvalidInput) {
		t.Fatalf("Invoke with durability %q: %v, want ErrInvalidInput", "", err)
	}
	if _, err := r.GetState(context.Background(), "t"); !errors.Is(err, graph.ErrThreadNotFound) {
		t.Fatalf("GetState after the refused run: %v, want ErrThreadNotFound", err)
	}
	if c.get("a") != 0 {
		t.Fatal("a ran")
	}
}

// The caller sees the same interrupt and resume in every mode, and a
// resume runs only the interrupted node: its finished sibling keeps its
// saved writes (in exit mode saved with the checkpoint the run paused on).
func TestDurabilityInterruptResume(t *testing.T) {
	type seen struct {
		Status    graph.Status
		Next      []string
		Questions []string
		Log       []string
		Runs      map[string]int
		Event     bool // the stream's interrupt event arrived with no put in progress
	}
	wantSteps := map[graph.DurabilityMode][2][]int{
		graph.DurabilitySync:  {{1, 0, -1}, {3, 2, 1, 0, -1}},
		graph.DurabilityAsync: {{1, 0, -1}, {3, 2, 1, 0, -1}},
		graph.DurabilityExit:  {{1, -1}, {3, 1, -1}},
	}
	for _, sf := range saverFactories {
		var want [2]seen
		for _, mode := range modes {
			t.Run(sf.name+"/"+string(mode), func(t *testing.T) {
				ctx := context.Background()
				c := newCounter()
				w := newWatchSaver(sf.open(t, nil))
				w.delay = time.Millisecond
				g := graph.New[State]().
					AddNode("a", logNode(c, "a")).AddNode("x", askNode(c, "x", "ok?")).AddNode("sib", logNode(c, "sib")).AddNode("b", logNode(c, "b")).
					AddEdge(graph.START, "a").AddEdge("a", "x").AddEdge("a", "sib").AddJoin([]string{"x", "sib"}, "b")
				r := mustCompile(t, g, graph.WithSaver(w), graph.WithDurability(mode))
				var got [2]seen
				var res graph.Result[State]
				for ev, err := range r.Stream(ctx, "t", graph.StartWith(graph.Update[State]{})) {
					if err != nil {
						t.Fatalf("Stream: %v", err)
					}
					if ev.Kind == graph.EventInterrupt {
						got[0].Event = w.inflight.Load() == 0
					}
				}
				snap, err := r.GetState(ctx, "t")
				if err != nil {
					t.Fatal(err)
				}
				got[0].Status, got[0].Next, got[0].Log = snap.Status, snap.Next, snap.Values.Log
				for _, in := range snap.Interrupts {
					var q string
					if err := in.Decode(&q); err != nil {
						t.Fatal(err)
					}
					got[0].Questions = append(got[0].Questions, q)
				}
				got[0].Runs = map[string]int{"a": c.get("a"), "sib": c.get("sib"), "x": c.get("x"), "b": c.get("b")}
				if diff := cmp.Diff(wantSteps[mode][0], steps(history(t, r, "t"))); diff != "" {
					t.Errorf("saved steps after the interrupt (-want +got):\n%s", diff)
				}
				res, err = r.Resume(ctx, "t", graph.Command[State]{Resume: "yes"})
				if err != nil {
					t.Fatalf("Resume: %v", err)
				}
				got[1] = seen{Status: res.Status, Next: res.Next, Log: res.Values.Log, Event: w.inflight.Load() == 0,
					Runs: map[string]int{"a": c.get("a"), "sib": c.get("sib"), "x": c.get("x"), "b": c.get("b")}}
				if diff := cmp.Diff(wantSteps[mode][1], steps(history(t, r, "t"))); diff != "" {
					t.Errorf("saved steps after the resume (-want +got):\n%s", diff)
				}
				if mode == graph.DurabilitySync {
					want = got
					if !got[0].Event || !got[1].Event || got[1].Runs["x"] != 2 || got[1].Runs["sib"] != 1 {
						t.Fatalf("sync: %+v", got)
					}
					return
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("what the caller sees differs from sync (-sync +%s):\n%s", mode, diff)
				}
			})
		}
	}
}

var errDisk = errors.New("disk on fire")

// A save that fails is the run's *SaveError in every mode; in async it
// fails while the next step runs, and the run stops at the first step's
// end after the failure (at most the queue's bound of steps later).
// Continue picks the thread up from the last checkpoint saved.
func TestDurabilitySaveError(t *testing.T) {
	cases := []struct {
		mode     graph.DurabilityMode
		failStep int            // the step whose put fails
		errStep  int            // the step the *SaveError names: the last of the chain
		runs     map[string]int // after the failed run
		head     int            // step of the head after it; -2: no checkpoint
		reruns   map[string]int // after Continue
	}{
		{graph.DurabilitySync, 1, 1, map[string]int{"a": 1, "b": 0, "c": 0, "d": 0}, 0, map[string]int{"a": 2, "b": 1, "c": 1, "d": 1}},
		{graph.DurabilityAsync, 1, 1, map[string]int{"a": 1, "b": 1, "c": 0, "d": 0}, 0, map[string]int{"a": 2, "b": 2, "c": 1, "d": 1}},
		// The input's put fails: this saver takes a chain one put at a time.
		{graph.DurabilityExit, -1, 4, map[string]int{"a": 1, "b": 1, "c": 1, "d": 1}, -2, nil},
	}
	for _, sf := range saverFactories {
		for _, tc := range cases {
			t.Run(sf.name+"/"+string(tc.mode), func(t *testing.T) {
				ctx := context.Background()
				c := newCounter()
				w := newWatchSaver(sf.open(t, nil))
				w.failStep, w.failErr = tc.failStep, errDisk
				r := linear(c, graph.WithDurability(tc.mode))(w)
				_, err := r.Invoke(ctx, "t", graph.Update[State]{})
				var se *graph.SaveError
				if !errors.As(err, &se) || !errors.Is(err, errDisk) {
					t.Fatalf("Invoke: %v, want a *SaveError around %v", err, errDisk)
				}
				if se.Thread != "t" || se.Checkpoint == "" || se.Step != tc.errStep || se.Durability != tc.mode {
					t.Errorf("SaveError = %+v, want thread t, a checkpoint, step %d, mode %s", se, tc.errStep, tc.mode)
				}
				runs := map[string]int{"a": c.get("a"), "b": c.get("b"), "c": c.get("c"), "d": c.get("d")}
				tc.runs, tc.reruns = maps.Clone(tc.runs), maps.Clone(tc.reruns)
				if tc.mode == graph.DurabilityAsync {
					// The steps after the failed one ran until the run
					// learnt of the failure, at a step's end: b at least
					// (it ran while the save was in flight), perhaps
					// more (they were queued behind it).
					for _, n := range []string{"c", "d"} {
						tc.runs[n] = runs[n]
						tc.reruns[n] = 1 + runs[n]
					}
				}
				if diff := cmp.Diff(tc.runs, runs); diff != "" {
					t.Errorf("node runs (-want +got):\n%s", diff)
				}
				snap, err := r.GetState(ctx, "t")
				if tc.head == -2 {
					if !errors.Is(err, graph.ErrThreadNotFound) {
						t.Fatalf("GetState: %v, want ErrThreadNotFound (nothing saved)", err)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				if snap.Metadata.Step != tc.head || snap.Status != graph.StatusPending {
					t.Fatalf("head: step %d status %s, want step %d pending", snap.Metadata.Step, snap.Status, tc.head)
				}
				res, err := r.Continue(ctx, "t")
				if err != nil || res.Status != graph.StatusDone {
					t.Fatalf("Continue: %v %v", res.Status, err)
				}
				runs = map[string]int{"a": c.get("a"), "b": c.get("b"), "c": c.get("c"), "d": c.get("d")}
				if diff := cmp.Diff(tc.reruns, runs); diff != "" {
					t.Errorf("node runs after Continue (-want +got):\n%s", diff)
				}
			})
		}
	}
}

// In async mode a step runs while the checkpoint of the step before it is
// being saved.
func TestDurabilityAsyncOverlaps(t *testing.T) {
	for _, sf := range saverFactories {
		t.Run(sf.name, func(t *testing.T) {
			w := newWatchSaver(sf.open(t, nil))
			w.holdStep, w.release = 1, make(chan struct{})
			var once sync.Once
			c := newCounter()
			g := graph.New[State]().
				AddNode("a", logNode(c, "a")).
				AddNode("b", func(ctx context.Context, s State) (graph.Update[State], error) {
					once.Do(func() { close(w.release) })
					return graph.Set(State{Log: []string{"b"}}, "Log"), nil
				}).
				AddEdge(graph.START, "a").AddEdge("a", "b")
			r := mustCompile(t, g, graph.WithSaver(w), graph.WithDurability(graph.DurabilityAsync))
			if _, err := r.Invoke(context.Background(), "t", graph.Update[State]{}); err != nil {
				t.Fatal(err)
			}
			w.mu.Lock()
			defer w.mu.Unlock()
			if !w.held {
				t.Fatal("the put of step 1 was not released by step 2's node: the steps did not overlap")
			}
		})
	}
}

// Exit mode saves the checkpoint a run stops on: after a node's failure
// (with the failure, so that only that node runs again), after the run's
// context ended between steps, and mid-step for a durable step's result.
func TestDurabilityExitStops(t *testing.T) {
	t.Run("failure", func(t *testing.T) {
		for _, sf := range saverFactories {
			t.Run(sf.name, func(t *testing.T) {
				ctx := context.Background()
				c := newCounter()
				var fail atomic.Bool
				fail.Store(true)
				g := graph.New[State]().
					AddNode("a", logNode(c, "a")).
					AddNode("f", func(ctx context.Context, s State) (graph.Update[State], error) {
						c.inc("f")
						if fail.Load() {
							return graph.Update[State]{}, errors.New("card declined")
						}
						return graph.Set(State{Log: []string{"f"}}, "Log"), nil
					}).
					AddNode("b", logNode(c, "b")).
					AddEdge(graph.START, "a").AddEdge("a", "f").AddEdge("f", "b")
				r := mustCompile(t, g, graph.WithSaver(sf.open(t, nil)), graph.WithDurability(graph.DurabilityExit))
				var ne *graph.NodeError
				if _, err := r.Invoke(ctx, "t", graph.Update[State]{}); !errors.As(err, &ne) {
					t.Fatalf("Invoke: %v, want a *NodeError", err)
				}
				if diff := cmp.Diff([]int{1, -1}, steps(history(t, r, "t"))); diff != "" {
					t.Errorf("saved steps (-want +got):\n%s", diff)
				}
				snap, err := r.GetState(ctx, "t")
				if err != nil || snap.Status != graph.StatusFailed {
					t.Fatalf("GetState: %v %v, want failed", snap.Status, err)
				}
				fail.Store(false)
				if res, err := r.Continue(ctx, "t"); err != nil || res.Status != graph.StatusDone {
					t.Fatalf("Continue: %v %v", res.Status, err)
				}
				if got := [3]int{c.get("a"), c.get("f"), c.get("b")}; got != [3]int{1, 2, 1} {
					t.Errorf("runs of a, f, b = %v, want [1 2 1]", got)
				}
			})
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		for _, sf := range saverFactories {
			t.Run(sf.name, func(t *testing.T) {
				c := newCounter()
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				g := graph.New[State]().
					AddNode("a", logNode(c, "a")).
					AddNode("b", func(_ context.Context, s State) (graph.Update[State], error) {
						c.inc("b")
						cancel() // the run stops at the step's end
						return graph.Set(State{Log: []string{"b"}}, "Log"), nil
					}).
					AddNode("c", logNode(c, "c")).
					AddEdge(graph.START, "a").AddEdge("a", "b").AddEdge("b", "c")
				r := mustCompile(t, g, graph.WithSaver(sf.open(t, nil)), graph.WithDurability(graph.DurabilityExit))
				if _, err := r.Invoke(ctx, "t", graph.Update[State]{}); !errors.Is(err, context.Canceled) {
					t.Fatalf("Invoke: %v, want context.Canceled", err)
				}
				if diff := cmp.Diff([]int{2, -1}, steps(history(t, r, "t"))); diff != "" {
					t.Errorf("saved steps (-want +got):\n%s", diff)
				}
				res, err := r.Continue(context.Background(), "t")
				if err != nil || res.Status != graph.StatusDone {
					t.Fatalf("Continue: %v %v", res.Status, err)
				}
				if diff := cmp.Diff([]string{"a", "b", "c"}, res.Values.Log); diff != "" {
					t.Errorf("Log (-want +got):\n%s", diff)
				}
				if got := [3]int{c.get("a"), c.get("b"), c.get("c")}; got != [3]int{1, 1, 1} {
					t.Errorf("runs of a, b, c = %v, want [1 1 1]", got)
				}
			})
		}
	})
	t.Run("durable step", func(t *testing.T) {
		for _, sf := range saverFactories {
			t.Run(sf.name, func(t *testing.T) {
				ctx := context.Background()
				c := newCounter()
				g := graph.New[State]().
					AddNode("a", logNode(c, "a")).
					AddNode("pay", func(ctx context.Context, s State) (graph.Update[State], error) {
						id, err := graph.Durable(ctx, "charge", func(context.Context) (string, error) {
							c.inc("charge")
							return "ch_1", nil
						})
						if err != nil {
							return graph.Update[State]{}, err
						}
						return askNode(c, "pay", id)(ctx, s)
					}).
					AddEdge(graph.START, "a").AddEdge("a", "pay")
				r := mustCompile(t, g, graph.WithSaver(sf.open(t, nil)), graph.WithDurability(graph.DurabilityExit))
				res, err := r.Invoke(ctx, "t", graph.Update[State]{})
				if err != nil || res.Status != graph.StatusWaiting {
					t.Fatalf("Invoke: %v %v, want waiting", res.Status, err)
				}
				if diff := cmp.Diff([]int{1, -1}, steps(history(t, r, "t"))); diff != "" {
					t.Errorf("saved steps (-want +got):\n%s", diff)
				}
				res, err = r.Resume(ctx, "t", graph.Command[State]{Resume: "ok"})
				if err != nil || res.Status != graph.StatusDone {
					t.Fatalf("Resume: %v %v", res.Status, err)
				}
				if got := [3]int{c.get("a"), c.get("pay"), c.get("charge")}; got != [3]int{1, 2, 1} {
					t.Errorf("runs of a, pay, charge = %v, want [1 2 1]", got)
				}
			})
		}
	})
}

// In async mode the checkpoints of the steps that finish while a save is
// in flight are queued behind it, up to a bound: past it the run waits.
// A crash costs at most the save in flight, the queue and the step
// running.
func TestDurabilityAsyncQueueBound(t *testing.T) {
	const nodes = 20
	w := newWatchSaver(checkpoint.NewMemorySaver(nil))
	w.holdStep, w.release = 1, make(chan struct{})
	var during atomic.Int32 // nodes that ran while step 1's put was held
	var held atomic.Bool
	held.Store(true)
	g := graph.New[State]()
	prev := graph.START
	for i := 1; i <= nodes; i++ {
		name := fmt.Sprintf("n%02d", i)
		g.AddNode(name, func(ctx context.Context, s State) (graph.Update[State], error) {
			if held.Load() && i > 1 {
				during.Add(1)
			}
			return graph.Set(State{Log: []string{name}}, "Log"), nil
		}).AddEdge(prev, name)
		prev = name
	}
	r := mustCompile(t, g, graph.WithSaver(w), graph.WithDurability(graph.DurabilityAsync))
	go func() {
		time.Sleep(2 * time.Second) // long enough for the loop to reach the bound
		held.Store(false)
		close(w.release)
	}()
	res, err := r.Invoke(context.Background(), "t", graph.Update[State]{})
	if err != nil || len(res.Values.Log) != nodes {
		t.Fatalf("Invoke: %v (%d nodes ran)", err, len(res.Values.Log))
	}
	// Steps 2 to 9 run and queue their checkpoints (the bound is 8);
	// the end of step 9 waits for step 1's put.
	if n := during.Load(); n < 1 || n > 8 {
		t.Fatalf("%d nodes ran after step 1 while its put was in flight, want 1 to 8", n)
	}
	if diff := cmp.Diff(nodes+2, len(history(t, r, "t"))); diff != "" {
		t.Errorf("checkpoints (-want +got):\n%s", diff)
	}
}
