package graph_test

// docs/reliability.md R24 (a cancelled, superseded run's late write) and R25 (a
// thread deleted while a run is in a node), on every saver. Interleavings
// are forced with channels: gateSaver holds one Put until the test lets it
// go, and nodes block on gates. Time moves only through fakeClock, which
// both the savers (leases) and the runtime (IDs, timestamps) read; the
// lease TTL is long in real time so that no heartbeat fires during a test.

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/checkpoint/sqlite"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/interrupt"
)

// lateTTL is the runs' lease TTL. The saver judges it on fakeClock; the
// heartbeat (every TTL/3 of real time) never fires within a test.
const lateTTL = time.Hour

// fakeClock is a clock that moves only when the test advances it.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// heldPut is one Put that gateSaver holds until release is called.
type heldPut struct {
	thread  string
	step    int
	reached chan struct{} // closed when the Put arrived
	free    chan struct{} // closed by release
	result  chan error    // what the inner saver answered, once
	once    sync.Once
	req     checkpoint.PutRequest // set before reached is closed
}

func (h *heldPut) release() { h.once.Do(func() { close(h.free) }) }

type holdKey struct {
	thread string
	step   int
}

// gateSaver wraps a Saver. Put of a checkpoint of a chosen (thread, step)
// waits until the test releases it; afterWrites, when set before any run
// starts, sees every PutWrites and its result.
type gateSaver struct {
	checkpoint.Saver
	afterWrites func(checkpoint.WritesRequest, error)

	mu    sync.Mutex
	holds map[holdKey]*heldPut
}

func newGateSaver(s checkpoint.Saver) *gateSaver {
	return &gateSaver{Saver: s, holds: map[holdKey]*heldPut{}}
}

// hold makes the next Put of a checkpoint at step of thread wait for
// release.
func (g *gateSaver) hold(thread string, step int) *heldPut {
	h := &heldPut{thread: thread, step: step, reached: make(chan struct{}), free: make(chan struct{}), result: make(chan error, 1)}
	g.mu.Lock()
	g.holds[holdKey{thread, step}] = h
	g.mu.Unlock()
	return h
}

func (g *gateSaver) Put(ctx context.Context, req checkpoint.PutRequest) error {
	k := holdKey{req.Thread, req.Checkpoint.Metadata.Step}
	g.mu.Lock()
	h := g.holds[k]
	delete(g.holds, k)
	g.mu.Unlock()
	if h == nil {
		return g.Saver.Put(ctx, req)
	}
	h.req = req
	close(h.reached)
	<-h.free
	err := g.Saver.Put(ctx, req)
	h.result <- err
	return err
}

func (g *gateSaver) PutWrites(ctx context.Context, req checkpoint.WritesRequest) error {
	err := g.Saver.PutWrites(ctx, req)
	if g.afterWrites != nil {
		g.afterWrites(req, err)
	}
	return err
}

// saverFactories open an empty saver reading time from now.
var saverFactories = []struct {
	name string
	open func(t *testing.T, now checkpoint.Clock) checkpoint.Saver
}{
	{"memory", func(t *testing.T, now checkpoint.Clock) checkpoint.Saver { return checkpoint.NewMemorySaver(now) }},
	{"sqlite", func(t *testing.T, now checkpoint.Clock) checkpoint.Saver {
		s, err := sqlite.Open(filepath.Join(t.TempDir(), "lockstep.db"), sqlite.Config{Now: now})
		if err != nil {
			t.Fatalf("sqlite.Open: %v", err)
		}
		t.Cleanup(func() {
			if err := s.Close(); err != nil {
				t.Errorf("sqlite Close: %v", err)
			}
		})
		return s
	}},
}

// runIDs names the runs of one Runnable prefix-1, prefix-2, ...
func runIDs(prefix string) func() string {
	var n atomic.Int64
	return func() string { return fmt.Sprintf("%s-%d", prefix, n.Add(1)) }
}

