package graph_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/internal/obstest"
	"github.com/lockstepgo/lockstep/interrupt"
	"github.com/lockstepgo/lockstep/observe"
	"github.com/lockstepgo/lockstep/retry"
)

// label names a recorded span for the trees below.
func label(sp obstest.Span) string {
	e := sp.Start
	switch e.Kind {
	case observe.KindRun:
		return e.Mode
	case observe.KindStep:
		return fmt.Sprintf("%d/%d", e.Step, e.Tasks)
	case observe.KindTask:
		if sp.End != nil {
			return fmt.Sprintf("%s#%d", e.Node, sp.End.Attempt)
		}
		return e.Node
	case observe.KindSaver:
		return e.Op
	}
	return "?"
}

// observedGraph: START → a → (b, c) → d, where b fails once (and is
// retried) and d asks a human.
func observedGraph(fails *atomic.Int32) *graph.Graph[State] {
	g := graph.New[State]()
	g.AddNode("a", logNode(nil, "a"))
	g.AddNode("b", func(ctx context.Context, s State) (graph.Update[State], error) {
		if fails.Add(-1) >= 0 {
			return graph.Update[State]{}, errors.New("flaky")
		}
		return graph.Set(State{Log: []string{"b"}}, "Log"), nil
	}, graph.WithRetry(retry.Policy{MaxAttempts: 3}))
	g.AddNode("c", logNode(nil, "c"))
	g.AddNode("d", func(ctx context.Context, s State) (graph.Update[State], error) {
		v, err := interrupt.Ask[string](ctx, "ok?")
		if err != nil {
			return graph.Update[State]{}, err
		}
		return graph.Set(State{Answer: v}, "Answer"), nil
	})
	g.AddEdge(graph.START, "a").AddEdge("a", "b").AddEdge("a", "c").AddJoin([]string{"b", "c"}, "d").AddEdge("d", graph.END)
	return g
}

