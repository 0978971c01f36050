package booking

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/interrupt"
	"github.com/lockstepgo/lockstep/nodes"
)

// The graph's own node (the model and tools nodes are named
// nodes.AgentModelNode and nodes.AgentToolsNode).
const ComplianceNode = "compliance"

// PriceLimitEUR is the booking total above which a human must approve.
const PriceLimitEUR = 1000

// RulePriceLimit names the approval rule that gates bookings above
// PriceLimitEUR.
const RulePriceLimit = "price_over_1000_eur"

// Approver is who decides the bookings that RulePriceLimit gates.
const Approver = "travel-desk"

// systemPrompt is what the agent is told before every turn.
const systemPrompt = "You book hotels for the travel desk. Quote the stay first with quote_hotel, then book it with book_hotel at the quoted total. " +
	"Bookings above 1000 EUR need the travel desk's approval; the runtime asks for it."

// Request is a booking request as the travel form sends it.
type Request struct {
	Guest   string `json:"guest"`
	Hotel   string `json:"hotel"`
	City    string `json:"city"`
	CheckIn string `json:"check_in"`
	Nights  int    `json:"nights"`
}

// String describes the request in one line.
func (r Request) String() string {
	return fmt.Sprintf("%s, %s, %d nights from %s, for guest %q", r.Hotel, r.City, r.Nights, r.CheckIn, r.Guest)
}

// State is the state of the booking graph: the request, an audit trail of
// the compliance review, and the agent's conversation and memo.
type State struct {
	Request  Request
	Audit    []string                   `lockstep:"append"`
	Messages []nodes.Message            `lockstep:"append"`
	Memo     map[string]nodes.MemoEntry `lockstep:"merge"`
}

// Hold is the value of the NodeInterrupt that the compliance node raises
// on a request it will not pass to the agent.
type Hold struct {
	Reason  string `json:"reason"`
	Field   string `json:"field"`
	Value   string `json:"value"`
	Matched string `json:"matched"`
}

// suspicious reports the first SQL-injection marker in s (lower-cased),
// if any. It is a demo check, not a sanitiser: the downstream API uses
// parameters anyway; compliance wants a human to look at such requests.
func suspicious(s string) (string, bool) {
	l := strings.ToLower(s)
	for _, m := range [...]string{"drop table", "delete from", "insert into", "union select", "' or ", "or 1=1", "--", ";", "/*", "xp_cmdshell"} {
		if strings.Contains(l, m) {
			return m, true
		}
	}
	return "", false
}

// Compliance is the node before the agent: it holds a request whose
// fields look like SQL injection with an *interrupt.NodeInterrupt (the
// thread then waits for a reviewer, who corrects the request with
// UpdateState and continues the run), and otherwise hands the request to
// the agent as its first user message.
func Compliance(ctx context.Context, s State) (graph.Update[State], error) {
	r := s.Request
	for _, f := range []struct{ name, value string }{{"guest", r.Guest}, {"hotel", r.Hotel}, {"city", r.City}, {"check_in", r.CheckIn}} {
		if m, bad := suspicious(f.value); bad {
			return graph.Update[State]{}, &interrupt.NodeInterrupt{Value: Hold{
				Reason: fmt.Sprintf("the %s field looks like SQL injection (it contains %q)", f.name, m),
				Field:  f.name, Value: f.value, Matched: m,
			}}
		}
	}
	msg := nodes.Message{Role: nodes.RoleUser, Content: fmt.Sprintf("Please book %s in %s for %s: %d nights from %s.", r.Hotel, r.City, r.Guest, r.Nights, r.CheckIn)}
	return graph.Set(State{Audit: []string{"compliance: cleared " + r.String()}, Messages: []nodes.Message{msg}}, "Audit", "Messages"), nil
}

// access is how the model and tool nodes read and write State.
func access() nodes.StateAccess[State] {
	return nodes.StateAccess[State]{
		Messages: func(s State) []nodes.Message { return s.Messages },
		Memo:     func(s State) map[string]nodes.MemoEntry { return s.Memo },
		Update: func(msgs []nodes.Message, memo map[string]nodes.MemoEntry) graph.Update[State] {
			fields := []string{"Messages"}
			if len(memo) > 0 {
				fields = append(fields, "Memo")
			}
			return graph.Set(State{Messages: msgs, Memo: memo}, fields...)
		},
	}
}

// QuoteArgs are the arguments of quote_hotel.
type QuoteArgs struct {
	Hotel   string `json:"hotel" description:"the hotel's name, as the guest asked for it"`
	City    string `json:"city" description:"the city of the hotel"`
	CheckIn string `json:"check_in" description:"arrival date, YYYY-MM-DD" jsonschema:"pattern=^[0-9]{4}-[0-9]{2}-[0-9]{2}$"`
	Nights  int    `json:"nights" description:"number of nights" jsonschema:"minimum=1,maximum=30"`
}