// gatedNode counts its runs, reports its entry on entered (if set) and
// waits for gate (if set) before appending its name to Log.
func gatedNode(c *counter, name string, entered chan<- string, gate <-chan struct{}) graph.NodeFunc[State] {
	return func(ctx context.Context, s State) (graph.Update[State], error) {
		c.inc(name)
		if entered != nil {
			entered <- name
		}
		if gate != nil {
			select {
			case <-gate:
			case <-ctx.Done():
				return graph.Update[State]{}, ctx.Err()
			}
		}
		return graph.Set(State{Log: []string{name}}, "Log"), nil
	}
}

// outcome is what a run returned.
type outcome struct {
	res graph.Result[State]
	err error
}

// start runs fn on a goroutine. The returned wait gives its outcome (it
// may be called many times); a cleanup waits for it so that no run
// outlives the test, after the cleanups registered later (which open the
// gates the run may wait on).
func start(t *testing.T, fn func() (graph.Result[State], error)) (wait func() outcome, done <-chan struct{}) {
	t.Helper()
	ch := make(chan struct{})
	var out outcome
	go func() {
		defer close(ch)
		out.res, out.err = fn()
	}()
	wait = func() outcome { <-ch; return out }
	t.Cleanup(func() { wait() })
	return wait, ch
}

// cpRow is what the tests compare about each checkpoint of a history.
type cpRow struct {
	Step   int
	Source checkpoint.Source
	Runner string // run ID up to "-": "run1", "run2"
	Parent int    // index of the parent in the same history, -1 for none
}

func rows(t *testing.T, hist []graph.Snapshot[State]) []cpRow {
	t.Helper()
	sums := summarize(t, hist)
	out := make([]cpRow, len(hist))
	for i, s := range hist {
		runner, _, _ := strings.Cut(s.Metadata.RunID, "-")
		out[i] = cpRow{Step: s.Metadata.Step, Source: s.Metadata.Source, Runner: runner, Parent: sums[i].Parent}
	}
	return out
}

// loopRows is a linear chain of loop checkpoints at steps hi down to lo,
// written by runner, whose oldest has the parent at index parent (-1 for
// none); index offsets the indexes.
func loopRows(runner string, hi, lo, index, parent int) []cpRow {
	var out []cpRow
	for s := hi; s >= lo; s-- {
		i := index + hi - s
		p := i + 1
		if s == lo {
			p = parent
		}
		out = append(out, cpRow{Step: s, Source: checkpoint.SourceLoop, Runner: runner, Parent: p})
	}
	return out
}

