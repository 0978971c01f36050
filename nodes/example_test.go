package nodes_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/nodes"
	"github.com/lockstepgo/lockstep/nodes/ledger"
	"github.com/lockstepgo/lockstep/nodes/scripted"
	"github.com/lockstepgo/lockstep/retry"
)

// A write tool with the five parts: name, description, argument schema (from
// the struct), a body that gets its credential from the runtime, and a
// structured result; plus what it declares at registration.
func ExampleNewTool() {
	type RefundArgs struct {
		OrderID string `json:"order_id" description:"the order to refund"`
		Cents   int    `json:"cents" jsonschema:"minimum=1"`
	}
	type Refund struct {
		ID    string `json:"id"`
		Cents int    `json:"cents"`
	}
	refund, err := nodes.NewTool("refund",
		"Refund part or all of an order. Call it only after the customer asked for a refund. Returns the refund's ID.",
		func(ctx context.Context, a RefundArgs, env nodes.Env) (Refund, error) {
			key, _ := env.Secret("PAYMENTS_KEY") // key.Reveal() goes into the API call
			_ = key
			// Send env.IdempotencyKey() as the API's Idempotency-Key header.
			return Refund{ID: "re_1", Cents: a.Cents}, nil
		},
		nodes.Destructive(approval.RiskHigh),
		nodes.Timeout(10*time.Second), // above the API's worst latency
		nodes.Retry(retry.Policy{MaxAttempts: 4, Initial: 500 * time.Millisecond, Max: 10 * time.Second, Jitter: 0.2}),
		nodes.NaturalKey(func(a RefundArgs) string { return a.OrderID }),
		nodes.Secrets("PAYMENTS_KEY"),
	)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(refund.Name())
	fmt.Println(string(refund.Schema()))
	// Output:
	// refund
	// {"type":"object","properties":{"cents":{"type":"integer","minimum":1},"order_id":{"type":"string","description":"the order to refund"}},"required":["order_id","cents"],"additionalProperties":false}
}

// The executor's questions: a read runs once and its respelled repeat is a
// cache hit; a destructive call is blocked until a human approves exactly
// these arguments; a repeat of the write is replayed from the ledger.
func ExampleExecutor_Execute() {
	type Query struct {
		Q string `json:"q"`
	}
	type Close struct {
		ID string `json:"id"`
	}
	search, _ := nodes.NewTool("search", "Search tickets. Returns their IDs.",
		func(ctx context.Context, a Query, env nodes.Env) ([]string, error) { return []string{"TKT-3"}, nil }, nodes.Idempotent())
	closeTicket, _ := nodes.NewTool("close_ticket", "Close a ticket. Returns its status.",
		func(ctx context.Context, a Close, env nodes.Env) (string, error) { return a.ID + " closed", nil }, nodes.Destructive(approval.RiskHigh))
	l, _ := ledger.NewMemory(ledger.Options{})
	ex, _ := nodes.NewExecutor([]*nodes.Tool{search, closeTicket}, nodes.WithLedger(l))
	ctx := context.Background()
	memo := nodes.NewMemo(nil)

	r, _ := ex.Execute(ctx, nodes.Call{Tool: "search", Args: json.RawMessage(`{"q":"login"}`), Scope: "thread-1", Memo: memo})
	fmt.Println(r.Status, string(r.Output))
	r, _ = ex.Execute(ctx, nodes.Call{Tool: "search", Args: json.RawMessage(` { "q" : "login" } `), Scope: "thread-1", Memo: memo})
	fmt.Println(r.Status, string(r.Output))

	args := json.RawMessage(`{"id":"TKT-3"}`)
	_, err := ex.Execute(ctx, nodes.Call{Tool: "close_ticket", Args: args, Scope: "thread-1"})
	var cr *nodes.ConfirmationRequired
	if errors.As(err, &cr) {
		fmt.Println("blocked:", cr.Tool, string(cr.CallArgs))
	}
	ok := approval.Decision{Outcome: approval.Approved, Reviewer: "alice", ArgsHash: cr.ArgsHash}
	r, _ = ex.Execute(ctx, nodes.Call{Tool: "close_ticket", Args: args, Scope: "thread-1", Approval: &ok})
	fmt.Println(r.Status, string(r.Output))
	r, _ = ex.Execute(ctx, nodes.Call{Tool: "close_ticket", Args: args, Scope: "thread-1", Approval: &ok})
	fmt.Println(r.Status, r.Replayed, string(r.Output))
	// Output:
	// executed ["TKT-3"]
	// cache_hit ["TKT-3"]
	// blocked: close_ticket {"id":"TKT-3"}
	// executed "TKT-3 closed"
	// replayed true "TKT-3 closed"
}

