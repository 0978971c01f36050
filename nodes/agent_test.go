package nodes_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/nodes"
	"github.com/lockstepgo/lockstep/nodes/scripted"
)

// modelGraph runs one model node, named "llm", and ends.
func modelGraph(t *testing.T, m nodes.Model, tools []nodes.Definition, opts ...nodes.ModelNodeOption) *graph.Runnable[nodes.AgentState] {
	t.Helper()
	node, err := nodes.ModelNode(m, tools, opts...)
	if err != nil {
		t.Fatal(err)
	}
	r, err := graph.New[nodes.AgentState]().AddNode("llm", node).AddEdge(graph.START, "llm").AddEdge("llm", graph.END).
		Compile(graph.WithSaver(checkpoint.NewMemorySaver(nil)))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestModelNode: what the model node sends and what it appends.
func TestModelNode(t *testing.T) {
	defs := []nodes.Definition{{Name: "search_tickets", Description: "Search.", Parameters: json.RawMessage(`{"type":"object"}`)}}
	history := []nodes.Message{
		{Role: nodes.RoleUser, Content: "find the login ticket"},
		{Role: nodes.RoleAssistant, ToolCalls: []nodes.ToolCall{call("c1", "search_tickets", `{"query":"login"}`)}},
		{Role: nodes.RoleTool, ToolCallID: "c1", Name: "search_tickets", Content: `{"status":"executed"}`,
			Meta: &nodes.ToolMeta{Tool: "search_tickets", Status: nodes.StatusExecuted}},
	}
	tests := []struct {
		name   string
		answer nodes.Message
		system string
		want   nodes.Message
	}{
		{"text", nodes.Message{Content: "TKT-3."}, "", nodes.Message{Role: nodes.RoleAssistant, Content: "TKT-3."}},
		{"role and runtime fields are not the model's", nodes.Message{Role: nodes.RoleTool, Content: "ok", ToolCallID: "x", Name: "n", Meta: &nodes.ToolMeta{Asked: 9}},
			"", nodes.Message{Role: nodes.RoleAssistant, Content: "ok"}},
		{"tool calls keep their IDs and arguments", nodes.Message{ToolCalls: []nodes.ToolCall{call("c2", "search_tickets", `{"query":"vpn"}`)}},
			"", nodes.Message{Role: nodes.RoleAssistant, ToolCalls: []nodes.ToolCall{call("c2", "search_tickets", `{"query":"vpn"}`)}}},
		{"missing IDs and arguments are filled", nodes.Message{ToolCalls: []nodes.ToolCall{call("", "search_tickets", ""), call("", "search_tickets", `{"query":"x"}`)}},
			"", nodes.Message{Role: nodes.RoleAssistant, ToolCalls: []nodes.ToolCall{call("call_1_0", "search_tickets", "{}"), call("call_1_1", "search_tickets", `{"query":"x"}`)}}},
		{"a filled ID never repeats one the model sent", nodes.Message{ToolCalls: []nodes.ToolCall{call("", "search_tickets", ""), call("call_1_0", "search_tickets", "")}},
			"", nodes.Message{Role: nodes.RoleAssistant, ToolCalls: []nodes.ToolCall{call("call_1_0_1", "search_tickets", "{}"), call("call_1_0", "search_tickets", "{}")}}},
		{"bad arguments are the executor's business", nodes.Message{ToolCalls: []nodes.ToolCall{call("c3", "search_tickets", `{"query":`)}},
			"", nodes.Message{Role: nodes.RoleAssistant, ToolCalls: []nodes.ToolCall{call("c3", "search_tickets", `{"query":`)}}},
		{"system prompt", nodes.Message{Content: "TKT-3."}, "You are a support agent.", nodes.Message{Role: nodes.RoleAssistant, Content: "TKT-3."}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var sent []nodes.Message
			var offered []nodes.Definition
			m := nodes.ModelFunc(func(ctx context.Context, msgs []nodes.Message, tools []nodes.Definition) (nodes.Message, error) {
				sent, offered = msgs, tools
				return tc.answer, nil
			})
			var opts []nodes.ModelNodeOption
			if tc.system != "" {
				opts = append(opts, nodes.WithSystemPrompt(tc.system))
			}
			r := modelGraph(t, m, defs, opts...)
			res, err := r.Invoke(context.Background(), "t", graph.Set(nodes.AgentState{Messages: history}, "Messages"))
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(append(history[:len(history):len(history)], tc.want), res.Values.Messages); d != "" {
				t.Errorf("state (-want +got):\n%s", d)
			}
			wantSent := make([]nodes.Message, 0, len(history)+1)
			if tc.system != "" {
				wantSent = append(wantSent, nodes.Message{Role: nodes.RoleSystem, Content: tc.system})
			}
			for _, h := range history {
				h.Meta = nil
				wantSent = append(wantSent, h)
			}
			if d := cmp.Diff(wantSent, sent); d != "" {
				t.Errorf("sent to the model (-want +got):\n%s", d)
			}
			if d := cmp.Diff(defs, offered); d != "" {
				t.Errorf("tools offered (-want +got):\n%s", d)
			}
		})
	}
}

