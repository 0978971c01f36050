package nodes_test

import (
	"context"
	"encoding/json"
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
	"github.com/lockstepgo/lockstep/interrupt"
	"github.com/lockstepgo/lockstep/nodes"
)

type RefundArgs struct {
	OrderID string `json:"order_id"`
	Amount  int    `json:"amount" jsonschema:"minimum=1"`
}

type Refund struct {
	OrderID string `json:"order_id"`
	Amount  int    `json:"amount"`
}

// refunds is a fake payment service.
type refunds struct{ calls counter }

func (r *refunds) tool(t testing.TB, opts ...nodes.ToolOption) *nodes.Tool {
	return mustTool(t)(nodes.NewTool("refund",
		"Refund an order. Call it when the customer is owed money back. Returns the refund.",
		func(ctx context.Context, a RefundArgs, env nodes.Env) (Refund, error) {
			r.calls.inc("refund")
			r.calls.inc(a.OrderID)
			return Refund(a), nil
		}, append([]nodes.ToolOption{nodes.Destructive(approval.RiskMedium)}, opts...)...))
}

// bigRefund gates refunds above 100 with its own rule.
func bigRefund(tool string, args json.RawMessage) string {
	var a RefundArgs
	if tool == "refund" && json.Unmarshal(args, &a) == nil && a.Amount > 100 {
		return "refund_over_100"
	}
	return ""
}

type nodeHarness struct {
	r     *graph.Runnable[nodes.AgentState]
	saver *checkpoint.MemorySaver
	clk   *fakeClock
	logs  *logBuffer
	ex    *nodes.Executor
}

func newHarness(t *testing.T, tools []*nodes.Tool, script func(int, []nodes.Message) nodes.Message, exOpts []nodes.ExecutorOption, nodeOpts ...nodes.ToolNodeOption) *nodeHarness {
	t.Helper()
	h := &nodeHarness{clk: newFakeClock(), logs: &logBuffer{}}
	exOpts = append([]nodes.ExecutorOption{nodes.WithLogger(h.logs.Logger()), nodes.WithLedger(newMemLedger(t, h.clk.Now)), nodes.WithClock(h.clk)}, exOpts...)
	ex, err := nodes.NewExecutor(tools, exOpts...)
	if err != nil {
		t.Fatal(err)
	}
	h.ex = ex
	tn, err := nodes.ToolNode(ex, append([]nodes.ToolNodeOption{nodes.WithNodeClock(h.clk.Now)}, nodeOpts...)...)
	if err != nil {
		t.Fatal(err)
	}
	h.saver = checkpoint.NewMemorySaver(h.clk.Now)
	h.r = agentGraph(t, scriptedModel(script), tn, h.saver)
	return h
}

func (h *nodeHarness) request(t *testing.T, res graph.Result[nodes.AgentState]) approval.Request {
	t.Helper()
	if res.Status != graph.StatusWaiting || len(res.Interrupts) != 1 {
		t.Fatalf("status %s with %d interrupts; want waiting on one", res.Status, len(res.Interrupts))
	}
	req, ok, err := approval.ParseRequest(res.Interrupts[0].Value)
	if err != nil || !ok {
		t.Fatalf("not an approval request: %v", err)
	}
	return req
}

func (h *nodeHarness) resume(t *testing.T, d approval.Decision) graph.Result[nodes.AgentState] {
	t.Helper()
	res, err := h.r.Resume(context.Background(), "th", graph.Command[nodes.AgentState]{Resume: d})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// answerThenDone makes a model that calls tools once, then answers.
func answerThenDone(calls ...nodes.ToolCall) func(int, []nodes.Message) nodes.Message {
	return turns(nodes.Message{Content: "I will do it.", ToolCalls: calls}, nodes.Message{Content: "Done."})
}

func TestToolNodeRejectAndExpire(t *testing.T) {
	for _, tc := range []struct {
		name     string
		decision approval.Decision
		status   nodes.Status
		note     string
	}{
		{"rejected", approval.Decision{Outcome: approval.Rejected, Reviewer: "bob", Note: "customer already refunded"}, nodes.StatusRejected, nodes.NoteRejected},
		{"expired", approval.Decision{Outcome: approval.Expired, Reviewer: "system:expiry"}, nodes.StatusExpired, nodes.NoteExpired},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rf := &refunds{}
			h := newHarness(t, []*nodes.Tool{rf.tool(t)}, answerThenDone(call("r1", "refund", `{"order_id":"O-1","amount":30}`)), nil)
			res, err := h.r.Invoke(context.Background(), "th", userSays("refund O-1"))
			if err != nil {
				t.Fatal(err)
			}
			req := h.request(t, res)
			tc.decision.ArgsHash = req.ArgsHash
			res = h.resume(t, recorded(res.Interrupts[0].ID, req, tc.decision))
			if res.Status != graph.StatusDone || rf.calls.get("refund") != 0 {
				t.Fatalf("status %s, %d refunds; want done and none", res.Status, rf.calls.get("refund"))
			}
			got := observation(t, toolMessages(res.Values.Messages)[0])
			want := nodes.Observation{Status: tc.status, Note: tc.note, ReviewerNote: tc.decision.Note}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("observation (-want +got):\n%s", d)
			}
			if d := cmp.Diff([]string{"refund:blocked", "refund:" + string(tc.status)}, h.logs.Statuses()); d != "" {
				t.Errorf("decisions (-want +got):\n%s", d)
			}
		})
	}
}

