package nodes_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/nodes"
	"github.com/lockstepgo/lockstep/retry"
)

func TestNewToolInvalid(t *testing.T) {
	body := func(ctx context.Context, a CloseArgs, env nodes.Env) (string, error) { return "", nil }
	other := mustTool(t)(nodes.NewTool("other", "Other.", body))
	for _, tc := range []struct {
		name string
		make func() (*nodes.Tool, error)
	}{
		{"empty name", func() (*nodes.Tool, error) { return nodes.NewTool("", "d", body) }},
		{"space in name", func() (*nodes.Tool, error) { return nodes.NewTool("close ticket", "d", body) }},
		{"look-alike letter", func() (*nodes.Tool, error) { return nodes.NewTool("clos\u0435", "d", body) }},
		{"zero-width space", func() (*nodes.Tool, error) { return nodes.NewTool("close\u200b", "d", body) }},
		{"too long", func() (*nodes.Tool, error) { return nodes.NewTool(strings.Repeat("a", 65), "d", body) }},
		{"no description", func() (*nodes.Tool, error) { return nodes.NewTool("x", "", body) }},
		{"nil body", func() (*nodes.Tool, error) {
			return nodes.NewTool[CloseArgs, string]("x", "d", nil)
		}},
		{"scalar arguments", func() (*nodes.Tool, error) {
			return nodes.NewTool("x", "d", func(ctx context.Context, a string, env nodes.Env) (string, error) { return a, nil })
		}},
		{"arguments without a schema", func() (*nodes.Tool, error) {
			return nodes.NewTool("x", "d", func(ctx context.Context, a struct{ C chan int }, env nodes.Env) (string, error) { return "", nil })
		}},
		{"destructive without a tier", func() (*nodes.Tool, error) {
			return nodes.NewTool("x", "d", body, nodes.Destructive(approval.RiskNone))
		}},
		{"destructive with a bad tier", func() (*nodes.Tool, error) { return nodes.NewTool("x", "d", body, nodes.Destructive("HIGH")) }},
		{"zero timeout", func() (*nodes.Tool, error) { return nodes.NewTool("x", "d", body, nodes.Timeout(0)) }},
		{"negative MaxAttempts", func() (*nodes.Tool, error) {
			return nodes.NewTool("x", "d", body, nodes.Retry(retry.Policy{MaxAttempts: -1}))
		}},
		{"negative Initial", func() (*nodes.Tool, error) {
			return nodes.NewTool("x", "d", body, nodes.Retry(retry.Policy{Initial: -time.Second}))
		}},
		{"a retry factor below 1", func() (*nodes.Tool, error) {
			return nodes.NewTool("x", "d", body, nodes.Retry(retry.Policy{Multiplier: 0.5}))
		}},
		{"Jitter above 1", func() (*nodes.Tool, error) {
			return nodes.NewTool("x", "d", body, nodes.Retry(retry.Policy{Jitter: 1.5}))
		}},
		{"negative MaxRetryAfter", func() (*nodes.Tool, error) {
			return nodes.NewTool("x", "d", body, nodes.MaxRetryAfter(-time.Second))
		}},
		{"natural key of another type", func() (*nodes.Tool, error) {
			return nodes.NewTool("x", "d", body, nodes.NaturalKey(func(a SearchArgs) string { return a.Query }))
		}},
		{"reconcile of another type", func() (*nodes.Tool, error) {
			return nodes.NewTool("x", "d", body, nodes.Reconcile(func(ctx context.Context, a CloseArgs, env nodes.Env) (int, bool, error) { return 0, false, nil }))
		}},
		{"nil fallback", func() (*nodes.Tool, error) { return nodes.NewTool("x", "d", body, nodes.Fallback(nil)) }},
		{"fallback to itself by name", func() (*nodes.Tool, error) { return nodes.NewTool("other", "d", body, nodes.Fallback(other)) }},
		{"empty version", func() (*nodes.Tool, error) { return nodes.NewTool("x", "d", body, nodes.Version("")) }},
		{"empty secret name", func() (*nodes.Tool, error) { return nodes.NewTool("x", "d", body, nodes.Secrets("")) }},
	} {
		_, err := tc.make()
		if !errors.Is(err, nodes.ErrInvalidTool) {
			t.Errorf("%s: %v, want ErrInvalidTool", tc.name, err)
		}
		var pe *retry.PolicyError
		if strings.HasPrefix(err.Error(), `nodes: invalid tool "x": Retry: `) != errors.As(err, &pe) {
			t.Errorf("%s: %v: a refused retry policy, and only that, is a *retry.PolicyError", tc.name, err)
		}
	}
}

