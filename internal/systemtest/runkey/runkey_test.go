package runkey_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/internal/systemtest"
	"github.com/lockstepgo/lockstep/interrupt"
)

type keyState struct {
	Log    []string `lockstep:"append"`
	Ask    bool
	Answer string
}

// keyGraph is START → a → ask → b: ask asks when the state says so, and b
// fails while *failB is set. runs counts each node's runs.
func keyGraph(runs map[string]*atomic.Int32, failB *atomic.Bool) *graph.Graph[keyState] {
	count := func(name string) {
		runs[name].Add(1)
	}
	return graph.New[keyState]().
		AddNode("a", func(ctx context.Context, s keyState) (graph.Update[keyState], error) {
			count("a")
			return graph.Set(keyState{Log: []string{"a"}}, "Log"), nil
		}).
		AddNode("ask", func(ctx context.Context, s keyState) (graph.Update[keyState], error) {
			count("ask")
			if !s.Ask {
				return graph.Update[keyState]{}, nil
			}
			ans, err := interrupt.Ask[string](ctx, "ship?")
			if err != nil {
				return graph.Update[keyState]{}, err
			}
			return graph.Set(keyState{Answer: ans}, "Answer"), nil
		}).
		AddNode("b", func(ctx context.Context, s keyState) (graph.Update[keyState], error) {
			count("b")
			if failB.Load() {
				return graph.Update[keyState]{}, errors.New("downstream unavailable")
			}
			return graph.Set(keyState{Log: []string{"b"}}, "Log"), nil
		}).
		AddEdge(graph.START, "a").AddEdge("a", "ask").AddEdge("ask", "b")
}

// keyRun compiles keyGraph on s with fresh counters: runs counts each
// node's runs, and node b fails while failB is set.
func keyRun(t *testing.T, s checkpoint.Saver) (r *graph.Runnable[keyState], runs map[string]*atomic.Int32, failB *atomic.Bool) {
	t.Helper()
	runs = map[string]*atomic.Int32{"a": {}, "ask": {}, "b": {}}
	failB = new(atomic.Bool)
	r, err := keyGraph(runs, failB).Compile(graph.WithSaver(s))
	if err != nil {
		t.Fatal(err)
	}
	return r, runs, failB
}

