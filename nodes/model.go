package nodes

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/internal/hookcall"
	"github.com/lockstepgo/lockstep/internal/safe"
	"github.com/lockstepgo/lockstep/observe"
)

// Model is the chat model an agent talks to: lockstep's own small
// interface, so that nodes, agents and examples never depend on a client
// library's types. FromLangchaingo adapts a langchaingo llms.Model; package
// nodes/scripted answers from a script, offline.
//
// Generate returns the model's next message for the conversation, given
// the tools it may call (their names, descriptions and JSON Schemas). The
// returned message's Content and ToolCalls are used (its Role is taken to
// be RoleAssistant; anything else is ignored). Generate returns an error
// when the model could not answer; the model node turns it into a
// *ModelError. Implementations must be safe for concurrent use, and must
// not keep or modify messages or tools.
type Model interface {
	Generate(ctx context.Context, messages []Message, tools []Definition) (Message, error)
}

// ModelFunc adapts a function to Model.
type ModelFunc func(ctx context.Context, messages []Message, tools []Definition) (Message, error)

// Generate calls f and returns its message and error.
func (f ModelFunc) Generate(ctx context.Context, messages []Message, tools []Definition) (Message, error) {
	return f(ctx, messages, tools)
}

// ModelNodeOption configures a model node.
type ModelNodeOption func(*modelNode)

// WithSystemPrompt sends text as a system message before the conversation
// on every model call. It is not stored in the state.
func WithSystemPrompt(text string) ModelNodeOption {
	return func(n *modelNode) { n.system = text }
}

type modelNode struct {
	model  Model
	tools  []Definition
	system string
	obs    *hookcall.Caller // the observer; nil without one
	calls  atomic.Int64     // model calls made, numbering streamed messages
}

// WithModelObserver reports every call of the node's model to h
// (observe.KindModel), with the model, provider and token counts its
// client reports (ReportUsage: the langchaingo adapter does). A prebuilt
// agent reports to its executor's observer (WithObserver) without it.
// A panic in h loses the event; a call still running when the node's
// context ends is given up on, and h is not called again.
func WithModelObserver(h observe.Hook) ModelNodeOption {
	return func(n *modelNode) { n.obs = hookcall.New(h, nil, nil) }
}

// withModelCaller is WithModelObserver with an executor's caller (its
// abandoned counter and logger).
func withModelCaller(c *hookcall.Caller) ModelNodeOption {
	return func(n *modelNode) {
		if c != nil {
			n.obs = c
		}
	}
}

// Usage is what one model call used, as the model's client reports it.
type Usage struct {
	Provider string // the provider, as OpenTelemetry's gen_ai.provider.name spells it: "openai", "anthropic", ...
	Model    string // the model the call asked for
	// Tokens reports that the client counted tokens: InputTokens (the
	// prompt's) and OutputTokens (the answer's).
	Tokens       bool
	InputTokens  int
	OutputTokens int
}

// usageKey carries a model call's *usageBox.
type usageKey struct{}

// usageBox receives what ReportUsage reports for one call.
type usageBox struct {
	mu sync.Mutex
	u  Usage
	ok bool
}

// ReportUsage tells the model node that called Model.Generate with ctx
// (or a context derived from it) what the call used, for its observer
// (WithModelObserver). A Model implementation calls it before Generate
// returns; FromLangchaingo's adapter does. A later report replaces an
// earlier one. Outside an observed model call it does nothing.
func ReportUsage(ctx context.Context, u Usage) {
	b, _ := ctx.Value(usageKey{}).(*usageBox)
	if b == nil {
		return
	}
	b.mu.Lock()
	b.u, b.ok = u, true
	b.mu.Unlock()
}

