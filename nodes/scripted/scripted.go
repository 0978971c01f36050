package scripted

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/lockstepgo/lockstep/nodes"
)

// Errors of a script, matched with errors.Is through *TurnError.
var (
	// ErrExhausted: the model was called for a turn past the end of its
	// script.
	ErrExhausted = errors.New("scripted: the script has no turn left")
	// ErrUnexpected: a turn's Expect refused what the model was sent.
	ErrUnexpected = errors.New("scripted: the model was sent something the script did not expect")
)

// TurnError reports a call the script cannot answer. It matches Kind
// (ErrExhausted or ErrUnexpected) and unwraps to Err, the expectation's
// error.
type TurnError struct {
	Turn  int   // the turn asked for, from 1
	Turns int   // how many turns the script has
	Kind  error // ErrExhausted or ErrUnexpected
	Err   error // why the expectation failed (nil for ErrExhausted)
}

// Error names the turn.
func (e *TurnError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("scripted: turn %d of a script of %d: %v", e.Turn, e.Turns, e.Kind)
	}
	return fmt.Sprintf("scripted: turn %d of a script of %d: %v: %v", e.Turn, e.Turns, e.Kind, e.Err)
}

// Unwrap returns the expectation's error.
func (e *TurnError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, e.Kind) true.
func (e *TurnError) Is(target error) bool { return target == e.Kind }

// Turn is one answer of the script.
type Turn struct {
	// Text is the answer's text.
	Text string
	// ToolCalls are the tool calls the answer asks for.
	ToolCalls []nodes.ToolCall
	// Expect, if set, checks what the model was sent (the conversation,
	// after any system prompt, and the tools offered) before the turn
	// answers; an error fails the call with a *TurnError matching
	// ErrUnexpected. It must not modify its arguments.
	Expect func(messages []nodes.Message, tools []nodes.Definition) error
	// Err, if set, is returned as is instead of an answer, as a provider
	// failure would be.
	Err error
}

// Say is a turn that answers with text.
func Say(text string) Turn { return Turn{Text: text} }

// CallTools is a turn that answers with text (which may be empty) and
// tool calls.
func CallTools(text string, calls ...nodes.ToolCall) Turn {
	return Turn{Text: text, ToolCalls: calls}
}

// Call is a tool call with arguments given as JSON text.
func Call(id, tool, args string) nodes.ToolCall {
	return nodes.ToolCall{ID: id, Name: tool, Arguments: args}
}

// Expecting returns t with check as its Expect.
func (t Turn) Expecting(check func(messages []nodes.Message, tools []nodes.Definition) error) Turn {
	t.Expect = check
	return t
}

// Received is one call of the model, as recorded.
type Received struct {
	Turn     int // the turn it asked for, from 1
	Messages []nodes.Message
	Tools    []nodes.Definition
}

// Model answers from a script. Build one with New.
type Model struct {
	turns []Turn
	mu    sync.Mutex
	calls []Received
}

var _ nodes.Model = (*Model)(nil)

// New returns a model that answers with turns, in conversation order.
func New(turns ...Turn) *Model {
	ts := make([]Turn, len(turns))
	for i, t := range turns {
		t.ToolCalls = slices.Clone(t.ToolCalls)
		ts[i] = t
	}
	return &Model{turns: ts}
}

// Generate implements nodes.Model: it answers with the turn whose index is
// the number of assistant messages in messages. It returns a *TurnError
// when the script has no such turn or the turn's Expect refuses the call,
// the turn's Err if it has one, and ctx's error when ctx is done.
func (m *Model) Generate(ctx context.Context, messages []nodes.Message, tools []nodes.Definition) (nodes.Message, error) {
	k := 0
	for _, msg := range messages {
		if msg.Role == nodes.RoleAssistant {
			k++
		}
	}
	m.mu.Lock()
	m.calls = append(m.calls, Received{Turn: k + 1, Messages: cloneMessages(messages), Tools: cloneDefinitions(tools)})
	m.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return nodes.Message{}, err
	}
	if k >= len(m.turns) {
		return nodes.Message{}, &TurnError{Turn: k + 1, Turns: len(m.turns), Kind: ErrExhausted}
	}
	t := m.turns[k]
	if t.Expect != nil {
		if err := t.Expect(messages, tools); err != nil {
			return nodes.Message{}, &TurnError{Turn: k + 1, Turns: len(m.turns), Kind: ErrUnexpected, Err: err}
		}
	}
	if t.Err != nil {
		return nodes.Message{}, t.Err
	}
	return nodes.Message{Role: nodes.RoleAssistant, Content: t.Text, ToolCalls: slices.Clone(t.ToolCalls)}, nil
}

// Calls returns every call so far, in the order they arrived (a copy).
func (m *Model) Calls() []Received {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Received, len(m.calls))
	for i, c := range m.calls {
		out[i] = Received{Turn: c.Turn, Messages: cloneMessages(c.Messages), Tools: cloneDefinitions(c.Tools)}
	}
	return out
}

// Turns returns the length of the script.
func (m *Model) Turns() int { return len(m.turns) }

// ExpectTools is an Expect that the tools offered are exactly names, in
// order.
func ExpectTools(names ...string) func([]nodes.Message, []nodes.Definition) error {
	return func(_ []nodes.Message, tools []nodes.Definition) error {
		got := make([]string, len(tools))
		for i, d := range tools {
			got[i] = d.Name
		}
		if !slices.Equal(got, names) {
			return fmt.Errorf("tools offered are %q, want %q", got, names)
		}
		return nil
	}
}

// ExpectToolResult is an Expect that the conversation holds the result of
// tool call callID (a tool message) whose content contains substr.
func ExpectToolResult(callID, substr string) func([]nodes.Message, []nodes.Definition) error {
	return func(msgs []nodes.Message, _ []nodes.Definition) error {
		for _, m := range msgs {
			if m.Role == nodes.RoleTool && m.ToolCallID == callID {
				if !strings.Contains(m.Content, substr) {
					return fmt.Errorf("result of call %q is %s, which does not contain %q", callID, m.Content, substr)
				}
				return nil
			}
		}
		return fmt.Errorf("no result of call %q was sent", callID)
	}
}

func cloneMessages(ms []nodes.Message) []nodes.Message {
	out := make([]nodes.Message, len(ms))
	for i, m := range ms {
		m.ToolCalls = slices.Clone(m.ToolCalls)
		if m.Meta != nil {
			meta := *m.Meta
			m.Meta = &meta
		}
		out[i] = m
	}
	return out
}

func cloneDefinitions(ds []nodes.Definition) []nodes.Definition {
	out := make([]nodes.Definition, len(ds))
	for i, d := range ds {
		d.Parameters = slices.Clone(d.Parameters)
		out[i] = d
	}
	return out
}
