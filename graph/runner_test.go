package graph_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/interrupt"
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

// claimGate wraps a Saver: once armed, the next Claim waits at the gate
// until the test opens it, and reports the lease it carried and its
// result. Every other call passes through.
type claimGate struct {
	checkpoint.Saver
	mu      sync.Mutex
	armed   bool
	reached chan checkpoint.Lease
	open    chan struct{}
	result  chan error
}

func (g *claimGate) arm() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.armed = true
	g.reached, g.open, g.result = make(chan checkpoint.Lease, 1), make(chan struct{}), make(chan error, 1)
}

func (g *claimGate) Claim(ctx context.Context, ref checkpoint.Ref, l checkpoint.Lease) error {
	g.mu.Lock()
	armed := g.armed
	g.armed = false
	g.mu.Unlock()
	if !armed {
		return g.Saver.Claim(ctx, ref, l)
	}
	g.reached <- l
	<-g.open
	err := g.Saver.Claim(ctx, ref, l)
	g.result <- err
	return err
}

// failingRelease wraps a Saver whose Put and Release fail while fail is
// set, as on a full disk, and PutWrites too while failWrites is; the
// claim that precedes them works.
type failingRelease struct {
	checkpoint.Saver
	fail, failWrites atomic.Bool
}

func (f *failingRelease) PutWrites(ctx context.Context, req checkpoint.WritesRequest) error {
	if f.failWrites.Load() {
		return errors.New("disk full")
	}
	return f.Saver.PutWrites(ctx, req)
}

func (f *failingRelease) Put(ctx context.Context, req checkpoint.PutRequest) error {
	if f.fail.Load() {
		return errors.New("disk full")
	}
	return f.Saver.Put(ctx, req)
}

func (f *failingRelease) Release(ctx context.Context, thread, ns, owner string) error {
	if f.fail.Load() {
		return errors.New("disk full")
	}
	return f.Saver.Release(ctx, thread, ns, owner)
}

// TestSameRunnableRunsKeptApart: two runs of one Runnable on one thread
// are serialised by the lease as two runners are, whichever asked first.
// The interleaving that lost an answer under concurrent Resume calls (the
// internal/systemtest/race's TestConcurrentResumesKeepEveryAnswer): run B, alone on
// the thread, sends its Claim; run A starts, claims the free lease and
// runs its node; B's Claim reaches the saver. B used to carry a take-back
// decided when it was alone, and took the lease from the live run A:
// both read the same answers, both saved their __resume__ write, and the
// later one replaced the other's answer. Now B is refused with a
// *checkpoint.BusyError naming A as a live run of this runner, A goes on
// holding the thread, and both answers are kept.
func TestSameRunnableRunsKeptApart(t *testing.T) {
	for _, sf := range saverFactories {
		t.Run(sf.name, func(t *testing.T) {
			ctx := t.Context()
			gate := &claimGate{Saver: sf.open(t, nil)}
			var hold atomic.Bool
			entered, release := make(chan struct{}), make(chan struct{})
			g := graph.New[State]()
			g.AddNode("ask", func(ctx context.Context, _ State) (graph.Update[State], error) {
				if hold.CompareAndSwap(true, false) {
					close(entered)
					<-release
				}
				a, errA := interrupt.AskKey[string](ctx, "a", "a?")
				b, errB := interrupt.AskKey[string](ctx, "b", "b?")
				if err := errors.Join(errA, errB); err != nil {
					return graph.Update[State]{}, err
				}
				return graph.Set(State{X: a + b}, "X"), nil
			})
			g.AddEdge(graph.START, "ask").AddEdge("ask", graph.END)
			r, err := g.Compile(graph.WithSaver(gate), graph.WithLeaseTTL(time.Hour), graph.WithRunIDs(runIDs("run")))
			if err != nil {
				t.Fatal(err)
			}
			res, err := r.Invoke(ctx, "t", graph.Update[State]{})
			if err != nil || len(res.Interrupts) != 2 {
				t.Fatalf("Invoke: %v, %d interrupts; want 2", err, len(res.Interrupts))
			}
			ids := map[string]string{}
			for _, in := range res.Interrupts {
				var q string
				if err := json.Unmarshal(in.Value, &q); err != nil {
					t.Fatal(err)
				}
				ids[q] = in.ID
			}

			gate.arm()
			errB := make(chan error, 1)
			go func() {
				_, err := r.Resume(ctx, "t", graph.Command[State]{ResumeByID: map[string]any{ids["a?"]: "x"}})
				errB <- err
			}()
			<-gate.reached // B's Claim is on its way, sent while B was alone on the thread
			hold.Store(true)
			errA := make(chan error, 1)
			go func() {
				_, err := r.Resume(ctx, "t", graph.Command[State]{ResumeByID: map[string]any{ids["b?"]: "y"}})
				errA <- err
			}()
			<-entered // A holds the thread and runs its node
			lease, err := gate.Saver.(checkpoint.LeaseInspector).Lease(ctx, "t", "")
			if err != nil {
				t.Fatal(err)
			}
			close(gate.open)
			var be *checkpoint.BusyError
			if err := <-gate.result; !errors.As(err, &be) || be.Owner != lease.Owner || !be.SameRunner {
				t.Errorf("B's Claim while run %s holds the thread: %v; want a *BusyError naming it as this runner's", lease.Owner, err)
			}
			if err := <-errB; !errors.Is(err, checkpoint.ErrThreadBusy) {
				t.Errorf("B's Resume while A runs: %v, want ErrThreadBusy", err)
			}
			now, err := gate.Saver.(checkpoint.LeaseInspector).Lease(ctx, "t", "")
			if err != nil || now.Owner != lease.Owner || now.Epoch != lease.Epoch {
				t.Errorf("lease after B's Claim: %+v, %v; want A's still, %+v", now, err, lease)
			}
			close(release)
			if err := <-errA; err != nil {
				t.Fatalf("A's Resume: %v", err)
			}
			res, err = r.Resume(ctx, "t", graph.Command[State]{ResumeByID: map[string]any{ids["a?"]: "x"}})
			if err != nil || res.Status != graph.StatusDone || res.Values.X != "xy" {
				t.Fatalf("B's Resume again: %v, %s %q; want done with both answers (xy)", err, res.Status, res.Values.X)
			}
		})
	}
}

