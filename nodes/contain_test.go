package nodes_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/nodes"
	"github.com/lockstepgo/lockstep/nodes/ledger"
)

// Errors whose methods panic: the bugs tool code ships (issue 16 item 1).
type (
	// nilDerefErr is returned as a typed nil: its Error reads the receiver.
	nilDerefErr struct{ code int }
	// panicErr's Error panics outright.
	panicErr struct{}
	// unwrapPanics, isPanics, asPanics, classPanics and unsurePanics have
	// a working Error and one method that panics.
	unwrapPanics struct{}
	isPanics     struct{}
	asPanics     struct{}
	classPanics  struct{}
	unsurePanics struct{}
)

func (e *nilDerefErr) Error() string             { return fmt.Sprintf("code %d", e.code) }
func (panicErr) Error() string                   { panic("Error exploded") }
func (unwrapPanics) Error() string               { return "unwrap panics" }
func (unwrapPanics) Unwrap() error               { panic("Unwrap exploded") }
func (isPanics) Error() string                   { return "is panics" }
func (isPanics) Is(error) bool                   { panic("Is exploded") }
func (asPanics) Error() string                   { return "as panics" }
func (asPanics) As(any) bool                     { panic("As exploded") }
func (classPanics) Error() string                { return "class panics" }
func (classPanics) RetryClass() nodes.Class      { panic("RetryClass exploded") }
func (unsurePanics) Error() string               { return "unsure panics" }
func (unsurePanics) Indeterminate() bool         { panic("Indeterminate exploded") }
func (panicResult) MarshalJSON() ([]byte, error) { panic("MarshalJSON exploded") }

type panicResult struct{}

func typedNil() error {
	var e *nilDerefErr
	return e
}

// TestToolErrorMethodsPanic: an error whose methods panic, returned by a
// read or a write (through the ledger), fails the call with a typed
// error naming the tool and the method; nothing panics out of Execute,
// and the message the model would read is written without calling the
// broken method again.
func TestToolErrorMethodsPanic(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		in   string // the PanicError's In; "" for none: the call fails with the error's own text
		text string // then its text
	}{
		{"typed nil whose Error reads its receiver", typedNil(), "the Error method of the error its body returned", ""},
		// fmt reads a typed nil's Error safely: the text says <nil>.
		{"typed nil, wrapped with fmt", fmt.Errorf("charging: %w", typedNil()), "", "charging: <nil>"},
		{"Error panics", panicErr{}, "the Error method of the error its body returned", ""},
		{"Unwrap panics", unwrapPanics{}, "a method of the error its body returned", ""},
		{"As panics", asPanics{}, "a method of the error its body returned", ""},
		{"RetryClass panics", classPanics{}, "a method of the error its body returned", ""},
		{"Indeterminate panics", unsurePanics{}, "a method of the error its body returned", ""},
		{"Is panics: it matches nothing", isPanics{}, "", "is panics"},
	} {
		for _, kind := range []string{"read", "write"} {
			t.Run(tc.name+"/"+kind, func(t *testing.T) {
				opts := []nodes.ToolOption{nodes.Idempotent(), nodes.NoMemo()}
				var exOpts []nodes.ExecutorOption
				if kind == "write" {
					opts = nil
					exOpts = append(exOpts, nodes.WithLedger(newMemLedger(t, nil)), nodes.WithPolicy(nodes.AlwaysApprove()))
				}
				tool := mustTool(t)(nodes.NewTool("buggy", "Fails with a broken error.", func(ctx context.Context, _ Empty, env nodes.Env) (string, error) {
					return "", tc.err
				}, opts...))
				ex, err := nodes.NewExecutor([]*nodes.Tool{tool}, append(exOpts, nodes.WithClock(newFakeClock()))...)
				if err != nil {
					t.Fatal(err)
				}
				_, err = ex.Execute(context.Background(), nodes.Call{ID: "c1", Tool: "buggy", Scope: "th"})
				checkContained(t, err, tc.in != "", tc.in, tc.text)
				if kind == "write" {
					// The ledger stored the failure (a permanent one) or
					// released the intent; either way a repeat does not
					// panic either.
					_, err = ex.Execute(context.Background(), nodes.Call{ID: "c2", Tool: "buggy", Scope: "th"})
					if err == nil || errors.Is(err, ledger.ErrInProgress) {
						t.Errorf("repeat: %v", err)
					}
					_ = err.Error()
				}
			})
		}
	}
}

