package graph_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/interrupt"
	"github.com/lockstepgo/lockstep/retry"
)

// Application code that misbehaves (issue 16 items 1 and 7).

// nilDeref is returned as a typed nil: its Error reads the receiver.
type nilDeref struct{ msg string }

func (e *nilDeref) Error() string { return e.msg }

func typedNil() error {
	var e *nilDeref
	return e
}

// brokenIs has a working Error and an Is and an Unwrap that panic.
type brokenIs struct{}

func (brokenIs) Error() string   { return "broken is" }
func (brokenIs) Is(error) bool   { panic("Is exploded") }
func (brokenIs) As(any) bool     { panic("As exploded") }
func (brokenIs) Unwrap() []error { panic("Unwrap exploded") }

// slow is a state value, interrupt value or answer whose JSON methods
// block while a test holds the gate (see hold), and panic while a test
// sets boom.
type slow struct{ N int }

var gate struct {
	mu      sync.Mutex
	ch      chan struct{}
	entered chan struct{} // receives once a call blocks on ch
	boom    bool
}

// hold makes slow's JSON methods block until release is called; the
// first call that blocks sends on entered.
func hold() (release func()) {
	ch := make(chan struct{})
	gate.mu.Lock()
	gate.ch = ch
	gate.entered = make(chan struct{}, 1)
	gate.mu.Unlock()
	return func() {
		gate.mu.Lock()
		gate.ch = nil
		gate.mu.Unlock()
		close(ch)
	}
}

// explode makes slow's JSON methods panic until the returned function is
// called.
func explode() (stop func()) {
	gate.mu.Lock()
	gate.boom = true
	gate.mu.Unlock()
	return func() {
		gate.mu.Lock()
		gate.boom = false
		gate.mu.Unlock()
	}
}

func waitGate() {
	gate.mu.Lock()
	ch, entered, boom := gate.ch, gate.entered, gate.boom
	gate.mu.Unlock()
	if boom {
		panic("slow exploded")
	}
	if ch != nil {
		select {
		case entered <- struct{}{}:
		default:
		}
		<-ch
	}
}

// gateEntered is the channel a call blocked by hold sends on.
func gateEntered() <-chan struct{} {
	gate.mu.Lock()
	defer gate.mu.Unlock()
	return gate.entered
}

// expiringCtx is a context whose deadline passes when expire is called:
// its Err is then context.DeadlineExceeded, as a real deadline's, without
// the test betting on how fast a loaded machine reaches the blocked call.
// It embeds no cancel context of the standard library, so contexts
// derived from it take their error from its Err.
type expiringCtx struct {
	context.Context // context.Background: no deadline, no values
	done            chan struct{}
	once            sync.Once
}

func newExpiringCtx() (ctx *expiringCtx, expire func()) {
	ctx = &expiringCtx{Context: context.Background(), done: make(chan struct{})}
	return ctx, func() { ctx.once.Do(func() { close(ctx.done) }) }
}

func (c *expiringCtx) Done() <-chan struct{} { return c.done }