// TestToolNodeApprovalLate: an approval decided at or after the request's
// deadline counts as an expiry.
func TestToolNodeApprovalLate(t *testing.T) {
	rf := &refunds{}
	h := newHarness(t, []*nodes.Tool{rf.tool(t)}, answerThenDone(call("r1", "refund", `{"order_id":"O-1","amount":30}`)), nil,
		nodes.WithApprovalRules(approval.Rules{TTL: time.Hour}))
	res, err := h.r.Invoke(context.Background(), "th", userSays("refund"))
	if err != nil {
		t.Fatal(err)
	}
	req := h.request(t, res)
	if !req.ExpiresAt.Equal(req.CreatedAt.Add(time.Hour)) {
		t.Fatalf("ExpiresAt %v, CreatedAt %v", req.ExpiresAt, req.CreatedAt)
	}
	d := approve(res.Interrupts[0].ID, req)
	d.DecidedAt = req.ExpiresAt
	res = h.resume(t, d)
	if rf.calls.get("refund") != 0 || observation(t, toolMessages(res.Values.Messages)[0]).Status != nodes.StatusExpired {
		t.Errorf("late approval ran the refund (%d) or was not an expiry", rf.calls.get("refund"))
	}
}

// TestToolNodeApprovalBoundToArgs: a decision for other arguments is
// refused; the tool does not run.
func TestToolNodeApprovalBoundToArgs(t *testing.T) {
	rf := &refunds{}
	h := newHarness(t, []*nodes.Tool{rf.tool(t)}, answerThenDone(call("r1", "refund", `{"order_id":"O-1","amount":30}`)), nil)
	res, err := h.r.Invoke(context.Background(), "th", userSays("refund"))
	if err != nil {
		t.Fatal(err)
	}
	req := h.request(t, res)
	res = h.resume(t, recorded(res.Interrupts[0].ID, req, approval.Decision{Outcome: approval.Approved, Reviewer: "alice", ArgsHash: argsHash(t, "refund", `{"order_id":"O-1","amount":3000}`)}))
	if rf.calls.get("refund") != 0 {
		t.Fatalf("refund ran with a mismatched approval")
	}
	if o := observation(t, toolMessages(res.Values.Messages)[0]); o.Status != nodes.StatusBlocked || o.Note != nodes.NoteMismatch {
		t.Errorf("observation %+v", o)
	}
}