// TestRunnerTakesBackAnEndedRun: a Resume that claims the thread and then
// can neither save its step nor release its lease (a full disk) leaves
// the lease live behind it. A Runnable of another runner waits it out;
// the next Continue of the same Runnable takes it back at once, and so
// does one of a Runnable
// of the same runner name (a restarted process), each growing the epoch
// by one.
func TestRunnerTakesBackAnEndedRun(t *testing.T) {
	for _, sf := range saverFactories {
		t.Run(sf.name, func(t *testing.T) {
			ctx := t.Context()
			s := &failingRelease{Saver: sf.open(t, nil)}
			inspect := s.Saver.(checkpoint.LeaseInspector)
			build := func(runner string) *graph.Runnable[State] {
				g := graph.New[State]()
				g.AddNode("ask", func(ctx context.Context, st State) (graph.Update[State], error) {
					a, err := interrupt.Ask[string](ctx, "a?")
					if err != nil {
						return graph.Update[State]{}, err
					}
					return graph.Set(State{X: a}, "X"), nil
				})
				g.AddEdge(graph.START, "ask").AddEdge("ask", graph.END)
				r, err := g.Compile(graph.WithSaver(s), graph.WithLeaseTTL(time.Hour), graph.WithRunner(runner))
				if err != nil {
					t.Fatal(err)
				}
				return r
			}
			r, restarted, other := build("worker-1"), build("worker-1"), build("worker-2")
			for _, next := range []*graph.Runnable[State]{r, restarted} {
				th := "t-" + fmt.Sprint(next == r)
				if _, err := r.Invoke(ctx, th, graph.Update[State]{}); err != nil {
					t.Fatal(err)
				}
				s.fail.Store(true)
				if _, err := r.Resume(ctx, th, graph.Command[State]{Resume: "x"}); err == nil {
					t.Fatal("Resume on a full disk succeeded")
				}
				s.fail.Store(false)
				left, err := inspect.Lease(ctx, th, "")
				if err != nil || left.Owner == "" {
					t.Fatalf("lease after a failed release: %+v, %v; want it still held", left, err)
				}
				var be *checkpoint.BusyError
				if _, err := other.Continue(ctx, th); !errors.As(err, &be) || be.Owner != left.Owner || be.SameRunner {
					t.Errorf("another runner: %v, want a *BusyError naming %s", err, left.Owner)
				}
				res, err := next.Continue(ctx, th)
				if err != nil || res.Status != graph.StatusDone || res.Values.X != "x" {
					t.Fatalf("a run of worker-1 after its ended run: %v, %s %q; want it to take the lease back and finish with the answer", err, res.Status, res.Values.X)
				}
				now, err := inspect.Lease(ctx, th, "")
				if err != nil || now.Owner != "" || now.Epoch != left.Epoch+1 {
					t.Errorf("lease after the run that took it back: %+v, %v; want released at epoch %d", now, err, left.Epoch+1)
				}
			}
		})
	}
}

