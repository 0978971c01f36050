package helpdesk

import (
	"context"
	"fmt"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/nodes"
)

// Approver is who decides closes.
const Approver = "support-leads"

// systemPrompt is what the agent is told before every turn.
const systemPrompt = "You are a support agent. Find tickets with search_tickets and close them with close_ticket. " +
	"Closing a ticket needs a support lead's approval; the runtime asks for it."

// SearchArgs are the arguments of search_tickets.
type SearchArgs struct {
	Query string `json:"query" description:"words to look for in ticket subjects" jsonschema:"minLength=1,maxLength=200"`
}

// CloseArgs are the arguments of close_ticket.
type CloseArgs struct {
	TicketID   string `json:"ticket_id" description:"the ticket to close, like TKT-3" jsonschema:"pattern=^TKT-[0-9]+$"`
	Resolution string `json:"resolution" description:"how the problem was solved, for the customer" jsonschema:"minLength=1,maxLength=500"`
}

// Tools returns the agent's tools over desk: search_tickets (a read,
// memoised per thread) and close_ticket (destructive, high risk: closing
// tells the customer the problem is solved).
func Tools(desk *Helpdesk) ([]*nodes.Tool, error) {
	search, err := nodes.NewTool("search_tickets", "Search tickets by words in their subject. Returns the matching tickets.",
		func(ctx context.Context, a SearchArgs, _ nodes.Env) ([]Ticket, error) {
			return desk.Search(ctx, a.Query)
		}, nodes.Idempotent())
	if err != nil {
		return nil, err
	}
	closeTool, err := nodes.NewTool("close_ticket", "Close a ticket as resolved, with the resolution the customer will read.",
		func(ctx context.Context, a CloseArgs, env nodes.Env) (Closure, error) {
			c, err := desk.Close(ctx, a.TicketID, a.Resolution, env.IdempotencyKey())
			return c, nodes.Permanent(err)
		}, nodes.Destructive(approval.RiskHigh))
	if err != nil {
		return nil, err
	}
	return []*nodes.Tool{search, closeTool}, nil
}

// Rules gate every call at high risk or above (close_ticket) for the
// support leads.
func Rules() approval.Rules { return approval.Rules{Owner: Approver} }

// maxTurns bounds the model calls of one run.
const maxTurns = 8

// newAgent is the prebuilt agent (model ⇄ tools) over desk's tools.
func newAgent(m nodes.Model, ex *nodes.Executor, opts ...nodes.ToolNodeOption) (*nodes.Agent[nodes.AgentState], error) {
	return nodes.NewAgent(m, ex, nodes.AgentOptions{System: systemPrompt, MaxTurns: maxTurns, ToolNode: opts})
}

// GraphName is the name the support agent is compiled with
// (graph.WithName): the lockstep CLI tells its versions apart by it.
const GraphName = "support"

// Graph returns the agent's graph for drawing (Runnable.Mermaid): its
// tools have no helpdesk behind them and its model no script, so it must
// not be run. Run builds the graph it runs.
func Graph() (*graph.Graph[nodes.AgentState], error) {
	tools, err := Tools(&Helpdesk{})
	if err != nil {
		return nil, err
	}
	ex, err := nodes.NewExecutor(tools, nodes.WithPolicy(nodes.FromRules(Rules())))
	if err != nil {
		return nil, err
	}
	a, err := newAgent(nodes.ModelFunc(func(context.Context, []nodes.Message, []nodes.Definition) (nodes.Message, error) {
		return nodes.Message{}, fmt.Errorf("helpdesk: the drawing graph has no model")
	}), ex)
	if err != nil {
		return nil, err
	}
	return a.Graph(), nil
}