// TestToolNodeEdit: an edit is validated against the schema and gated
// again; an edit the rules gate differently is asked again; what runs is
// exactly the last approved arguments.
func TestToolNodeEdit(t *testing.T) {
	rules := approval.Rules{MinRisk: approval.RiskMedium, ArgRules: []approval.ArgRule{bigRefund}}
	t.Run("same rule runs the edit", func(t *testing.T) {
		rf := &refunds{}
		h := newHarness(t, []*nodes.Tool{rf.tool(t)}, answerThenDone(call("r1", "refund", `{"order_id":"O-1","amount":30}`)), []nodes.ExecutorOption{nodes.WithPolicy(nodes.FromRules(rules))})
		res, err := h.r.Invoke(context.Background(), "th", userSays("refund"))
		if err != nil {
			t.Fatal(err)
		}
		req := h.request(t, res)
		edited := `{"amount":20,"order_id":"O-1"}`
		res = h.resume(t, recorded(res.Interrupts[0].ID, req, approval.Decision{Outcome: approval.Edited, Reviewer: "alice", Args: json.RawMessage(edited), ArgsHash: argsHash(t, "refund", edited)}))
		if res.Status != graph.StatusDone || rf.calls.get("O-1") != 1 {
			t.Fatalf("status %s, %d refunds", res.Status, rf.calls.get("O-1"))
		}
		o := observation(t, toolMessages(res.Values.Messages)[0])
		if string(o.Result) != `{"order_id":"O-1","amount":20}` {
			t.Errorf("result %s, want the edited refund of 20", o.Result)
		}
	})
	t.Run("edit gated by another rule is asked again", func(t *testing.T) {
		rf := &refunds{}
		h := newHarness(t, []*nodes.Tool{rf.tool(t)}, answerThenDone(call("r1", "refund", `{"order_id":"O-1","amount":30}`)), []nodes.ExecutorOption{nodes.WithPolicy(nodes.FromRules(rules))})
		res, err := h.r.Invoke(context.Background(), "th", userSays("refund"))
		if err != nil {
			t.Fatal(err)
		}
		first := h.request(t, res)
		if first.Rule != "risk:medium" {
			t.Fatalf("first rule %q", first.Rule)
		}
		edited := `{"order_id":"O-1","amount":500}`
		res = h.resume(t, recorded(res.Interrupts[0].ID, first, approval.Decision{Outcome: approval.Edited, Reviewer: "alice", Args: json.RawMessage(edited), ArgsHash: argsHash(t, "refund", edited)}))
		second := h.request(t, res)
		if second.Rule != "refund_over_100" || string(second.Args) != `{"amount":500,"order_id":"O-1"}` || rf.calls.get("refund") != 0 {
			t.Fatalf("second request %+v; %d refunds", second, rf.calls.get("refund"))
		}
		res = h.resume(t, approve(res.Interrupts[0].ID, second))
		if res.Status != graph.StatusDone || rf.calls.get("O-1") != 1 {
			t.Fatalf("status %s, %d refunds", res.Status, rf.calls.get("O-1"))
		}
		if m := toolMessages(res.Values.Messages)[0].Meta; m.Asked != 2 || m.Approval != "approved" {
			t.Errorf("meta %+v", m)
		}
	})
	t.Run("invalid edit is refused", func(t *testing.T) {
		rf := &refunds{}
		h := newHarness(t, []*nodes.Tool{rf.tool(t)}, answerThenDone(call("r1", "refund", `{"order_id":"O-1","amount":30}`)), nil)
		res, err := h.r.Invoke(context.Background(), "th", userSays("refund"))
		if err != nil {
			t.Fatal(err)
		}
		req := h.request(t, res)
		edited := `{"order_id":"O-1","amount":-5}`
		res = h.resume(t, recorded(res.Interrupts[0].ID, req, approval.Decision{Outcome: approval.Edited, Reviewer: "alice", Args: json.RawMessage(edited), ArgsHash: argsHash(t, "refund", edited)}))
		o := observation(t, toolMessages(res.Values.Messages)[0])
		if rf.calls.get("refund") != 0 || o.Status != nodes.StatusFailed || o.Error == "" {
			t.Errorf("invalid edit: %d refunds, observation %+v", rf.calls.get("refund"), o)
		}
	})
}

// requests returns the approval requests of a paused run by call ID, with
// the interrupt ID each is answered by.
func (h *nodeHarness) requests(t *testing.T, res graph.Result[nodes.AgentState]) (map[string]approval.Request, map[string]string) {
	t.Helper()
	if res.Status != graph.StatusWaiting {
		t.Fatalf("status %s; want waiting", res.Status)
	}
	reqs, ids := map[string]approval.Request{}, map[string]string{}
	for _, in := range res.Interrupts {
		req, ok, err := approval.ParseRequest(in.Value)
		if err != nil || !ok {
			t.Fatalf("interrupt %s is not an approval request: %v", in.ID, err)
		}
		if _, dup := reqs[req.CallID]; dup {
			t.Fatalf("two requests for call %q", req.CallID)
		}
		reqs[req.CallID], ids[req.CallID] = req, in.ID
	}
	return reqs, ids
}

