package nodes_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/internal/obstest"
	"github.com/lockstepgo/lockstep/nodes"
	"github.com/lockstepgo/lockstep/observe"
	"github.com/lockstepgo/lockstep/retry"
)

// obsLabel names spans and lists the decision notes of tool spans.
func obsLabel(sp obstest.Span) string {
	e := sp.Start
	switch e.Kind {
	case observe.KindRun:
		return e.Mode
	case observe.KindStep:
		return fmt.Sprint(e.Step)
	case observe.KindTask, observe.KindModel:
		return e.Node
	case observe.KindSaver:
		return e.Op
	case observe.KindTool:
		return e.Tool
	case observe.KindApprovalResume, observe.KindApprovalDecide:
		return e.Tool
	}
	return "?"
}

// TestObserverAgent runs an observed agent through a read that is retried,
// a memo hit, a gated write and its approval, and checks what the hook
// saw: tool calls nested in the tools task with the executor's decisions,
// model calls with what the model reported, the request's traceparent
// (the tools task that raised it), the worker's resume linked to it and
// the run it started carrying the link.
func TestObserverAgent(t *testing.T) {
	ctx := context.Background()
	rec := &obstest.Recorder{}
	clk := newFakeClock()
	var flaky atomic.Int32
	flaky.Store(1)
	lookup := mustTool(t)(nodes.NewTool("lookup", "Look an order up.", func(ctx context.Context, a RefundArgs, env nodes.Env) (Refund, error) {
		if flaky.Add(-1) >= 0 {
			return Refund{}, nodes.Transient(errors.New("service unavailable"))
		}
		return Refund(a), nil
	}, nodes.Retry(retry.Policy{MaxAttempts: 3, Initial: time.Millisecond})))
	rf := &refunds{}
	ex, err := nodes.NewExecutor([]*nodes.Tool{lookup, rf.tool(t)}, nodes.WithLedger(newMemLedger(t, clk.Now)), nodes.WithClock(clk), nodes.WithObserver(rec))
	if err != nil {
		t.Fatal(err)
	}
	turn := 0
	model := nodes.ModelFunc(func(ctx context.Context, msgs []nodes.Message, tools []nodes.Definition) (nodes.Message, error) {
		turn++
		nodes.ReportUsage(ctx, nodes.Usage{Provider: "openai", Model: "gpt-test", Tokens: true, InputTokens: 10 * turn, OutputTokens: turn})
		switch turn {
		case 1:
			return nodes.Message{Content: "Looking.", ToolCalls: []nodes.ToolCall{call("l1", "lookup", `{"order_id":"O-1","amount":5}`)}}, nil
		case 2:
			return nodes.Message{Content: "Again, and refunding.", ToolCalls: []nodes.ToolCall{
				call("l2", "lookup", `{"order_id":"O-1","amount":5}`), call("r1", "refund", `{"order_id":"O-1","amount":5}`)}}, nil
		}
		return nodes.Message{Content: "Done."}, nil
	})
	agent, err := nodes.NewAgent(model, ex, nodes.AgentOptions{ToolNode: []nodes.ToolNodeOption{nodes.WithNodeClock(clk.Now)}})
	if err != nil {
		t.Fatal(err)
	}
	saver := checkpoint.NewMemorySaver(clk.Now)
	r, err := agent.Compile(graph.WithSaver(saver), graph.WithObserver(rec))
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Invoke(ctx, "th", userSays("refund O-1"))
	if err != nil || res.Status != graph.StatusWaiting {
		t.Fatalf("Invoke: %v, %v", res.Status, err)
	}
	req, ok, err := approval.ParseRequest(res.Interrupts[0].Value)
	if err != nil || !ok {
		t.Fatalf("not a request: %v", err)
	}

	store := approval.NewMemoryStore(clk.Now)
	inbox := approval.NewInbox(saver, store).WithObserver(rec)
	groups, complete, err := inbox.CountPending(ctx, 0)
	if err != nil || !complete || !cmp.Equal(groups, []approval.PendingGroup{{Tool: "refund", Risk: approval.RiskMedium, Count: 1}}) {
		t.Errorf("CountPending: %+v complete %v, %v", groups, complete, err)
	}
	clk.Advance(90e9)
	if _, err := inbox.Approve(ctx, res.Interrupts[0].ID, "alice", "ok"); err != nil {
		t.Fatal(err)
	}
	if groups, _, _ := inbox.CountPending(ctx, 0); len(groups) != 0 {
		t.Errorf("pending after the decision: %+v", groups)
	}
	worker, err := approval.NewWorker(store, approval.ResumeGraph(r), approval.WorkerOptions{Observer: rec})
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := worker.RunOnce(ctx); err != nil || rep.Resumed != 1 {
		t.Fatalf("worker: %+v, %v", rep, err)
	}
	if rf.calls.get("refund") != 1 {
		t.Fatalf("%d refunds", rf.calls.get("refund"))
	}

	// Saver calls left out: the graph's own tests cover them.
	spans := rec.Spans()
	keep := map[int]bool{}
	for _, sp := range spans {
		keep[sp.ID] = sp.Start.Kind != observe.KindSaver
	}
	tree := rec.Tree(func(sp obstest.Span) string {
		if !keep[sp.ID] {
			return "-"
		}
		return obsLabel(sp)
	}, false)
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(tree), "\n") {
		if !strings.Contains(l, "saver - ") {
			lines = append(lines, l)
		}
	}
	want := []string{
		"run input waiting",
		"  step 0 done",
		"    task __start__ done",
		"  step 1 done",
		"    task model done",
		"      model model done",
		"  step 2 done",
		"    task tools done",
		"      tool lookup executed [decision allowed] [decision retry] [decision executed]",
		"  step 3 done",
		"    task model done",
		"      model model done",
		"  step 4 waiting",
		"    task tools waiting [approval_raised ]",
		"      tool lookup replayed [decision allowed] [decision replayed]",
		"      tool refund blocked [decision blocked]",
		"approval_decide refund approved",
		"approval_resume refund resumed",
		"  run resume done",
		"    step 4 done",
		"      task tools done",
		"        tool refund executed [decision approved] [decision executed]",
		"    step 5 done",
		"      task model done",
		"        model model done",
	}
	if diff := cmp.Diff(want, lines); diff != "" {
		t.Errorf("tree (-want +got):\n%s", diff)
	}

	var tools, resume, resumedRun, decide obstest.Span
	var models []obstest.Span
	for _, sp := range spans {
		switch {
		case sp.Start.Kind == observe.KindTask && sp.Start.Node == nodes.AgentToolsNode && sp.End.Outcome == observe.OutcomeWaiting:
			tools = sp
		case sp.Start.Kind == observe.KindApprovalResume:
			resume = sp
		case sp.Start.Kind == observe.KindApprovalDecide:
			decide = sp
		case sp.Start.Kind == observe.KindRun && sp.Start.Mode == observe.ModeResume:
			resumedRun = sp
		case sp.Start.Kind == observe.KindModel:
			models = append(models, sp)
		}
	}
	tp := fmt.Sprintf("00-4bf92f3577b34da6a3ce929d0e0e4736-%016x-01", tools.ID)
	if req.TraceParent != tp {
		t.Errorf("request traceparent %q, want the raising task's %q", req.TraceParent, tp)
	}
	raised := tools.Notes[0]
	if raised.Approval != res.Interrupts[0].ID || raised.Tool != "refund" || raised.Risk != "medium" || raised.Reason != "gate" || raised.Thread != "th" {
		t.Errorf("raised note %+v", raised)
	}
	for _, sp := range []obstest.Span{decide, resume, resumedRun} {
		if !cmp.Equal(sp.Start.Links, []string{tp}) {
			t.Errorf("%s links %v, want [%s]", sp.Start.Kind, sp.Start.Links, tp)
		}
	}
	if decide.End.Waited != 90e9 || resume.End.Waited != 90e9 || resume.Start.Approval != res.Interrupts[0].ID {
		t.Errorf("decide end %+v, resume %+v / %+v", *decide.End, resume.Start, *resume.End)
	}
	if len(models) != 3 {
		t.Fatalf("%d model spans", len(models))
	}
	if e := models[1].End; e.Model != "gpt-test" || e.Provider != "openai" || !e.Usage || e.InputTokens != 20 || e.OutputTokens != 2 {
		t.Errorf("second model call's end %+v", *e)
	}
	for _, sp := range spans {
		if sp.Start.Kind != observe.KindTool || sp.Start.Tool != "lookup" || sp.End.Outcome != "executed" {
			continue
		}
		retryNote := sp.Notes[1]
		if retryNote.Class != "transient" || retryNote.Attempt != 1 || retryNote.Delay <= 0 || !strings.Contains(retryNote.Error, "service unavailable") {
			t.Errorf("retry note %+v", retryNote)
		}
		if sp.End.Attempt != 2 {
			t.Errorf("lookup attempts %d", sp.End.Attempt)
		}
	}
	if open := rec.Open(); len(open) > 0 {
		t.Errorf("open spans %+v", open)
	}
}