func TestObserverSpanTree(t *testing.T) {
	var fails atomic.Int32
	fails.Store(1)
	rec := &obstest.Recorder{}
	r := mustCompile(t, observedGraph(&fails), graph.WithSaver(checkpoint.NewMemorySaver(nil)), graph.WithObserver(rec))
	ctx := context.Background()
	res, err := r.Invoke(ctx, "t1", graph.Set(State{Count: 1}, "Count"))
	if err != nil || res.Status != graph.StatusWaiting {
		t.Fatalf("Invoke: %v, %v", res.Status, err)
	}
	// The run waits: not a failure. The step's writes go to the saver in
	// the step's span; a parallel task that finishes first is saved on its
	// own (put_writes) inside its step. The thread is new: no claim.
	want := `run input waiting
  saver get done
  step 0/1 done
    saver put done
    task __start__#1 done
  step 1/1 done
    saver put done
    task a#1 done
  step 2/2 done
    saver put done
    saver put_writes done
    task b#2 done [retry ]
    task c#1 done
  step 3/1 waiting
    saver put_writes done
    task d#1 waiting
`
	if diff := cmp.Diff(want, rec.Tree(label, true)); diff != "" {
		t.Errorf("span tree (-want +got):\n%s", diff)
	}
	spans := rec.Spans()
	run := spans[0]
	if run.End.Interrupts == nil || len(run.End.Interrupts) != 1 || run.End.Interrupts[0] != res.Interrupts[0].ID {
		t.Errorf("run end interrupts %v, want %v", run.End.Interrupts, res.Interrupts)
	}
	if run.Start.Thread != "t1" || run.Start.Run == "" || run.End.Error != "" {
		t.Errorf("run start %+v end %+v", run.Start, *run.End)
	}
	for _, sp := range spans {
		if sp.Start.Kind == observe.KindSaver && sp.Start.Op != observe.OpGet && sp.Start.Bytes == 0 {
			t.Errorf("saver %s writes 0 bytes", sp.Start.Op)
		}
		if sp.Start.Kind == observe.KindTask && sp.Start.Node == "b" {
			n := sp.Notes[0]
			if n.Kind != observe.KindRetry || n.Attempt != 1 || n.Class != "node" || n.Error != "flaky" {
				t.Errorf("b's retry note %+v", n)
			}
		}
	}

	// The resume: claimed (and read), the answer saved with the step;
	// its context's links are the run's.
	ctx = observe.WithLinks(ctx, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	res, err = r.Resume(ctx, "t1", graph.Command[State]{Resume: "yes"})
	if err != nil || res.Status != graph.StatusDone || res.Values.Answer != "yes" {
		t.Fatalf("Resume: %v %+v, %v", res.Status, res.Values, err)
	}
	spans = rec.Spans()
	var resume obstest.Span
	for _, sp := range spans {
		if sp.Start.Kind == observe.KindRun && sp.Start.Mode == observe.ModeResume {
			resume = sp
		}
	}
	if diff := cmp.Diff([]string{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}, resume.Start.Links); diff != "" {
		t.Errorf("resume links (-want +got):\n%s", diff)
	}
	tree := rec.Tree(label, false)
	// The final save releases the lease: no release call.
	wantResume := `run resume done
  saver claim done
  saver get done
  step 3/1 done
    task d#1 done
    saver put done
`
	if !strings.Contains(tree, wantResume) {
		t.Errorf("the resume's tree is not\n%s\nin\n%s", wantResume, tree)
	}
	if open := rec.Open(); len(open) > 0 {
		t.Errorf("spans left open: %+v", open)
	}
}

// TestObserverLeaseConflict: a run refused because another runner holds
// the thread notes the conflict in its claim.
func TestObserverLeaseConflict(t *testing.T) {
	saver := checkpoint.NewMemorySaver(nil)
	entered, release := make(chan struct{}), make(chan struct{})
	g := graph.New[State]()
	g.AddNode("slow", func(ctx context.Context, s State) (graph.Update[State], error) {
		close(entered)
		<-release
		return graph.Set(State{Count: 1}, "Count"), nil
	}).AddEdge(graph.START, "slow").AddEdge("slow", graph.END)
	holder := mustCompile(t, g, graph.WithSaver(saver), graph.WithRunner("holder"))
	done := make(chan error, 1)
	go func() {
		_, err := holder.Invoke(context.Background(), "t", graph.Set(State{}, "Count"))
		done <- err
	}()
	<-entered
	rec := &obstest.Recorder{}
	other := mustCompile(t, g, graph.WithSaver(saver), graph.WithRunner("other"), graph.WithObserver(rec))
	_, err := other.Continue(context.Background(), "t")
	close(release)
	if herr := <-done; herr != nil {
		t.Fatal(herr)
	}
	if !errors.Is(err, checkpoint.ErrThreadBusy) {
		t.Fatalf("Continue: %v, want ErrThreadBusy", err)
	}
	var notes []observe.Event
	for _, sp := range rec.Spans() {
		notes = append(notes, sp.Notes...)
	}
	if len(notes) != 1 || notes[0].Kind != observe.KindLeaseConflict || notes[0].Op != observe.OpClaim || notes[0].Thread != "t" || notes[0].Holder == "" {
		t.Fatalf("notes %+v, want one lease conflict of the claim naming its holder", notes)
	}
	if got := rec.Tree(label, false); !strings.HasPrefix(got, "run continue failed\n") {
		t.Errorf("tree:\n%s", got)
	}
}

// panicky is a hook whose every method panics.
type panicky struct{ calls atomic.Int32 }

func (p *panicky) Start(ctx context.Context, e observe.Event) context.Context {
	p.calls.Add(1)
	panic("start")
}
func (p *panicky) End(ctx context.Context, e observe.Event)  { p.calls.Add(1); panic("end") }
func (p *panicky) Note(ctx context.Context, e observe.Event) { p.calls.Add(1); panic("note") }
func (p *panicky) TraceParent(ctx context.Context) string    { p.calls.Add(1); panic("traceparent") }

// blocking is a hook whose Start blocks until release is closed.
type blocking struct {
	release chan struct{}
	started atomic.Int32
}

func (b *blocking) Start(ctx context.Context, e observe.Event) context.Context {
	b.started.Add(1)
	<-b.release
	return ctx
}
func (b *blocking) End(ctx context.Context, e observe.Event)  {}
func (b *blocking) Note(ctx context.Context, e observe.Event) {}
func (b *blocking) TraceParent(ctx context.Context) string    { return "" }

func TestObserverContained(t *testing.T) {
	t.Run("panics", func(t *testing.T) {
		var fails atomic.Int32
		fails.Store(1)
		h := &panicky{}
		var logs strings.Builder
		r := mustCompile(t, observedGraph(&fails), graph.WithSaver(checkpoint.NewMemorySaver(nil)), graph.WithObserver(h),
			graph.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
		for _, ctx := range []context.Context{context.Background(), withCancel(t)} {
			thread := fmt.Sprintf("t-%d", h.calls.Load())
			res, err := r.Invoke(ctx, thread, graph.Set(State{Count: 1}, "Count"))
			if err != nil || res.Status != graph.StatusWaiting {
				t.Fatalf("Invoke: %v, %v", res.Status, err)
			}
			if res, err = r.Resume(ctx, thread, graph.Command[State]{Resume: "yes"}); err != nil || res.Values.Answer != "yes" {
				t.Fatalf("Resume: %+v, %v", res.Values, err)
			}
			fails.Store(1)
		}
		if h.calls.Load() == 0 || !strings.Contains(logs.String(), "the observer panicked") {
			t.Errorf("calls %d, logs %q", h.calls.Load(), logs.String())
		}
	})
	t.Run("blocks", func(t *testing.T) {
		h := &blocking{release: make(chan struct{})}
		g := graph.New[State]()
		g.AddNode("a", logNode(nil, "a")).AddEdge(graph.START, "a").AddEdge("a", graph.END)
		r := mustCompile(t, g, graph.WithSaver(checkpoint.NewMemorySaver(nil)), graph.WithObserver(h))
		t.Cleanup(func() {
			close(h.release)
			for deadline := time.Now().Add(10 * time.Second); r.AbandonedRunning() > 0 && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond)
			}
		})
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		done := make(chan error, 1)
		go func() {
			_, err := r.Invoke(ctx, "t", graph.Set(State{Count: 1}, "Count"))
			done <- err
		}()
		select {
		case err := <-done:
			// The run's Start was given up on when the deadline passed;
			// the run then stopped as a run whose context ended does.
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Invoke: %v, want the deadline", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the run did not return after its deadline: the blocked observer held it")
		}
		if r.Abandoned() != 1 || h.started.Load() != 1 {
			t.Errorf("abandoned %d, starts %d; want the one Start given up on and no call after it", r.Abandoned(), h.started.Load())
		}
		// The next run is not observed any more, and runs.
		if res, err := r.Invoke(context.Background(), "t2", graph.Set(State{Count: 1}, "Count")); err != nil || res.Status != graph.StatusDone {
			t.Errorf("next Invoke: %v, %v", res.Status, err)
		}
		if h.started.Load() != 1 {
			t.Errorf("starts %d after the hook was given up on", h.started.Load())
		}
	})
}

func withCancel(t *testing.T) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return ctx
}

// BenchmarkObserverOff checks that a run without an observer allocates
// what it did before the hook existed (compare -benchmem of the parent's
// commit): the hook's call sites cost a nil check.
func BenchmarkObserverOff(b *testing.B) {
	g := graph.New[State]()
	g.AddNode("a", logNode(nil, "a")).AddEdge(graph.START, "a").AddEdge("a", graph.END)
	r := mustCompile(b, g, graph.WithSaver(checkpoint.NewMemorySaver(nil)))
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		if _, err := r.Invoke(context.Background(), fmt.Sprint(n), graph.Set(State{Count: 1}, "Count")); err != nil {
			b.Fatal(err)
		}
		n++
	}
}