// TestRunThatLostTheThreadTakesNothingBack: run A of a Runnable holds the
// thread and is paused in its node past its lease; run B of the same
// Runnable takes the lapsed lease, and ends without releasing it (its
// release fails). A, going on, finds the thread held by a run of its
// runner that has ended, but A had held the thread and lost it: what it
// read may be stale, so it is refused (ErrThreadBusy) instead of taking
// the lease back, and writes nothing. The next run takes the lease back.
func TestRunThatLostTheThreadTakesNothingBack(t *testing.T) {
	for _, sf := range saverFactories {
		t.Run(sf.name, func(t *testing.T) {
			ctx := t.Context()
			clock := newFakeClock()
			s := &failingRelease{Saver: sf.open(t, clock.Now)}
			var hold atomic.Bool
			entered, release := make(chan struct{}), make(chan struct{})
			g := graph.New[State]()
			g.AddNode("ask", func(ctx context.Context, _ State) (graph.Update[State], error) {
				if hold.CompareAndSwap(true, false) {
					close(entered)
					<-release
				}
				a, err := interrupt.Ask[string](ctx, "a?")
				if err != nil {
					return graph.Update[State]{}, err
				}
				return graph.Set(State{X: a}, "X"), nil
			})
			g.AddEdge(graph.START, "ask").AddEdge("ask", graph.END)
			r, err := g.Compile(graph.WithSaver(s), graph.WithClock(clock.Now), graph.WithLeaseTTL(lateTTL), graph.WithRunIDs(runIDs("run")))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := r.Invoke(ctx, "t", graph.Update[State]{}); err != nil {
				t.Fatal(err)
			}
			hold.Store(true)
			errA := make(chan error, 1)
			go func() {
				_, err := r.Resume(ctx, "t", graph.Command[State]{Resume: "from A"})
				errA <- err
			}()
			<-entered
			clock.Advance(lateTTL + time.Second) // A's lease lapses
			s.fail.Store(true)
			var ue *graph.ResumeError
			if _, err := r.Resume(ctx, "t", graph.Command[State]{ResumeByID: map[string]any{"nobody": "x"}}); !errors.As(err, &ue) {
				t.Fatalf("run B: %v, want a *graph.ResumeError after it claimed the thread", err)
			}
			s.fail.Store(false)
			inspect := s.Saver.(checkpoint.LeaseInspector)
			left, err := inspect.Lease(ctx, "t", "")
			if err != nil || left.Owner != "run-3" {
				t.Fatalf("lease after B: %+v, %v; want B's (run-3) left live", left, err)
			}
			before, err := r.GetState(ctx, "t")
			if err != nil {
				t.Fatal(err)
			}
			close(release)
			var be *checkpoint.BusyError
			if err := <-errA; !errors.As(err, &be) || be.Owner != "run-3" {
				t.Errorf("A after it lost the thread: %v, want a *BusyError naming run-3", err)
			}
			after, err := r.GetState(ctx, "t")
			if err != nil {
				t.Fatal(err)
			}
			if after.Config.CheckpointID != before.Config.CheckpointID || len(after.Interrupts) != 1 {
				t.Errorf("A wrote after it lost the thread: checkpoint %s → %s, %d interrupts", before.Config.CheckpointID, after.Config.CheckpointID, len(after.Interrupts))
			}
			if now, err := inspect.Lease(ctx, "t", ""); err != nil || now.Owner != left.Owner || now.Epoch != left.Epoch {
				t.Errorf("lease after A: %+v, %v; want B's still, %+v", now, err, left)
			}
			res, err := r.Resume(ctx, "t", graph.Command[State]{Resume: "from C"})
			if err != nil || res.Values.X != "from C" {
				t.Errorf("the next run: %v, %q; want it to take B's lease back and finish", err, res.Values.X)
			}
		})
	}
}

