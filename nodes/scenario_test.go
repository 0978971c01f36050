package nodes_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/nodes"
)

// scriptedModel is a fake model node: its n-th answer in a thread is
// script(n, messages), where n counts the assistant messages so far, so a
// resumed run answers exactly as the first one would have.
func scriptedModel(script func(n int, msgs []nodes.Message) nodes.Message) graph.NodeFunc[nodes.AgentState] {
	return func(ctx context.Context, s nodes.AgentState) (graph.Update[nodes.AgentState], error) {
		n := 0
		for _, m := range s.Messages {
			if m.Role == nodes.RoleAssistant {
				n++
			}
		}
		m := script(n, s.Messages)
		m.Role = nodes.RoleAssistant
		return graph.Set(nodes.AgentState{Messages: []nodes.Message{m}}, "Messages"), nil
	}
}

// turns is a script of fixed answers; past its end the model fails loudly.
func turns(answers ...nodes.Message) func(int, []nodes.Message) nodes.Message {
	return func(n int, _ []nodes.Message) nodes.Message {
		if n >= len(answers) {
			panic(fmt.Sprintf("scripted model: script has %d turns, asked for turn %d", len(answers), n+1))
		}
		return answers[n]
	}
}

func call(id, name, args string) nodes.ToolCall {
	return nodes.ToolCall{ID: id, Name: name, Arguments: args}
}