// TestModelNodeFails: a model error, an empty answer or a nameless tool
// call fails the node with a *ModelError naming it; nothing is appended.
func TestModelNodeFails(t *testing.T) {
	provider := errors.New("503 from the provider")
	tests := []struct {
		name   string
		answer nodes.Message
		err    error
		want   error
	}{
		{"model error", nodes.Message{}, provider, provider},
		{"empty answer", nodes.Message{}, nil, nodes.ErrEmptyAnswer},
		{"empty answer with a role", nodes.Message{Role: nodes.RoleAssistant}, nil, nodes.ErrEmptyAnswer},
		{"tool call without a name", nodes.Message{ToolCalls: []nodes.ToolCall{call("c", "", "{}")}}, nil, nodes.ErrMalformedAnswer},
		{"script exhausted", nodes.Message{}, &scripted.TurnError{Turn: 2, Turns: 1, Kind: scripted.ErrExhausted}, scripted.ErrExhausted},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := nodes.ModelFunc(func(ctx context.Context, msgs []nodes.Message, tools []nodes.Definition) (nodes.Message, error) {
				return tc.answer, tc.err
			})
			r := modelGraph(t, m, nil)
			ctx := context.Background()
			_, err := r.Invoke(ctx, "t", userSays("hi"))
			var me *nodes.ModelError
			if !errors.As(err, &me) || me.Node != "llm" || !errors.Is(err, nodes.ErrModel) || !errors.Is(err, tc.want) {
				t.Fatalf("Invoke: %v; want a *ModelError of node llm matching %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), `"llm"`) {
				t.Errorf("error %q does not name the node", err)
			}
			snap, err := r.GetState(ctx, "t")
			if err != nil {
				t.Fatal(err)
			}
			if snap.Status != graph.StatusFailed || len(snap.Values.Messages) != 1 {
				t.Errorf("status %s with %d messages; want failed with the user's only", snap.Status, len(snap.Values.Messages))
			}
		})
	}
}

func TestNewModelNodeInvalid(t *testing.T) {
	m := scripted.New()
	dup := []nodes.Definition{{Name: "a"}, {Name: "a"}}
	for name, f := range map[string]func() error{
		"nil model":   func() error { _, err := nodes.ModelNode(nil, nil); return err },
		"no access":   func() error { _, err := nodes.NewModelNode(m, nil, nodes.StateAccess[nodes.AgentState]{}); return err },
		"two tools":   func() error { _, err := nodes.ModelNode(m, dup); return err },
		"agent model": func() error { _, err := nodes.NewAgent(nil, &nodes.Executor{}, nodes.AgentOptions{}); return err },
		"agent tools": func() error { _, err := nodes.NewAgent(m, nil, nodes.AgentOptions{}); return err },
		"agent turns": func() error {
			ex, _ := nodes.NewExecutor(nil)
			_, err := nodes.NewAgent(m, ex, nodes.AgentOptions{MaxTurns: -1})
			return err
		},
		"agent options": func() error {
			ex, _ := nodes.NewExecutor(nil)
			_, err := nodes.NewAgent(m, ex, nodes.AgentOptions{ToolNode: []nodes.ToolNodeOption{nodes.WithParallelism(0)}})
			return err
		},
	} {
		if err := f(); !errors.Is(err, nodes.ErrInvalidConfig) {
			t.Errorf("%s: %v, want ErrInvalidConfig", name, err)
		}
	}
}