// TestEndedRunWritesNothing: a goroutine a node left behind that runs a
// durable step after the run ended writes nothing and does not run the
// step, even while the ended run's lease is still live (its last save and
// its release failed): the next run of the runner may take that lease
// back, so nothing of the ended run may land beside it.
func TestEndedRunWritesNothing(t *testing.T) {
	for _, sf := range saverFactories {
		t.Run(sf.name, func(t *testing.T) {
			ctx := t.Context()
			s := &failingRelease{Saver: sf.open(t, nil)}
			later, result := make(chan struct{}), make(chan error, 1)
			var ran atomic.Bool
			g := graph.New[State]()
			g.AddNode("a", func(ctx context.Context, _ State) (graph.Update[State], error) {
				return graph.Set(State{X: "a"}, "X"), nil
			})
			g.AddNode("b", func(ctx context.Context, _ State) (graph.Update[State], error) {
				go func() {
					<-later
					_, err := graph.Durable(ctx, "late", func(context.Context) (int, error) { ran.Store(true); return 1, nil })
					result <- err
				}()
				s.fail.Store(true) // the disk fills: the step's save and the release fail
				s.failWrites.Store(true)
				return graph.Set(State{Y: "b"}, "Y"), nil
			})
			g.AddEdge(graph.START, "a").AddEdge("a", "b").AddEdge("b", graph.END)
			r, err := g.Compile(graph.WithSaver(s), graph.WithLeaseTTL(time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := r.Invoke(ctx, "t", graph.Update[State]{}); err == nil {
				t.Fatal("Invoke on a full disk succeeded")
			}
			s.fail.Store(false)
			s.failWrites.Store(false)
			left, err := s.Saver.(checkpoint.LeaseInspector).Lease(ctx, "t", "")
			if err != nil || left.Owner == "" {
				t.Fatalf("lease after the run: %+v, %v; want it left live", left, err)
			}
			before, err := r.GetState(ctx, "t")
			if err != nil {
				t.Fatal(err)
			}
			close(later)
			if err := <-result; !errors.Is(err, checkpoint.ErrThreadBusy) || ran.Load() {
				t.Errorf("a durable step after the run ended: %v (ran: %v), want ErrThreadBusy and not run", err, ran.Load())
			}
			after, err := r.GetState(ctx, "t")
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(before.Tasks, after.Tasks); diff != "" {
				t.Errorf("the ended run's tasks changed (-before +after):\n%s", diff)
			}
		})
	}
}

// slowReleaseSaver is a MemorySaver whose saves that release the lease
// take a minute to come back after they commit (in a synctest bubble, on
// its clock): the window in which a heartbeat can fire between the
// release and the run recording it.
type slowReleaseSaver struct {
	*checkpoint.MemorySaver
}

func (s slowReleaseSaver) PutWrites(ctx context.Context, req checkpoint.WritesRequest) error {
	err := s.MemorySaver.PutWrites(ctx, req)
	if err == nil && req.Release {
		time.Sleep(time.Minute)
	}
	return err
}

func (s slowReleaseSaver) PutChain(ctx context.Context, reqs []checkpoint.PutRequest) error {
	err := s.MemorySaver.PutChain(ctx, reqs)
	if err == nil && len(reqs) > 0 && reqs[len(reqs)-1].Release {
		time.Sleep(time.Minute)
	}
	return err
}

// TestEndedRunHoldsNoLease: a run's last save releases the thread's lease
// in its transaction; a heartbeat that fires while that save returns (here
// a releasing save takes a minute to come back, and the heartbeat beats
// every 10 s) must not take the thread again for the run that is ending.
// It did when the run ended waiting (its last save is pending writes on
// the head, so the renewal's head still matched): the run ended, and the
// next run of another runner found the thread busy for a whole lease (a
// kill loop over the examples found it with a 600 ms lease on a loaded
// machine). The renewal stops before the releasing save, so none runs and
// fails after it either (no warning in the log). Both ways a run ends are
// checked.
func TestEndedRunHoldsNoLease(t *testing.T) {
	for _, tc := range []struct {
		name string
		node func(ctx context.Context, st State) (graph.Update[State], error)
		want graph.Status
		next func(ctx context.Context, r *graph.Runnable[State]) error // another runner's next run
	}{
		{"done", func(ctx context.Context, st State) (graph.Update[State], error) {
			return graph.Set(State{Count: st.Count + 1}, "Count"), nil
		}, graph.StatusDone, func(ctx context.Context, r *graph.Runnable[State]) error {
			_, err := r.Invoke(ctx, "t", graph.Set(State{Count: 5}, "Count"))
			return err
		}},
		{"waiting on an interrupt", func(ctx context.Context, st State) (graph.Update[State], error) {
			a, err := interrupt.Ask[string](ctx, "go on?")
			if err != nil {
				return graph.Update[State]{}, err
			}
			return graph.Set(State{Answer: a}, "Answer"), nil
		}, graph.StatusWaiting, func(ctx context.Context, r *graph.Runnable[State]) error {
			_, err := r.Resume(ctx, "t", graph.Command[State]{Resume: "yes"})
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := slowReleaseSaver{checkpoint.NewMemorySaver(nil)}
				g := graph.New[State]()
				g.AddNode("a", tc.node)
				g.AddEdge(graph.START, "a").AddEdge("a", graph.END)
				var logs strings.Builder
				r, err := g.Compile(graph.WithSaver(s), graph.WithLeaseTTL(30*time.Second),
					graph.WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))))
				if err != nil {
					t.Fatal(err)
				}
				res, err := r.Invoke(t.Context(), "t", graph.Set(State{Count: 1}, "Count"))
				if err != nil || res.Status != tc.want {
					t.Fatalf("Invoke: %v, %v; want %v", res.Status, err, tc.want)
				}
				lease, err := s.Lease(t.Context(), "t", "")
				if err != nil || lease.Owner != "" {
					t.Errorf("lease after the run ended: %+v, %v; want released", lease, err)
				}
				if logs.Len() > 0 {
					t.Errorf("the run logged (a renewal after its release?):\n%s", logs.String())
				}
				other, err := g.Compile(graph.WithSaver(s), graph.WithLeaseTTL(30*time.Second))
				if err != nil {
					t.Fatal(err)
				}
				if err := tc.next(t.Context(), other); err != nil {
					t.Errorf("another runner right after the run ended: %v", err)
				}
			})
		})
	}
}

