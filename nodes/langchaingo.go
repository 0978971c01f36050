package nodes

// This is the only file of lockstep that imports langchaingo.

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/tmc/langchaingo/llms"
	"github.com/tmc/langchaingo/llms/anthropic"
	"github.com/tmc/langchaingo/llms/ollama"
	"github.com/tmc/langchaingo/llms/openai"
)

// FromLangchaingo adapts a langchaingo model (llms.Model) to Model. Every
// call binds the tools as langchaingo function tools (llms.WithTools) with
// their JSON Schemas, after opts (model name, temperature, ...); maps the
// conversation to llms.MessageContent (system, human, ai and tool
// messages; an assistant's tool calls as llms.ToolCall parts after its
// text, each tool result as its own tool message with one
// llms.ToolCallResponse part; Message.Meta is never sent); and maps the
// response back to one assistant message: its text and its tool calls (or
// the legacy function call). What reaches the provider depends on the
// client, as of langchaingo v0.1.14:
//
//   - OpenAI (llms/openai), which also serves every OpenAI-compatible
//     endpoint: the conversation and the tools as they are; the answer is
//     the first choice, which holds the text and every tool call.
//   - Anthropic (a *anthropic.LLM from llms/anthropic, on the Messages
//     API): the client sends only the first part of a message, so the
//     adapter sends an assistant message as consecutive assistant
//     messages of one part each (its text, then each tool call in order),
//     and each tool result as its own user message; the Messages API
//     combines consecutive turns of one role into one turn, so every
//     tool_use reaches it in one assistant turn and every tool_result in
//     the user turn after it. The client answers with one choice per
//     content block, so the adapter merges all choices of the response
//     into one message (text concatenated in order, every tool call in
//     order). The client is recognised by its type: an llms.Model that
//     wraps a *anthropic.LLM is not, and loses all but the first block of
//     an answer. The client's legacy text-completions mode
//     (anthropic.WithLegacyTextCompletionsAPI) sends only the first
//     message and cannot be detected: do not use it. Tool-call arguments
//     go through the client as a JSON object (a map), so a number beyond
//     float64 precision does not survive the trip either way.
//   - Ollama (a *ollama.LLM from llms/ollama): the client has no tools,
//     tool calls or tool results; the adapter refuses such a call rather
//     than let the model answer without its tools.
//   - Any other client: as OpenAI; the answer is the first choice.
//
// Generate returns the client's error as is; an error matching
// ErrBadMessage for a message it cannot map (for Anthropic, also a tool
// call whose arguments are not a JSON object); a *ClientLimitError
// (matching ErrClientLimit) naming the provider when the client cannot
// carry the tools or a message, before calling it; one matching
// ErrEmptyAnswer for a response without a choice; one matching
// ErrMalformedAnswer for a tool call without a function; and one matching
// ErrInvalidConfig when m is nil. The adapter is as safe for concurrent
// use as m.
func FromLangchaingo(m llms.Model, opts ...llms.CallOption) Model {
	l := &langchaingoModel{m: m, opts: slices.Clone(opts)}
	switch m.(type) {
	case *anthropic.LLM:
		l.client = clientAnthropic
	case *ollama.LLM:
		l.client = clientOllama
	}
	var co llms.CallOptions
	for _, o := range l.opts {
		if o != nil {
			o(&co)
		}
	}
	l.model = co.Model
	return l
}

// clientKind is what the adapter knows of a langchaingo client's limits.
type clientKind int

const (
	clientOpenAILike clientKind = iota // carries messages and tools as they are
	clientAnthropic                    // one part per message, one choice per content block
	clientOllama                       // no tools
)

type langchaingoModel struct {
	m      llms.Model
	opts   []llms.CallOption
	client clientKind
	model  string // the model named by opts, for errors
}

func (l *langchaingoModel) Generate(ctx context.Context, messages []Message, tools []Definition) (Message, error) {
	if l.m == nil {
		return Message{}, fmt.Errorf("%w: FromLangchaingo was given a nil llms.Model", ErrInvalidConfig)
	}
	if l.client == clientOllama {
		if err := l.checkOllama(messages, tools); err != nil {
			return Message{}, err
		}
	}
	mc, err := toMessageContents(messages)
	if err != nil {
		return Message{}, err
	}
	if l.client == clientAnthropic {
		if mc, err = forAnthropic(mc); err != nil {
			return Message{}, err
		}
	}
	opts := slices.Clone(l.opts)
	if len(tools) > 0 {
		opts = append(opts, llms.WithTools(toLangchaingoTools(tools)))
	}
	if Streamed(ctx) {
		// Only a streamed run asks for the client's token stream.
		opts = append(opts, llms.WithStreamingFunc(func(cctx context.Context, chunk []byte) error {
			streamLangchaingo(ctx, chunk)
			return nil
		}))
	}
	resp, err := l.m.GenerateContent(ctx, mc, opts...)
	if err != nil {
		return Message{}, err
	}
	ReportUsage(ctx, l.usage(resp))
	return fromContentResponse(resp, l.client == clientAnthropic)
}