func (c *expiringCtx) Err() error {
	select {
	case <-c.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

func (s slow) MarshalJSON() ([]byte, error) {
	waitGate()
	return json.Marshal(s.N)
}

func (s *slow) UnmarshalJSON(b []byte) error {
	waitGate()
	return json.Unmarshal(b, &s.N)
}

// cState is the state of these tests: Slow's JSON methods are the
// application's; Sum has a reducer function.
type cState struct {
	Slow slow
	Sum  int
	Log  []string `lockstep:"append"`
}

func cNode(name string) graph.NodeFunc[cState] {
	return func(ctx context.Context, s cState) (graph.Update[cState], error) {
		return graph.Set(cState{Log: []string{name}}, "Log"), nil
	}
}

// readerFunc is an io.Reader made of a function.
type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(b []byte) (int, error) { return f(b) }

// TestApplicationCodePanics (issue 16 item 1): a panic in any application
// code the runtime calls (a node's error's methods, a router, a reducer,
// a RetryOn function, a retry policy's Rand reader, a JSON method of a state value, an interrupt
// value or an answer) is a typed error naming what panicked; the process
// lives, the run returns, and the thread can still be read.
func TestApplicationCodePanics(t *testing.T) {
	errNode := func(err error) graph.NodeFunc[cState] {
		return func(ctx context.Context, s cState) (graph.Update[cState], error) { return graph.Update[cState]{}, err }
	}
	for _, tc := range []struct {
		name  string
		build func() *graph.Graph[cState]
		run   func(ctx context.Context, r *graph.Runnable[cState], saver checkpoint.Saver) error
		node  string // the *PanicError's Node and Call; "" Call: any *PanicError
		call  string
		other func(err error) string // instead of a *PanicError
	}{
		{"a node returns a typed nil whose Error reads its receiver", func() *graph.Graph[cState] {
			return graph.New[cState]().AddNode("a", errNode(typedNil())).AddEdge(graph.START, "a")
		}, nil, "a", "the Error method of the error it returned", nil},
		{"two nodes in parallel, one returns a typed nil", func() *graph.Graph[cState] {
			return graph.New[cState]().AddNode("a", errNode(typedNil())).AddNode("b", cNode("b")).AddEdge(graph.START, "a").AddEdge(graph.START, "b")
		}, nil, "a", "the Error method of the error it returned", nil},
		{"a node's error has an Is, As and Unwrap that panic", func() *graph.Graph[cState] {
			return graph.New[cState]().AddNode("a", errNode(brokenIs{})).AddEdge(graph.START, "a")
		}, nil, "", "", func(err error) string {
			var ne *graph.NodeError
			if !errors.As(err, &ne) || ne.Node != "a" || !strings.Contains(err.Error(), "broken is") || errors.Is(err, context.Canceled) {
				return "want a *NodeError of node a with the error's text"
			}
			return ""
		}},
		{"a router panics", func() *graph.Graph[cState] {
			return graph.New[cState]().AddNode("a", cNode("a")).AddNode("b", cNode("b")).AddEdge(graph.START, "a").
				AddConditionalEdges("a", func(ctx context.Context, s cState) ([]string, error) { panic("router exploded") })
		}, nil, "a", "router", nil},
		{"a router returns a typed nil", func() *graph.Graph[cState] {
			return graph.New[cState]().AddNode("a", cNode("a")).AddNode("b", cNode("b")).AddEdge(graph.START, "a").
				AddConditionalEdges("a", func(ctx context.Context, s cState) ([]string, error) { return nil, typedNil() })
		}, nil, "a", "the Error method of the error its router returned", nil},
		{"a send router panics", func() *graph.Graph[cState] {
			return graph.New[cState]().AddNode("a", cNode("a")).AddNode("b", cNode("b")).AddEdge(graph.START, "a").
				AddSendEdges("a", func(ctx context.Context, s cState) ([]graph.Send[cState], error) { panic("send exploded") })
		}, nil, "a", "send router", nil},
		{"a reducer panics", func() *graph.Graph[cState] {
			return graph.New[cState]().Reducer("Sum", graph.ReduceFunc(func(a, b int) int { panic("reducer exploded") })).
				AddNode("a", func(ctx context.Context, s cState) (graph.Update[cState], error) {
					return graph.Set(cState{Sum: 1}, "Sum"), nil
				}).AddEdge(graph.START, "a")
		}, nil, "", `the reducer of field "Sum"`, nil},
		{"RetryOn panics", func() *graph.Graph[cState] {
			return graph.New[cState]().AddNode("a", errNode(errors.New("flaky")), graph.WithRetry(retry.Policy{MaxAttempts: 3}), graph.WithRetryOn(func(error) bool { panic("RetryOn exploded") })).
				AddEdge(graph.START, "a")
		}, nil, "a", "its RetryOn function", nil},
		{"a retry policy's Rand reader panics", func() *graph.Graph[cState] {
			return graph.New[cState]().AddNode("a", errNode(errors.New("flaky")),
				graph.WithRetry(retry.Policy{MaxAttempts: 3, Initial: time.Millisecond, Jitter: 0.5, Rand: readerFunc(func([]byte) (int, error) { panic("Rand exploded") })})).
				AddEdge(graph.START, "a")
		}, nil, "a", "the Rand reader of its retry policy", nil},
		{"a stored value's UnmarshalJSON panics", func() *graph.Graph[cState] {
			return graph.New[cState]().AddNode("a", func(ctx context.Context, s cState) (graph.Update[cState], error) {
				return graph.Set(cState{Slow: slow{N: 7}}, "Slow"), nil
			}).AddEdge(graph.START, "a")
		}, func(ctx context.Context, r *graph.Runnable[cState], saver checkpoint.Saver) error {
			if _, err := r.Invoke(ctx, "t", graph.Update[cState]{}); err != nil {
				return fmt.Errorf("setup: %w", err)
			}
			defer explode()()
			// A runnable of its own, whose frame cache does not hold the
			// thread: the state is decoded.
			fresh, err := graph.New[cState]().AddNode("a", cNode("a")).AddEdge(graph.START, "a").Compile(graph.WithSaver(saver))
			if err != nil {
				return err
			}
			_, err = fresh.GetState(ctx, "t")
			return err
		}, "", `the UnmarshalJSON method of field "Slow" (graph_test.slow)`, nil},
		{"an answer's UnmarshalJSON panics: the answer is refused", func() *graph.Graph[cState] {
			return graph.New[cState]().AddNode("a", func(ctx context.Context, s cState) (graph.Update[cState], error) {
				v, err := interrupt.Ask[slow](ctx, "n?")
				if err != nil {
					return graph.Update[cState]{}, err
				}
				return graph.Set(cState{Sum: v.N}, "Sum"), nil
			}).AddEdge(graph.START, "a")
		}, func(ctx context.Context, r *graph.Runnable[cState], saver checkpoint.Saver) error {
			if _, err := r.Invoke(ctx, "t", graph.Update[cState]{}); err != nil {
				return fmt.Errorf("setup: %w", err)
			}
			defer explode()()
			_, err := r.Resume(ctx, "t", graph.Command[cState]{Resume: 3})
			return err
		}, "", "", func(err error) string {
			var ae *interrupt.AnswerError
			if !errors.As(err, &ae) || !strings.Contains(err.Error(), "UnmarshalJSON panicked") {
				return "want an *interrupt.AnswerError saying UnmarshalJSON panicked"
			}
			return ""
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			saver := checkpoint.NewMemorySaver(nil)
			r, err := tc.build().Compile(graph.WithSaver(saver))
			if err != nil {
				t.Fatal(err)
			}
			run := tc.run
			if run == nil {
				run = func(ctx context.Context, r *graph.Runnable[cState], saver checkpoint.Saver) error {
					_, err := r.Invoke(ctx, "t", graph.Update[cState]{})
					return err
				}
			}
			err = run(context.Background(), r, saver)
			if err == nil {
				t.Fatal("no error")
			}
			_ = err.Error()
			_ = errors.Is(err, errors.New("other"))
			if tc.other != nil {
				if msg := tc.other(err); msg != "" {
					t.Errorf("%v: %s", err, msg)
				}
			} else {
				var pe *graph.PanicError
				if !errors.As(err, &pe) || !errors.Is(err, graph.ErrNodePanic) || pe.Node != tc.node || pe.Call != tc.call || len(pe.Stack) == 0 {
					t.Fatalf("err = %v (%+v), want a *PanicError of node %q in %q with its stack", err, pe, tc.node, tc.call)
				}
				if !strings.Contains(err.Error(), tc.call) {
					t.Errorf("message %q does not name %q", err, tc.call)
				}
			}
			// The thread can still be read, and says what happened.
			if snap, err := r.GetState(context.Background(), "t"); err == nil {
				for _, task := range snap.Tasks {
					if task.Error != nil {
						_ = task.Error.Error()
					}
				}
			}
		})
	}
}

// TestApplicationCodeBlocks (issue 16 item 7): application code that does
// not return (a MarshalJSON or UnmarshalJSON method of a resume answer,
// an interrupt value, a state value or the input; a router, a reducer, a
// RetryOn function, a retry policy's Rand reader) holds a run, or a read, no longer than its context:
// it returns an error matching the context's, nothing it had not saved
// before is written, and Runnable.Abandoned counts the call it left
// running until that returns.
func TestApplicationCodeBlocks(t *testing.T) {
	ask := func(ctx context.Context, s cState) (graph.Update[cState], error) {
		v, err := interrupt.Ask[slow](ctx, "n?")
		if err != nil {
			return graph.Update[cState]{}, err
		}
		return graph.Set(cState{Sum: v.N}, "Sum"), nil
	}
	askGraph := func() *graph.Graph[cState] {
		return graph.New[cState]().AddNode("ask", ask).AddEdge(graph.START, "ask")
	}
	waitOn := func(ctx context.Context, r *graph.Runnable[cState]) error {
		_, err := r.Invoke(ctx, "t", graph.Update[cState]{})
		return err
	}
	invoke := func(ctx context.Context, r *graph.Runnable[cState], _ checkpoint.Saver) error { return waitOn(ctx, r) }
	for _, tc := range []struct {
		name  string
		build func() *graph.Graph[cState]
		setup func(ctx context.Context, r *graph.Runnable[cState]) error // before the gate is held
		run   func(ctx context.Context, r *graph.Runnable[cState], saver checkpoint.Saver) error
		want  graph.Status // the thread's status after, "" for no thread
	}{
		{"a resume answer's MarshalJSON", askGraph, waitOn, func(ctx context.Context, r *graph.Runnable[cState], _ checkpoint.Saver) error {
			_, err := r.Resume(ctx, "t", graph.Command[cState]{Resume: slow{N: 1}})
			return err
		}, graph.StatusWaiting},
		{"an answer's UnmarshalJSON, in interrupt.Ask", askGraph, waitOn, func(ctx context.Context, r *graph.Runnable[cState], _ checkpoint.Saver) error {
			_, err := r.Resume(ctx, "t", graph.Command[cState]{Resume: 1})
			return err
		}, graph.StatusPending},
		{"a question's MarshalJSON, in interrupt.Ask", func() *graph.Graph[cState] {
			return graph.New[cState]().AddNode("ask", func(ctx context.Context, s cState) (graph.Update[cState], error) {
				_, err := interrupt.Ask[int](ctx, slow{N: 2})
				return graph.Update[cState]{}, err
			}).AddEdge(graph.START, "ask")
		}, func(ctx context.Context, r *graph.Runnable[cState]) error {
			_, err := r.Invoke(ctx, "t", graph.Update[cState]{}, graph.InterruptBefore("ask"))
			return err
		}, func(ctx context.Context, r *graph.Runnable[cState], _ checkpoint.Saver) error {
			_, err := r.Continue(ctx, "t")
			return err
		}, graph.StatusWaiting}, // at its breakpoint still
		{"a NodeInterrupt value's MarshalJSON", func() *graph.Graph[cState] {
			return graph.New[cState]().AddNode("stop", func(ctx context.Context, s cState) (graph.Update[cState], error) {
				return graph.Update[cState]{}, &interrupt.NodeInterrupt{Value: slow{N: 3}}
			}).AddEdge(graph.START, "stop")
		}, nil, invoke, ""},
		{"the input's MarshalJSON", func() *graph.Graph[cState] {
			return graph.New[cState]().AddNode("a", cNode("a")).AddEdge(graph.START, "a")
		}, nil, func(ctx context.Context, r *graph.Runnable[cState], saver checkpoint.Saver) error {
			_, err := r.Invoke(ctx, "t", graph.Set(cState{Slow: slow{N: 4}}, "Slow"))
			return err
		}, ""},
		{"a node write's MarshalJSON", func() *graph.Graph[cState] {
			return graph.New[cState]().AddNode("a", func(ctx context.Context, s cState) (graph.Update[cState], error) {
				return graph.Set(cState{Slow: slow{N: 5}}, "Slow"), nil
			}).AddEdge(graph.START, "a")
		}, nil, invoke, graph.StatusPending},
		{"a router", func() *graph.Graph[cState] {
			return graph.New[cState]().AddNode("a", cNode("a")).AddNode("b", cNode("b")).AddEdge(graph.START, "a").
				AddConditionalEdges("a", func(ctx context.Context, s cState) ([]string, error) { waitGate(); return []string{"b"}, nil })
		}, nil, invoke, graph.StatusPending},
		{"a reducer", func() *graph.Graph[cState] {
			return graph.New[cState]().Reducer("Sum", graph.ReduceFunc(func(a, b int) int { waitGate(); return a + b })).
				AddNode("a", func(ctx context.Context, s cState) (graph.Update[cState], error) {
					return graph.Set(cState{Sum: 1}, "Sum"), nil
				}).AddEdge(graph.START, "a")
		}, nil, invoke, graph.StatusPending},
		{"a RetryOn function", func() *graph.Graph[cState] {
			return graph.New[cState]().AddNode("a", func(ctx context.Context, s cState) (graph.Update[cState], error) {
				return graph.Update[cState]{}, errors.New("flaky")
			}, graph.WithRetry(retry.Policy{MaxAttempts: 3}), graph.WithRetryOn(func(error) bool { waitGate(); return true })).AddEdge(graph.START, "a")
		}, nil, invoke, graph.StatusPending},
		{"a retry policy's Rand reader", func() *graph.Graph[cState] {
			return graph.New[cState]().AddNode("a", func(ctx context.Context, s cState) (graph.Update[cState], error) {
				return graph.Update[cState]{}, errors.New("flaky")
			}, graph.WithRetry(retry.Policy{MaxAttempts: 3, Initial: time.Millisecond, Jitter: 0.5, Rand: readerFunc(func(b []byte) (int, error) { waitGate(); return len(b), nil })})).AddEdge(graph.START, "a")
		}, nil, invoke, graph.StatusPending},
		{"a stored value's UnmarshalJSON, in GetState", func() *graph.Graph[cState] {
			return graph.New[cState]().AddNode("a", func(ctx context.Context, s cState) (graph.Update[cState], error) {
				return graph.Set(cState{Slow: slow{N: 6}}, "Slow"), nil
			}).AddEdge(graph.START, "a")
		}, waitOn, func(ctx context.Context, r *graph.Runnable[cState], saver checkpoint.Saver) error {
			// A fresh runnable: its frame cache does not hold the thread.
			fresh, err := graph.New[cState]().AddNode("a", cNode("a")).AddEdge(graph.START, "a").Compile(graph.WithSaver(saver))
			if err != nil {
				return err
			}
			_, err = fresh.GetState(ctx, "t")
			if fresh.Abandoned() == 0 {
				return fmt.Errorf("the fresh runnable counts no abandoned call: %w", err)
			}
			return err
		}, graph.StatusDone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			saver := checkpoint.NewMemorySaver(nil)
			r, err := tc.build().Compile(graph.WithSaver(saver))
			if err != nil {
				t.Fatal(err)
			}
			if tc.setup != nil {
				if err := tc.setup(context.Background(), r); err != nil {
					t.Fatalf("setup: %v", err)
				}
			}
			var before []*checkpoint.Tuple
			if tc.want != "" {
				before = listAll(t, saver)
			}
			release := hold()
			ctx, expire := newExpiringCtx()
			defer expire()
			done := make(chan error, 1)
			go func() { done <- tc.run(ctx, r, saver) }()
			// The deadline passes once the application code blocks, however
			// long a busy machine takes to get there.
			select {
			case <-gateEntered():
				expire()
			case err = <-done:
				release()
				t.Fatalf("the call returned (%v) before it reached the blocking application code", err)
			case <-time.After(time.Minute):
				release()
				t.Fatal("the call did not reach the blocking application code in a minute")
			}
			select {
			case err = <-done:
			case <-time.After(time.Minute):
				release()
				t.Fatal("the call did not return after its context ended")
			}
			release()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("err = %v, want one matching context.DeadlineExceeded", err)
			}
			if tc.name != "a stored value's UnmarshalJSON, in GetState" && r.Abandoned() == 0 {
				t.Errorf("the blocked call is not counted as abandoned (%v)", err)
			}
			for deadline := time.Now().Add(time.Minute); r.AbandonedRunning() != 0; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("%d abandoned calls still running after their release", r.AbandonedRunning())
				}
			}
			if tc.want == "" {
				if _, err := r.GetState(context.Background(), "t"); err != nil && !errors.Is(err, graph.ErrThreadNotFound) {
					t.Errorf("GetState: %v", err)
				}
				return
			}
			snap, err := r.GetState(context.Background(), "t")
			if err != nil || snap.Status != tc.want {
				t.Errorf("after: status %s, %v; want %s", snap.Status, err, tc.want)
			}
			if tc.want == graph.StatusWaiting {
				if diff := len(listAll(t, saver)) - len(before); diff != 0 {
					t.Errorf("the refused resume wrote %d checkpoints", diff)
				}
			}
		})
	}
}

func listAll(t *testing.T, s checkpoint.Saver) []*checkpoint.Tuple {
	t.Helper()
	tps, err := s.List(context.Background(), "t", checkpoint.ListOptions{})
	if err != nil && !errors.Is(err, checkpoint.ErrNotFound) {
		t.Fatal(err)
	}
	return tps
}
