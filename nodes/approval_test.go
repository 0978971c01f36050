package nodes_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/nodes"
)

// TestApprovalStoreRoundTrip runs the whole approval loop with the approval
// package: the paused request shows in the inbox, a reviewer approves it
// there, the run resumes with that decision, the refund is paid once and
// the store's audit trail holds what ran (key, argument hash, result).
func TestApprovalStoreRoundTrip(t *testing.T) {
	ctx := context.Background()
	rf := &refunds{}
	clk := newFakeClock()
	store := approval.NewMemoryStore(clk.Now)
	h := newHarness(t, []*nodes.Tool{rf.tool(t)}, answerThenDone(call("r1", "refund", `{"order_id":"O-9","amount":40}`)), nil,
		nodes.WithOutcomeRecorder(store),
		nodes.WithReviewContext(func(ctx context.Context, c nodes.ToolCall, msgs []nodes.Message) (json.RawMessage, error) {
			return json.RawMessage(`{"customer":"C-1","order_total":40}`), nil
		}))
	res, err := h.r.Invoke(ctx, "th", userSays("refund my order O-9, it arrived broken"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != graph.StatusWaiting {
		t.Fatalf("status %s", res.Status)
	}
	inbox := approval.NewInbox(h.saver, store, clk.Now)
	page, err := inbox.List(ctx, approval.Filter{Tool: "refund"})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Items) != 1 {
		t.Fatalf("%d pending approvals", len(page.Items))
	}
	it := page.Items[0]
	if it.ID != res.Interrupts[0].ID || string(it.Request.Context) != `{"customer":"C-1","order_total":40}` || it.Request.Rationale != "I will do it." {
		t.Errorf("inbox item %+v", it)
	}
	dec, err := inbox.Approve(ctx, it.ID, "alice", "customer sent photos")
	if err != nil {
		t.Fatal(err)
	}
	res = h.resume(t, dec)
	if res.Status != graph.StatusDone || rf.calls.get("O-9") != 1 {
		t.Fatalf("status %s, %d refunds", res.Status, rf.calls.get("O-9"))
	}
	trail, err := store.Audit(ctx, it.ID)
	if err != nil {
		t.Fatal(err)
	}
	if trail.Execution == nil || trail.Execution.ArgsHash != it.Request.ArgsHash || string(trail.Execution.Result) != `{"amount":40,"order_id":"O-9"}` || trail.Execution.IdempotencyKey == "" {
		t.Errorf("audit execution %+v", trail.Execution)
	}
	// A second reviewer loses; the refund is still paid once.
	if _, err := inbox.Reject(ctx, it.ID, "bob", "no"); !errors.Is(err, approval.ErrAlreadyDecided) {
		t.Errorf("second decision: %v", err)
	}
	if rf.calls.get("refund") != 1 {
		t.Errorf("%d refunds", rf.calls.get("refund"))
	}
}