// TestObserverFallback: a fallback is a tool call inside the call that
// failed, after a fallback decision naming both.
func TestObserverFallback(t *testing.T) {
	rec := &obstest.Recorder{}
	backup := mustTool(t)(nodes.NewTool("backup", "Backup lookup.", func(ctx context.Context, a RefundArgs, env nodes.Env) (Refund, error) {
		return Refund(a), nil
	}))
	primary := mustTool(t)(nodes.NewTool("primary", "Lookup.", func(ctx context.Context, a RefundArgs, env nodes.Env) (Refund, error) {
		return Refund{}, errors.New("down")
	}, nodes.Fallback(backup)))
	ex, err := nodes.NewExecutor([]*nodes.Tool{primary}, nodes.WithObserver(rec))
	if err != nil {
		t.Fatal(err)
	}
	res, err := ex.Execute(context.Background(), nodes.Call{ID: "c1", Tool: "primary", Args: []byte(`{"order_id":"O","amount":1}`), Scope: "s"})
	if err != nil || res.Status != nodes.StatusFallback {
		t.Fatalf("Execute: %+v, %v", res, err)
	}
	want := "tool primary fallback [decision allowed] [decision failed] [decision fallback]\n  tool backup executed [decision allowed] [decision executed]\n"
	if diff := cmp.Diff(want, rec.Tree(obsLabel, false)); diff != "" {
		t.Errorf("tree (-want +got):\n%s", diff)
	}
	fb := rec.Spans()[0].Notes[2]
	if fb.Tool != "backup" || fb.FallbackFor != "primary" {
		t.Errorf("fallback note %+v", fb)
	}
	if child := rec.Spans()[1].Start; child.FallbackFor != "primary" || child.CallID != "c1" {
		t.Errorf("fallback call %+v", child)
	}
}