func TestToolInfo(t *testing.T) {
	fb := mustTool(t)(nodes.NewTool("fb", "Fallback.", func(ctx context.Context, a CloseArgs, env nodes.Env) (string, error) { return "", nil }))
	tool := mustTool(t)(nodes.NewTool("close_ticket", "Close a ticket.", func(ctx context.Context, a CloseArgs, env nodes.Env) (string, error) { return "", nil },
		nodes.Destructive(approval.RiskHigh), nodes.Timeout(7*time.Second), nodes.Version("3"), nodes.Secrets("B", "A", "A"), nodes.Fallback(fb)))
	want := nodes.ToolInfo{Name: "close_ticket", Description: "Close a ticket.", Destructive: true, Risk: approval.RiskHigh, Version: "3",
		Timeout: 7 * time.Second, Fallback: "fb", Secrets: []string{"A", "B"},
		Schema: json.RawMessage(`{"type":"object","properties":{"ticket_id":{"type":"string","pattern":"^TKT-[0-9]+$"}},"required":["ticket_id"],"additionalProperties":false}`)}
	if d := cmp.Diff(want, tool.Info()); d != "" {
		t.Errorf("Info (-want +got):\n%s", d)
	}
	if strings.Contains(string(tool.Schema()), "A") {
		t.Error("secret names in the schema")
	}
}

func TestNewExecutorInvalid(t *testing.T) {
	body := func(ctx context.Context, a CloseArgs, env nodes.Env) (string, error) { return "", nil }
	a1 := mustTool(t)(nodes.NewTool("a", "A.", body))
	a2 := mustTool(t)(nodes.NewTool("a", "Another A.", body))
	b := mustTool(t)(nodes.NewTool("b", "B.", body, nodes.Fallback(a2)))
	for _, tools := range [][]*nodes.Tool{{nil}, {a1, a1}, {a1, b}} {
		if _, err := nodes.NewExecutor(tools); !errors.Is(err, nodes.ErrInvalidConfig) {
			t.Errorf("%v: %v, want ErrInvalidConfig", tools, err)
		}
	}
}

// TestArgsErrorNamesField: validation failures name the field.
func TestArgsErrorNamesField(t *testing.T) {
	d := &desk{}
	ex, _ := nodes.NewExecutor([]*nodes.Tool{d.searchTool(t)})
	for _, tc := range []struct{ args, path string }{
		{`{"limit":5}`, "$.query"},
		{`{"query":"x","limit":500}`, "$.limit"},
		{`{"query":"x","lmit":5}`, "$.lmit"},
		{`{"query":1}`, "$.query"},
		{`{"query":"x","query":"y"}`, "$"},
		{`not json`, "$"},
	} {
		_, err := ex.Execute(context.Background(), nodes.Call{Tool: "search_tickets", Args: json.RawMessage(tc.args)})
		var ae *nodes.ArgsError
		if !errors.As(err, &ae) || ae.Path != tc.path || ae.Tool != "search_tickets" || !strings.Contains(err.Error(), tc.path) {
			t.Errorf("%s: %v, want an ArgsError at %s", tc.args, err, tc.path)
		}
	}
	if d.calls.get("search_tickets") != 0 {
		t.Error("the tool ran with invalid arguments")
	}
}

func TestNoScope(t *testing.T) {
	p := &payments{}
	ex, _ := nodes.NewExecutor([]*nodes.Tool{p.tool(t)}, nodes.WithLedger(newMemLedger(t, nil)))
	c := charge("O-1", 1, "")
	if _, err := ex.Execute(context.Background(), c); !errors.Is(err, nodes.ErrNoScope) {
		t.Errorf("write without a scope: %v", err)
	}
}
