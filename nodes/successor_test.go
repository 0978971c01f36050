package nodes_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/checkpoint/sqlite"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/nodes"
	"github.com/lockstepgo/lockstep/nodes/ledger"
)

// successorChildEnv makes the test binary run successorChild instead of
// the tests (see TestMain).
const successorChildEnv = "LOCKSTEP_NODES_SUCCESSOR_CHILD"

// chargeCall is the model's one call of the charge tool.
var chargeCall = call("call-1", "charge", `{"order_id":"O-7","amount":30}`)

// chargeAgent is a model that calls charge once and then says it is done,
// and the tool node over ex, as a graph on saver with the options given.
func chargeAgent(t testing.TB, ex *nodes.Executor, saver checkpoint.Saver, opts ...graph.Option) *graph.Runnable[nodes.AgentState] {
	t.Helper()
	r, err := buildChargeAgent(ex, saver, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func buildChargeAgent(ex *nodes.Executor, saver checkpoint.Saver, opts ...graph.Option) (*graph.Runnable[nodes.AgentState], error) {
	tn, err := nodes.ToolNode(ex)
	if err != nil {
		return nil, err
	}
	g := graph.New[nodes.AgentState]().
		AddNode("model", scriptedModel(answerThenDone(chargeCall))).
		AddNode("tools", tn).
		AddEdge(graph.START, "model").
		AddConditionalEdges("model", func(ctx context.Context, s nodes.AgentState) ([]string, error) {
			if len(nodes.LastToolCalls(s.Messages)) > 0 {
				return []string{"tools"}, nil
			}
			return []string{graph.END}, nil
		}, "tools", graph.END).
		AddEdge("tools", "model")
	return g.Compile(append([]graph.Option{graph.WithSaver(saver)}, opts...)...)
}

// chargeTool is a payment that does not dedupe by key (no gate: it is not
// destructive; a write: not idempotent), whose body is body.
func chargeTool(t testing.TB, body func(ctx context.Context, a OrderArgs) error, opts ...nodes.ToolOption) *nodes.Tool {
	return mustTool(t)(nodes.NewTool("charge", "Charge an order.", func(ctx context.Context, a OrderArgs, env nodes.Env) (string, error) {
		if err := body(ctx, a); err != nil {
			return "", err
		}
		return "charged " + a.OrderID, nil
	}, opts...))
}

// successorChild is the child of TestKilledInsideBodyIsOutcomeUnknown: it
// runs the agent on a SQLite file with a 2 s lease and is SIGKILLed inside
// the charge's body, before the charge.
func successorChild() int {
	ctx := context.Background()
	fail := func(err error) int { fmt.Fprintln(os.Stderr, err); return 2 }
	saver, err := sqlite.Open(os.Getenv("SUCCESSOR_DB"), sqlite.Config{})
	if err != nil {
		return fail(err)
	}
	l, err := ledger.NewSQL(ctx, saver.DB(), ledger.Options{})
	if err != nil {
		return fail(err)
	}
	tool, err := nodes.NewTool("charge", "Charge an order.", func(ctx context.Context, a OrderArgs, env nodes.Env) (string, error) {
		// The process dies in the middle of the body: sleeping, before
		// the charge.
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		time.Sleep(time.Hour)
		return "", nil
	})
	if err != nil {
		return fail(err)
	}
	ex, err := nodes.NewExecutor([]*nodes.Tool{tool}, nodes.WithLedger(l))
	if err != nil {
		return fail(err)
	}
	r, err := buildChargeAgent(ex, saver, graph.WithLeaseTTL(2*time.Second))
	if err != nil {
		return fail(err)
	}
	_, err = r.Invoke(ctx, "order-7", userSays("charge order O-7"))
	fmt.Fprintln(os.Stderr, "survived:", err)
	return 3
}

// waitingOnUnknown checks that res waits on exactly one approval request
// about an unknown outcome of the charge, and returns it with its ID.
func waitingOnUnknown(t *testing.T, what string, res graph.Result[nodes.AgentState], err error) (approval.Request, string) {
	t.Helper()
	if err != nil || res.Status != graph.StatusWaiting || len(res.Interrupts) != 1 {
		t.Fatalf("%s: %s with %d interrupts, %v; want waiting on one approval (the thread used to end with the call \"in progress\")",
			what, res.Status, len(res.Interrupts), err)
	}
	var req approval.Request
	if err := json.Unmarshal(res.Interrupts[0].Value, &req); err != nil {
		t.Fatal(err)
	}
	if req.Kind != approval.KindOutcomeUnknown || req.Rule != nodes.RuleOutcomeUnknown || req.Tool != "charge" {
		t.Fatalf("%s: request %s %s of %s; want the outcome-unknown approval of charge", what, req.Kind, req.Rule, req.Tool)
	}
	if tm := toolMessages(res.Values.Messages); len(tm) != 0 {
		t.Fatalf("%s: %d tool results recorded while the call waits: %+v", what, len(tm), tm)
	}
	return req, res.Interrupts[0].ID
}

// TestKilledInsideBodyIsOutcomeUnknown (issue 15 item 1, D17): a process
// running an ungated, ledgered write that does not dedupe by key is
// SIGKILLed inside the tool's body. Continue 3 s later, past the thread's
// 2 s lease and well inside the write's ledger lease, used to find the
// call "in progress elsewhere" and save that as its tool result: the
// thread was done, 0 charges, the ledger row pending for good, no
// approval. The run that now holds the thread is the successor of the
// dead one: its intent is of unknown outcome at once, and the thread waits
// on the outcome-unknown approval; approved, the charge runs once.
func TestKilledInsideBodyIsOutcomeUnknown(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "agent.db")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), successorChildEnv+"=1", "SUCCESSOR_DB="+path)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child did not die by SIGKILL: %v\n%s", err, out)
	}

	later := func() time.Time { return time.Now().Add(3 * time.Second) }
	saver, err := sqlite.Open(path, sqlite.Config{Now: later})
	if err != nil {
		t.Fatal(err)
	}
	defer saver.Close()
	l, err := ledger.NewSQL(ctx, saver.DB(), ledger.Options{Now: later})
	if err != nil {
		t.Fatal(err)
	}
	var charges atomic.Int32
	tool := chargeTool(t, func(context.Context, OrderArgs) error { charges.Add(1); return nil })
	ex, err := nodes.NewExecutor([]*nodes.Tool{tool}, nodes.WithLedger(l), nodes.WithClock(nodes.SystemClock()))
	if err != nil {
		t.Fatal(err)
	}
	r := chargeAgent(t, ex, saver, graph.WithLeaseTTL(2*time.Second), graph.WithClock(later))
	res, err := r.Continue(ctx, "order-7")
	req, id := waitingOnUnknown(t, "Continue 3 s after the kill", res, err)
	if n := charges.Load(); n != 0 {
		t.Fatalf("%d charges before anyone decided", n)
	}
	var key string
	db := saver.DB()
	var state, run string
	if err := db.QueryRow(`SELECT key, state, run_id FROM lockstep_ledger`).Scan(&key, &state, &run); err != nil || state != "pending" || run == "" {
		t.Fatalf("ledger row: %s %q (run %q), %v; want the dead run's intent pending", key, state, run, err)
	}

	res, err = r.Resume(ctx, "order-7", graph.Command[nodes.AgentState]{ResumeByID: map[string]any{id: approve(id, req)}})
	if err != nil || res.Status != graph.StatusDone {
		t.Fatalf("Resume with the approval: %s, %v; want done", res.Status, err)
	}
	tm := toolMessages(res.Values.Messages)
	if len(tm) != 1 || observation(t, tm[0]).Status != nodes.StatusExecuted || charges.Load() != 1 {
		t.Errorf("after the approval: %+v, %d charges; want it run once", tm, charges.Load())
	}
	if e, err := l.Get(ctx, key); err != nil || e.State != ledger.StateDone {
		t.Errorf("ledger after the approved run: %+v, %v; want done", e, err)
	}
}