// The tool node in a graph: a gated call pauses the run with an approval
// request; resuming with the decision runs exactly the approved call once.
func ExampleToolNode() {
	type Close struct {
		ID string `json:"id"`
	}
	closeTicket, _ := nodes.NewTool("close_ticket", "Close a ticket. Returns its status.",
		func(ctx context.Context, a Close, env nodes.Env) (string, error) { return a.ID + " closed", nil }, nodes.Destructive(approval.RiskHigh))
	ex, _ := nodes.NewExecutor([]*nodes.Tool{closeTicket})
	tools, _ := nodes.ToolNode(ex)
	// A stand-in for the model: it asks for the close once, then answers.
	model := func(ctx context.Context, s nodes.AgentState) (graph.Update[nodes.AgentState], error) {
		m := nodes.Message{Role: nodes.RoleAssistant, Content: "The ticket is closed."}
		if len(s.Messages) == 1 {
			m = nodes.Message{Role: nodes.RoleAssistant, Content: "The user confirmed the fix.",
				ToolCalls: []nodes.ToolCall{{ID: "call_1", Name: "close_ticket", Arguments: `{"id":"TKT-3"}`}}}
		}
		return graph.Set(nodes.AgentState{Messages: []nodes.Message{m}}, "Messages"), nil
	}
	g := graph.New[nodes.AgentState]().
		AddNode("model", model).AddNode("tools", tools).
		AddEdge(graph.START, "model").
		AddConditionalEdges("model", func(ctx context.Context, s nodes.AgentState) ([]string, error) {
			if len(nodes.LastToolCalls(s.Messages)) > 0 {
				return []string{"tools"}, nil
			}
			return []string{graph.END}, nil
		}, "tools", graph.END).
		AddEdge("tools", "model")
	r, _ := g.Compile(graph.WithSaver(checkpoint.NewMemorySaver(nil)))
	ctx := context.Background()

	res, _ := r.Invoke(ctx, "t1", graph.Set(nodes.AgentState{Messages: []nodes.Message{{Role: nodes.RoleUser, Content: "close TKT-3"}}}, "Messages"))
	req, _, _ := approval.ParseRequest(res.Interrupts[0].Value)
	fmt.Println(res.Status, res.Next, req.Tool, string(req.Args), req.Rationale)

	// A reviewer's verdict is recorded by an approval store (a SQLStore
	// next to the checkpoints in production); the thread resumes with the
	// recorded decision, which the tool node requires.
	store := approval.NewMemoryStore(nil)
	dec, err := store.Decide(ctx, approval.Item{ID: res.Interrupts[0].ID, Thread: "t1", Request: req}, approval.Verdict{Outcome: approval.Approved, Reviewer: "alice"})
	if err != nil {
		fmt.Println(err)
		return
	}
	res, _ = r.Resume(ctx, "t1", graph.Command[nodes.AgentState]{Resume: dec})
	for _, m := range res.Values.Messages[2:] {
		fmt.Println(m.Role, m.Content)
	}
	// Output:
	// waiting [tools] close_ticket {"id":"TKT-3"} The user confirmed the fix.
	// tool {"status":"executed","result":"TKT-3 closed"}
	// assistant The ticket is closed.
}

