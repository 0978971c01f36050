package nodes_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/nodes"
)

func TestExecutorSeedsCalls(t *testing.T) {
	ctx := context.Background()
	d := &desk{}
	var logs logBuffer
	ex, err := nodes.NewExecutor([]*nodes.Tool{d.searchTool(t), d.closeTool(t)}, nodes.WithLogger(logs.Logger()))
	if err != nil {
		t.Fatal(err)
	}
	memo := nodes.NewMemo(nil)
	res, err := ex.Execute(ctx, nodes.Call{ID: "c1", Tool: "search_tickets", Args: json.RawMessage(`{"query":"login","limit":5}`), Scope: "th", Memo: memo})
	if err != nil || res.Status != nodes.StatusExecuted {
		t.Fatalf("first search: %+v, %v", res, err)
	}
	// Same arguments, other key order, spacing and number spelling.
	res2, err := ex.Execute(ctx, nodes.Call{ID: "c2", Tool: "search_tickets", Args: json.RawMessage(` { "limit" : 5.0, "query":"login" }`), Scope: "th", Memo: memo})
	if err != nil || res2.Status != nodes.StatusCacheHit || string(res2.Output) != string(res.Output) {
		t.Fatalf("second search: %+v, %v", res2, err)
	}
	if n := d.calls.get("search_tickets"); n != 1 {
		t.Errorf("search ran %d times, want 1", n)
	}
	// No policy: the destructive close is blocked.
	_, err = ex.Execute(ctx, nodes.Call{ID: "c3", Tool: "close_ticket", Args: json.RawMessage(`{"ticket_id":"TKT-3"}`), Scope: "th"})
	var cr *nodes.ConfirmationRequired
	if !errors.As(err, &cr) || !errors.Is(err, nodes.ErrConfirmationRequired) {
		t.Fatalf("close without approval = %v, want *ConfirmationRequired", err)
	}
	want := &nodes.ConfirmationRequired{Tool: "close_ticket", CallID: "c3", CallArgs: []byte(`{"ticket_id":"TKT-3"}`),
		ArgsHash: argsHash(t, "close_ticket", `{"ticket_id":"TKT-3"}`), Rule: nodes.RuleDestructive, Risk: approval.RiskHigh}
	if d := cmp.Diff(want, cr); d != "" {
		t.Errorf("ConfirmationRequired (-want +got):\n%s", d)
	}
	if n := d.calls.get("close_ticket"); n != 0 {
		t.Errorf("close ran %d times while blocked", n)
	}
	dec := approval.Decision{Outcome: approval.Approved, Reviewer: "alice", ArgsHash: cr.ArgsHash}
	res3, err := ex.Execute(ctx, nodes.Call{ID: "c3", Tool: "close_ticket", Args: json.RawMessage(`{"ticket_id":"TKT-3"}`), Scope: "th", Approval: &dec})
	if err != nil || res3.Status != nodes.StatusExecuted || string(res3.Output) != `{"id":"TKT-3","status":"closed"}` {
		t.Fatalf("approved close: %+v, %v", res3, err)
	}
	wantLog := []string{"search_tickets:executed", "search_tickets:cache_hit", "close_ticket:blocked", "close_ticket:approved", "close_ticket:executed"}
	if d := cmp.Diff(wantLog, logs.Statuses()); d != "" {
		t.Errorf("logged decisions (-want +got):\n%s", d)
	}
}