// resumeByID answers the interrupts given by ID.
func (h *nodeHarness) resumeByID(t *testing.T, answers map[string]any) graph.Result[nodes.AgentState] {
	t.Helper()
	res, err := h.r.Resume(context.Background(), "th", graph.Command[nodes.AgentState]{ResumeByID: answers})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestToolNodeAsksAllAtOnce: two gated calls and a read in one message:
// the read runs at once; both gated calls are asked together (one pause,
// two approval interrupts, in call order); each is decided and resumed on
// its own, by ID, the thread waiting on the other meanwhile; every side
// effect happens exactly once and the tool messages come in call order.
func TestToolNodeAsksAllAtOnce(t *testing.T) {
	for _, order := range [][]string{{"a", "c"}, {"c", "a"}} {
		t.Run("approve "+order[0]+" first", func(t *testing.T) {
			rf := &refunds{}
			d := &desk{}
			h := newHarness(t, []*nodes.Tool{rf.tool(t), d.searchTool(t)}, answerThenDone(
				call("a", "refund", `{"order_id":"O-1","amount":10}`),
				call("b", "search_tickets", `{"query":"refund"}`),
				call("c", "refund", `{"order_id":"O-2","amount":20}`),
			), nil)
			ctx := context.Background()
			res, err := h.r.Invoke(ctx, "th", userSays("refund both"))
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Interrupts) != 2 {
				t.Fatalf("%d interrupts; want 2 (both gated calls at once)", len(res.Interrupts))
			}
			reqs, ids := h.requests(t, res)
			var callOrder []string
			for _, in := range res.Interrupts {
				r, _, _ := approval.ParseRequest(in.Value)
				callOrder = append(callOrder, r.CallID)
			}
			if d := cmp.Diff([]string{"a", "c"}, callOrder); d != "" {
				t.Errorf("interrupts out of call order (-want +got):\n%s", d)
			}
			if ids["a"] == ids["c"] || d.calls.get("search_tickets") != 1 || rf.calls.get("refund") != 0 {
				t.Fatalf("IDs %v; %d searches, %d refunds; want distinct IDs, 1, 0", ids, d.calls.get("search_tickets"), rf.calls.get("refund"))
			}
			// A single plain answer is refused while two requests wait.
			if _, err := h.r.Resume(ctx, "th", graph.Command[nodes.AgentState]{Resume: approve(ids["a"], reqs["a"])}); !errors.Is(err, graph.ErrAmbiguousResume) {
				t.Errorf("plain Resume with two pending: %v, want ErrAmbiguousResume", err)
			}

			first, second := order[0], order[1]
			res = h.resumeByID(t, map[string]any{ids[first]: approve(ids[first], reqs[first])})
			if res.Status != graph.StatusWaiting || len(res.Interrupts) != 1 || res.Interrupts[0].ID != ids[second] {
				t.Fatalf("after approving %s: status %s, interrupts %+v; want waiting on %s only", first, res.Status, res.Interrupts, ids[second])
			}
			snap, err := h.r.GetState(ctx, "th")
			if err != nil {
				t.Fatal(err)
			}
			if snap.Status != graph.StatusWaiting || len(snap.Interrupts) != 1 || snap.Interrupts[0].ID != ids[second] {
				t.Errorf("snapshot: status %s, %d interrupts", snap.Status, len(snap.Interrupts))
			}
			orderOf := map[string]string{"a": "O-1", "c": "O-2"}
			want := map[string]int{"O-1": 0, "O-2": 0}
			want[orderOf[first]] = 1
			if rf.calls.get("O-1") != want["O-1"] || rf.calls.get("O-2") != want["O-2"] {
				t.Fatalf("after approving %s: refunds O-1 %d, O-2 %d", first, rf.calls.get("O-1"), rf.calls.get("O-2"))
			}
			// Answering the decided request again is refused before any node runs.
			if _, err := h.r.Resume(ctx, "th", graph.Command[nodes.AgentState]{ResumeByID: map[string]any{ids[first]: approve(ids[first], reqs[first])}}); !errors.Is(err, graph.ErrAlreadyAnswered) {
				t.Errorf("second answer to %s: %v, want ErrAlreadyAnswered", first, err)
			}

			res = h.resumeByID(t, map[string]any{ids[second]: approve(ids[second], reqs[second])})
			if res.Status != graph.StatusDone {
				t.Fatalf("status %s", res.Status)
			}
			if rf.calls.get("O-1") != 1 || rf.calls.get("O-2") != 1 || rf.calls.get("refund") != 2 || d.calls.get("search_tickets") != 1 {
				t.Errorf("refunds O-1 %d, O-2 %d, searches %d; want 1 each", rf.calls.get("O-1"), rf.calls.get("O-2"), d.calls.get("search_tickets"))
			}
			var got []string
			for _, m := range toolMessages(res.Values.Messages) {
				got = append(got, m.ToolCallID+":"+string(m.Meta.Status)+":"+m.Meta.Approval)
			}
			if d := cmp.Diff([]string{"a:executed:approved", "b:executed:", "c:executed:approved"}, got); d != "" {
				t.Errorf("tool messages (-want +got):\n%s", d)
			}
		})
	}
}