// claimFailSaver is a MemorySaver whose Claims by one owner fail, as a
// run's renewals do when its disk is full or its database unreachable.
type claimFailSaver struct {
	*checkpoint.MemorySaver
	mu    sync.Mutex
	owner string
}

func (s *claimFailSaver) failFor(owner string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.owner = owner
}

func (s *claimFailSaver) Claim(ctx context.Context, ref checkpoint.Ref, l checkpoint.Lease) error {
	s.mu.Lock()
	fail := s.owner != "" && l.Owner == s.owner
	s.mu.Unlock()
	if fail {
		return errors.New("disk I/O error")
	}
	return s.MemorySaver.Claim(ctx, ref, l)
}

// TestLostLeaseNotRenewed: a run whose renewals failed loses the thread
// when its lease expires; another runner takes the thread and ends
// waiting, giving the lease back without moving the head. The first run's
// heartbeat, its renewals working again, must not take the free thread:
// it did (a renewal claimed whatever lease was free on the head it knew),
// and the thread was busy for a run that no longer owned it, as long as
// its node ran.
func TestLostLeaseNotRenewed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &claimFailSaver{MemorySaver: checkpoint.NewMemorySaver(nil)}
		release := make(chan struct{})
		var calls atomic.Int32
		g := graph.New[State]()
		g.AddNode("a", func(ctx context.Context, st State) (graph.Update[State], error) {
			if calls.Add(1) == 1 {
				<-release // the first run's node runs on
				return graph.Set(State{Answer: "first"}, "Answer"), nil
			}
			a, err := interrupt.Ask[string](ctx, "go on?")
			if err != nil {
				return graph.Update[State]{}, err
			}
			return graph.Set(State{Answer: a}, "Answer"), nil
		})
		g.AddEdge(graph.START, "a").AddEdge("a", graph.END)
		compile := func() *graph.Runnable[State] {
			r, err := g.Compile(graph.WithSaver(s), graph.WithLeaseTTL(30*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			return r
		}
		first, second, third := compile(), compile(), compile()
		done := make(chan error, 1)
		go func() {
			_, err := first.Invoke(t.Context(), "t", graph.Set(State{Count: 1}, "Count"))
			done <- err
		}()
		synctest.Wait() // the first run's node is running
		lease, err := s.Lease(t.Context(), "t", "")
		if err != nil || lease.Owner == "" {
			t.Fatalf("lease while the first run's node runs: %+v, %v", lease, err)
		}
		s.failFor(lease.Owner)
		time.Sleep(45 * time.Second) // past the first run's lease
		res, err := second.Continue(t.Context(), "t")
		if err != nil || res.Status != graph.StatusWaiting {
			t.Fatalf("second runner's Continue: %v, %v; want waiting", res.Status, err)
		}
		s.failFor("")
		time.Sleep(15 * time.Second) // the first run's heartbeat beats again
		if lease, err := s.Lease(t.Context(), "t", ""); err != nil || lease.Owner != "" {
			t.Errorf("lease after the second runner ended waiting: %+v, %v; want released", lease, err)
		}
		if _, err := third.Resume(t.Context(), "t", graph.Command[State]{Resume: "yes"}); err != nil {
			t.Errorf("a third runner's Resume: %v", err)
		}
		close(release)
		if err := <-done; err == nil {
			t.Errorf("the first run, which lost the thread, ended without an error")
		}
	})
}