// supportAgent is the seeds' support desk as a prebuilt agent on a
// scripted model.
func supportAgent(t *testing.T, d *desk, m nodes.Model, opts nodes.AgentOptions, exOpts ...nodes.ExecutorOption) (*graph.Runnable[nodes.AgentState], *logBuffer) {
	t.Helper()
	logs := &logBuffer{}
	clk := newFakeClock()
	exOpts = append([]nodes.ExecutorOption{nodes.WithLogger(logs.Logger()), nodes.WithLedger(newMemLedger(t, clk.Now))}, exOpts...)
	ex, err := nodes.NewExecutor([]*nodes.Tool{d.searchTool(t), d.closeTool(t)}, exOpts...)
	if err != nil {
		t.Fatal(err)
	}
	opts.ToolNode = append([]nodes.ToolNodeOption{nodes.WithNodeClock(clk.Now)}, opts.ToolNode...)
	a, err := nodes.NewAgent(m, ex, opts)
	if err != nil {
		t.Fatal(err)
	}
	r, err := a.Compile(graph.WithSaver(checkpoint.NewMemorySaver(clk.Now)))
	if err != nil {
		t.Fatal(err)
	}
	return r, logs
}

// TestAgentSupportScenario: "find the login ticket and close it" on the
// prebuilt agent: the model is offered exactly the agent's tools, the
// search runs once and its repeat is a cache hit, the close waits for a
// human with the approval rules and reviewer context passed through, and
// after approval it closes once and the model answers.
func TestAgentSupportScenario(t *testing.T) {
	d := &desk{}
	m := scripted.New(
		scripted.CallTools("Let me look.", scripted.Call("c1", "search_tickets", `{"query":"login"}`)).
			Expecting(scripted.ExpectTools("close_ticket", "search_tickets")),
		scripted.CallTools("Again.", scripted.Call("c2", "search_tickets", `{"query":"login"}`)).
			Expecting(scripted.ExpectToolResult("c1", "TKT-3")),
		scripted.CallTools("Closing TKT-3.", scripted.Call("c3", "close_ticket", `{"ticket_id":"TKT-3"}`)).
			Expecting(scripted.ExpectToolResult("c2", `"status":"cache_hit"`)),
		scripted.Say("TKT-3 is closed.").Expecting(scripted.ExpectToolResult("c3", `"status":"executed"`)),
	)
	review := func(ctx context.Context, c nodes.ToolCall, msgs []nodes.Message) (json.RawMessage, error) {
		return json.RawMessage(`{"customer":"C-7"}`), nil
	}
	r, logs := supportAgent(t, d, m, nodes.AgentOptions{
		System:   "You are a support agent.",
		ToolNode: []nodes.ToolNodeOption{nodes.WithApprovalRules(approval.Rules{Owner: "support-leads"}), nodes.WithReviewContext(review)},
	})
	ctx := context.Background()
	res, err := r.Invoke(ctx, "th", userSays("find the login ticket and close it"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != graph.StatusWaiting || len(res.Interrupts) != 1 || d.calls.get("search_tickets") != 1 || d.calls.get("close_ticket") != 0 {
		t.Fatalf("status %s, %d interrupts, %d searches, %d closes", res.Status, len(res.Interrupts), d.calls.get("search_tickets"), d.calls.get("close_ticket"))
	}
	req, _, err := approval.ParseRequest(res.Interrupts[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	if req.Owner != "support-leads" || string(req.Context) != `{"customer":"C-7"}` || req.Rationale != "Closing TKT-3." || req.Kind != approval.KindGate {
		t.Errorf("request %+v", req)
	}
	res, err = r.Resume(ctx, "th", graph.Command[nodes.AgentState]{Resume: approve(res.Interrupts[0].ID, req)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != graph.StatusDone || d.calls.get("close_ticket:TKT-3") != 1 || d.calls.get("search_tickets") != 1 {
		t.Fatalf("status %s, %d closes, %d searches", res.Status, d.calls.get("close_ticket"), d.calls.get("search_tickets"))
	}
	last := res.Values.Messages[len(res.Values.Messages)-1]
	if last.Role != nodes.RoleAssistant || last.Content != "TKT-3 is closed." {
		t.Errorf("last message %+v", last)
	}
	calls := m.Calls()
	var turns []int
	for _, c := range calls {
		turns = append(turns, c.Turn)
		if c.Messages[0].Role != nodes.RoleSystem || c.Messages[0].Content != "You are a support agent." {
			t.Errorf("turn %d was not sent the system prompt first", c.Turn)
		}
	}
	if d := cmp.Diff([]int{1, 2, 3, 4}, turns); d != "" {
		t.Errorf("model calls (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{"search_tickets:executed", "search_tickets:cache_hit", "close_ticket:blocked", "close_ticket:approved", "close_ticket:executed"}, logs.Statuses()); d != "" {
		t.Errorf("decisions (-want +got):\n%s", d)
	}
}

// TestAgentTwoGatedCalls: the prebuilt agent asks for both gated calls of
// one model message at once; each is approved on its own, by ID; each
// close happens once and the model then answers.
func TestAgentTwoGatedCalls(t *testing.T) {
	d := &desk{}
	m := scripted.New(
		scripted.CallTools("Closing both.", scripted.Call("a", "close_ticket", `{"ticket_id":"TKT-1"}`), scripted.Call("b", "close_ticket", `{"ticket_id":"TKT-2"}`)),
		scripted.Say("Both closed.").Expecting(func(msgs []nodes.Message, _ []nodes.Definition) error {
			for _, id := range []string{"a", "b"} {
				if err := scripted.ExpectToolResult(id, `"status":"executed"`)(msgs, nil); err != nil {
					return err
				}
			}
			return nil
		}),
	)
	r, _ := supportAgent(t, d, m, nodes.AgentOptions{})
	ctx := context.Background()
	res, err := r.Invoke(ctx, "th", userSays("close TKT-1 and TKT-2"))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Interrupts) != 2 {
		t.Fatalf("%d interrupts, want 2", len(res.Interrupts))
	}
	pending := res.Interrupts
	for i, in := range pending {
		req, _, _ := approval.ParseRequest(in.Value)
		dec := approve(in.ID, req)
		res, err = r.Resume(ctx, "th", graph.Command[nodes.AgentState]{ResumeByID: map[string]any{in.ID: dec}})
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 && (res.Status != graph.StatusWaiting || len(res.Interrupts) != 1 || res.Interrupts[0].ID != pending[1].ID) {
			t.Fatalf("after the first approval: status %s, interrupts %+v; want waiting on %s", res.Status, res.Interrupts, pending[1].ID)
		}
	}
	if res.Status != graph.StatusDone || d.calls.get("close_ticket:TKT-1") != 1 || d.calls.get("close_ticket:TKT-2") != 1 {
		t.Errorf("status %s, closes TKT-1 %d, TKT-2 %d", res.Status, d.calls.get("close_ticket:TKT-1"), d.calls.get("close_ticket:TKT-2"))
	}
	if got := res.Values.Messages[len(res.Values.Messages)-1].Content; got != "Both closed." {
		t.Errorf("final answer %q", got)
	}
}

// TestAgentScope: tools are scoped per agent. Each agent's model is
// offered its own executor's tools only, and a call to the other agent's
// tool is refused as unknown (a tool result the model can act on).
func TestAgentScope(t *testing.T) {
	d := &desk{}
	searchOnly, _ := nodes.NewExecutor([]*nodes.Tool{d.searchTool(t)})
	m := scripted.New(
		scripted.CallTools("", scripted.Call("x", "close_ticket", `{"ticket_id":"TKT-3"}`)).Expecting(scripted.ExpectTools("search_tickets")),
		scripted.Say("I cannot close tickets.").Expecting(scripted.ExpectToolResult("x", `"status":"failed"`)),
	)
	a, err := nodes.NewAgent(m, searchOnly, nodes.AgentOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(searchOnly.Definitions(), a.Tools()); d != "" {
		t.Errorf("agent tools (-want +got):\n%s", d)
	}
	r, err := a.Compile(graph.WithSaver(checkpoint.NewMemorySaver(nil)))
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Invoke(context.Background(), "th", userSays("close TKT-3"))
	if err != nil {
		t.Fatal(err)
	}
	o := observation(t, toolMessages(res.Values.Messages)[0])
	if res.Status != graph.StatusDone || d.calls.get("close_ticket") != 0 || !strings.Contains(o.Error, "not bound to this agent") {
		t.Errorf("status %s, %d closes, observation %+v", res.Status, d.calls.get("close_ticket"), o)
	}
}

// TestAgentMaxTurns: MaxTurns model calls fit in one run, one more fails
// with the recursion limit, and the thread can be continued.
func TestAgentMaxTurns(t *testing.T) {
	loop := func(n int) *scripted.Model {
		var ts []scripted.Turn
		for i := range n - 1 {
			ts = append(ts, scripted.CallTools("", scripted.Call(fmt.Sprint("s", i), "search_tickets", fmt.Sprintf(`{"query":"q%d"}`, i))))
		}
		return scripted.New(append(ts, scripted.Say("done"))...)
	}
	for _, tc := range []struct {
		turns, max int
		wantErr    bool
	}{{3, 3, false}, {4, 3, true}, {1, 1, false}, {2, 1, true}} {
		t.Run(fmt.Sprintf("%d turns of %d", tc.turns, tc.max), func(t *testing.T) {
			d := &desk{}
			r, _ := supportAgent(t, d, loop(tc.turns), nodes.AgentOptions{MaxTurns: tc.max})
			ctx := context.Background()
			_, err := r.Invoke(ctx, "th", userSays("go"))
			if got := errors.Is(err, graph.ErrRecursionLimit); got != tc.wantErr {
				t.Fatalf("Invoke: %v; want recursion limit %v", err, tc.wantErr)
			}
			if tc.wantErr {
				// The thread goes on where it stopped, in a new run.
				res, err := r.Continue(ctx, "th")
				if err != nil || res.Status != graph.StatusDone || d.calls.get("search_tickets") != tc.turns-1 {
					t.Errorf("Continue: status %s, %v, %d searches", res.Status, err, d.calls.get("search_tickets"))
				}
			}
		})
	}
	ex, _ := nodes.NewExecutor(nil)
	a, _ := nodes.NewAgent(scripted.New(), ex, nodes.AgentOptions{})
	if a.RecursionLimit() != 2*nodes.DefaultMaxTurns {
		t.Errorf("default recursion limit %d", a.RecursionLimit())
	}
}

// TestAgentScriptExhausted: a model that runs out of script fails the run
// loudly, naming the node and the turn; the thread shows failed, with no
// empty answer appended.
func TestAgentScriptExhausted(t *testing.T) {
	d := &desk{}
	r, _ := supportAgent(t, d, scripted.New(scripted.CallTools("", scripted.Call("s", "search_tickets", `{"query":"x"}`))), nodes.AgentOptions{})
	ctx := context.Background()
	_, err := r.Invoke(ctx, "th", userSays("go"))
	var te *scripted.TurnError
	if !errors.Is(err, nodes.ErrModel) || !errors.As(err, &te) || te.Turn != 2 || !strings.Contains(err.Error(), `model node "model"`) {
		t.Fatalf("Invoke: %v", err)
	}
	snap, _ := r.GetState(ctx, "th")
	if snap.Status != graph.StatusFailed || len(snap.Values.Messages) != 3 {
		t.Errorf("status %s, %d messages; want failed after user, assistant, tool", snap.Status, len(snap.Values.Messages))
	}
}

// TestAgentCustomState runs the prebuilt agent on a state of the user's.
func TestAgentCustomState(t *testing.T) {
	type Chat struct {
		History []nodes.Message `lockstep:"append"`
		Ticket  string
	}
	d := &desk{}
	ex, _ := nodes.NewExecutor([]*nodes.Tool{d.searchTool(t)})
	m := scripted.New(scripted.CallTools("", scripted.Call("s", "search_tickets", `{"query":"vpn"}`)), scripted.Say("TKT-3"))
	a, err := nodes.NewAgentFor(m, ex, nodes.StateAccess[Chat]{
		Messages: func(c Chat) []nodes.Message { return c.History },
		Update: func(msgs []nodes.Message, _ map[string]nodes.MemoEntry) graph.Update[Chat] {
			return graph.Set(Chat{History: msgs}, "History")
		},
	}, nodes.AgentOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := a.Compile(graph.WithSaver(checkpoint.NewMemorySaver(nil)))
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Invoke(context.Background(), "t", graph.Set(Chat{History: []nodes.Message{{Role: nodes.RoleUser, Content: "vpn?"}}}, "History"))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Values.History) != 4 || res.Values.History[3].Content != "TKT-3" || d.calls.get("search_tickets") != 1 {
		t.Errorf("history %+v", res.Values.History)
	}
}

// TestAgentSharedScriptConcurrent: one scripted model serves many threads
// at once (turns follow each conversation).
func TestAgentSharedScriptConcurrent(t *testing.T) {
	d := &desk{}
	m := scripted.New(scripted.CallTools("", scripted.Call("s", "search_tickets", `{"query":"vpn"}`)), scripted.Say("TKT-3"))
	r, _ := supportAgent(t, d, m, nodes.AgentOptions{})
	var wg sync.WaitGroup
	errs := make([]error, 16)
	for i := range errs {
		wg.Go(func() {
			res, err := r.Invoke(context.Background(), fmt.Sprint("th-", i), userSays("vpn?"))
			if err == nil && res.Status != graph.StatusDone {
				err = fmt.Errorf("status %s", res.Status)
			}
			errs[i] = err
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if n := len(m.Calls()); n != 32 {
		t.Errorf("%d model calls, want 32", n)
	}
	if d.calls.get("search_tickets") != 16 {
		t.Errorf("%d searches, want 16 (one per thread: the memo is per thread)", d.calls.get("search_tickets"))
	}
}
