package refunds

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/examples/internal/demo"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/nodes"
	"github.com/lockstepgo/lockstep/nodes/scripted"
)

// Approver is who decides refunds.
const Approver = "payments-team"

// TTL is how long a refund request waits for a decision before it
// expires (and becomes a rejection).
const TTL = 2 * time.Hour

// systemPrompt is what the agent is told before every turn.
const systemPrompt = "You handle refund requests for the shop. Look the order up with lookup_order, then ask for the refund with issue_refund, " +
	"saying why. Every refund needs the payments team's approval; the runtime asks for it. Tell the customer plainly what happened."

// LookupArgs are the arguments of lookup_order.
type LookupArgs struct {
	OrderID string `json:"order_id" description:"the order, like A-1001" jsonschema:"pattern=^A-[0-9]+$"`
}

// RefundArgs are the arguments of issue_refund.
type RefundArgs struct {
	OrderID     string `json:"order_id" description:"the order to refund, like A-1001" jsonschema:"pattern=^A-[0-9]+$"`
	AmountCents int    `json:"amount_cents" description:"the amount to pay back, in euro cents" jsonschema:"minimum=1"`
	Reason      string `json:"reason" description:"why the customer gets the refund" jsonschema:"minLength=1,maxLength=300"`
}

// Tools returns the agent's tools over shop: lookup_order (a read) and
// issue_refund (destructive, high risk: money leaves the shop).
func Tools(shop *Shop) ([]*nodes.Tool, error) {
	lookup, err := nodes.NewTool("lookup_order", "Look an order up: customer, item, amount and what was refunded already.",
		func(ctx context.Context, a LookupArgs, _ nodes.Env) (Order, error) {
			o, err := shop.Order(ctx, a.OrderID)
			return o, nodes.Permanent(err)
		}, nodes.Idempotent())
	if err != nil {
		return nil, err
	}
	refund, err := nodes.NewTool("issue_refund", "Pay money back to the customer of an order. Needs the payments team's approval.",
		func(ctx context.Context, a RefundArgs, env nodes.Env) (Payment, error) {
			p, err := shop.Refund(ctx, a.OrderID, a.AmountCents, a.Reason, env.IdempotencyKey())
			return p, nodes.Permanent(err)
		}, nodes.Destructive(approval.RiskHigh))
	if err != nil {
		return nil, err
	}
	return []*nodes.Tool{lookup, refund}, nil
}

// Rules gate every refund (high risk) for the payments team, for TTL.
func Rules() approval.Rules { return approval.Rules{Owner: Approver, TTL: TTL} }

// ReviewContext is what a reviewer sees next to a refund request: the
// customer, the order and the customer's history with the shop.
type ReviewContext struct {
	Customer string  `json:"customer"`
	Email    string  `json:"email"`
	Order    Order   `json:"order"`
	History  History `json:"history"`
}

// reviewContext returns the tool node's reviewer-context function over
// shop (nodes.WithReviewContext).
func reviewContext(shop *Shop) func(ctx context.Context, call nodes.ToolCall, _ []nodes.Message) (json.RawMessage, error) {
	return func(ctx context.Context, call nodes.ToolCall, _ []nodes.Message) (json.RawMessage, error) {
		var a RefundArgs
		if err := json.Unmarshal([]byte(call.Arguments), &a); err != nil {
			return nil, fmt.Errorf("refunds: reviewer context: %w", err)
		}
		o, err := shop.Order(ctx, a.OrderID)
		if err != nil {
			return nil, err
		}
		h, err := shop.History(ctx, o.Customer)
		if err != nil {
			return nil, err
		}
		return json.Marshal(ReviewContext{Customer: o.Customer, Email: o.Email, Order: o, History: h})
	}
}

// story is one refund request: who asks, for which order, and what the
// agent proposes.
type story struct {
	thread, ask                   string
	order, customer, item, reason string
	amountCents                   int
}

