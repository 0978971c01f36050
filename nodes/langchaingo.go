package nodes

// This is the only file of lockstep that imports langchaingo.

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/tmc/langchaingo/llms"
)

// FromLangchaingo adapts a langchaingo model (llms.Model) to Model. It is
// tested with langchaingo's OpenAI client, which also serves every
// OpenAI-compatible endpoint. The Anthropic and Ollama clients of
// langchaingo v0.1.14 do not carry tool calls faithfully (Anthropic's
// sends only the first part of an assistant message and answers with one
// choice per content block; Ollama's has no tools), so an agent that calls
// tools through them loses calls: use an OpenAI-compatible endpoint, or
// implement Model for the provider. Every call binds the tools as
// langchaingo function tools (llms.WithTools) with their JSON Schemas,
// after opts (model name, temperature, ...); maps the conversation to
// llms.MessageContent (system, human, ai and tool messages; an assistant's
// tool calls as llms.ToolCall parts, tool results as llms.ToolCallResponse
// parts; Message.Meta is never sent); and maps the first choice of the
// response back to an assistant message: its text and its tool calls (or
// the legacy function call).
//
// Generate returns the client's error as is, an error matching
// ErrBadMessage for a message it cannot map, one matching ErrEmptyAnswer
// for a response without a choice, one matching ErrMalformedAnswer for a tool
// call without a function, and one matching ErrInvalidConfig when m is
// nil. The adapter is as safe for concurrent use as m.
func FromLangchaingo(m llms.Model, opts ...llms.CallOption) Model {
	return &langchaingoModel{m: m, opts: slices.Clone(opts)}
}

type langchaingoModel struct {
	m    llms.Model
	opts []llms.CallOption
}

func (l *langchaingoModel) Generate(ctx context.Context, messages []Message, tools []Definition) (Message, error) {
	if l.m == nil {
		return Message{}, fmt.Errorf("%w: FromLangchaingo was given a nil llms.Model", ErrInvalidConfig)
	}
	mc, err := toMessageContents(messages)
	if err != nil {
		return Message{}, err
	}
	opts := slices.Clone(l.opts)
	if len(tools) > 0 {
		opts = append(opts, llms.WithTools(toLangchaingoTools(tools)))
	}
	resp, err := l.m.GenerateContent(ctx, mc, opts...)
	if err != nil {
		return Message{}, err
	}
	return fromContentResponse(resp)
}

// toLangchaingoTools binds tools as langchaingo function tools.
func toLangchaingoTools(tools []Definition) []llms.Tool {
	out := make([]llms.Tool, len(tools))
	for i, d := range tools {
		params := json.RawMessage(slices.Clone(d.Parameters))
		if len(params) == 0 {
			params = json.RawMessage(`{"type":"object","properties":{}}`)
		}
		out[i] = llms.Tool{Type: "function", Function: &llms.FunctionDefinition{Name: d.Name, Description: d.Description, Parameters: params}}
	}
	return out
}

// toMessageContents maps the conversation to langchaingo's messages.
func toMessageContents(msgs []Message) ([]llms.MessageContent, error) {
	out := make([]llms.MessageContent, 0, len(msgs))
	for i, m := range msgs {
		var mc llms.MessageContent
		switch m.Role {
		case RoleSystem:
			mc = llms.MessageContent{Role: llms.ChatMessageTypeSystem, Parts: []llms.ContentPart{llms.TextContent{Text: m.Content}}}
		case RoleUser:
			mc = llms.MessageContent{Role: llms.ChatMessageTypeHuman, Parts: []llms.ContentPart{llms.TextContent{Text: m.Content}}}
		case RoleAssistant:
			mc = llms.MessageContent{Role: llms.ChatMessageTypeAI}
			if m.Content != "" || len(m.ToolCalls) == 0 {
				mc.Parts = append(mc.Parts, llms.TextContent{Text: m.Content})
			}
			for _, tc := range m.ToolCalls {
				mc.Parts = append(mc.Parts, llms.ToolCall{ID: tc.ID, Type: "function", FunctionCall: &llms.FunctionCall{Name: tc.Name, Arguments: tc.Arguments}})
			}
		case RoleTool:
			if m.ToolCallID == "" {
				return nil, fmt.Errorf("%w: message %d is a tool result that answers no call (no tool_call_id)", ErrBadMessage, i)
			}
			mc = llms.MessageContent{Role: llms.ChatMessageTypeTool, Parts: []llms.ContentPart{llms.ToolCallResponse{ToolCallID: m.ToolCallID, Name: m.Name, Content: m.Content}}}
		default:
			return nil, fmt.Errorf("%w: message %d has role %s", ErrBadMessage, i, quote(string(m.Role)))
		}
		out = append(out, mc)
	}
	return out, nil
}

// fromContentResponse maps the first choice of a response to an assistant
// message.
func fromContentResponse(resp *llms.ContentResponse) (Message, error) {
	if resp == nil || len(resp.Choices) == 0 || resp.Choices[0] == nil {
		return Message{}, fmt.Errorf("%w: the response has no choice", ErrEmptyAnswer)
	}
	c := resp.Choices[0]
	msg := Message{Role: RoleAssistant, Content: c.Content}
	for i, tc := range c.ToolCalls {
		if tc.FunctionCall == nil {
			return Message{}, fmt.Errorf("%w: tool call %d (ID %s) has no function", ErrMalformedAnswer, i, quote(tc.ID))
		}
		msg.ToolCalls = append(msg.ToolCalls, ToolCall{ID: tc.ID, Name: tc.FunctionCall.Name, Arguments: tc.FunctionCall.Arguments})
	}
	if len(msg.ToolCalls) == 0 && c.FuncCall != nil {
		msg.ToolCalls = []ToolCall{{Name: c.FuncCall.Name, Arguments: c.FuncCall.Arguments}}
	}
	return msg, nil
}