// callModel calls the model, observed when the node has an observer.
func (n *modelNode) callModel(ctx context.Context, node string, msgs []Message) (Message, error) {
	if graph.Streaming(ctx) {
		ctx = streamCall(ctx, node, int(n.calls.Add(1)))
	}
	if n.obs == nil {
		return n.model.Generate(ctx, msgs, cloneDefinitions(n.tools))
	}
	e := observe.Event{Kind: observe.KindModel, Node: node}
	if info, ok := graph.TaskFrom(ctx); ok {
		e.Thread, e.Run, e.Step, e.TaskID = info.Thread, info.Run, info.Step, info.TaskID
	}
	sp := n.obs.Start(ctx, e)
	box := &usageBox{}
	out, err := n.model.Generate(context.WithValue(sp.Ctx, usageKey{}, box), msgs, cloneDefinitions(n.tools))
	if !sp.Open() {
		return out, err
	}
	box.mu.Lock()
	if box.ok {
		e.Model, e.Provider = box.u.Model, box.u.Provider
		if box.u.Tokens {
			e.Usage, e.InputTokens, e.OutputTokens = true, box.u.InputTokens, box.u.OutputTokens
		}
	}
	box.mu.Unlock()
	e.Outcome = observe.OutcomeDone
	if err != nil {
		e.Outcome = observe.OutcomeFailed
		e.ErrorType = safe.TypeName(err)
		if txt, p := safe.Text(err); p == nil {
			e.Error = txt
		} else {
			e.Error = "the Error method of the model's error panicked: " + p.String()
		}
	}
	n.obs.End(sp, e)
	return out, err
}

// NewModelNode returns a graph node that sends the conversation
// (acc.Messages, after the system prompt if one is set) and tools to m and
// appends its answer, one assistant message, through acc.Update (with a
// nil memo). Tool calls without an ID get one ("call_<turn>_<index>",
// unique in the thread), and empty arguments become "{}"; the arguments
// are otherwise passed on as the model sent them, for the executor to
// validate (a bad argument becomes a tool result the model can fix, not a
// node failure).
//
// The node fails with a *ModelError naming the node when m returns an
// error, an answer with neither text nor tool calls (ErrEmptyAnswer), or
// a malformed one (ErrMalformedAnswer: a tool call without a name, text
// that is not valid UTF-8): never with a silent empty answer. NewModelNode returns an error matching ErrInvalidConfig
// when m, acc.Messages or acc.Update is nil or two tools share a name.
func NewModelNode[S any](m Model, tools []Definition, acc StateAccess[S], opts ...ModelNodeOption) (graph.NodeFunc[S], error) {
	if m == nil || acc.Messages == nil || acc.Update == nil {
		return nil, fmt.Errorf("%w: model node needs a model and StateAccess.Messages and Update", ErrInvalidConfig)
	}
	n := &modelNode{model: m, tools: cloneDefinitions(tools)}
	seen := map[string]bool{}
	for _, d := range n.tools {
		if seen[d.Name] {
			return nil, fmt.Errorf("%w: two tools named %q for the model", ErrInvalidConfig, d.Name)
		}
		seen[d.Name] = true
	}
	for _, o := range opts {
		if o != nil {
			o(n)
		}
	}
	return func(ctx context.Context, s S) (graph.Update[S], error) {
		msg, err := n.generate(ctx, acc.Messages(s))
		if err != nil {
			return graph.Update[S]{}, err
		}
		return acc.Update([]Message{msg}, nil), nil
	}, nil
}

// ModelNode is NewModelNode over AgentState. It returns an error matching
// ErrInvalidConfig when m is nil or two tools share a name.
func ModelNode(m Model, tools []Definition, opts ...ModelNodeOption) (graph.NodeFunc[AgentState], error) {
	return NewModelNode(m, tools, AgentAccess(), opts...)
}

func (n *modelNode) generate(ctx context.Context, history []Message) (Message, error) {
	node := ""
	if info, ok := graph.TaskFrom(ctx); ok {
		node = info.Node
	}
	msgs := make([]Message, 0, len(history)+1)
	if n.system != "" {
		msgs = append(msgs, Message{Role: RoleSystem, Content: n.system})
	}
	for _, m := range history {
		m.ToolCalls = cloneToolCalls(m.ToolCalls)
		m.Meta = nil // for the runtime and people, never for the model
		msgs = append(msgs, m)
	}
	out, err := n.callModel(ctx, node, msgs)
	if err != nil {
		return Message{}, &ModelError{Node: node, Err: err}
	}
	turn := 0
	for _, m := range history {
		if m.Role == RoleAssistant {
			turn++
		}
	}
	if !utf8.ValidString(out.Content) {
		return Message{}, &ModelError{Node: node, Err: fmt.Errorf("%w: its text is not valid UTF-8", ErrMalformedAnswer)}
	}
	msg := Message{Role: RoleAssistant, Content: out.Content}
	given := map[string]bool{}
	for _, tc := range out.ToolCalls {
		given[tc.ID] = true
	}
	for i, tc := range out.ToolCalls {
		switch {
		case tc.Name == "":
			return Message{}, &ModelError{Node: node, Err: fmt.Errorf("%w: tool call %d (ID %s) names no tool", ErrMalformedAnswer, i, quote(tc.ID))}
		case !utf8.ValidString(tc.Name) || !utf8.ValidString(tc.ID) || !utf8.ValidString(tc.Arguments):
			return Message{}, &ModelError{Node: node, Err: fmt.Errorf("%w: tool call %d (ID %s) is not valid UTF-8", ErrMalformedAnswer, i, quote(tc.ID))}
		}
		if tc.ID == "" {
			// Unique in the thread: the turn and position, and a suffix
			// if the model itself sent that ID in this answer.
			id := "call_" + strconv.Itoa(turn) + "_" + strconv.Itoa(i)
			for n := 1; given[id]; n++ {
				id = "call_" + strconv.Itoa(turn) + "_" + strconv.Itoa(i) + "_" + strconv.Itoa(n)
			}
			tc.ID = id
			given[id] = true
		}
		if tc.Arguments == "" {
			tc.Arguments = "{}"
		}
		msg.ToolCalls = append(msg.ToolCalls, tc)
	}
	if msg.Content == "" && len(msg.ToolCalls) == 0 {
		return Message{}, &ModelError{Node: node, Err: ErrEmptyAnswer}
	}
	return msg, nil
}