func concatRows(parts ...[]cpRow) []cpRow {
	var out []cpRow
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// headView is what must not change when a late write is refused.
type headView struct {
	State   graph.Snapshot[State]
	History []graph.Snapshot[State]
}

func viewHead(t *testing.T, r *graph.Runnable[State], thread string) headView {
	t.Helper()
	st, err := r.GetState(context.Background(), thread)
	if err != nil {
		t.Fatalf("GetState(%q): %v", thread, err)
	}
	return headView{State: st, History: history(t, r, thread)}
}

// TestLateWriteOfSupersededRun is R24: run 1 on thread "t" reaches a save
// that the saver holds, its context is cancelled and its lease lapses; run
// 2 (another Runnable on the same saver) takes the thread over. When run
// 1's save is let go, it must be refused: run 1 fails with context.Canceled
// or an error matching checkpoint.ErrThreadBusy or checkpoint.ErrConflict,
// run 2's checkpoint stays the head, nothing of run 1's uncommitted step
// shows, and no node ran more often than the takeover requires.
func TestLateWriteOfSupersededRun(t *testing.T) {
	const thread = "t"
	run1Input := graph.Set(State{Count: 1}, "Count")
	run2Input := graph.Set(State{Count: 2}, "Count")
	input1 := cpRow{Step: -1, Source: checkpoint.SourceInput, Runner: "run1", Parent: -1}
	cases := []struct {
		name string
		// holdStep is the step of run 1's checkpoint that the saver holds.
		// The graph is START→a→b→c: step -1 is the input, 0 __start__,
		// 1 a, 2 b, 3 c.
		holdStep int
		// invoke makes run 2 start with new input; otherwise it continues
		// the thread's pending tasks.
		invoke bool
		// midRun lets run 1's save go while run 2 is inside node c (and so
		// holds the lease); otherwise after run 2 has finished.
		midRun     bool
		wantValues State
		wantRows   []cpRow
		wantRuns   map[string]int
	}{
		{
			name:       "continue, late save released after run 2 finished",
			holdStep:   2,
			wantValues: State{Count: 1, Log: []string{"a", "b", "c"}},
			wantRows:   concatRows(loopRows("run2", 3, 2, 0, 2), loopRows("run1", 1, 0, 2, 4), []cpRow{input1}),
			wantRuns:   map[string]int{"a": 1, "b": 2, "c": 1},
		},
		{
			name:       "continue, late save released while run 2 holds the lease",
			holdStep:   2,
			midRun:     true,
			wantValues: State{Count: 1, Log: []string{"a", "b", "c"}},
			wantRows:   concatRows(loopRows("run2", 3, 2, 0, 2), loopRows("run1", 1, 0, 2, 4), []cpRow{input1}),
			wantRuns:   map[string]int{"a": 1, "b": 2, "c": 1},
		},
		{
			name:       "new input, late save released after run 2 finished",
			holdStep:   2,
			invoke:     true,
			wantValues: State{Count: 2, Log: []string{"a", "a", "b", "c"}},
			wantRows: concatRows(loopRows("run2", 6, 3, 0, 4),
				[]cpRow{{Step: 2, Source: checkpoint.SourceInput, Runner: "run2", Parent: 5}},
				loopRows("run1", 1, 0, 5, 7), []cpRow{input1}),
			wantRuns: map[string]int{"a": 2, "b": 2, "c": 1},
		},
		{
			name:       "late input checkpoint of a new thread",
			holdStep:   -1,
			invoke:     true,
			wantValues: State{Count: 2, Log: []string{"a", "b", "c"}},
			wantRows: concatRows(loopRows("run2", 3, 0, 0, 4),
				[]cpRow{{Step: -1, Source: checkpoint.SourceInput, Runner: "run2", Parent: -1}}),
			wantRuns: map[string]int{"a": 1, "b": 1, "c": 1},
		},
	}
	for _, sf := range saverFactories {
		for _, tc := range cases {
			t.Run(sf.name+"/"+tc.name, func(t *testing.T) {
				clk := newFakeClock()
				gs := newGateSaver(sf.open(t, clk.Now))
				c := newCounter()
				var enteredC chan string
				var gateC chan struct{}
				openC := func() {}
				if tc.midRun {
					enteredC = make(chan string, 1)
					gateC = make(chan struct{})
					openC = sync.OnceFunc(func() { close(gateC) })
				}
				g := graph.New[State]().
					AddNode("a", logNode(c, "a")).
					AddNode("b", logNode(c, "b")).
					AddNode("c", gatedNode(c, "c", enteredC, gateC)).
					AddEdge(graph.START, "a").AddEdge("a", "b").AddEdge("b", "c")
				opts := []graph.Option{graph.WithSaver(gs), graph.WithClock(clk.Now), graph.WithLeaseTTL(lateTTL)}
				r1 := mustCompile(t, g, append(opts, graph.WithRunIDs(runIDs("run1")))...)
				r2 := mustCompile(t, g, append(opts, graph.WithRunIDs(runIDs("run2")))...)

				held := gs.hold(thread, tc.holdStep)
				ctx1, cancel1 := context.WithCancel(context.Background())
				defer cancel1()
				wait1, done1 := start(t, func() (graph.Result[State], error) { return r1.Invoke(ctx1, thread, run1Input) })
				t.Cleanup(held.release) // runs before wait1's cleanup
				select {
				case <-held.reached:
				case <-done1:
					o := wait1()
					t.Fatalf("thread %q: run 1 returned (%v, %v) before its step %d save reached the saver", thread, o.res.Status, o.err, tc.holdStep)
				}
				if got := held.req.Lease.Owner; got != "run1-1" {
					t.Fatalf("thread %q step %d: held save belongs to %q, want run1-1", thread, tc.holdStep, got)
				}
				cancel1()
				clk.Advance(lateTTL + time.Second) // run 1's lease lapses

				wait2, done2 := start(t, func() (graph.Result[State], error) {
					if tc.invoke {
						return r2.Invoke(context.Background(), thread, run2Input)
					}
					return r2.Continue(context.Background(), thread)
				})
				if tc.midRun {
					t.Cleanup(openC) // runs before wait2's cleanup
					select {
					case <-enteredC:
					case <-done2:
						o := wait2()
						t.Fatalf("thread %q: run 2 returned (%v, %v) before node c ran", thread, o.res.Status, o.err)
					}
				} else if o := wait2(); o.err != nil {
					t.Fatalf("thread %q: run 2: %v", thread, o.err)
				}

				before := viewHead(t, r2, thread)
				held.release()
				o1 := wait1()
				after := viewHead(t, r2, thread)

				// Run 1: its save was refused by the saver and it failed.
				var putErr error
				select {
				case putErr = <-held.result:
				default:
					t.Fatalf("thread %q step %d: run 1 returned without the held save reaching the saver", thread, tc.holdStep)
				}
				if !errors.Is(putErr, checkpoint.ErrThreadBusy) && !errors.Is(putErr, checkpoint.ErrConflict) {
					t.Errorf("thread %q step %d: the saver answered run 1's late Put with %v, want an error matching ErrThreadBusy or ErrConflict", thread, tc.holdStep, putErr)
				}
				switch {
				case o1.err == nil:
					t.Errorf("thread %q step %d: run 1 returned no error after its late save (status %v, checkpoint %s)", thread, tc.holdStep, o1.res.Status, o1.res.Config.CheckpointID)
				case !errors.Is(o1.err, context.Canceled) && !errors.Is(o1.err, checkpoint.ErrThreadBusy) && !errors.Is(o1.err, checkpoint.ErrConflict):
					t.Errorf("thread %q step %d: run 1 error = %v, want context.Canceled or an error matching ErrThreadBusy or ErrConflict", thread, tc.holdStep, o1.err)
				default:
					t.Logf("thread %q step %d: run 1 error = %v (context.Canceled: %t, ErrThreadBusy: %t, ErrConflict: %t)", thread, tc.holdStep, o1.err,
						errors.Is(o1.err, context.Canceled), errors.Is(o1.err, checkpoint.ErrThreadBusy), errors.Is(o1.err, checkpoint.ErrConflict))
				}
				// The refused write changed nothing.
				if diff := cmp.Diff(before, after); diff != "" {
					t.Errorf("thread %q: state and history changed when run 1's step %d save was let go (-before +after):\n%s", thread, tc.holdStep, diff)
				}

				openC()
				o2 := wait2()
				if o2.err != nil {
					t.Fatalf("thread %q: run 2: %v", thread, o2.err)
				}
				if o2.res.Status != graph.StatusDone {
					t.Errorf("thread %q: run 2 status = %v, want %v", thread, o2.res.Status, graph.StatusDone)
				}
				final := viewHead(t, r2, thread)
				if got, want := final.State.Config.CheckpointID, o2.res.Config.CheckpointID; got != want {
					t.Errorf("thread %q: head = %s, want run 2's last checkpoint %s", thread, got, want)
				}
				if got := final.State.Metadata.RunID; !strings.HasPrefix(got, "run2-") {
					t.Errorf("thread %q: head %s was written by %q, want run 2", thread, final.State.Config.CheckpointID, got)
				}
				if diff := cmp.Diff(tc.wantValues, final.State.Values); diff != "" {
					t.Errorf("thread %q: head values (-want +got):\n%s", thread, diff)
				}
				if diff := cmp.Diff(tc.wantRows, rows(t, final.History)); diff != "" {
					t.Errorf("thread %q: checkpoint chain, newest first (-want +got):\n%s", thread, diff)
				}
				for _, s := range final.History {
					if s.Config.CheckpointID == held.req.Checkpoint.ID {
						t.Errorf("thread %q: run 1's refused step %d checkpoint %s is in the history", thread, tc.holdStep, s.Config.CheckpointID)
					}
				}
				for _, node := range []string{"a", "b", "c"} {
					if got, want := c.get(node), tc.wantRuns[node]; got != want {
						t.Errorf("thread %q: node %s ran %d times, want %d", thread, node, got, want)
					}
				}
			})
		}
	}
}

// TestDeleteThreadWhileRunning is R25: DeleteThread runs while a node of
// run 1 is executing; when the node returns, the step's commit must be
// refused with an error matching checkpoint.ErrConflict (the saver
// contract's answer to a write naming a deleted head; the ErrThreadDeleted
// that docs/reliability.md's R25 names does not exist), nothing of the
// thread may come back, and another thread on the same saver must be
// untouched.
func TestDeleteThreadWhileRunning(t *testing.T) {
	const thread, other = "t", "other"
	cases := []struct {
		name string
		// build adds run 1's nodes; blk is the node that blocks.
		build    func(g *graph.Graph[State], c *counter, entered chan<- string, gate <-chan struct{})
		parallel bool // a sibling of blk finishes and is saved before the delete
		wantRuns map[string]int
		blkStep  int
	}{
		{
			name: "first node",
			build: func(g *graph.Graph[State], c *counter, entered chan<- string, gate <-chan struct{}) {
				g.AddNode("blk", gatedNode(c, "blk", entered, gate)).
					AddNode("c", logNode(c, "c")).
					AddEdge(graph.START, "blk").AddEdge("blk", "c")
			},
			blkStep:  1,
			wantRuns: map[string]int{"blk": 1, "c": 0},
		},
		{
			name: "node after a committed step",
			build: func(g *graph.Graph[State], c *counter, entered chan<- string, gate <-chan struct{}) {
				g.AddNode("a", logNode(c, "a")).
					AddNode("blk", gatedNode(c, "blk", entered, gate)).
					AddNode("c", logNode(c, "c")).
					AddEdge(graph.START, "a").AddEdge("a", "blk").AddEdge("blk", "c")
			},
			blkStep:  2,
			wantRuns: map[string]int{"a": 1, "blk": 1, "c": 0},
		},
		{
			name: "parallel sibling saved before the delete",
			build: func(g *graph.Graph[State], c *counter, entered chan<- string, gate <-chan struct{}) {
				g.AddNode("x", logNode(c, "x")).
					AddNode("blk", gatedNode(c, "blk", entered, gate)).
					AddNode("c", logNode(c, "c")).
					AddEdge(graph.START, "x").AddEdge(graph.START, "blk").
					AddJoin([]string{"x", "blk"}, "c")
			},
			parallel: true,
			blkStep:  1,
			wantRuns: map[string]int{"x": 1, "blk": 1, "c": 0},
		},
	}
	for _, sf := range saverFactories {
		for _, tc := range cases {
			t.Run(sf.name+"/"+tc.name, func(t *testing.T) {
				ctx := context.Background()
				clk := newFakeClock()
				base := sf.open(t, clk.Now)
				gs := newGateSaver(base)
				siblingSaved := make(chan error, 1)
				if tc.parallel {
					gs.afterWrites = func(req checkpoint.WritesRequest, err error) {
						if req.Ref.Thread == thread {
							select {
							case siblingSaved <- err:
							default:
							}
						}
					}
				}
				opts := []graph.Option{graph.WithSaver(gs), graph.WithClock(clk.Now), graph.WithLeaseTTL(lateTTL)}

				// The bystander thread, written by its own graph.
				oc := newCounter()
				og := graph.New[State]().
					AddNode("a", logNode(oc, "a")).AddNode("b", logNode(oc, "b")).
					AddEdge(graph.START, "a").AddEdge("a", "b")
				ro := mustCompile(t, og, append(opts, graph.WithRunIDs(runIDs("other")))...)
				if _, err := ro.Invoke(ctx, other, graph.Set(State{Count: 9}, "Count")); err != nil {
					t.Fatalf("thread %q: %v", other, err)
				}
				otherHist := history(t, ro, other)
				otherRaw, err := base.List(ctx, other, checkpoint.ListOptions{AllNamespaces: true})
				if err != nil {
					t.Fatalf("List(%q): %v", other, err)
				}

				c := newCounter()
				entered := make(chan string, 1)
				gate := make(chan struct{})
				g := graph.New[State]()
				tc.build(g, c, entered, gate)
				r1 := mustCompile(t, g, append(opts, graph.WithRunIDs(runIDs("run1")))...)
				wait1, done1 := start(t, func() (graph.Result[State], error) {
					return r1.Invoke(ctx, thread, graph.Set(State{Count: 1}, "Count"))
				})
				gateOpen := false
				t.Cleanup(func() {
					if !gateOpen {
						close(gate)
					}
				})
				select {
				case <-entered:
				case <-done1:
					o := wait1()
					t.Fatalf("thread %q: run 1 returned (%v, %v) before node blk (step %d) ran", thread, o.res.Status, o.err, tc.blkStep)
				}
				if tc.parallel {
					select {
					case err := <-siblingSaved:
						if err != nil {
							t.Fatalf("thread %q step %d: saving sibling x's writes: %v", thread, tc.blkStep, err)
						}
					case <-done1:
						o := wait1()
						t.Fatalf("thread %q: run 1 returned (%v, %v) before sibling x's writes were saved", thread, o.res.Status, o.err)
					}
				}

				if err := gs.DeleteThread(ctx, thread); err != nil {
					t.Fatalf("DeleteThread(%q) during step %d: %v", thread, tc.blkStep, err)
				}
				close(gate)
				gateOpen = true
				o1 := wait1()

				var ce *checkpoint.ConflictError
				switch {
				case o1.err == nil:
					t.Errorf("thread %q step %d: run 1 returned no error after DeleteThread (status %v, checkpoint %s)", thread, tc.blkStep, o1.res.Status, o1.res.Config.CheckpointID)
				case !errors.Is(o1.err, checkpoint.ErrConflict):
					t.Errorf("thread %q step %d: run 1 error = %v, want an error matching checkpoint.ErrConflict", thread, tc.blkStep, o1.err)
				case !errors.As(o1.err, &ce):
					t.Errorf("thread %q step %d: run 1 error = %v, want a *checkpoint.ConflictError in its chain", thread, tc.blkStep, o1.err)
				case ce.Thread != thread || ce.Head != "":
					t.Errorf("thread %q step %d: conflict = %+v, want thread %q and an empty head", thread, tc.blkStep, *ce, thread)
				}

				// Nothing of the thread comes back.
				if tps, err := base.List(ctx, thread, checkpoint.ListOptions{AllNamespaces: true}); err != nil || len(tps) != 0 {
					t.Errorf("thread %q after DeleteThread and run 1's commit: List = %d tuples, %v; want none", thread, len(tps), err)
				}
				if h := history(t, r1, thread); len(h) != 0 {
					t.Errorf("thread %q after DeleteThread: History has %d snapshots, want none: %v", thread, len(h), rows(t, h))
				}
				if st, err := r1.GetState(ctx, thread); !errors.Is(err, graph.ErrThreadNotFound) {
					t.Errorf("thread %q after DeleteThread: GetState = (checkpoint %s, %v), want ErrThreadNotFound", thread, st.Config.CheckpointID, err)
				}
				if _, err := base.Get(ctx, checkpoint.Ref{Thread: thread}, checkpoint.GetOptions{}); !errors.Is(err, checkpoint.ErrNotFound) {
					t.Errorf("thread %q after DeleteThread: Get(head) error = %v, want ErrNotFound", thread, err)
				}
				if tl, ok := base.(checkpoint.ThreadLister); ok {
					infos, err := tl.Threads(ctx, 0, 0)
					if err != nil {
						t.Fatalf("Threads: %v", err)
					}
					for _, info := range infos {
						if info.Thread == thread {
							t.Errorf("thread %q after DeleteThread: Threads lists it: %+v", thread, info)
						}
					}
				}
				for node, want := range tc.wantRuns {
					if got := c.get(node); got != want {
						t.Errorf("thread %q: node %s ran %d times, want %d", thread, node, got, want)
					}
				}

				// The other thread is untouched.
				if diff := cmp.Diff(otherHist, history(t, ro, other)); diff != "" {
					t.Errorf("thread %q: history changed by deleting %q (-before +after):\n%s", other, thread, diff)
				}
				otherRawAfter, err := base.List(ctx, other, checkpoint.ListOptions{AllNamespaces: true})
				if err != nil {
					t.Fatalf("List(%q): %v", other, err)
				}
				if diff := cmp.Diff(otherRaw, otherRawAfter); diff != "" {
					t.Errorf("thread %q: stored tuples changed by deleting %q (-before +after):\n%s", other, thread, diff)
				}

				// No lease or value survived: a new runner starts the thread
				// afresh at once, and sees none of the old state.
				nc := newCounter()
				ng := graph.New[State]().AddNode("n", logNode(nc, "n")).AddEdge(graph.START, "n")
				rn := mustCompile(t, ng, append(opts, graph.WithRunIDs(runIDs("fresh")))...)
				res, err := rn.Invoke(ctx, thread, graph.Set(State{Count: 5}, "Count"))
				if err != nil {
					t.Fatalf("thread %q: a new run after DeleteThread: %v", thread, err)
				}
				if diff := cmp.Diff(State{Count: 5, Log: []string{"n"}}, res.Values); diff != "" {
					t.Errorf("thread %q: new run after DeleteThread sees old state (-want +got):\n%s", thread, diff)
				}
				wantRows := concatRows(loopRows("fresh", 1, 0, 0, 2), []cpRow{{Step: -1, Source: checkpoint.SourceInput, Runner: "fresh", Parent: -1}})
				if diff := cmp.Diff(wantRows, rows(t, history(t, rn, thread))); diff != "" {
					t.Errorf("thread %q: history of the new run after DeleteThread (-want +got):\n%s", thread, diff)
				}
			})
		}
	}
}

// TestFenceAfterATakeoverThatPaused (docs/reliability.md R11: a superseded
// owner is told it lost): runner 1 runs durable step A and stalls past its lease.
// Runner 2 takes the thread over, reuses A, runs B, pauses at a question
// and releases the lease, so the head does not move. When runner 1 goes
// on, its durable step B must not run: the fence finds that another
// runner held the thread since, and runner 1's run fails as busy.
func TestFenceAfterATakeoverThatPaused(t *testing.T) {
	ctx := context.Background()
	clock := newFakeClock()
	saver := checkpoint.NewMemorySaver(clock.Now)
	var a, b atomic.Int32
	atA, goOn := make(chan struct{}), make(chan struct{})
	var first atomic.Bool
	first.Store(true)
	r := mustCompile(t, graph.New[State]().AddNode("n", func(ctx context.Context, s State) (graph.Update[State], error) {
		if _, err := graph.Durable(ctx, "A", func(ctx context.Context) (int, error) { return int(a.Add(1)), nil }); err != nil {
			return graph.Update[State]{}, err
		}
		if first.CompareAndSwap(true, false) {
			close(atA)
			<-goOn // runner 1 stalls here
		}
		if _, err := graph.Durable(ctx, "B", func(ctx context.Context) (int, error) { return int(b.Add(1)), nil }); err != nil {
			return graph.Update[State]{}, err
		}
		ok, err := interrupt.Ask[bool](ctx, "ok?")
		if err != nil || !ok {
			return graph.Update[State]{}, err
		}
		return graph.Set(State{X: "done"}, "X"), nil
	}).AddEdge(graph.START, "n"), graph.WithSaver(saver), graph.WithLeaseTTL(time.Minute))

	done := make(chan error, 1)
	go func() {
		_, err := r.Invoke(ctx, "t", graph.Update[State]{})
		done <- err
	}()
	<-atA
	clock.Advance(2 * time.Minute) // runner 1's lease lapses (its heartbeat is far off)
	res, err := r.Continue(ctx, "t")
	if err != nil || res.Status != graph.StatusWaiting || a.Load() != 1 || b.Load() != 1 {
		t.Fatalf("runner 2: %+v, %v; A ran %d, B %d; want waiting with A reused and B run once", res.Status, err, a.Load(), b.Load())
	}
	close(goOn)
	if err := <-done; !errors.Is(err, checkpoint.ErrThreadBusy) && !errors.Is(err, checkpoint.ErrConflict) {
		t.Errorf("runner 1 after the takeover: %v, want it told it lost the thread", err)
	}
	if b.Load() != 1 {
		t.Errorf("B ran %d times, want once", b.Load())
	}
	s, _ := r.GetState(ctx, "t")
	if s.Status != graph.StatusWaiting || len(s.Interrupts) != 1 {
		t.Errorf("the thread is %s with %d interrupts, want waiting on runner 2's question", s.Status, len(s.Interrupts))
	}
}

// TestDurableAfterTheRunEnded: a goroutine a node started calls Durable
// after its run has ended (the thread waits, the lease is released). fn
// does not run, the call is told the run lost the thread, and it takes no
// lease, so the next Resume is not kept waiting.
func TestDurableAfterTheRunEnded(t *testing.T) {
	ctx := context.Background()
	var ran atomic.Int32
	late, result := make(chan struct{}), make(chan error, 1)
	var once sync.Once
	r := mustCompile(t, graph.New[State]().AddNode("n", func(ctx context.Context, s State) (graph.Update[State], error) {
		once.Do(func() {
			go func() {
				<-late
				_, err := graph.Durable(ctx, "late", func(ctx context.Context) (int, error) { return int(ran.Add(1)), nil })
				result <- err
			}()
		})
		if _, err := interrupt.Ask[bool](ctx, "ok?"); err != nil {
			return graph.Update[State]{}, err
		}
		return graph.Set(State{X: "done"}, "X"), nil
	}).AddEdge(graph.START, "n"), graph.WithSaver(checkpoint.NewMemorySaver(nil)))
	if res, err := r.Invoke(ctx, "t", graph.Update[State]{}); err != nil || res.Status != graph.StatusWaiting {
		t.Fatalf("Invoke = %+v, %v", res.Status, err)
	}
	close(late)
	if err := <-result; !errors.Is(err, checkpoint.ErrThreadBusy) || ran.Load() != 0 {
		t.Errorf("Durable after the run ended: %v, fn ran %d times; want ErrThreadBusy and no run", err, ran.Load())
	}
	if res, err := r.Resume(ctx, "t", graph.Command[State]{Resume: true}); err != nil || res.Status != graph.StatusDone {
		t.Errorf("Resume after it: %+v, %v", res.Status, err)
	}
}