// TestToolNodeDecisionID: a decision recorded for another request (its ID
// is set and is not the interrupt ID of the call's request) is refused:
// the tool does not run and the model gets a blocked result; the sibling
// answered with its own ID runs. (A decision without an ID is refused and
// taken back: TestToolNodeUnrecordedDecision.)
func TestToolNodeDecisionID(t *testing.T) {
	rf := &refunds{}
	h := newHarness(t, []*nodes.Tool{rf.tool(t)}, answerThenDone(
		call("a", "refund", `{"order_id":"O-1","amount":10}`),
		call("c", "refund", `{"order_id":"O-2","amount":20}`),
	), nil)
	res, err := h.r.Invoke(context.Background(), "th", userSays("refund both"))
	if err != nil {
		t.Fatal(err)
	}
	reqs, ids := h.requests(t, res)
	right := approve(ids["a"], reqs["a"])
	wrong := approve(ids["a"], reqs["c"]) // the right arguments, but recorded for a's request
	res = h.resumeByID(t, map[string]any{ids["a"]: right, ids["c"]: wrong})
	if res.Status != graph.StatusDone {
		t.Fatalf("status %s", res.Status)
	}
	if rf.calls.get("O-1") != 1 || rf.calls.get("O-2") != 0 {
		t.Errorf("refunds O-1 %d, O-2 %d; want 1 and 0", rf.calls.get("O-1"), rf.calls.get("O-2"))
	}
	tm := toolMessages(res.Values.Messages)
	if o := observation(t, tm[1]); o.Status != nodes.StatusBlocked || o.Note != nodes.NoteWrongDecision || !strings.Contains(o.Error, ids["c"]) {
		t.Errorf("refused call's observation %+v", o)
	}
	var refused bool
	for _, e := range h.logs.Events() {
		refused = refused || e["reason"] == "decision_id_mismatch" && e["call_id"] == "c"
	}
	if !refused {
		t.Error("no decision_id_mismatch event for call c")
	}

	err = &nodes.DecisionIDError{Tool: "refund", CallID: "c", Want: ids["c"], Got: ids["a"]}
	var de *nodes.DecisionIDError
	if !errors.Is(err, nodes.ErrWrongDecision) || !errors.Is(err, nodes.ErrApprovalMismatch) || !errors.As(fmt.Errorf("wrapped: %w", err), &de) || nodes.Classify(err) != nodes.ClassPermanent {
		t.Errorf("DecisionIDError does not match its sentinels: %v", err)
	}
}

