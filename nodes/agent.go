package nodes

import (
	"context"
	"fmt"

	"github.com/lockstepgo/lockstep/graph"
)

// The node names of an agent graph.
const (
	AgentModelNode = "model"
	AgentToolsNode = "tools"
)

// DefaultMaxTurns is how many model calls one run of an agent may make
// when AgentOptions.MaxTurns is not set.
const DefaultMaxTurns = 25

// AgentOptions configures NewAgent. The zero value is usable.
type AgentOptions struct {
	// System is the system prompt sent before the conversation on every
	// model call. It is not stored in the state.
	System string
	// MaxTurns bounds the model calls of one run (an Invoke or a Resume;
	// default DefaultMaxTurns): the agent's recursion limit is 2×MaxTurns
	// supersteps, what MaxTurns model calls with tool steps between them
	// take. A Resume or Continue may make one call more: the runtime gives
	// a run that re-enters an interrupted step one extra superstep for it.
	// A run that needs more fails with a *graph.RecursionError
	// (graph.ErrRecursionLimit); its thread goes on from there with
	// Runnable.Continue.
	MaxTurns int
	// ToolNode configures the tool node: the approval rules requests
	// carry (WithApprovalRules), the reviewer's context
	// (WithReviewContext), the approval audit (WithOutcomeRecorder), the
	// ask limit, the clock and the parallelism.
	ToolNode []ToolNodeOption
}

// Agent is a prebuilt agent graph: a model node and a tool node in a loop
// (model ↔ tools). After the model node the run goes to the tool node
// when the last assistant message has tool calls, and ends otherwise;
// after the tool node it goes back to the model. The tools are scoped to
// the agent: the model is shown its executor's tools (Executor.Definitions)
// and the tool node runs calls through that executor only, so a call to
// any other tool is a *ScopeError the model reads as a tool result.
//
// Build one with NewAgent (over AgentState) or NewAgentFor (over a state
// of your own), add nodes to Graph if you need to, and Compile it with your
// saver. An Agent is not safe for concurrent modification; the Runnable
// that Compile returns is safe for concurrent use.
type Agent[S any] struct {
	g     *graph.Graph[S]
	limit int
	tools []Definition
}

// NewAgent returns an agent over AgentState that talks to m and runs tools
// through ex. It returns an error matching ErrInvalidConfig when m or ex is
// nil or an option is out of range.
func NewAgent(m Model, ex *Executor, opts AgentOptions) (*Agent[AgentState], error) {
	return NewAgentFor(m, ex, AgentAccess(), opts)
}

// NewAgentFor is NewAgent over a state type of your own; its messages
// field must be an append field (`lockstep:"append"`) and its memo field,
// if any, a merge field. It returns what NewAgent returns, and an error
// matching ErrInvalidConfig when acc.Messages or acc.Update is nil.
func NewAgentFor[S any](m Model, ex *Executor, acc StateAccess[S], opts AgentOptions) (*Agent[S], error) {
	if m == nil || ex == nil {
		return nil, fmt.Errorf("%w: an agent needs a model and an executor", ErrInvalidConfig)
	}
	turns := opts.MaxTurns
	switch {
	case turns == 0:
		turns = DefaultMaxTurns
	case turns < 0:
		return nil, fmt.Errorf("%w: MaxTurns %d is negative", ErrInvalidConfig, turns)
	}
	tools := ex.Definitions()
	mopts := []ModelNodeOption{withModelCaller(ex.modelCaller())}
	if opts.System != "" {
		mopts = append(mopts, WithSystemPrompt(opts.System))
	}
	model, err := NewModelNode(m, tools, acc, mopts...)
	if err != nil {
		return nil, err
	}
	tn, err := NewToolNode(ex, acc, opts.ToolNode...)
	if err != nil {
		return nil, err
	}
	g := graph.New[S]().
		AddNode(AgentModelNode, model).
		AddNode(AgentToolsNode, tn).
		AddEdge(graph.START, AgentModelNode).
		AddConditionalEdges(AgentModelNode, RouteToolCalls(acc.Messages, AgentToolsNode), AgentToolsNode, graph.END).
		AddEdge(AgentToolsNode, AgentModelNode)
	return &Agent[S]{g: g, limit: 2 * turns, tools: tools}, nil
}

// Graph returns the agent's graph, to add nodes or edges before Compile.
func (a *Agent[S]) Graph() *graph.Graph[S] { return a.g }

// RecursionLimit returns the recursion limit Compile sets: 2×MaxTurns.
func (a *Agent[S]) RecursionLimit() int { return a.limit }

// Tools returns the tool definitions the model is shown (a copy).
func (a *Agent[S]) Tools() []Definition { return cloneDefinitions(a.tools) }

// Compile compiles the agent's graph with the agent's recursion limit
// followed by opts (so graph.WithRecursionLimit in opts overrides it). It
// returns what graph.Graph.Compile returns: every problem found, joined,
// each matching graph.ErrInvalidGraph.
func (a *Agent[S]) Compile(opts ...graph.Option) (*graph.Runnable[S], error) {
	return a.g.Compile(append([]graph.Option{graph.WithRecursionLimit(a.limit)}, opts...)...)
}

// RouteToolCalls returns the router after a model node: to the node named
// tools when the last message is an assistant message with tool calls
// (LastToolCalls), and to graph.END otherwise.
func RouteToolCalls[S any](messages func(S) []Message, tools string) graph.Router[S] {
	return func(ctx context.Context, s S) ([]string, error) {
		if len(LastToolCalls(messages(s))) > 0 {
			return []string{tools}, nil
		}
		return []string{graph.END}, nil
	}
}
