package nodes_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/nodes"
	"github.com/lockstepgo/lockstep/retry"
)

func TestFallback(t *testing.T) {
	ctx := context.Background()
	email := func(opts ...nodes.ToolOption) *nodes.Tool {
		return mustTool(t)(nodes.NewTool("email_support", "Email the support team about an issue.",
			func(ctx context.Context, a IssueArgs, env nodes.Env) (string, error) {
				return "emailed: " + a.Title, nil
			}, opts...))
	}
	for _, tc := range []struct {
		name     string
		fail     error
		attempts int
	}{
		{"retries exhausted", &nodes.HTTPError{Status: 503}, 3},
		{"permanent", &nodes.HTTPError{Status: 401}, 1},
		{"unclassified", errors.New("weird"), 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runs := &counter{}
			create := mustTool(t)(nodes.NewTool("create_issue", "Create an issue.",
				func(ctx context.Context, a IssueArgs, env nodes.Env) (string, error) {
					runs.inc("create")
					return "", tc.fail
				}, nodes.Fallback(email()), nodes.Idempotent()))
			var logs logBuffer
			ex, err := nodes.NewExecutor([]*nodes.Tool{create}, nodes.WithClock(newFakeClock()), nodes.WithLogger(logs.Logger()))
			if err != nil {
				t.Fatal(err)
			}
			res, err := ex.Execute(ctx, nodes.Call{Tool: "create_issue", Args: json.RawMessage(`{"title":"outage"}`), Scope: "t"})
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != nodes.StatusFallback || res.Tool != "email_support" || res.FallbackFrom != "create_issue" || res.Cause == "" || string(res.Output) != `"emailed: outage"` {
				t.Errorf("result %+v", res)
			}
			if runs.get("create") != tc.attempts {
				t.Errorf("%d attempts, want %d", runs.get("create"), tc.attempts)
			}
			st := logs.Statuses()
			if len(st) < 3 || st[len(st)-3] != "create_issue:failed" || st[len(st)-2] != "create_issue:fallback" || st[len(st)-1] != "email_support:executed" {
				t.Errorf("decisions %v", st)
			}
		})
	}
	t.Run("a fallback is not callable by the model", func(t *testing.T) {
		create := mustTool(t)(nodes.NewTool("create_issue", "Create an issue.",
			func(ctx context.Context, a IssueArgs, env nodes.Env) (string, error) { return "", nil }, nodes.Fallback(email())))
		ex, _ := nodes.NewExecutor([]*nodes.Tool{create})
		if _, err := ex.Execute(ctx, nodes.Call{Tool: "email_support", Args: json.RawMessage(`{"title":"x"}`), Scope: "t"}); !errors.Is(err, nodes.ErrUnknownTool) {
			t.Errorf("direct call of a fallback: %v", err)
		}
		if _, err := ex.Execute(ctx, nodes.Call{Tool: "email_support", FallbackFor: "nope", Args: json.RawMessage(`{"title":"x"}`), Scope: "t"}); !errors.Is(err, nodes.ErrUnknownTool) {
			t.Errorf("fallback of an unknown tool: %v", err)
		}
		if defs := ex.Definitions(); len(defs) != 1 || defs[0].Name != "create_issue" {
			t.Errorf("definitions %+v", defs)
		}
	})
	t.Run("both fail", func(t *testing.T) {
		broken := mustTool(t)(nodes.NewTool("email_support", "Email support.",
			func(ctx context.Context, a IssueArgs, env nodes.Env) (string, error) {
				return "", &nodes.HTTPError{Status: 500}
			}, nodes.Retry(retry.Policy{MaxAttempts: 1})))
		create := mustTool(t)(nodes.NewTool("create_issue", "Create an issue.",
			func(ctx context.Context, a IssueArgs, env nodes.Env) (string, error) {
				return "", &nodes.HTTPError{Status: 403}
			}, nodes.Fallback(broken)))
		ex, _ := nodes.NewExecutor([]*nodes.Tool{create})
		_, err := ex.Execute(ctx, nodes.Call{Tool: "create_issue", Args: json.RawMessage(`{"title":"x"}`), Scope: "t"})
		var he *nodes.HTTPError
		if !errors.As(err, &he) || nodes.Classify(err) != nodes.ClassPermanent || !errors.Is(err, nodes.ErrToolFailed) {
			t.Errorf("err %v", err)
		}
	})
}

// TestFallbackGated: a destructive fallback goes through its own gate; the
// tool node asks for it, and on approval runs the fallback, not the tool.
func TestFallbackGated(t *testing.T) {
	runs := &counter{}
	page := mustTool(t)(nodes.NewTool("page_oncall", "Page the on-call engineer.",
		func(ctx context.Context, a IssueArgs, env nodes.Env) (string, error) {
			runs.inc("page")
			return "paged", nil
		}, nodes.Destructive(approval.RiskHigh)))
	create := mustTool(t)(nodes.NewTool("create_issue", "Create an issue.",
		func(ctx context.Context, a IssueArgs, env nodes.Env) (string, error) {
			runs.inc("create")
			return "", &nodes.HTTPError{Status: 403}
		}, nodes.Fallback(page)))
	ex, _ := nodes.NewExecutor([]*nodes.Tool{create})
	_, err := ex.Execute(context.Background(), nodes.Call{Tool: "create_issue", Args: json.RawMessage(`{"title":"x"}`), Scope: "t"})
	var cr *nodes.ConfirmationRequired
	if !errors.As(err, &cr) || cr.Tool != "page_oncall" || cr.FallbackFor != "create_issue" {
		t.Fatalf("err %v", err)
	}
	h := newHarness(t, []*nodes.Tool{create}, answerThenDone(call("c", "create_issue", `{"title":"db down"}`)), nil)
	res, err := h.r.Invoke(context.Background(), "th", userSays("escalate"))
	if err != nil {
		t.Fatal(err)
	}
	req := h.request(t, res)
	if req.Tool != "page_oncall" || req.Kind != approval.KindFallback || req.FallbackFor != "create_issue" || len(req.Context) != 0 || runs.get("page") != 0 {
		t.Fatalf("request %+v", req)
	}
	res = h.resume(t, approve(res.Interrupts[0].ID, req))
	o := observation(t, toolMessages(res.Values.Messages)[0])
	if runs.get("page") != 1 || runs.get("create") != 2 || res.Status != graph.StatusDone || string(o.Result) != `"paged"` ||
		o.Status != nodes.StatusFallback || o.Fallback != "page_oncall" {
		t.Errorf("pages %d, creates %d, observation %+v", runs.get("page"), runs.get("create"), o)
	}
}