// agentGraph is model ↔ tools, ending when the model answers without tool
// calls.
func agentGraph(t testing.TB, model graph.NodeFunc[nodes.AgentState], tools graph.NodeFunc[nodes.AgentState], saver checkpoint.Saver) *graph.Runnable[nodes.AgentState] {
	t.Helper()
	g := graph.New[nodes.AgentState]().
		AddNode("model", model).
		AddNode("tools", tools).
		AddEdge(graph.START, "model").
		AddConditionalEdges("model", func(ctx context.Context, s nodes.AgentState) ([]string, error) {
			if len(nodes.LastToolCalls(s.Messages)) > 0 {
				return []string{"tools"}, nil
			}
			return []string{graph.END}, nil
		}, "tools", graph.END).
		AddEdge("tools", "model")
	r, err := g.Compile(graph.WithSaver(saver), graph.WithRecursionLimit(50))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func userSays(text string) graph.Update[nodes.AgentState] {
	return graph.Set(nodes.AgentState{Messages: []nodes.Message{{Role: nodes.RoleUser, Content: text}}}, "Messages")
}

func observation(t testing.TB, m nodes.Message) nodes.Observation {
	t.Helper()
	var o nodes.Observation
	if err := json.Unmarshal([]byte(m.Content), &o); err != nil {
		t.Fatalf("tool message %q: %v", m.Content, err)
	}
	return o
}

func toolMessages(msgs []nodes.Message) []nodes.Message {
	var out []nodes.Message
	for _, m := range msgs {
		if m.Role == nodes.RoleTool {
			out = append(out, m)
		}
	}
	return out
}

// TestSeedsScenario is the support desk of the seeds: a search runs once
// and its repeat (keys in another order) is a cache hit; the destructive
// close is blocked with no policy, the run waits on an approval request,
// and after approval the ticket is closed once.
func TestSeedsScenario(t *testing.T) {
	ctx := context.Background()
	d := &desk{}
	var logs logBuffer
	clk := newFakeClock()
	ex, err := nodes.NewExecutor([]*nodes.Tool{d.searchTool(t), d.closeTool(t)}, nodes.WithLogger(logs.Logger()), nodes.WithLedger(newMemLedger(t, clk.Now)))
	if err != nil {
		t.Fatal(err)
	}
	tools, err := nodes.ToolNode(ex, nodes.WithNodeClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	model := scriptedModel(turns(
		nodes.Message{Content: "Let me look for it.", ToolCalls: []nodes.ToolCall{call("c1", "search_tickets", `{"query":"login","limit":10}`)}},
		nodes.Message{Content: "Searching again.", ToolCalls: []nodes.ToolCall{call("c2", "search_tickets", `{"limit":10,"query":"login"}`)}},
		nodes.Message{Content: "TKT-3 is the login ticket and the user confirmed it is fixed, so I will close it.", ToolCalls: []nodes.ToolCall{call("c3", "close_ticket", `{"ticket_id":"TKT-3"}`)}},
		nodes.Message{Content: "Ticket TKT-3 is closed."},
	))
	saver := checkpoint.NewMemorySaver(clk.Now)
	r := agentGraph(t, model, tools, saver)

	res, err := r.Invoke(ctx, "support-1", userSays("find the login ticket and close it"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != graph.StatusWaiting || len(res.Interrupts) != 1 {
		t.Fatalf("status %s with %d interrupts, want waiting on one", res.Status, len(res.Interrupts))
	}
	if d.calls.get("search_tickets") != 1 || d.calls.get("close_ticket") != 0 {
		t.Fatalf("before approval: %d searches, %d closes; want 1 and 0", d.calls.get("search_tickets"), d.calls.get("close_ticket"))
	}
	req, ok, err := approval.ParseRequest(res.Interrupts[0].Value)
	if err != nil || !ok {
		t.Fatalf("interrupt value is not an approval request: %v", err)
	}
	wantReq := approval.Request{
		Type: approval.RequestType, Tool: "close_ticket", Args: json.RawMessage(`{"ticket_id":"TKT-3"}`),
		ArgsHash: argsHash(t, "close_ticket", `{"ticket_id":"TKT-3"}`), CallID: "c3",
		Rationale: "TKT-3 is the login ticket and the user confirmed it is fixed, so I will close it.",
		Risk:      approval.RiskHigh, Rule: nodes.RuleDestructive, Schema: ex.Tool("close_ticket").Schema(),
		CreatedAt: clk.Now(), ExpiresAt: clk.Now().Add(24 * 60 * 60 * 1e9), Kind: approval.KindGate,
	}
	if d := cmp.Diff(wantReq, req); d != "" {
		t.Errorf("approval request (-want +got):\n%s", d)
	}
	snap, err := r.GetState(ctx, "support-1")
	if err != nil {
		t.Fatal(err)
	}
	if snap.Status != graph.StatusWaiting || !slices.Equal(snap.Next, []string{"tools"}) || len(snap.Interrupts) != 1 {
		t.Errorf("snapshot: status %s, next %v, %d interrupts", snap.Status, snap.Next, len(snap.Interrupts))
	}

	dec := approve(res.Interrupts[0].ID, req)
	res, err = r.Resume(ctx, "support-1", graph.Command[nodes.AgentState]{Resume: dec})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != graph.StatusDone {
		t.Fatalf("after approval: status %s", res.Status)
	}
	if d.calls.get("close_ticket:TKT-3") != 1 || d.calls.get("search_tickets") != 1 {
		t.Errorf("after approval: %d closes, %d searches; want 1 and 1", d.calls.get("close_ticket:TKT-3"), d.calls.get("search_tickets"))
	}
	tm := toolMessages(res.Values.Messages)
	var got []nodes.Status
	for _, m := range tm {
		got = append(got, observation(t, m).Status)
	}
	if d := cmp.Diff([]nodes.Status{nodes.StatusExecuted, nodes.StatusCacheHit, nodes.StatusExecuted}, got); d != "" {
		t.Errorf("tool results (-want +got):\n%s", d)
	}
	if m := tm[2].Meta; m == nil || m.Approval != "approved" || m.Asked != 1 {
		t.Errorf("close's meta = %+v", m)
	}
	if len(res.Values.Memo) != 1 {
		t.Errorf("memo has %d entries, want 1 (the search)", len(res.Values.Memo))
	}
	wantLog := []string{"search_tickets:executed", "search_tickets:cache_hit", "close_ticket:blocked", "close_ticket:approved", "close_ticket:executed"}
	if d := cmp.Diff(wantLog, logs.Statuses()); d != "" {
		t.Errorf("decisions (-want +got):\n%s", d)
	}
	if !strings.Contains(logs.String(), `"args":"{\"ticket_id\":\"TKT-3\"}"`) {
		t.Errorf("the blocked event does not show the arguments:\n%s", logs.String())
	}
	// The run is done: a second resume is refused, nothing runs again.
	if _, err := r.Resume(ctx, "support-1", graph.Command[nodes.AgentState]{Resume: dec}); err == nil {
		t.Error("second resume succeeded")
	}
	if d.calls.get("close_ticket") != 1 {
		t.Errorf("close ran %d times", d.calls.get("close_ticket"))
	}
}