// checkContained checks a call's error: a *PanicError of tool "buggy"
// whose In is in (with a stack) when panics is set, or else a *ToolError
// whose text holds text. Its message, and errors.Is and errors.As on it,
// must not panic.
func checkContained(t *testing.T, err error, panics bool, in, text string) {
	t.Helper()
	if err == nil {
		t.Fatal("no error")
	}
	msg := err.Error()
	_ = errors.Is(err, errors.New("other"))
	var he *nodes.HTTPError
	_ = errors.As(err, &he)
	if !errors.Is(err, nodes.ErrToolFailed) {
		t.Errorf("%v: does not match ErrToolFailed", err)
	}
	if !panics {
		var te *nodes.ToolError
		if !errors.As(err, &te) || !strings.Contains(msg, text) || errors.Is(err, nodes.ErrToolPanic) {
			t.Errorf("err = %v, want a *ToolError saying %q", err, text)
		}
		return
	}
	var pe *nodes.PanicError
	if !errors.As(err, &pe) || pe.Tool != "buggy" || pe.In != in || len(pe.Stack) == 0 || !errors.Is(err, nodes.ErrToolPanic) {
		t.Fatalf("err = %v (%+v), want a *PanicError of tool buggy in %q with its stack", err, pe, in)
	}
	if !strings.Contains(msg, "buggy") || !strings.Contains(msg, in) {
		t.Errorf("message %q does not name the tool and %q", msg, in)
	}
}