func cloneDefinitions(ds []Definition) []Definition {
	if ds == nil {
		return nil
	}
	out := make([]Definition, len(ds))
	for i, d := range ds {
		d.Parameters = append([]byte(nil), d.Parameters...)
		out[i] = d
	}
	return out
}

func cloneToolCalls(tcs []ToolCall) []ToolCall {
	if tcs == nil {
		return nil
	}
	return append([]ToolCall(nil), tcs...)
}

// Model node errors.
var (
	// ErrModel matches every *ModelError.
	ErrModel = errors.New("nodes: model failed")
	// ErrEmptyAnswer: the model answered with neither text nor tool
	// calls. Matched through a *ModelError.
	ErrEmptyAnswer = errors.New("nodes: the model's answer is empty")
	// ErrMalformedAnswer: the model's answer cannot be used: a tool call
	// without a tool name, or text (content, tool name, call ID or
	// arguments) that is not valid UTF-8. Matched through a *ModelError.
	ErrMalformedAnswer = errors.New("nodes: the model's answer is malformed")
	// ErrBadMessage: a message of the conversation cannot be sent to the
	// model (an unknown role, or a tool message that answers no call).
	// Model adapters return it, wrapped.
	ErrBadMessage = errors.New("nodes: message cannot be sent to the model")
	// ErrClientLimit: the model's client library cannot carry the call
	// (its tools, a tool call or a tool result) without losing part of it,
	// so the adapter refused it before calling the client. Matches
	// *ClientLimitError.
	ErrClientLimit = errors.New("nodes: the model client cannot carry the call")
)

// ClientLimitError reports a call that a model's client library cannot
// carry faithfully, refused before the client was called: for example
// tools bound to langchaingo's Ollama client, which would answer without
// them. It names the provider and matches ErrClientLimit.
type ClientLimitError struct {
	Provider string // the client's provider, for example "ollama"
	Model    string // the model named in the adapter's call options ("" if none)
	What     string // what the client cannot carry, for example "the tool calls of message 3"
}

// Error names the provider, the model if known, and what cannot be
// carried.
func (e *ClientLimitError) Error() string {
	model := ""
	if e.Model != "" {
		model = " (model " + quote(e.Model) + ")"
	}
	return fmt.Sprintf("nodes: the %s client%s cannot carry %s; use a client that can, or implement Model for the provider", e.Provider, model, e.What)
}

// Is makes errors.Is(err, ErrClientLimit) true.
func (e *ClientLimitError) Is(target error) bool { return target == ErrClientLimit }

// ModelError reports a model node that got no usable answer: the model's
// error (a provider failure, a cancelled context, a scripted model's
// *scripted.TurnError), or an answer the node refuses (ErrEmptyAnswer,
// ErrMalformedAnswer). It names the graph node and matches ErrModel; Err is
// kept for errors.Is and errors.As.
type ModelError struct {
	Node string // the graph node ("" outside a run)
	Err  error
}

// Error names the node and the cause.
func (e *ModelError) Error() string {
	return fmt.Sprintf("nodes: model node %q: %v", e.Node, e.Err)
}

// Unwrap returns the cause.
func (e *ModelError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrModel) true.
func (e *ModelError) Is(target error) bool { return target == ErrModel }
