package nodes_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/interrupt"
	"github.com/lockstepgo/lockstep/nodes"
)

// TestToolNodeUnrecordedDecision: a decision that lacks the approval ID,
// the reviewer or the decision time (built by hand, not recorded by an
// approval store) is refused with an *UnrecordedDecisionError naming the
// tool, the call and the waiting request, inside the *interrupt.AnswerError
// that makes the runtime take the answer back: nothing runs, the request
// keeps waiting, and a recorded decision then completes the run. The
// zero-time case used to slip past the deadline: a hand-built approval
// given after the request expired ran the refund.
func TestToolNodeUnrecordedDecision(t *testing.T) {
	for _, tc := range []struct {
		name    string
		edit    func(d *approval.Decision)
		late    bool // given after the request expired
		missing []string
	}{
		{"no approval ID", func(d *approval.Decision) { d.ID = "" }, false, []string{"approval ID"}},
		{"no reviewer", func(d *approval.Decision) { d.Reviewer = "" }, false, []string{"reviewer"}},
		{"blank reviewer", func(d *approval.Decision) { d.Reviewer = " \t" }, false, []string{"reviewer"}},
		{"no decision time", func(d *approval.Decision) { d.DecidedAt = time.Time{} }, false, []string{"decision time"}},
		{"no decision time, after the deadline", func(d *approval.Decision) { d.DecidedAt = time.Time{} }, true, []string{"decision time"}},
		{"hand-built approval", func(d *approval.Decision) { *d = approval.Decision{Outcome: d.Outcome, ArgsHash: d.ArgsHash} }, false, []string{"approval ID", "reviewer", "decision time"}},
		{"hand-built rejection", func(d *approval.Decision) { d.Outcome, d.ID = approval.Rejected, "" }, false, []string{"approval ID"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			rf := &refunds{}
			h := newHarness(t, []*nodes.Tool{rf.tool(t)}, answerThenDone(call("r1", "refund", `{"order_id":"O-1","amount":30}`)), nil,
				nodes.WithApprovalRules(approval.Rules{TTL: time.Hour}))
			res, err := h.r.Invoke(ctx, "th", userSays("refund O-1"))
			if err != nil {
				t.Fatal(err)
			}
			req := h.request(t, res)
			id := res.Interrupts[0].ID
			if tc.late {
				h.clk.Advance(2 * time.Hour)
			}
			bad := approve(id, req)
			tc.edit(&bad)

			_, err = h.r.Resume(ctx, "th", graph.Command[nodes.AgentState]{Resume: bad})
			var (
				ue *nodes.UnrecordedDecisionError
				ae *interrupt.AnswerError
			)
			if !errors.As(err, &ue) || !errors.Is(err, nodes.ErrUnrecordedDecision) || !errors.As(err, &ae) || ae.ID != id {
				t.Fatalf("resume with %+v: %v; want an *UnrecordedDecisionError inside an *interrupt.AnswerError for %s", bad, err, id)
			}
			want := &nodes.UnrecordedDecisionError{Tool: "refund", CallID: "r1", InterruptID: id, Missing: tc.missing}
			if diff := cmp.Diff(want, ue); diff != "" {
				t.Errorf("refusal (-want +got):\n%s", diff)
			}
			if msg := err.Error(); !strings.Contains(msg, `"refund"`) || !strings.Contains(msg, `"r1"`) || !strings.Contains(msg, id) {
				t.Errorf("error %q should name the tool, the call and the approval", msg)
			}
			if rf.calls.get("refund") != 0 {
				t.Fatalf("the refund ran %d times on an unrecorded decision", rf.calls.get("refund"))
			}
			snap, err := h.r.GetState(ctx, "th")
			if err != nil {
				t.Fatal(err)
			}
			if snap.Status != graph.StatusWaiting || len(snap.Interrupts) != 1 || snap.Interrupts[0].ID != id {
				t.Fatalf("after the refusal: status %s, interrupts %+v; want the request %s waiting", snap.Status, snap.Interrupts, id)
			}
			var logged bool
			for _, e := range h.logs.Events() {
				logged = logged || e["reason"] == "unrecorded decision" && e["call_id"] == "r1"
			}
			if !logged {
				t.Error("no unrecorded decision event for call r1")
			}

			// The request still waits: a recorded decision completes the run.
			good := approve(id, req)
			wantStatus, wantRuns := nodes.StatusExecuted, 1
			if tc.late {
				good.DecidedAt = h.clk.Now() // recorded late: an expiry
				wantStatus, wantRuns = nodes.StatusExpired, 0
			}
			res = h.resume(t, good)
			if res.Status != graph.StatusDone || rf.calls.get("refund") != wantRuns {
				t.Fatalf("after a recorded decision: status %s, %d refunds; want done and %d", res.Status, rf.calls.get("refund"), wantRuns)
			}
			if o := observation(t, toolMessages(res.Values.Messages)[0]); o.Status != wantStatus {
				t.Errorf("observation %+v, want status %s", o, wantStatus)
			}
		})
	}
}

// TestToolNodeUnrecordedDecisionSibling: when one call of a message gets
// an unrecorded decision and its sibling a recorded one, the sibling's
// approved call runs once, the refused request keeps waiting alone, and
// answering it finishes the message without running the sibling again.
func TestToolNodeUnrecordedDecisionSibling(t *testing.T) {
	ctx := context.Background()
	rf := &refunds{}
	h := newHarness(t, []*nodes.Tool{rf.tool(t)}, answerThenDone(
		call("a", "refund", `{"order_id":"O-1","amount":10}`),
		call("c", "refund", `{"order_id":"O-2","amount":20}`),
	), nil)
	res, err := h.r.Invoke(ctx, "th", userSays("refund both"))
	if err != nil {
		t.Fatal(err)
	}
	reqs, ids := h.requests(t, res)
	bad := approve(ids["c"], reqs["c"])
	bad.ID = ""
	_, err = h.r.Resume(ctx, "th", graph.Command[nodes.AgentState]{ResumeByID: map[string]any{ids["a"]: approve(ids["a"], reqs["a"]), ids["c"]: bad}})
	var ue *nodes.UnrecordedDecisionError
	if !errors.As(err, &ue) || ue.CallID != "c" || ue.InterruptID != ids["c"] {
		t.Fatalf("resume: %v; want an *UnrecordedDecisionError for call c", err)
	}
	if rf.calls.get("O-2") != 0 {
		t.Fatalf("O-2 refunded %d times on an unrecorded decision", rf.calls.get("O-2"))
	}
	snap, err := h.r.GetState(ctx, "th")
	if err != nil {
		t.Fatal(err)
	}
	if snap.Status != graph.StatusWaiting || len(snap.Interrupts) != 1 || snap.Interrupts[0].ID != ids["c"] {
		t.Fatalf("after the refusal: status %s, interrupts %+v; want only c's request (%s) waiting", snap.Status, snap.Interrupts, ids["c"])
	}
	res = h.resumeByID(t, map[string]any{ids["c"]: approve(ids["c"], reqs["c"])})
	if res.Status != graph.StatusDone || rf.calls.get("O-1") != 1 || rf.calls.get("O-2") != 1 {
		t.Fatalf("status %s, refunds O-1 %d, O-2 %d; want done, each once", res.Status, rf.calls.get("O-1"), rf.calls.get("O-2"))
	}
}
