package graph_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/retry"
)

// attempts records when each attempt of a node started, on the bubble's
// clock.
type attempts struct{ at []time.Time }

func (a *attempts) gaps() []time.Duration {
	var out []time.Duration
	for i := 1; i < len(a.at); i++ {
		out = append(out, a.at[i].Sub(a.at[i-1]))
	}
	return out
}

// failingNode fails its first failures attempts with err, then writes X.
func failingNode(a *attempts, failures int, err error) graph.NodeFunc[State] {
	return func(ctx context.Context, s State) (graph.Update[State], error) {
		a.at = append(a.at, time.Now())
		if len(a.at) <= failures {
			return graph.Update[State]{}, err
		}
		return graph.Set(State{X: "ok"}, "X"), nil
	}
}

// TestRetrySchedule: a node with WithRetry runs up to the policy's
// attempts in the same step, waiting the policy's backoff between them
// (on synctest's clock, so the waits are exact and nothing sleeps): the
// former graph schedule (100ms doubling) when spelled out, no wait for a
// zero Initial, the cap, the jitter from an injected Rand.
func TestRetrySchedule(t *testing.T) {
	flaky := errors.New("flaky")
	for _, tc := range []struct {
		name     string
		p        retry.Policy
		failures int
		gaps     []time.Duration // between attempts
		wantErr  bool
	}{
		{"the zero policy: three attempts, no wait", retry.Policy{}, 10, []time.Duration{0, 0}, true},
		{"one attempt", retry.Policy{MaxAttempts: 1, Initial: time.Second}, 10, nil, true},
		{"success on the second attempt", retry.Policy{Initial: time.Second}, 1, []time.Duration{time.Second}, false},
		{"100ms doubling (graph's former default, spelled out)", retry.Policy{MaxAttempts: 5, Initial: 100 * time.Millisecond, Multiplier: 2, Max: 10 * time.Second}, 10,
			[]time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond}, true},
		{"capped at Max", retry.Policy{MaxAttempts: 5, Initial: time.Second, Max: 2 * time.Second}, 10,
			[]time.Duration{time.Second, 2 * time.Second, 2 * time.Second, 2 * time.Second}, true},
		{"constant", retry.Policy{MaxAttempts: 4, Initial: 50 * time.Millisecond, Multiplier: 1}, 10,
			[]time.Duration{50 * time.Millisecond, 50 * time.Millisecond, 50 * time.Millisecond}, true},
		{"jitter from Rand: all zero bits, the low end", retry.Policy{Initial: time.Second, Jitter: 0.5, Rand: bytes.NewReader(make([]byte, 16))}, 10,
			[]time.Duration{500 * time.Millisecond, time.Second}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a := &attempts{}
				g := graph.New[State]().AddNode("a", failingNode(a, tc.failures, flaky), graph.WithRetry(tc.p)).AddEdge(graph.START, "a")
				r := mustCompile(t, g, graph.WithSaver(checkpoint.NewMemorySaver(nil)))
				res, err := r.Invoke(context.Background(), "t", graph.Update[State]{})
				if tc.wantErr != (err != nil) || (err != nil && !errors.Is(err, flaky)) {
					t.Fatalf("Invoke = %+v, %v; want error %v (the node's)", res, err, tc.wantErr)
				}
				if d := cmp.Diff(tc.gaps, a.gaps()); d != "" {
					t.Errorf("waits between attempts (-want +got):\n%s", d)
				}
			})
		})
	}
}