// TestStoppedInsideBodyIsOutcomeUnknown (issue 15 item 1): Ctrl-C (the
// run's context cancelled) inside a write's body, after its effect. The
// run gives the thread's lease back, and its intent stays pending, as the
// write may have taken effect. The next run, at once, used to find it "in
// progress" (for the write's 3-minute ledger lease) and tell the model so
// for good; now it asks a human about the unknown outcome. An approved
// call interrupted the same way (the gate's approval used) is asked about
// again in the same way, instead of failing the thread until the ledger
// lease ends.
func TestStoppedInsideBodyIsOutcomeUnknown(t *testing.T) {
	for _, gated := range []bool{false, true} {
		t.Run(map[bool]string{false: "ungated", true: "approved"}[gated], func(t *testing.T) {
			ctx := context.Background()
			saver := checkpoint.NewMemorySaver(nil)
			l := newMemLedger(t, nil)
			var charges atomic.Int32
			entered := make(chan struct{}, 1)
			body := func(ctx context.Context, _ OrderArgs) error {
				if charges.Add(1) == 1 {
					entered <- struct{}{}
					<-ctx.Done() // the user presses Ctrl-C while the service answers
					return ctx.Err()
				}
				return nil
			}
			var opts []nodes.ToolOption
			policy := nodes.DenyDestructive()
			if gated {
				opts = append(opts, nodes.Destructive(approval.RiskHigh))
			}
			ex, err := nodes.NewExecutor([]*nodes.Tool{chargeTool(t, body, opts...)}, nodes.WithLedger(l), nodes.WithPolicy(policy))
			if err != nil {
				t.Fatal(err)
			}
			r := chargeAgent(t, ex, saver)
			runCtx, stop := context.WithCancel(ctx)
			go func() { <-entered; stop() }()
			res, err := r.Invoke(runCtx, "order-7", userSays("charge order O-7"))
			if gated {
				req, id := gateRequest(t, res, err)
				res, err = r.Resume(runCtx, "order-7", graph.Command[nodes.AgentState]{ResumeByID: map[string]any{id: approve(id, req)}})
			}
			stop()
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("the run stopped inside the body: %s, %v; want context.Canceled", res.Status, err)
			}
			if lease, err := saver.Lease(ctx, "order-7", ""); err != nil || lease.Owner != "" {
				t.Fatalf("thread lease after Ctrl-C: %+v, %v; want released", lease, err)
			}
			if es := l.Entries(); len(es) != 1 || es[0].State != ledger.StatePending {
				t.Fatalf("ledger after Ctrl-C: %+v; want the intent pending (the charge may have happened)", es)
			}

			res, err = r.Continue(ctx, "order-7")
			req, id := waitingOnUnknown(t, "Continue at once", res, err)
			// The reviewer sees the charge went through: reject running it
			// again.
			dec := recorded(id, req, approval.Decision{Outcome: approval.Rejected, Reviewer: "alice", Note: "already charged"})
			res, err = r.Resume(ctx, "order-7", graph.Command[nodes.AgentState]{ResumeByID: map[string]any{id: dec}})
			if err != nil || res.Status != graph.StatusDone {
				t.Fatalf("Resume with the rejection: %s, %v", res.Status, err)
			}
			tm := toolMessages(res.Values.Messages)
			if len(tm) != 1 || observation(t, tm[0]).Status != nodes.StatusRejected || charges.Load() != 1 {
				t.Errorf("after the rejection: %+v, %d charges; want a rejected result and the one charge", tm, charges.Load())
			}
		})
	}
}