// TestToolNodeCallIDs: a model cannot make one human answer count for two
// calls, or steer one call's approval to another, by choosing IDs. Calls
// that share an ID are refused, neither run; an ID that spells another
// call's internal step name ("X/decision:1") is just an ID.
func TestToolNodeCallIDs(t *testing.T) {
	t.Run("shared ID", func(t *testing.T) {
		var runs counter
		send := mustTool(t)(nodes.NewTool("send", "Send a message after the user confirms.",
			func(ctx context.Context, a struct {
				To string `json:"to"`
			}, env nodes.Env) (string, error) {
				runs.inc("send")
				ok, err := nodes.Ask[bool](ctx, env, "confirm", "send to "+a.To+"?")
				if err != nil || !ok {
					return "not sent", err
				}
				return "sent to " + a.To, nil
			}, nodes.Idempotent()))
		h := newHarness(t, []*nodes.Tool{send}, answerThenDone(call("dup", "send", `{"to":"alice"}`), call("dup", "send", `{"to":"mallory"}`)), nil)
		res, err := h.r.Invoke(context.Background(), "th", userSays("send it"))
		if err != nil || res.Status != graph.StatusDone || runs.get("send") != 0 {
			t.Fatalf("Invoke = %s, %v, send ran %d times; want done with neither run", res.Status, err, runs.get("send"))
		}
		for _, m := range toolMessages(res.Values.Messages) {
			if o := observation(t, m); o.Status != nodes.StatusFailed || !strings.Contains(o.Error, "share an ID") {
				t.Errorf("tool message %+v, want a refusal naming the shared ID", o)
			}
		}
	})
	t.Run("ID that spells a step name", func(t *testing.T) {
		p := &payments{}
		var searches counter
		search := mustTool(t)(nodes.NewTool("search", "Search.", func(ctx context.Context, _ Empty, env nodes.Env) (string, error) {
			searches.inc("search")
			return "found", nil
		}, nodes.Idempotent()))
		h := newHarness(t, []*nodes.Tool{p.tool(t, nodes.Destructive(approval.RiskHigh)), search},
			answerThenDone(call("X", "charge", `{"order_id":"O-1","amount":5}`), call("X/decision:1", "search", `{}`)), nil)
		res, err := h.r.Invoke(context.Background(), "th", userSays("charge"))
		if err != nil {
			t.Fatal(err)
		}
		res = h.resume(t, approve(res.Interrupts[0].ID, h.request(t, res)))
		tm := toolMessages(res.Values.Messages)
		if res.Status != graph.StatusDone || p.calls.get("charge") != 1 || searches.get("search") != 1 || len(tm) != 2 ||
			tm[0].ToolCallID != "X" || observation(t, tm[0]).Status != nodes.StatusExecuted || tm[1].ToolCallID != "X/decision:1" {
			t.Errorf("status %s, %d charges, %d searches, tool messages %+v; want each call answered once, the approved charge run", res.Status, p.calls.get("charge"), searches.get("search"), tm)
		}
	})
}

// TestToolNodeBodyAskRedacted (D13): a question a tool body asks is saved
// with the secrets the executor handed out redacted, as its results are.
func TestToolNodeBodyAskRedacted(t *testing.T) {
	ask := mustTool(t)(nodes.NewTool("confirm_link", "Ask the user to confirm the link.",
		func(ctx context.Context, _ Empty, env nodes.Env) (string, error) {
			tok, err := env.Secret("TOKEN")
			if err != nil {
				return "", err
			}
			return nodes.Ask[string](ctx, env, "confirm", map[string]string{"open": "https://bank.example/api?token=" + tok.Reveal()})
		}, nodes.Idempotent(), nodes.Secrets("TOKEN")))
	h := newHarness(t, []*nodes.Tool{ask}, answerThenDone(call("c", "confirm_link", `{}`)),
		[]nodes.ExecutorOption{nodes.WithSecrets(nodes.StaticSecrets{"TOKEN": "tok_live_123456"})})
	res, err := h.r.Invoke(context.Background(), "th", userSays("open it"))
	if err != nil || len(res.Interrupts) != 1 {
		t.Fatalf("Invoke = %+v, %v", res, err)
	}
	if v := string(res.Interrupts[0].Value); strings.Contains(v, "tok_live_123456") || !strings.Contains(v, nodes.Redacted) {
		t.Errorf("the saved question is %s, want the token redacted", v)
	}
}