// TestRunKey (R03): Invoke with a RunKey applies its input once. Repeated
// with the same key it returns the run's result (done or waiting, nothing
// run again) or continues the run where it stopped (the committed nodes
// not run again), with Result.Repeated set; a new key starts a new run; a
// key of an earlier run is ErrRunKeyReused and applies nothing; bad keys
// and keys where they mean nothing are refused. On both savers.
func TestRunKey(t *testing.T) {
	savers := systemtest.EverySaver()
	in := func(ask bool) graph.Update[keyState] {
		return graph.Set(keyState{Log: []string{"in"}, Ask: ask}, "Log", "Ask")
	}
	type call struct {
		input        graph.Update[keyState]
		key          string
		failB        bool
		wantStatus   graph.Status
		wantRepeated bool
		wantErr      error
	}
	for _, tc := range []struct {
		name     string
		calls    []call
		wantLog  []string
		wantRuns map[string]int32
		inputs   int // input checkpoints in the thread's history
	}{
		{"done, repeated", []call{
			{input: in(false), key: "k1", wantStatus: graph.StatusDone},
			{input: in(false), key: "k1", wantStatus: graph.StatusDone, wantRepeated: true},
		}, []string{"in", "a", "b"}, map[string]int32{"a": 1, "ask": 1, "b": 1}, 1},
		{"waiting, repeated", []call{
			{input: in(true), key: "k1", wantStatus: graph.StatusWaiting},
			{input: in(true), key: "k1", wantStatus: graph.StatusWaiting, wantRepeated: true},
			{input: in(true), key: "k1", wantStatus: graph.StatusWaiting, wantRepeated: true},
		}, []string{"in", "a"}, map[string]int32{"a": 1, "ask": 1}, 1},
		{"stopped, repeated: continued", []call{
			{input: in(false), key: "k1", failB: true, wantErr: errors.New("node")},
			{input: in(false), key: "k1", wantStatus: graph.StatusDone, wantRepeated: true},
		}, []string{"in", "a", "b"}, map[string]int32{"a": 1, "ask": 1, "b": 2}, 1},
		{"a new key is a new run", []call{
			{input: in(false), key: "k1", wantStatus: graph.StatusDone},
			{input: in(false), key: "k2", wantStatus: graph.StatusDone},
			{input: in(false), key: "k2", wantStatus: graph.StatusDone, wantRepeated: true},
		}, []string{"in", "a", "b", "in", "a", "b"}, map[string]int32{"a": 2, "ask": 2, "b": 2}, 2},
		{"an earlier run's key is refused", []call{
			{input: in(false), key: "k1", wantStatus: graph.StatusDone},
			{input: in(false), key: "k2", wantStatus: graph.StatusDone},
			{input: in(false), key: "k1", wantErr: graph.ErrRunKeyReused},
		}, []string{"in", "a", "b", "in", "a", "b"}, map[string]int32{"a": 2, "ask": 2, "b": 2}, 2},
		{"unkeyed input after a keyed run is applied", []call{
			{input: in(false), key: "k1", wantStatus: graph.StatusDone},
			{input: in(false), wantStatus: graph.StatusDone},
			{input: in(false), key: "k1", wantErr: graph.ErrRunKeyReused},
		}, []string{"in", "a", "b", "in", "a", "b"}, map[string]int32{"a": 2, "ask": 2, "b": 2}, 2},
	} {
		for name, open := range savers {
			t.Run(tc.name+"/"+name, func(t *testing.T) {
				ctx := context.Background()
				r, runs, failB := keyRun(t, open(t))
				var first []interrupt.Interrupt
				for i, c := range tc.calls {
					failB.Store(c.failB)
					var opts []graph.RunOption
					if c.key != "" {
						opts = append(opts, graph.RunKey(c.key))
					}
					res, err := r.Invoke(ctx, "t", c.input, opts...)
					switch {
					case c.wantErr != nil && c.wantErr.Error() == "node":
						var ne *graph.NodeError
						if !errors.As(err, &ne) {
							t.Fatalf("call %d: %v, want a *NodeError", i, err)
						}
						continue
					case c.wantErr != nil:
						if !errors.Is(err, c.wantErr) {
							t.Fatalf("call %d: %v, want %v", i, err, c.wantErr)
						}
						continue
					case err != nil:
						t.Fatalf("call %d: %v", i, err)
					}
					if res.Status != c.wantStatus || res.Repeated != c.wantRepeated {
						t.Errorf("call %d: status %s repeated %v, want %s %v", i, res.Status, res.Repeated, c.wantStatus, c.wantRepeated)
					}
					if res.Status == graph.StatusWaiting {
						if first == nil {
							first = res.Interrupts
						} else if diff := cmp.Diff(first, res.Interrupts); diff != "" {
							t.Errorf("call %d: the interrupts changed (-first +now):\n%s", i, diff)
						}
					}
				}
				snap, err := r.GetState(ctx, "t")
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(tc.wantLog, snap.Values.Log); diff != "" {
					t.Errorf("log (-want +got):\n%s", diff)
				}
				got := map[string]int32{}
				for n, c := range runs {
					if v := c.Load(); v > 0 {
						got[n] = v
					}
				}
				if diff := cmp.Diff(tc.wantRuns, got); diff != "" {
					t.Errorf("node runs (-want +got):\n%s", diff)
				}
				hist, err := r.History(ctx, "t", graph.HistoryOptions{})
				if err != nil {
					t.Fatal(err)
				}
				inputs := 0
				for _, h := range hist {
					if h.Metadata.Source == checkpoint.SourceInput {
						inputs++
					}
				}
				if inputs != tc.inputs {
					t.Errorf("%d input checkpoints, want %d", inputs, tc.inputs)
				}
			})
		}
	}
}

// TestRunKeyRefused: a run key that is empty, too long, not UTF-8 or has a
// control character, one given to Resume or Continue, and one without a
// saver are refused before anything runs.
func TestRunKeyRefused(t *testing.T) {
	ctx := context.Background()
	r, runs, failB := keyRun(t, checkpoint.NewMemorySaver(nil))
	for _, key := range []string{"", strings.Repeat("k", checkpoint.MaxRunKeyBytes+1), "bad\xff", "line\nbreak"} {
		if _, err := r.Invoke(ctx, "t", graph.Update[keyState]{}, graph.RunKey(key)); !errors.Is(err, graph.ErrInvalidInput) {
			t.Errorf("key %q: %v, want ErrInvalidInput", key, err)
		}
	}
	if _, err := r.Invoke(ctx, "t", graph.Set(keyState{Ask: true}, "Ask")); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Resume(ctx, "t", graph.Command[keyState]{Resume: "yes"}, graph.RunKey("k")); !errors.Is(err, graph.ErrInvalidInput) {
		t.Errorf("RunKey on Resume: %v, want ErrInvalidInput", err)
	}
	if _, err := r.Continue(ctx, "t", graph.RunKey("k")); !errors.Is(err, graph.ErrInvalidInput) {
		t.Errorf("RunKey on Continue: %v, want ErrInvalidInput", err)
	}
	bare, err := keyGraph(runs, failB).Compile()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bare.Invoke(ctx, "t", graph.Update[keyState]{}, graph.RunKey("k")); !errors.Is(err, graph.ErrNoSaver) {
		t.Errorf("RunKey without a saver: %v, want ErrNoSaver", err)
	}
	if got := runs["a"].Load(); got != 1 {
		t.Errorf("a ran %d times, want 1 (only the unkeyed Invoke)", got)
	}
	if got := fmt.Sprint(slices.Sorted(func(yield func(string) bool) {
		for n, c := range runs {
			if c.Load() > 0 && !yield(n) {
				return
			}
		}
	})); got != "[a ask]" {
		t.Errorf("nodes that ran: %s", got)
	}
}

