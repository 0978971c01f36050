package nodes_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/lockstepgo/lockstep/nodes"
)

// benchSecrets are three credentials of typical length and shape.
var benchSecrets = []string{
	"sk_live_4f9c2b7e1a8d3f6c0b5e9a2d7c4f1e8b",
	"ghp_Zq8rT2vLm9XkP4wN7bY1cH6dF3sJ0gA5eU",
	"AKIAW7EXAMPLEQ2R4T6Y/wJalrXUtnFEMI+K7MDENG",
}

// benchTexts are what the executor redacts on every call: an error text,
// a log-sized text with URL and JSON escapes in it, and a stack trace.
func benchTexts() map[string]string {
	var log strings.Builder
	for i := 0; log.Len() < 4<<10; i++ {
		fmt.Fprintf(&log, "GET https://api.example/v1/orders?page=%d&q=caf%%C3%%A9 -> 200 {\"id\":\"ord_%06d\",\"note\":\"line\\nnext \\u00e9\"}\n", i, i)
	}
	var stack strings.Builder
	for i := 0; stack.Len() < 16<<10; i++ {
		fmt.Fprintf(&stack, "github.com/lockstepgo/lockstep/nodes.(*Executor).attempt.func%d(...)\n\t/work/nodes/executor.go:%d +0x%x\n", i, 900+i, 0x1c0+i)
	}
	return map[string]string{
		"error-160B":  "nodes: tool \"call_api\": GET https://api.example/v1/orders/ord_123456?expand=items: 503 Service Unavailable: upstream timed out after 30s",
		"log-4KiB":    log.String(),
		"stack-16KiB": stack.String(),
	}
}

// BenchmarkRedact measures the redactor on texts that hold no secret (the
// common case: every result and error of every call) and on the same
// texts with a secret in them, for String (error and log text) and JSON
// (results).
func BenchmarkRedact(b *testing.B) {
	r := nodes.NewTestRedactor(benchSecrets...)
	texts := benchTexts()
	for _, name := range []string{"error-160B", "log-4KiB", "stack-16KiB"} {
		clean := texts[name]
		hit := clean[:len(clean)/2] + "Bearer " + benchSecrets[0] + " " + clean[len(clean)/2:]
		for _, tc := range []struct{ kind, s string }{{"clean", clean}, {"hit", hit}} {
			b.Run(fmt.Sprintf("String/%s/%s", name, tc.kind), func(b *testing.B) {
				b.SetBytes(int64(len(tc.s)))
				b.ReportAllocs()
				for b.Loop() {
					_ = r.String(tc.s)
				}
			})
		}
	}
	doc := func(secret string) []byte {
		m := map[string]any{}
		for i := range 20 {
			m[fmt.Sprintf("field_%02d", i)] = fmt.Sprintf("value %d of the order, shipped to 12 Rue de la Paix", i)
		}
		m["items"] = []any{map[string]any{"sku": "SKU-1", "qty": 2}, map[string]any{"sku": "SKU-2", "qty": 1}}
		if secret != "" {
			m["auth"] = "Bearer " + secret
		}
		out, _ := json.Marshal(m)
		return out
	}
	for _, tc := range []struct {
		kind string
		b    []byte
	}{{"clean", doc("")}, {"hit", doc(benchSecrets[1])}} {
		b.Run("JSON/result-1KiB/"+tc.kind, func(b *testing.B) {
			b.SetBytes(int64(len(tc.b)))
			b.ReportAllocs()
			for b.Loop() {
				_ = r.JSON(tc.b)
			}
		})
	}
}

// BenchmarkExecutorSecrets measures a call of a tool that declared a
// secret: its result and its error are redacted on every call.
func BenchmarkExecutorSecrets(b *testing.B) {
	ctx := context.Background()
	provider := nodes.StaticSecrets{"A": benchSecrets[0], "B": benchSecrets[1], "C": benchSecrets[2]}
	ok := mustTool(b)(nodes.NewTool("lookup", "Look an order up.", func(ctx context.Context, a SearchArgs, env nodes.Env) ([]Ticket, error) {
		return []Ticket{{ID: "TKT-3", Title: "Cannot " + a.Query}, {ID: "TKT-4", Title: "Slow " + a.Query}}, nil
	}, nodes.Idempotent(), nodes.NoMemo(), nodes.Secrets("A", "B", "C")))
	bad := mustTool(b)(nodes.NewTool("fails", "Fails.", func(ctx context.Context, a SearchArgs, env nodes.Env) (string, error) {
		return "", nodes.Permanent(fmt.Errorf("GET https://api.example/v1/search?q=%s: 404 Not Found: no ticket matches", a.Query))
	}, nodes.Idempotent(), nodes.NoMemo(), nodes.Secrets("A", "B", "C")))
	ex, err := nodes.NewExecutor([]*nodes.Tool{ok, bad}, nodes.WithSecrets(provider))
	if err != nil {
		b.Fatal(err)
	}
	args := json.RawMessage(`{"query":"login","limit":10}`)
	b.Run("result", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := ex.Execute(ctx, nodes.Call{Tool: "lookup", Args: args, Scope: "t"}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("error", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := ex.Execute(ctx, nodes.Call{Tool: "fails", Args: args, Scope: "t"}); err == nil {
				b.Fatal("no error")
			}
		}
	})
}