// stories are the example's two refund requests.
func stories() []story {
	return []story{
		{thread: ThreadPaid, order: "A-1001", customer: "Mia Chen", item: "wireless headphones", amountCents: 8990, reason: "the parcel was lost in transit",
			ask: "Hi, this is Mia Chen. My order A-1001 never arrived: the carrier says the parcel was lost. Can I have my money back?"},
		{thread: ThreadExpired, order: "A-1002", customer: "Leo Park", item: "espresso machine", amountCents: 24900, reason: "the machine arrived with a cracked water tank",
			ask: "Hello, Leo Park here. The espresso machine from order A-1002 arrived with a cracked water tank. I would like a refund."},
	}
}

// script is the model's script for s: look the order up, ask for the
// refund with a rationale, then tell the customer what became of it.
func (s story) script() nodes.Model {
	amount := Euros(s.amountCents)
	return demo.Branch([]scripted.Turn{
		scripted.CallTools(fmt.Sprintf("Let me look up order %s.", s.order),
			scripted.Call("lookup-1", "lookup_order", fmt.Sprintf(`{"order_id":%q}`, s.order))),
		scripted.CallTools(fmt.Sprintf("Order %s (%s, %s) qualifies for a refund: %s. %s has not been refunded for it before, so I propose a full refund of %s.",
			s.order, s.item, amount, s.reason, s.customer, amount),
			scripted.Call("refund-1", "issue_refund", fmt.Sprintf(`{"order_id":%q,"amount_cents":%d,"reason":%q}`, s.order, s.amountCents, s.reason))).
			Expecting(scripted.ExpectToolResult("lookup-1", fmt.Sprintf(`"amount_cents":%d`, s.amountCents))),
	}, map[nodes.Status][]scripted.Turn{
		nodes.StatusExecuted: {scripted.Say(fmt.Sprintf("Good news, %s: your refund of %s for order %s has been issued. It should reach your card within 5 business days.", s.customer, amount, s.order))},
		nodes.StatusRejected: {scripted.Say(fmt.Sprintf("I'm sorry, %s: our payments team did not approve a refund for order %s, so none was issued. They will email you the reason.", s.customer, s.order))},
		nodes.StatusExpired: {scripted.Say(fmt.Sprintf("I'm sorry, %s: I could not get your refund of %s for order %s approved in time, so it has not been issued. "+
			"I have passed your case to our payments team, who will contact you within one business day.", s.customer, amount, s.order))},
	})
}

// maxTurns bounds the model calls of one run.
const maxTurns = 6

// newAgent is the prebuilt agent (model ⇄ tools).
func newAgent(m nodes.Model, ex *nodes.Executor, opts ...nodes.ToolNodeOption) (*nodes.Agent[nodes.AgentState], error) {
	return nodes.NewAgent(m, ex, nodes.AgentOptions{System: systemPrompt, MaxTurns: maxTurns, ToolNode: opts})
}

// GraphName is the name the refund agent is compiled with
// (graph.WithName): the lockstep CLI tells its versions apart by it.
const GraphName = "refund"

// Graph returns the agent's graph for drawing (Runnable.Mermaid): its
// tools have no shop behind them and its model no script, so it must not
// be run. Open builds the graph it runs.
func Graph() (*graph.Graph[nodes.AgentState], error) {
	tools, err := Tools(&Shop{})
	if err != nil {
		return nil, err
	}
	ex, err := nodes.NewExecutor(tools, nodes.WithPolicy(nodes.FromRules(Rules())))
	if err != nil {
		return nil, err
	}
	a, err := newAgent(nodes.ModelFunc(func(context.Context, []nodes.Message, []nodes.Definition) (nodes.Message, error) {
		return nodes.Message{}, fmt.Errorf("refunds: the drawing graph has no model")
	}), ex)
	if err != nil {
		return nil, err
	}
	return a.Graph(), nil
}