// usage is what the response says the call used: the token counts the
// clients put in the first choice's GenerationInfo (PromptTokens and
// CompletionTokens for OpenAI, Ollama and Google AI, InputTokens and
// OutputTokens for Anthropic).
func (l *langchaingoModel) usage(resp *llms.ContentResponse) Usage {
	u := Usage{Model: l.model}
	switch l.m.(type) {
	case *anthropic.LLM:
		u.Provider = "anthropic"
	case *ollama.LLM:
		u.Provider = "ollama"
	case *openai.LLM:
		u.Provider = "openai"
	}
	if resp == nil || len(resp.Choices) == 0 || resp.Choices[0] == nil {
		return u
	}
	info := resp.Choices[0].GenerationInfo
	in, okIn := tokenCount(info, "PromptTokens", "InputTokens")
	out, okOut := tokenCount(info, "CompletionTokens", "OutputTokens")
	if okIn || okOut {
		u.Tokens, u.InputTokens, u.OutputTokens = true, in, out
	}
	return u
}

// tokenCount reads the first of keys that info holds as a number.
func tokenCount(info map[string]any, keys ...string) (int, bool) {
	for _, k := range keys {
		switch v := info[k].(type) {
		case int:
			return v, true
		case int32:
			return int(v), true
		case int64:
			return int(v), true
		case float64:
			return int(v), true
		}
	}
	return 0, false
}

// checkOllama refuses what langchaingo's Ollama client would drop (tools)
// or fail on with an untyped error (tool calls and tool results).
func (l *langchaingoModel) checkOllama(messages []Message, tools []Definition) error {
	if len(tools) > 0 {
		return &ClientLimitError{Provider: "ollama", Model: l.model, What: fmt.Sprintf("tools (%d bound, first %s)", len(tools), quote(tools[0].Name))}
	}
	for i, m := range messages {
		switch {
		case m.Role == RoleAssistant && len(m.ToolCalls) > 0:
			return &ClientLimitError{Provider: "ollama", Model: l.model, What: fmt.Sprintf("the tool calls of message %d", i)}
		case m.Role == RoleTool:
			return &ClientLimitError{Provider: "ollama", Model: l.model, What: fmt.Sprintf("the tool result of message %d (call %s)", i, quote(m.ToolCallID))}
		}
	}
	return nil
}

// forAnthropic reshapes mc for langchaingo's Anthropic client, which sends
// only the first part of each message: an assistant message of several
// parts becomes consecutive assistant messages of one part each, which
// the Messages API combines into one turn. Tool results are already one
// per message. A tool call's arguments must be a JSON object (the client
// decodes them into a map); empty arguments are sent as {}.
func forAnthropic(mc []llms.MessageContent) ([]llms.MessageContent, error) {
	out := make([]llms.MessageContent, 0, len(mc))
	for i, m := range mc {
		if m.Role != llms.ChatMessageTypeAI {
			out = append(out, m)
			continue
		}
		for _, p := range m.Parts {
			if tc, ok := p.(llms.ToolCall); ok {
				args := strings.TrimSpace(tc.FunctionCall.Arguments)
				if args == "" {
					args = "{}"
				}
				var obj map[string]json.RawMessage
				if err := json.Unmarshal([]byte(args), &obj); err != nil || obj == nil {
					return nil, fmt.Errorf("%w: message %d: the arguments of tool call %s (%s) are not a JSON object, which the anthropic client cannot send", ErrBadMessage, i, quote(tc.ID), quote(tc.FunctionCall.Name))
				}
				fc := *tc.FunctionCall
				fc.Arguments = args
				tc.FunctionCall = &fc
				p = tc
			}
			out = append(out, llms.MessageContent{Role: llms.ChatMessageTypeAI, Parts: []llms.ContentPart{p}})
		}
	}
	return out, nil
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

// fromContentResponse maps a response to an assistant message: its first
// choice, or, when merge is set (the client answers with one choice per
// content block), all its choices in order.
func fromContentResponse(resp *llms.ContentResponse, merge bool) (Message, error) {
	if resp == nil || len(resp.Choices) == 0 || resp.Choices[0] == nil {
		return Message{}, fmt.Errorf("%w: the response has no choice", ErrEmptyAnswer)
	}
	choices := resp.Choices[:1]
	if merge {
		choices = resp.Choices
	}
	msg := Message{Role: RoleAssistant}
	var text strings.Builder
	for _, c := range choices {
		if c == nil {
			continue
		}
		text.WriteString(c.Content)
		for _, tc := range c.ToolCalls {
			if tc.FunctionCall == nil {
				return Message{}, fmt.Errorf("%w: tool call %d (ID %s) has no function", ErrMalformedAnswer, len(msg.ToolCalls), quote(tc.ID))
			}
			msg.ToolCalls = append(msg.ToolCalls, ToolCall{ID: tc.ID, Name: tc.FunctionCall.Name, Arguments: tc.FunctionCall.Arguments})
		}
		if len(c.ToolCalls) == 0 && c.FuncCall != nil {
			msg.ToolCalls = append(msg.ToolCalls, ToolCall{Name: c.FuncCall.Name, Arguments: c.FuncCall.Arguments})
		}
	}
	msg.Content = text.String()
	return msg, nil
}