// TestRetryWhatIsRetried: WithRetryOn chooses the errors retried (and is
// asked about each failure but the last); a node's context error and the
// run's context ending are never retried.
func TestRetryWhatIsRetried(t *testing.T) {
	flaky, fatal := errors.New("flaky"), errors.New("fatal")
	onlyFlaky := func(err error) bool { return errors.Is(err, flaky) }
	for _, tc := range []struct {
		name     string
		err      error
		on       func(error) bool
		set      bool // WithRetryOn(on) is given
		attempts int
		asked    int
	}{
		{"no RetryOn: every error", fatal, nil, false, 3, 0},
		{"a nil RetryOn: every error", fatal, nil, true, 3, 0},
		{"RetryOn true", flaky, onlyFlaky, true, 3, 2},
		{"RetryOn false", fatal, onlyFlaky, true, 1, 1},
		{"a node's context.Canceled", fmt.Errorf("call: %w", context.Canceled), nil, false, 1, 0},
		{"a node's context.DeadlineExceeded", fmt.Errorf("call: %w", context.DeadlineExceeded), nil, false, 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &attempts{}
			asked := 0
			opts := []graph.NodeOption{graph.WithRetry(retry.Policy{})}
			switch {
			case tc.set && tc.on == nil:
				opts = append(opts, graph.WithRetryOn(nil))
			case tc.set:
				opts = append(opts, graph.WithRetryOn(func(err error) bool { asked++; return tc.on(err) }))
			}
			g := graph.New[State]().AddNode("a", failingNode(a, 10, tc.err), opts...).AddEdge(graph.START, "a")
			r := mustCompile(t, g)
			if _, err := r.Invoke(context.Background(), "t", graph.Update[State]{}); !errors.Is(err, tc.err) {
				t.Fatalf("err = %v, want the node's %v", err, tc.err)
			}
			if len(a.at) != tc.attempts || asked != tc.asked {
				t.Errorf("%d attempts, RetryOn asked %d times; want %d, %d", len(a.at), asked, tc.attempts, tc.asked)
			}
		})
	}
	t.Run("the run's context ending", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			a := &attempts{}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			g := graph.New[State]().AddNode("a", func(ctx context.Context, s State) (graph.Update[State], error) {
				a.at = append(a.at, time.Now())
				go func() { time.Sleep(time.Second); cancel() }() // during the first wait
				return graph.Update[State]{}, flaky
			}, graph.WithRetry(retry.Policy{Initial: time.Hour, Max: time.Hour})).AddEdge(graph.START, "a")
			r := mustCompile(t, g)
			start := time.Now()
			_, err := r.Invoke(ctx, "t", graph.Update[State]{})
			if err == nil || len(a.at) != 1 || time.Since(start) != time.Second {
				t.Errorf("err %v after %d attempts and %v; want the run ended by its context during the wait, after 1s", err, len(a.at), time.Since(start))
			}
		})
	})
}

// TestRetryPolicyRefused: a policy that means nothing, or a RetryOn with
// no policy, is refused by Compile with a *CompileError naming the node
// (the policy's *retry.PolicyError inside), never replaced.
func TestRetryPolicyRefused(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opts  []graph.NodeOption
		field string // the *retry.PolicyError's, "" for none
	}{
		{"negative Initial", []graph.NodeOption{graph.WithRetry(retry.Policy{Initial: -time.Millisecond})}, "Initial"},
		{"negative MaxAttempts", []graph.NodeOption{graph.WithRetry(retry.Policy{MaxAttempts: -1})}, "MaxAttempts"},
		{"a factor below 1", []graph.NodeOption{graph.WithRetry(retry.Policy{Multiplier: 0.5})}, "Multiplier"},
		{"negative Max", []graph.NodeOption{graph.WithRetry(retry.Policy{Max: -time.Second})}, "Max"},
		{"Jitter above 1", []graph.NodeOption{graph.WithRetry(retry.Policy{Jitter: 2})}, "Jitter"},
		{"RetryOn without a policy", []graph.NodeOption{graph.WithRetryOn(func(error) bool { return true })}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := graph.New[State]().AddNode("flaky", logNode(nil, "flaky"), tc.opts...).AddEdge(graph.START, "flaky")
			_, err := g.Compile()
			var ce *graph.CompileError
			if !errors.Is(err, graph.ErrInvalidGraph) || !errors.As(err, &ce) || ce.Node != "flaky" {
				t.Fatalf("Compile: %v, want a *CompileError of node flaky", err)
			}
			var pe *retry.PolicyError
			switch {
			case tc.field == "" && errors.As(err, &pe):
				t.Errorf("Compile: %v, want no *retry.PolicyError", err)
			case tc.field != "" && (!errors.As(err, &pe) || pe.Field != tc.field || !errors.Is(err, retry.ErrInvalidPolicy)):
				t.Errorf("Compile: %v, want a *retry.PolicyError for %s", err, tc.field)
			}
		})
	}
	_, err := graph.New[State]().AddNode("a", logNode(nil, "a"), graph.WithRetry(retry.Policy{Initial: -1})).AddEdge(graph.START, "a").Compile()
	want := `graph: invalid retry policy (node "a"): retry: invalid policy: Initial -1ns: want 0 (no wait) or more`
	if err == nil || err.Error() != want {
		t.Errorf("message %q, want %q", err, want)
	}
}