// gateRequest checks that res waits on the charge's gate and returns the
// request and its interrupt ID.
func gateRequest(t *testing.T, res graph.Result[nodes.AgentState], err error) (approval.Request, string) {
	t.Helper()
	if err != nil || res.Status != graph.StatusWaiting || len(res.Interrupts) != 1 {
		t.Fatalf("Invoke: %s, %v; want waiting on the gate", res.Status, err)
	}
	var req approval.Request
	if err := json.Unmarshal(res.Interrupts[0].Value, &req); err != nil || req.Kind != approval.KindGate {
		t.Fatalf("gate request %+v, %v", req, err)
	}
	return req, res.Interrupts[0].ID
}

// cancellingLedger cancels the run right after Begin recorded an intent
// (and, with failBegin, reports the cancellation from that Begin although
// the intent was committed), so that the call ends before its body starts.
type cancellingLedger struct {
	*ledger.Memory
	cancel    context.CancelFunc
	failBegin bool
	once      sync.Once
}

func (c *cancellingLedger) Begin(ctx context.Context, in ledger.Intent) (ledger.Entry, bool, error) {
	e, started, err := c.Memory.Begin(ctx, in)
	fire := false
	c.once.Do(func() { fire = true })
	if !fire {
		return e, started, err
	}
	c.cancel()
	if c.failBegin && err == nil {
		return ledger.Entry{}, false, fmt.Errorf("commit: %w", context.Canceled)
	}
	return e, started, err
}

