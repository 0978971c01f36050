package nodes_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

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
	inbox := approval.NewInbox(h.saver, store)
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

// TestApprovalStoreTwoAtOnce: two gated refunds of one message show in the
// inbox together; each reviewer decision is resumed by the worker on its
// own (the thread keeps waiting on the other); each refund is paid once
// and each audit trail holds its own execution.
func TestApprovalStoreTwoAtOnce(t *testing.T) {
	ctx := context.Background()
	rf := &refunds{}
	clk := newFakeClock()
	store := approval.NewMemoryStore(clk.Now)
	h := newHarness(t, []*nodes.Tool{rf.tool(t)}, answerThenDone(
		call("r1", "refund", `{"order_id":"O-1","amount":40}`),
		call("r2", "refund", `{"order_id":"O-2","amount":15}`),
	), nil, nodes.WithOutcomeRecorder(store))
	res, err := h.r.Invoke(ctx, "th", userSays("refund both orders"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != graph.StatusWaiting || len(res.Interrupts) != 2 {
		t.Fatalf("status %s with %d interrupts; want waiting on 2", res.Status, len(res.Interrupts))
	}
	inbox := approval.NewInbox(h.saver, store)
	page, err := inbox.List(ctx, approval.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]string{} // call ID → approval ID
	for _, it := range page.Items {
		ids[it.Request.CallID] = it.ID
	}
	if len(page.Items) != 2 || ids["r1"] == "" || ids["r2"] == "" {
		t.Fatalf("inbox lists %d approvals (%v); want both at once", len(page.Items), ids)
	}
	worker, err := approval.NewWorker(store, approval.ResumeGraph(h.r), approval.WorkerOptions{})
	if err != nil {
		t.Fatal(err)
	}

	if _, err := inbox.Approve(ctx, ids["r2"], "alice", "ok"); err != nil {
		t.Fatal(err)
	}
	if rep, err := worker.RunOnce(ctx); err != nil || rep.Resumed != 1 {
		t.Fatalf("worker: %+v, %v", rep, err)
	}
	snap, err := h.r.GetState(ctx, "th")
	if err != nil {
		t.Fatal(err)
	}
	if snap.Status != graph.StatusWaiting || len(snap.Interrupts) != 1 || snap.Interrupts[0].ID != ids["r1"] {
		t.Fatalf("after one decision: status %s, interrupts %+v; want waiting on %s", snap.Status, snap.Interrupts, ids["r1"])
	}
	if rf.calls.get("O-2") != 1 || rf.calls.get("O-1") != 0 {
		t.Fatalf("after one decision: refunds O-1 %d, O-2 %d", rf.calls.get("O-1"), rf.calls.get("O-2"))
	}
	if page, _ := inbox.List(ctx, approval.Filter{}); len(page.Items) != 1 || page.Items[0].ID != ids["r1"] {
		t.Errorf("inbox after one decision: %+v", page.Items)
	}

	if _, err := inbox.Approve(ctx, ids["r1"], "bob", "ok"); err != nil {
		t.Fatal(err)
	}
	if rep, err := worker.RunOnce(ctx); err != nil || rep.Resumed != 1 {
		t.Fatalf("worker: %+v, %v", rep, err)
	}
	snap, err = h.r.GetState(ctx, "th")
	if err != nil {
		t.Fatal(err)
	}
	if snap.Status != graph.StatusDone || rf.calls.get("O-1") != 1 || rf.calls.get("O-2") != 1 || rf.calls.get("refund") != 2 {
		t.Fatalf("status %s, refunds O-1 %d, O-2 %d", snap.Status, rf.calls.get("O-1"), rf.calls.get("O-2"))
	}
	for call, order := range map[string]string{"r1": "O-1", "r2": "O-2"} {
		trail, err := store.Audit(ctx, ids[call])
		if err != nil {
			t.Fatal(err)
		}
		if trail.Execution == nil || !strings.Contains(string(trail.Execution.Result), order) {
			t.Errorf("audit of %s: execution %+v", call, trail.Execution)
		}
	}
	// Nothing is left to resume, and a late answer to a decided request is refused.
	if rep, err := worker.RunOnce(ctx); err != nil || rep.Resumed != 0 {
		t.Errorf("third pass: %+v, %v", rep, err)
	}
}

// TestRecordedExpiryWins: once the approval store recorded a request's
// expiry (an inbox listing saw it expired), an approved decision that
// reaches the thread anyway (one made on a clock that had stepped back, or
// assembled by hand) does not run the call: the tool node applies the
// decision the store recorded, and the model is told the request expired.
func TestRecordedExpiryWins(t *testing.T) {
	ctx := context.Background()
	rf := &refunds{}
	clk := newFakeClock()
	store := approval.NewMemoryStore(clk.Now)
	h := newHarness(t, []*nodes.Tool{rf.tool(t)}, answerThenDone(call("r1", "refund", `{"order_id":"O-9","amount":40}`)), nil,
		nodes.WithOutcomeRecorder(store))
	res, err := h.r.Invoke(ctx, "th", userSays("refund my order O-9"))
	if err != nil {
		t.Fatal(err)
	}
	req := h.request(t, res)
	id := res.Interrupts[0].ID
	clk.Advance(req.ExpiresAt.Sub(clk.Now()))
	if p, err := approval.NewInbox(h.saver, store).List(ctx, approval.Filter{}); err != nil || p.Expired != 1 {
		t.Fatalf("listing at the deadline: %+v, %v; want the expiry recorded", p, err)
	}
	approved := recorded(id, req, approval.Decision{Outcome: approval.Approved, Reviewer: "alice", ArgsHash: req.ArgsHash})
	res = h.resume(t, approved)
	if res.Status != graph.StatusDone || rf.calls.get("refund") != 0 {
		t.Fatalf("status %s, %d refunds; want done and none", res.Status, rf.calls.get("refund"))
	}
	if got := observation(t, toolMessages(res.Values.Messages)[0]); got.Status != nodes.StatusExpired {
		t.Errorf("the model was told %+v; want the recorded expiry", got)
	}
	if tr, err := store.Audit(ctx, id); err != nil || tr.Execution != nil {
		t.Errorf("audit %+v, %v; want no execution", tr, err)
	}
}

// TestApprovalRulesRefused: approval rules out of range (a negative TTL
// used to become 24 h) are refused when the executor or the tool node is
// built, with ErrInvalidConfig wrapping the approval package's error.
func TestApprovalRulesRefused(t *testing.T) {
	rf := &refunds{}
	for _, r := range []approval.Rules{{TTL: -time.Hour}, {TTL: approval.MaxTTL + time.Hour}, {MinRisk: "hihg"}, {ArgRules: []approval.ArgRule{nil}}} {
		_, err := nodes.NewExecutor([]*nodes.Tool{rf.tool(t)}, nodes.WithPolicy(nodes.FromRules(r)))
		if !errors.Is(err, nodes.ErrInvalidConfig) || !errors.Is(err, approval.ErrInvalidConfig) {
			t.Errorf("NewExecutor with rules %+v: %v, want ErrInvalidConfig", r, err)
		}
		ex, err := nodes.NewExecutor([]*nodes.Tool{rf.tool(t)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := nodes.ToolNode(ex, nodes.WithApprovalRules(r)); !errors.Is(err, nodes.ErrInvalidConfig) || !errors.Is(err, approval.ErrInvalidConfig) {
			t.Errorf("ToolNode with rules %+v: %v, want ErrInvalidConfig", r, err)
		}
	}
}