// gatedSaver pauses after the first read of a thread (the run key lookup
// or the head) until gate is closed, after telling listed.
type gatedSaver struct {
	checkpoint.Saver
	once   atomic.Bool
	listed chan struct{}
	gate   chan struct{}
}

func (g *gatedSaver) pause() {
	if g.once.CompareAndSwap(false, true) {
		close(g.listed)
		<-g.gate
	}
}

func (g *gatedSaver) List(ctx context.Context, thread string, o checkpoint.ListOptions) ([]*checkpoint.Tuple, error) {
	tps, err := g.Saver.List(ctx, thread, o)
	g.pause()
	return tps, err
}

func (g *gatedSaver) Get(ctx context.Context, ref checkpoint.Ref, o checkpoint.GetOptions) (*checkpoint.Tuple, error) {
	tp, err := g.Saver.Get(ctx, ref, o)
	g.pause()
	return tp, err
}

// TestRunKeyRace: two Invokes with one key, the second runner (B) reading
// the thread (its key or its head) just before the first (A) applies it, on a new thread and on
// one with an earlier run. Exactly one applies the input; the other is
// refused with ErrThreadBusy or ErrConflict, or returns the run's result
// (Repeated), and a retry afterwards is Repeated. Before the key was
// checked under the thread's lease, B found no key, waited, then applied
// the input again (or, on the existing thread, saw the key in its second
// look-up only and called it ErrRunKeyReused).
func TestRunKeyRace(t *testing.T) {
	in := graph.Set(keyState{Log: []string{"in"}}, "Log")
	for _, tc := range []struct {
		name    string
		earlier bool // the thread has a run with another key
	}{{"new thread", false}, {"existing thread", true}} {
		for saverName, open := range systemtest.EverySaver() {
			t.Run(tc.name+"/"+saverName, func(t *testing.T) {
				ctx := context.Background()
				base := open(t)
				runs := map[string]*atomic.Int32{"a": {}, "ask": {}, "b": {}}
				var failB atomic.Bool
				ra, err := keyGraph(runs, &failB).Compile(graph.WithSaver(base))
				if err != nil {
					t.Fatal(err)
				}
				gated := &gatedSaver{Saver: base, listed: make(chan struct{}), gate: make(chan struct{})}
				rb, err := keyGraph(runs, &failB).Compile(graph.WithSaver(gated))
				if err != nil {
					t.Fatal(err)
				}
				if tc.earlier {
					if _, err := ra.Invoke(ctx, "t", in, graph.RunKey("k0")); err != nil {
						t.Fatal(err)
					}
				}
				type outcome struct {
					res graph.Result[keyState]
					err error
				}
				bDone := make(chan outcome)
				go func() {
					res, err := rb.Invoke(ctx, "t", in, graph.RunKey("k1"))
					bDone <- outcome{res, err}
				}()
				<-gated.listed
				resA, errA := ra.Invoke(ctx, "t", in, graph.RunKey("k1"))
				close(gated.gate)
				b := <-bDone
				applied := 0
				for name, o := range map[string]outcome{"A": {resA, errA}, "B": b} {
					switch {
					case errors.Is(o.err, checkpoint.ErrThreadBusy), errors.Is(o.err, checkpoint.ErrConflict):
					case o.err != nil:
						t.Errorf("%s: %v", name, o.err)
					case o.res.Status != graph.StatusDone:
						t.Errorf("%s: status %s", name, o.res.Status)
					case !o.res.Repeated:
						applied++
					}
				}
				if applied != 1 {
					t.Errorf("%d Invokes applied the input, want 1", applied)
				}
				res, err := ra.Invoke(ctx, "t", in, graph.RunKey("k1"))
				if err != nil || !res.Repeated {
					t.Errorf("retry: repeated=%v (%v), want repeated", res.Repeated, err)
				}
				want := []string{"in", "a", "b"}
				if tc.earlier {
					want = append(want, want...)
				}
				if diff := cmp.Diff(want, res.Values.Log); diff != "" {
					t.Errorf("log (-want +got):\n%s", diff)
				}
			})
		}
	}
}