// TestToolNodeBodiesAskByKey: tool bodies that ask with nodes.Ask, from
// reads running in parallel, pause together with a gated call's approval
// request; each question is answered by its ID and reaches its own body.
func TestToolNodeBodiesAskByKey(t *testing.T) {
	type Q struct {
		Question string `json:"question"`
	}
	var runs counter
	ask := mustTool(t)(nodes.NewTool("ask_user", "Ask the user a question and return the answer.",
		func(ctx context.Context, q Q, env nodes.Env) (string, error) {
			runs.inc(env.CallID)
			return nodes.Ask[string](ctx, env, "answer", q.Question)
		}, nodes.Idempotent()))
	rf := &refunds{}
	h := newHarness(t, []*nodes.Tool{ask, rf.tool(t)}, answerThenDone(
		call("q1", "ask_user", `{"question":"which order?"}`),
		call("q2", "ask_user", `{"question":"which amount?"}`),
		call("r", "refund", `{"order_id":"O-1","amount":10}`),
	), nil)
	res, err := h.r.Invoke(context.Background(), "th", userSays("refund"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != graph.StatusWaiting || len(res.Interrupts) != 3 {
		t.Fatalf("status %s with %d interrupts; want waiting on 3", res.Status, len(res.Interrupts))
	}
	answers := map[string]any{}
	for _, in := range res.Interrupts {
		if req, ok, _ := approval.ParseRequest(in.Value); ok {
			answers[in.ID] = approve(in.ID, req)
			continue
		}
		var q string
		if err := in.Decode(&q); err != nil {
			t.Fatal(err)
		}
		answers[in.ID] = "answer to " + q
	}
	res = h.resumeByID(t, answers)
	if res.Status != graph.StatusDone || rf.calls.get("refund") != 1 {
		t.Fatalf("status %s, %d refunds", res.Status, rf.calls.get("refund"))
	}
	tm := toolMessages(res.Values.Messages)
	for i, want := range []string{`"answer to which order?"`, `"answer to which amount?"`} {
		if o := observation(t, tm[i]); string(o.Result) != want {
			t.Errorf("call %d result %s, want %s", i, o.Result, want)
		}
	}
	if runs.get("q1") != 2 || runs.get("q2") != 2 {
		t.Errorf("bodies ran %d and %d times; want 2 each (ask, then answer)", runs.get("q1"), runs.get("q2"))
	}
}

// TestToolNodeAskLimit: the model asks for the same rejected call again
// and again; past the limit it is told to stop asking, without a request.
func TestToolNodeAskLimit(t *testing.T) {
	rf := &refunds{}
	again := nodes.Message{Content: "Trying again.", ToolCalls: []nodes.ToolCall{call("x", "refund", `{"order_id":"O-1","amount":10}`)}}
	script := func(n int, msgs []nodes.Message) nodes.Message {
		if n < 3 {
			m := again
			m.ToolCalls = []nodes.ToolCall{call(string(rune('x'+n)), "refund", `{"amount":10,"order_id":"O-1"}`)}
			return m
		}
		return nodes.Message{Content: "I need a human."}
	}
	h := newHarness(t, []*nodes.Tool{rf.tool(t)}, script, nil, nodes.WithMaxApprovalRequests(2))
	res, err := h.r.Invoke(context.Background(), "th", userSays("refund O-1"))
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		req := h.request(t, res)
		res = h.resume(t, recorded(res.Interrupts[0].ID, req, approval.Decision{Outcome: approval.Rejected, Reviewer: "bob", ArgsHash: req.ArgsHash}))
	}
	if res.Status != graph.StatusDone {
		t.Fatalf("third ask was not refused: status %s", res.Status)
	}
	tm := toolMessages(res.Values.Messages)
	if o := observation(t, tm[2]); o.Status != nodes.StatusBlocked || o.Note != nodes.NoteStopAsking {
		t.Errorf("third result %+v", o)
	}
	if rf.calls.get("refund") != 0 {
		t.Error("refund ran")
	}
}

// TestToolNodeCustomState runs the tool node on a user's own state type.
func TestToolNodeCustomState(t *testing.T) {
	type Chat struct {
		History []nodes.Message            `lockstep:"append"`
		Cache   map[string]nodes.MemoEntry `lockstep:"merge"`
		Turns   int
	}
	d := &desk{}
	ex, err := nodes.NewExecutor([]*nodes.Tool{d.searchTool(t)})
	if err != nil {
		t.Fatal(err)
	}
	tn, err := nodes.NewToolNode(ex, nodes.StateAccess[Chat]{
		Messages: func(c Chat) []nodes.Message { return c.History },
		Memo:     func(c Chat) map[string]nodes.MemoEntry { return c.Cache },
		Update: func(msgs []nodes.Message, memo map[string]nodes.MemoEntry) graph.Update[Chat] {
			return graph.Set(Chat{History: msgs, Cache: memo}, "History", "Cache")
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	g := graph.New[Chat]().AddNode("tools", tn).AddEdge(graph.START, "tools").AddEdge("tools", graph.END)
	r, err := g.Compile(graph.WithSaver(checkpoint.NewMemorySaver(nil)))
	if err != nil {
		t.Fatal(err)
	}
	in := Chat{History: []nodes.Message{{Role: nodes.RoleAssistant, ToolCalls: []nodes.ToolCall{call("1", "search_tickets", `{"query":"vpn"}`), call("2", "search_tickets", `{"query":"vpn"}`)}}}}
	res, err := r.Invoke(context.Background(), "t", graph.Set(in, "History"))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Values.History) != 3 || len(res.Values.Cache) != 1 || d.calls.get("search_tickets") != 1 {
		t.Errorf("history %d, cache %d, searches %d; want 3, 1, 1", len(res.Values.History), len(res.Values.Cache), d.calls.get("search_tickets"))
	}
}

func TestNewToolNodeInvalid(t *testing.T) {
	ex, _ := nodes.NewExecutor(nil)
	for _, f := range []func() error{
		func() error { _, err := nodes.ToolNode(nil); return err },
		func() error { _, err := nodes.NewToolNode(ex, nodes.StateAccess[nodes.AgentState]{}); return err },
		func() error { _, err := nodes.ToolNode(ex, nodes.WithMaxApprovalRequests(0)); return err },
		func() error { _, err := nodes.ToolNode(ex, nodes.WithParallelism(0)); return err },
	} {
		if err := f(); !errors.Is(err, nodes.ErrInvalidConfig) {
			t.Errorf("got %v, want ErrInvalidConfig", err)
		}
	}
}

// TestToolNodeNoCalls: a last message without tool calls writes nothing.
func TestToolNodeNoCalls(t *testing.T) {
	ex, _ := nodes.NewExecutor(nil)
	tn, _ := nodes.ToolNode(ex)
	u, err := tn(context.Background(), nodes.AgentState{Messages: []nodes.Message{{Role: nodes.RoleUser, Content: "hi"}}})
	if err != nil || !u.IsZero() {
		t.Errorf("update %+v, %v", u, err)
	}
}

// TestToolNodeBodyInterruptResumes: a tool body that asks a question pauses
// the node; the answer reaches it on resume, and the call is not retried
// meanwhile.
func TestToolNodeBodyInterruptResumes(t *testing.T) {
	var runs atomic.Int32
	type Q struct {
		Question string `json:"question"`
	}
	ask := mustTool(t)(nodes.NewTool("ask_user", "Ask the user a question and return the answer.",
		func(ctx context.Context, q Q, env nodes.Env) (string, error) {
			runs.Add(1)
			return interrupt.Ask[string](ctx, q.Question)
		}, nodes.Idempotent(), nodes.Retry(upTo(5))))
	h := newHarness(t, []*nodes.Tool{ask}, answerThenDone(call("q", "ask_user", `{"question":"which order?"}`)), nil)
	res, err := h.r.Invoke(context.Background(), "th", userSays("help"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != graph.StatusWaiting || runs.Load() != 1 {
		t.Fatalf("status %s after %d runs; want waiting after 1", res.Status, runs.Load())
	}
	res = h.resume2(t, "O-7")
	if o := observation(t, toolMessages(res.Values.Messages)[0]); string(o.Result) != `"O-7"` {
		t.Errorf("observation %+v", o)
	}
}

func (h *nodeHarness) resume2(t *testing.T, v any) graph.Result[nodes.AgentState] {
	t.Helper()
	res, err := h.r.Resume(context.Background(), "th", graph.Command[nodes.AgentState]{Resume: v})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestNewExecutorRefusesOptionsOutOfRange: an executor option out of
// range makes NewExecutor fail with ErrInvalidConfig, naming it, instead
// of keeping the default; the edge of the range is accepted.
func TestNewExecutorRefusesOptionsOutOfRange(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  nodes.ExecutorOption
		want string // a fragment of the error; "" is accepted
	}{
		{"max abandoned 0", nodes.WithMaxAbandoned(0), "WithMaxAbandoned(0)"},
		{"max abandoned negative", nodes.WithMaxAbandoned(-3), "WithMaxAbandoned(-3)"},
		{"max abandoned 1", nodes.WithMaxAbandoned(1), ""},
		{"negative wait in progress", nodes.WithWaitInProgress(-time.Second), "WithWaitInProgress(-1s)"},
		{"no wait in progress", nodes.WithWaitInProgress(0), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := nodes.NewExecutor(nil, tc.opt)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("NewExecutor: %v, want it accepted", err)
			case tc.want != "" && (!errors.Is(err, nodes.ErrInvalidConfig) || err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("NewExecutor: %v, want ErrInvalidConfig naming %s", err, tc.want)
			}
		})
	}
}