// BookArgs are the arguments of book_hotel.
type BookArgs struct {
	Guest    string `json:"guest" description:"the guest's full name"`
	Hotel    string `json:"hotel" description:"the hotel's name"`
	City     string `json:"city" description:"the city of the hotel"`
	CheckIn  string `json:"check_in" description:"arrival date, YYYY-MM-DD" jsonschema:"pattern=^[0-9]{4}-[0-9]{2}-[0-9]{2}$"`
	Nights   int    `json:"nights" description:"number of nights" jsonschema:"minimum=1,maximum=30"`
	TotalEUR int    `json:"total_eur" description:"the quoted total in euros" jsonschema:"minimum=1"`
}

// Tools returns the agent's tools over api: quote_hotel (a read,
// memoised) and book_hotel (a write through the ledger, declared
// destructive at medium risk: a booking can be cancelled, at a cost).
func Tools(api *HotelAPI) ([]*nodes.Tool, error) {
	quote, err := nodes.NewTool("quote_hotel", "Price a stay: returns the nightly rate and the total in euros.",
		func(ctx context.Context, a QuoteArgs, _ nodes.Env) (Quote, error) {
			q, err := api.Quote(ctx, a)
			return q, nodes.Permanent(err)
		}, nodes.Idempotent())
	if err != nil {
		return nil, err
	}
	book, err := nodes.NewTool("book_hotel", "Book a stay at the quoted total. Returns the confirmation.",
		func(ctx context.Context, a BookArgs, env nodes.Env) (Booking, error) {
			b, err := api.Book(ctx, a, env.IdempotencyKey())
			return b, nodes.Permanent(err)
		}, nodes.Destructive(approval.RiskMedium))
	if err != nil {
		return nil, err
	}
	return []*nodes.Tool{quote, book}, nil
}

// Rules are the approval rules: bookings above PriceLimitEUR need the
// travel desk; anything else runs (book_hotel's medium risk is below the
// default MinRisk, high).
func Rules() approval.Rules {
	return approval.Rules{
		Owner: Approver,
		ArgRules: []approval.ArgRule{func(tool string, args json.RawMessage) string {
			if tool != "book_hotel" {
				return ""
			}
			var a BookArgs
			if json.Unmarshal(args, &a) != nil || a.TotalEUR > PriceLimitEUR {
				return RulePriceLimit // unreadable arguments fail closed
			}
			return ""
		}},
	}
}

// maxTurns bounds the model calls of one run.
const maxTurns = 6

// newGraph builds the graph: START → compliance → model ⇄ tools. It is
// nodes.NewAgent's loop with a node in front of it, so it is assembled
// from the same parts (NewModelNode, NewToolNode, RouteToolCalls).
func newGraph(m nodes.Model, ex *nodes.Executor, mopts []nodes.ModelNodeOption, opts ...nodes.ToolNodeOption) (*graph.Graph[State], error) {
	acc := access()
	model, err := nodes.NewModelNode(m, ex.Definitions(), acc, append([]nodes.ModelNodeOption{nodes.WithSystemPrompt(systemPrompt)}, mopts...)...)
	if err != nil {
		return nil, err
	}
	tools, err := nodes.NewToolNode(ex, acc, opts...)
	if err != nil {
		return nil, err
	}
	return graph.New[State]().
		AddNode(ComplianceNode, Compliance).
		AddNode(nodes.AgentModelNode, model).
		AddNode(nodes.AgentToolsNode, tools).
		AddEdge(graph.START, ComplianceNode).
		AddEdge(ComplianceNode, nodes.AgentModelNode).
		AddConditionalEdges(nodes.AgentModelNode, nodes.RouteToolCalls(acc.Messages, nodes.AgentToolsNode), nodes.AgentToolsNode, graph.END).
		AddEdge(nodes.AgentToolsNode, nodes.AgentModelNode), nil
}

// recursionLimit is what maxTurns model calls, the tool steps between
// them and the compliance step take.
const recursionLimit = 2*maxTurns + 2

// GraphName is the name the booking graph is compiled with
// (graph.WithName): the lockstep CLI tells its versions apart by it.
const GraphName = "hotelbooking"

// Graph returns the booking graph for drawing (Runnable.Mermaid; the
// lockstep CLI draws the one a thread ran from the database): its tools
// have no service behind them and its model no script, so it must not be
// run. Run builds the graph it runs.
func Graph() (*graph.Graph[State], error) {
	tools, err := Tools(&HotelAPI{})
	if err != nil {
		return nil, err
	}
	ex, err := nodes.NewExecutor(tools, nodes.WithPolicy(nodes.FromRules(Rules())))
	if err != nil {
		return nil, err
	}
	return newGraph(nodes.ModelFunc(func(context.Context, []nodes.Message, []nodes.Definition) (nodes.Message, error) {
		return nodes.Message{}, fmt.Errorf("booking: the drawing graph has no model")
	}), ex, nil)
}