// Errors are classified by type, through wrapping and joins.
func ExampleClassify() {
	fmt.Println(nodes.Classify(&nodes.HTTPError{Status: 503}))
	fmt.Println(nodes.Classify(fmt.Errorf("lookup: %w", &nodes.HTTPError{Status: 404})))
	fmt.Println(nodes.Classify(errors.Join(&nodes.HTTPError{Status: 429}, &nodes.HTTPError{Status: 401})))
	fmt.Println(nodes.Classify(errors.New("connection reset")))
	fmt.Println(nodes.Classify(nodes.Transient(errors.New("connection reset"))))
	// Output:
	// transient
	// permanent
	// permanent
	// unclassified
	// transient
}

// An agent on a scripted model: the model searches, then asks to close the
// ticket; the close waits for a human; approved, it runs once and the model
// answers. The same code runs with a real model (FromLangchaingo).
func ExampleNewAgent() {
	type Query struct {
		Q string `json:"q"`
	}
	type Close struct {
		ID string `json:"id"`
	}
	closes := 0
	search, _ := nodes.NewTool("search_tickets", "Search tickets by words in their titles. Returns their IDs.",
		func(ctx context.Context, a Query, env nodes.Env) ([]string, error) { return []string{"TKT-3"}, nil }, nodes.Idempotent())
	closeTicket, _ := nodes.NewTool("close_ticket", "Close a ticket by ID. Returns its status.",
		func(ctx context.Context, a Close, env nodes.Env) (string, error) {
			closes++
			return a.ID + " closed", nil
		},
		nodes.Destructive(approval.RiskHigh))
	ex, _ := nodes.NewExecutor([]*nodes.Tool{search, closeTicket})

	model := scripted.New(
		scripted.CallTools("Let me find it.", scripted.Call("c1", "search_tickets", `{"q":"login"}`)),
		scripted.CallTools("TKT-3 is the login ticket; closing it.", scripted.Call("c2", "close_ticket", `{"id":"TKT-3"}`)),
		scripted.Say("TKT-3 is closed."),
	)
	agent, _ := nodes.NewAgent(model, ex, nodes.AgentOptions{System: "You are a support agent."})
	r, _ := agent.Compile(graph.WithSaver(checkpoint.NewMemorySaver(nil)))
	ctx := context.Background()

	res, _ := r.Invoke(ctx, "t1", graph.Set(nodes.AgentState{Messages: []nodes.Message{{Role: nodes.RoleUser, Content: "find the login ticket and close it"}}}, "Messages"))
	req, _, _ := approval.ParseRequest(res.Interrupts[0].Value)
	fmt.Println(res.Status, res.Next, req.Kind, req.Tool, string(req.Args))

	store := approval.NewMemoryStore(nil) // a SQLStore in production
	dec, err := store.Decide(ctx, approval.Item{ID: res.Interrupts[0].ID, Thread: "t1", Request: req}, approval.Verdict{Outcome: approval.Approved, Reviewer: "alice"})
	if err != nil {
		fmt.Println(err)
		return
	}
	res, _ = r.Resume(ctx, "t1", graph.Command[nodes.AgentState]{ResumeByID: map[string]any{dec.ID: dec}})
	for _, m := range res.Values.Messages {
		fmt.Println(m.Role, m.Content)
	}
	fmt.Println(res.Status, "closes:", closes, "model calls:", len(model.Calls()))
	// Output:
	// waiting [tools] gate close_ticket {"id":"TKT-3"}
	// user find the login ticket and close it
	// assistant Let me find it.
	// tool {"status":"executed","result":["TKT-3"]}
	// assistant TKT-3 is the login ticket; closing it.
	// tool {"status":"executed","result":"TKT-3 closed"}
	// assistant TKT-3 is closed.
	// done closes: 1 model calls: 3
}