// TestRunKeyStream: a repeated keyed Stream of a run that waits or is done
// streams what a caller needs to act on it: the state (EventValues at the
// head) and, when it waits, the EventInterrupt with the same interrupts.
// Before, it streamed nothing, so a waiting run looked like a done one.
func TestRunKeyStream(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ask   bool
		kinds []graph.EventKind
	}{
		{"done", false, []graph.EventKind{graph.EventValues}},
		{"waiting", true, []graph.EventKind{graph.EventValues, graph.EventInterrupt}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			r, runs, _ := keyRun(t, checkpoint.NewMemorySaver(nil))
			in := graph.Set(keyState{Log: []string{"in"}, Ask: tc.ask}, "Log", "Ask")
			first, err := r.Invoke(ctx, "t", in, graph.RunKey("k"))
			if err != nil {
				t.Fatal(err)
			}
			var kinds []graph.EventKind
			var last graph.Event[keyState]
			for e, err := range r.Stream(ctx, "t", graph.StartWith(in), graph.RunKey("k")) {
				if err != nil {
					t.Fatal(err)
				}
				kinds, last = append(kinds, e.Kind), e
			}
			if diff := cmp.Diff(tc.kinds, kinds); diff != "" {
				t.Fatalf("events (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(first.Config, last.Config); diff != "" {
				t.Errorf("last event's config (-run +repeated):\n%s", diff)
			}
			if diff := cmp.Diff(first.Interrupts, last.Interrupts); diff != "" {
				t.Errorf("interrupts (-run +repeated):\n%s", diff)
			}
			if got := runs["a"].Load(); got != 1 {
				t.Errorf("a ran %d times, want 1", got)
			}
		})
	}
}

// TestRunKeyAfterABranch: a keyed run's input must be on the head's
// branch for a retry to count as repeated. An update on the head keeps it
// there (Repeated); a Replay from before it, or an update of an older
// checkpoint, branches the thread off before it, and the retry is
// ErrRunKeyReused rather than a Repeated that reports input the current
// branch does not hold. On both savers.
func TestRunKeyAfterABranch(t *testing.T) {
	savers := systemtest.EverySaver()
	in := graph.Set(keyState{Log: []string{"in"}}, "Log")
	for _, tc := range []struct {
		name   string
		branch func(t *testing.T, r *graph.Runnable[keyState], k0Head string)
		want   error // nil: Repeated
	}{
		{"update on the head", func(t *testing.T, r *graph.Runnable[keyState], _ string) {
			if _, err := r.UpdateState(context.Background(), "t", graph.Set(keyState{Log: []string{"note"}}, "Log"), graph.UpdateOptions{AsNode: "b"}); err != nil {
				t.Fatal(err)
			}
		}, nil},
		{"replay from before the run", func(t *testing.T, r *graph.Runnable[keyState], k0Head string) {
			if _, err := r.Replay(context.Background(), "t", k0Head); err != nil {
				t.Fatal(err)
			}
		}, graph.ErrRunKeyReused},
		{"update of an older checkpoint", func(t *testing.T, r *graph.Runnable[keyState], k0Head string) {
			if _, err := r.UpdateState(context.Background(), "t", graph.Set(keyState{Log: []string{"note"}}, "Log"), graph.UpdateOptions{AsNode: "b", CheckpointID: k0Head}); err != nil {
				t.Fatal(err)
			}
		}, graph.ErrRunKeyReused},
	} {
		for name, open := range savers {
			t.Run(tc.name+"/"+name, func(t *testing.T) {
				ctx := context.Background()
				r, _, _ := keyRun(t, open(t))
				res, err := r.Invoke(ctx, "t", in, graph.RunKey("k0"))
				if err != nil {
					t.Fatal(err)
				}
				k0Head := res.Config.CheckpointID
				if _, err := r.Invoke(ctx, "t", in, graph.RunKey("k1")); err != nil {
					t.Fatal(err)
				}
				tc.branch(t, r, k0Head)
				before, err := r.GetState(ctx, "t")
				if err != nil {
					t.Fatal(err)
				}
				res, err = r.Invoke(ctx, "t", in, graph.RunKey("k1"))
				switch {
				case tc.want == nil && (err != nil || !res.Repeated):
					t.Fatalf("retry of k1: repeated=%v (%v), want Repeated", res.Repeated, err)
				case tc.want != nil && !errors.Is(err, tc.want):
					t.Fatalf("retry of k1: repeated=%v (%v), want %v", res.Repeated, err, tc.want)
				}
				after, err := r.GetState(ctx, "t")
				if err != nil {
					t.Fatal(err)
				}
				if after.Config != before.Config {
					t.Errorf("the retry moved the head from %v to %v", before.Config, after.Config)
				}
			})
		}
	}
}