// TestToolCodePanics: every other function of a tool's that the runtime
// calls is contained the same way: a panic is a typed error of the call.
func TestToolCodePanics(t *testing.T) {
	body := func(ctx context.Context, a OrderArgs, env nodes.Env) (string, error) { return "ok", nil }
	for _, tc := range []struct {
		name    string
		tool    func(t *testing.T) *nodes.Tool
		exOpts  []nodes.ExecutorOption
		prepare func(t *testing.T, l *ledger.Memory, clk *fakeClock) // leaves an unknown outcome, for Reconcile
		check   func(t *testing.T, err error)
	}{
		{"the result's MarshalJSON panics", func(t *testing.T) *nodes.Tool {
			return mustTool(t)(nodes.NewTool("buggy", "d", func(ctx context.Context, a OrderArgs, env nodes.Env) (panicResult, error) {
				return panicResult{}, nil
			}, nodes.Idempotent()))
		}, nil, nil, func(t *testing.T, err error) { checkContained(t, err, true, "", "") }},
		{"the body panics with a typed nil error", func(t *testing.T) *nodes.Tool {
			return mustTool(t)(nodes.NewTool("buggy", "d", func(ctx context.Context, a OrderArgs, env nodes.Env) (string, error) {
				panic(typedNil())
			}, nodes.Idempotent()))
		}, nil, nil, func(t *testing.T, err error) { checkContained(t, err, true, "", "") }},
		{"NaturalKey panics", func(t *testing.T) *nodes.Tool {
			return mustTool(t)(nodes.NewTool("buggy", "d", body, nodes.NaturalKey(func(a OrderArgs) string { panic("no key") })))
		}, nil, nil, func(t *testing.T, err error) { checkContained(t, err, true, "its NaturalKey function", "") }},
		{"Reconcile panics", func(t *testing.T) *nodes.Tool {
			return mustTool(t)(nodes.NewTool("buggy", "d", body, nodes.Reconcile(func(ctx context.Context, a OrderArgs, env nodes.Env) (string, bool, error) {
				panic("cannot look")
			})))
		}, nil, leaveUnknown, func(t *testing.T, err error) { checkContained(t, err, true, "its Reconcile function", "") }},
		{"Reconcile returns a typed nil", func(t *testing.T) *nodes.Tool {
			return mustTool(t)(nodes.NewTool("buggy", "d", body, nodes.Reconcile(func(ctx context.Context, a OrderArgs, env nodes.Env) (string, bool, error) {
				return "", false, typedNil()
			})))
		}, nil, leaveUnknown, func(t *testing.T, err error) {
			checkContained(t, err, true, "the Error method of the error its Reconcile function returned", "")
		}},
		{"the secret provider panics", func(t *testing.T) *nodes.Tool {
			return mustTool(t)(nodes.NewTool("buggy", "d", body, nodes.Idempotent(), nodes.Secrets("API_KEY")))
		}, []nodes.ExecutorOption{nodes.WithSecrets(nodes.SecretFunc(func(ctx context.Context, name string) (string, error) {
			panic("vault down: token s3cr3t-value")
		}))}, nil, func(t *testing.T, err error) {
			var se *nodes.SecretError
			if !errors.As(err, &se) || se.Reason != "the secret provider panicked" || strings.Contains(err.Error(), "s3cr3t") {
				t.Errorf("err = %v, want a *SecretError saying the provider panicked, without its panic value", err)
			}
		}},
		{"the secret provider returns a typed nil", func(t *testing.T) *nodes.Tool {
			return mustTool(t)(nodes.NewTool("buggy", "d", body, nodes.Idempotent(), nodes.Secrets("API_KEY")))
		}, []nodes.ExecutorOption{nodes.WithSecrets(nodes.SecretFunc(func(ctx context.Context, name string) (string, error) {
			return "", typedNil()
		}))}, nil, func(t *testing.T, err error) {
			if !errors.Is(err, nodes.ErrSecret) {
				t.Errorf("err = %v, want ErrSecret", err)
			}
		}},
		{"the memo store panics: the read runs without it", func(t *testing.T) *nodes.Tool {
			return mustTool(t)(nodes.NewTool("buggy", "d", body, nodes.Idempotent()))
		}, nil, nil, func(t *testing.T, err error) {
			if err != nil {
				t.Errorf("err = %v, want the read's result", err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newFakeClock()
			l := newMemLedger(t, clk.Now)
			ex, err := nodes.NewExecutor([]*nodes.Tool{tc.tool(t)}, append([]nodes.ExecutorOption{nodes.WithLedger(l), nodes.WithClock(clk), nodes.WithPolicy(nodes.AlwaysApprove())}, tc.exOpts...)...)
			if err != nil {
				t.Fatal(err)
			}
			c := charge("O-1", 5, "th")
			c.Tool = "buggy"
			c.Memo = panicMemo{}
			if tc.prepare != nil {
				tc.prepare(t, l, clk)
			}
			_, err = ex.Execute(context.Background(), c)
			tc.check(t, err)
		})
	}
}

// leaveUnknown leaves buggy's call O-1 with an intent whose holder died,
// past its lease: an unknown outcome, which the Reconcile function decides.
func leaveUnknown(t *testing.T, l *ledger.Memory, clk *fakeClock) { leaveUnknownOf(t, "buggy", l, clk) }

func leaveUnknownOf(t *testing.T, tool string, l *ledger.Memory, clk *fakeClock) {
	c := charge("O-1", 5, "th")
	c.Tool = tool
	abandon(t, l, c)
	clk.Advance(time.Hour)
}

type panicMemo struct{}

func (panicMemo) Get(string) (nodes.MemoEntry, bool) { panic("memo get") }
func (panicMemo) Put(string, nodes.MemoEntry)        { panic("memo put") }

// TestAgentToolErrorPanics: in an agent, reads run on goroutines of the
// tool node's; a read returning a typed nil error whose Error reads its
// receiver used to kill the process. Now it is a tool result the model
// reads, and the run goes on.
func TestAgentToolErrorPanics(t *testing.T) {
	good := mustTool(t)(nodes.NewTool("lookup", "Looks up.", func(ctx context.Context, _ Empty, env nodes.Env) (string, error) {
		return "found", nil
	}, nodes.Idempotent()))
	bad := mustTool(t)(nodes.NewTool("buggy", "Fails.", func(ctx context.Context, _ Empty, env nodes.Env) (string, error) {
		return "", typedNil()
	}, nodes.Idempotent()))
	h := newHarness(t, []*nodes.Tool{good, bad}, answerThenDone(call("c1", "lookup", `{}`), call("c2", "buggy", `{}`)), nil)
	res, err := h.r.Invoke(context.Background(), "th", userSays("look it up"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != graph.StatusDone {
		t.Fatalf("status %s", res.Status)
	}
	msgs := toolMessages(res.Values.Messages)
	if len(msgs) != 2 {
		t.Fatalf("%d tool messages", len(msgs))
	}
	if o := observation(t, msgs[0]); o.Status != nodes.StatusExecuted {
		t.Errorf("lookup: %+v", o)
	}
	if o := observation(t, msgs[1]); o.Status != nodes.StatusFailed || !strings.Contains(o.Error, "Error method") {
		t.Errorf("buggy: %+v, want failed, naming the Error method that panicked", o)
	}
}

// TestToolNodeCallbacksPanic: the reviewer-context function and the
// outcome recorder are the application's code too: a panic in either
// (or in its error's Error method) fails the node with a *PanicError
// naming the tool and the function, and the process lives.
func TestToolNodeCallbacksPanic(t *testing.T) {
	for _, tc := range []struct {
		name   string
		review func(ctx context.Context, c nodes.ToolCall, msgs []nodes.Message) (json.RawMessage, error)
		rec    approval.OutcomeRecorder
		in     string
	}{
		{"reviewer context panics", func(ctx context.Context, c nodes.ToolCall, msgs []nodes.Message) (json.RawMessage, error) {
			panic("no context")
		}, nil, "the reviewer-context function (WithReviewContext)"},
		{"reviewer context returns a typed nil", func(ctx context.Context, c nodes.ToolCall, msgs []nodes.Message) (json.RawMessage, error) {
			return nil, typedNil()
		}, nil, "the Error method of the error the reviewer-context function returned"},
		{"outcome recorder panics", nil, recorderFunc(func(ctx context.Context, id string, e approval.Execution) error {
			panic("no audit")
		}), "the outcome recorder (WithOutcomeRecorder)"},
		{"outcome recorder returns a typed nil", nil, recorderFunc(func(ctx context.Context, id string, e approval.Execution) error {
			return typedNil()
		}), "the Error method of the outcome recorder's error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rf := &refunds{}
			var opts []nodes.ToolNodeOption
			if tc.review != nil {
				opts = append(opts, nodes.WithReviewContext(tc.review))
			}
			if tc.rec != nil {
				opts = append(opts, nodes.WithOutcomeRecorder(tc.rec))
			}
			h := newHarness(t, []*nodes.Tool{rf.tool(t)}, answerThenDone(call("r1", "refund", `{"order_id":"O-1","amount":30}`)), nil, opts...)
			res, err := h.r.Invoke(context.Background(), "th", userSays("refund O-1"))
			if tc.review == nil {
				if err != nil {
					t.Fatal(err)
				}
				req := h.request(t, res)
				_, err = h.r.Resume(context.Background(), "th", graph.Command[nodes.AgentState]{Resume: approve(res.Interrupts[0].ID, req)})
			}
			var pe *nodes.PanicError
			if !errors.As(err, &pe) || pe.Tool != "refund" || pe.In != tc.in || !errors.Is(err, graph.ErrNodePanic) && !errors.Is(err, nodes.ErrToolPanic) {
				t.Fatalf("err = %v, want a *PanicError of tool refund in %q", err, tc.in)
			}
		})
	}
}

type recorderFunc func(ctx context.Context, id string, e approval.Execution) error

func (f recorderFunc) RecordOutcome(ctx context.Context, id string, e approval.Execution) error {
	return f(ctx, id, e)
}

// TestBlockedToolCode (issue 16 item 7): application code that blocks
// (a gate policy, a secret provider, a NaturalKey or Reconcile function)
// holds the call no longer than its context (the tool's timeout, for
// Reconcile): the call returns an error matching the context's and
// graph.ErrAbandoned, and the executor counts the call it left running
// until it returns.
func TestBlockedToolCode(t *testing.T) {
	body := func(ctx context.Context, a OrderArgs, env nodes.Env) (string, error) { return "ok", nil }
	for _, tc := range []struct {
		name    string
		tool    func(t *testing.T, block func()) *nodes.Tool
		exOpts  func(block func()) []nodes.ExecutorOption
		unknown bool  // leave an unknown outcome first (for Reconcile)
		want    error // the error the call must match
	}{
		{"the gate policy", func(t *testing.T, block func()) *nodes.Tool {
			return mustTool(t)(nodes.NewTool("slow", "d", body, nodes.Idempotent()))
		}, func(block func()) []nodes.ExecutorOption {
			return []nodes.ExecutorOption{nodes.WithPolicy(nodes.PolicyFunc(func(nodes.ToolInfo, json.RawMessage) nodes.Verdict { block(); return nodes.Verdict{} }))}
		}, false, context.DeadlineExceeded},
		{"the secret provider", func(t *testing.T, block func()) *nodes.Tool {
			return mustTool(t)(nodes.NewTool("slow", "d", body, nodes.Idempotent(), nodes.Secrets("API_KEY")))
		}, func(block func()) []nodes.ExecutorOption {
			return []nodes.ExecutorOption{nodes.WithSecrets(nodes.SecretFunc(func(context.Context, string) (string, error) { block(); return "a-long-secret", nil })), nodes.WithPolicy(nodes.AlwaysApprove())}
		}, false, context.DeadlineExceeded},
		{"a NaturalKey function", func(t *testing.T, block func()) *nodes.Tool {
			return mustTool(t)(nodes.NewTool("slow", "d", body, nodes.NaturalKey(func(a OrderArgs) string { block(); return a.OrderID })))
		}, func(func()) []nodes.ExecutorOption {
			return []nodes.ExecutorOption{nodes.WithPolicy(nodes.AlwaysApprove())}
		}, false, context.DeadlineExceeded},
		{"a Reconcile function, past the tool's timeout", func(t *testing.T, block func()) *nodes.Tool {
			return mustTool(t)(nodes.NewTool("slow", "d", body, nodes.Timeout(20*time.Millisecond), nodes.Reconcile(func(ctx context.Context, a OrderArgs, env nodes.Env) (string, bool, error) {
				block()
				return "", false, nil
			})))
		}, func(func()) []nodes.ExecutorOption {
			return []nodes.ExecutorOption{nodes.WithPolicy(nodes.AlwaysApprove())}
		}, true, nodes.ErrToolTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			release := make(chan struct{})
			block := func() { <-release }
			clk := newFakeClock()
			l := newMemLedger(t, clk.Now)
			ex, err := nodes.NewExecutor([]*nodes.Tool{tc.tool(t, block)}, append([]nodes.ExecutorOption{nodes.WithLedger(l), nodes.WithClock(clk)}, tc.exOpts(block)...)...)
			if err != nil {
				t.Fatal(err)
			}
			defer waitReturned(t, ex, release)
			c := charge("O-1", 5, "th")
			c.Tool = "slow"
			timeout := 50 * time.Millisecond
			if tc.unknown {
				leaveUnknownOf(t, "slow", l, clk)
				timeout = time.Hour // the tool's timeout bounds Reconcile
			}
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			done := make(chan error, 1)
			go func() {
				_, err := ex.Execute(ctx, c)
				done <- err
			}()
			select {
			case err = <-done:
			case <-time.After(time.Minute):
				t.Fatal("Execute did not return after its context ended")
			}
			if !errors.Is(err, tc.want) {
				t.Errorf("err = %v, want one matching %v", err, tc.want)
			}
			if ex.Abandoned() == 0 || ex.AbandonedRunning() == 0 {
				t.Errorf("%d abandoned, %d running; want the blocked call counted", ex.Abandoned(), ex.AbandonedRunning())
			}
		})
	}
}

// waitReturned releases the blocked calls and waits until the executor
// counts none still running.
func waitReturned(t *testing.T, ex *nodes.Executor, release chan struct{}) {
	t.Helper()
	close(release)
	for deadline := time.Now().Add(time.Minute); ex.AbandonedRunning() != 0; {
		if time.Now().After(deadline) {
			t.Fatalf("%d abandoned calls still running a minute after their release", ex.AbandonedRunning())
		}
		time.Sleep(time.Millisecond)
	}
}

// TestBlockedToolNodeCallbacks (issue 16 item 7): a reviewer-context
// function or an outcome recorder that blocks holds the run no longer
// than its context: Invoke or Resume returns an error matching the
// context's, the thread stays where it was (waiting or pending), and the
// executor counts the call it left running.
func TestBlockedToolNodeCallbacks(t *testing.T) {
	for _, which := range []string{"reviewer context", "outcome recorder"} {
		t.Run(which, func(t *testing.T) {
			release := make(chan struct{})
			rf := &refunds{}
			var opts []nodes.ToolNodeOption
			if which == "reviewer context" {
				opts = append(opts, nodes.WithReviewContext(func(ctx context.Context, c nodes.ToolCall, msgs []nodes.Message) (json.RawMessage, error) {
					<-release
					return nil, nil
				}))
			} else {
				opts = append(opts, nodes.WithOutcomeRecorder(recorderFunc(func(ctx context.Context, id string, e approval.Execution) error {
					<-release
					return nil
				})))
			}
			h := newHarness(t, []*nodes.Tool{rf.tool(t)}, answerThenDone(call("r1", "refund", `{"order_id":"O-1","amount":30}`)), nil, opts...)
			defer waitReturned(t, h.ex, release)
			run := func(ctx context.Context) (graph.Result[nodes.AgentState], error) {
				return h.r.Invoke(ctx, "th", userSays("refund O-1"))
			}
			if which == "outcome recorder" {
				res, err := run(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				cmd := graph.Command[nodes.AgentState]{Resume: approve(res.Interrupts[0].ID, h.request(t, res))}
				run = func(ctx context.Context) (graph.Result[nodes.AgentState], error) { return h.r.Resume(ctx, "th", cmd) }
			}
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			done := make(chan error, 1)
			go func() {
				_, err := run(ctx)
				done <- err
			}()
			var err error
			select {
			case err = <-done:
			case <-time.After(time.Minute):
				t.Fatal("the run did not return after its context ended")
			}
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("err = %v, want one matching context.DeadlineExceeded", err)
			}
			if h.ex.Abandoned() == 0 {
				t.Errorf("the blocked %s is not counted as abandoned", which)
			}
		})
	}
}