// TestCancelledBeforeBodyReleases (issue 15 item 1): a call whose run is
// cancelled after its intent was recorded and before its body started,
// also when Begin itself reports the cancellation after it committed,
// gives its intent back: the body never runs, nothing stays pending, and
// the next run runs the call (no approval: it cannot have happened).
func TestCancelledBeforeBodyReleases(t *testing.T) {
	for _, failBegin := range []bool{false, true} {
		t.Run(map[bool]string{false: "after Begin", true: "Begin reports it"}[failBegin], func(t *testing.T) {
			ctx := context.Background()
			saver := checkpoint.NewMemorySaver(nil)
			mem := newMemLedger(t, nil)
			runCtx, stop := context.WithCancel(ctx)
			defer stop()
			l := &cancellingLedger{Memory: mem, cancel: stop, failBegin: failBegin}
			var started atomic.Int32
			ex, err := nodes.NewExecutor([]*nodes.Tool{chargeTool(t, func(context.Context, OrderArgs) error { started.Add(1); return nil })}, nodes.WithLedger(l))
			if err != nil {
				t.Fatal(err)
			}
			r := chargeAgent(t, ex, saver)
			if _, err := r.Invoke(runCtx, "order-7", userSays("charge order O-7")); !errors.Is(err, context.Canceled) {
				t.Fatalf("Invoke: %v, want context.Canceled", err)
			}
			if n := started.Load(); n != 0 {
				t.Fatalf("the body started %d times under a cancelled context", n)
			}
			if es := mem.Entries(); len(es) != 0 {
				t.Fatalf("ledger after the cancellation: %+v; want the intent released", es)
			}
			res, err := r.Continue(ctx, "order-7")
			if err != nil || res.Status != graph.StatusDone || started.Load() != 1 {
				t.Fatalf("Continue: %s, %v, %d runs; want done with the call run once", res.Status, err, started.Load())
			}
			if tm := toolMessages(res.Values.Messages); len(tm) != 1 || observation(t, tm[0]).Status != nodes.StatusExecuted {
				t.Errorf("tool results %+v, want one executed", tm)
			}
		})
	}
}

// BookArgs books a room under the booking reference the caller made.
type BookArgs struct {
	Ref  string `json:"ref"`
	Room string `json:"room"`
}

// TestLiveHolderIsNotAToolResult (issue 15 item 1): two threads make the
// same booking (one natural key) at once. While the first thread's run
// holds the key, alive, the second's tool node does not save "in
// progress" as the call's result: its step fails with a typed, transient
// *nodes.CallInProgressError (ErrCallInProgress, ledger.ErrInProgress,
// ClassTransient, saying when to retry), and nothing is recorded for the
// call. Continued after the first run finished, the second thread replays
// the booking: it already existed, made once.
func TestLiveHolderIsNotAToolResult(t *testing.T) {
	ctx := context.Background()
	saver := checkpoint.NewMemorySaver(nil)
	l := newMemLedger(t, nil)
	var bookings atomic.Int32
	entered, release := make(chan struct{}), make(chan struct{})
	book := mustTool(t)(nodes.NewTool("book", "Book a room.", func(ctx context.Context, a BookArgs, env nodes.Env) (string, error) {
		if bookings.Add(1) == 1 {
			close(entered)
			<-release
		}
		return "booked " + a.Ref, nil
	}, nodes.NaturalKey(func(a BookArgs) string { return a.Ref })))
	ex, err := nodes.NewExecutor([]*nodes.Tool{book}, nodes.WithLedger(l))
	if err != nil {
		t.Fatal(err)
	}
	tn, err := nodes.ToolNode(ex)
	if err != nil {
		t.Fatal(err)
	}
	bookCall := call("call-1", "book", `{"ref":"BK-1","room":"101"}`)
	r := agentGraph(t, scriptedModel(answerThenDone(bookCall)), tn, saver)

	first := make(chan error, 1)
	go func() {
		_, err := r.Invoke(ctx, "guest-a", userSays("book it"))
		first <- err
	}()
	<-entered
	_, err = r.Invoke(ctx, "guest-b", userSays("book it"))
	var ip *nodes.CallInProgressError
	if !errors.As(err, &ip) || !errors.Is(err, nodes.ErrCallInProgress) || !errors.Is(err, ledger.ErrInProgress) ||
		nodes.Classify(err) != nodes.ClassTransient || ip.RetryAfter.IsZero() {
		t.Fatalf("the second thread's run: %v, want a transient *nodes.CallInProgressError", err)
	}
	snap, err := r.GetState(ctx, "guest-b")
	if err != nil {
		t.Fatal(err)
	}
	if tm := toolMessages(snap.Values.Messages); len(tm) != 0 {
		t.Fatalf("the second thread recorded %d tool results for a call in progress elsewhere: %+v", len(tm), tm)
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	res, err := r.Continue(ctx, "guest-b")
	if err != nil || res.Status != graph.StatusDone {
		t.Fatalf("Continue of the second thread: %s, %v", res.Status, err)
	}
	tm := toolMessages(res.Values.Messages)
	if len(tm) != 1 || observation(t, tm[0]).Status != nodes.StatusReplayed || bookings.Load() != 1 {
		t.Errorf("second thread: %+v, %d bookings; want the first booking replayed, made once", tm, bookings.Load())
	}
}

// TestDedupingToolRunsAgainAfterAnEarlierRun: a write whose service
// dedupes by key, left pending by an earlier run of the thread (killed
// inside its body), is simply run again by the next run with the same
// key: no human is asked (control: the same tool without DedupesByKey
// waits on the outcome-unknown approval).
func TestDedupingToolRunsAgainAfterAnEarlierRun(t *testing.T) {
	for _, dedupes := range []bool{true, false} {
		t.Run(map[bool]string{true: "dedupes", false: "does not dedupe"}[dedupes], func(t *testing.T) {
			ctx := context.Background()
			saver := checkpoint.NewMemorySaver(nil)
			l := newMemLedger(t, nil)
			args := []byte(`{"amount":30,"order_id":"O-7"}`)
			key := nodes.IdempotencyKey("order-7", "charge", args)
			hash, _ := approval.ArgsHash("charge", args)
			// What a run killed inside the body left: its intent, with a
			// lease of an hour.
			if _, _, err := l.Begin(ctx, ledger.Intent{Key: key, Tool: "charge", ArgsHash: hash, Owner: "dead-exec", Lease: time.Hour, Thread: "order-7", Run: "dead-run"}); err != nil {
				t.Fatal(err)
			}
			var keys []string
			var opts []nodes.ToolOption
			if dedupes {
				opts = append(opts, nodes.DedupesByKey())
			}
			tool := mustTool(t)(nodes.NewTool("charge", "Charge an order.", func(ctx context.Context, a OrderArgs, env nodes.Env) (string, error) {
				keys = append(keys, env.IdempotencyKey())
				return "charged " + a.OrderID, nil
			}, opts...))
			ex, err := nodes.NewExecutor([]*nodes.Tool{tool}, nodes.WithLedger(l))
			if err != nil {
				t.Fatal(err)
			}
			r := chargeAgent(t, ex, saver)
			res, err := r.Invoke(ctx, "order-7", userSays("charge order O-7"))
			if !dedupes {
				waitingOnUnknown(t, "a tool that does not dedupe", res, err)
				if len(keys) != 0 {
					t.Errorf("it ran %d times", len(keys))
				}
				return
			}
			if err != nil || res.Status != graph.StatusDone {
				t.Fatalf("Invoke: %s, %v; want done without asking anyone", res.Status, err)
			}
			if tm := toolMessages(res.Values.Messages); len(tm) != 1 || observation(t, tm[0]).Status != nodes.StatusExecuted || len(keys) != 1 || keys[0] != key {
				t.Errorf("tool results %+v, keys %v; want it run again once, with the key %s", tm, keys, key)
			}
		})
	}
}
