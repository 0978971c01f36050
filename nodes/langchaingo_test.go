package nodes_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/tmc/langchaingo/llms"
	"github.com/tmc/langchaingo/llms/anthropic"
	"github.com/tmc/langchaingo/llms/ollama"
	"github.com/tmc/langchaingo/llms/openai"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/internal/obstest"
	"github.com/lockstepgo/lockstep/nodes"
	"github.com/lockstepgo/lockstep/observe"
)

// fakeLLM is a function-field fake of langchaingo's llms.Model.
type fakeLLM struct {
	generate func(ctx context.Context, msgs []llms.MessageContent, opts llms.CallOptions) (*llms.ContentResponse, error)
}

func (f *fakeLLM) GenerateContent(ctx context.Context, msgs []llms.MessageContent, options ...llms.CallOption) (*llms.ContentResponse, error) {
	var o llms.CallOptions
	for _, opt := range options {
		opt(&o)
	}
	return f.generate(ctx, msgs, o)
}

func (f *fakeLLM) Call(ctx context.Context, prompt string, options ...llms.CallOption) (string, error) {
	return llms.GenerateFromSinglePrompt(ctx, f, prompt, options...)
}

// TestFromLangchaingoRequest: the conversation and the tools as
// langchaingo sees them.
func TestFromLangchaingoRequest(t *testing.T) {
	var got []llms.MessageContent
	var opts llms.CallOptions
	m := nodes.FromLangchaingo(&fakeLLM{generate: func(ctx context.Context, msgs []llms.MessageContent, o llms.CallOptions) (*llms.ContentResponse, error) {
		got, opts = msgs, o
		return &llms.ContentResponse{Choices: []*llms.ContentChoice{{Content: "ok"}}}, nil
	}}, llms.WithTemperature(0.25))
	schema := json.RawMessage(`{"type":"object","properties":{"query":{"type":"string"}},"required":["query"]}`)
	tools := []nodes.Definition{{Name: "search_tickets", Description: "Search tickets.", Parameters: schema}, {Name: "ping", Description: "Ping."}}
	msgs := []nodes.Message{
		{Role: nodes.RoleSystem, Content: "Be brief."},
		{Role: nodes.RoleUser, Content: "find the login ticket"},
		{Role: nodes.RoleAssistant, Content: "Looking.", ToolCalls: []nodes.ToolCall{call("c1", "search_tickets", `{"query":"login"}`), call("c2", "ping", `{}`)}},
		{Role: nodes.RoleTool, ToolCallID: "c1", Name: "search_tickets", Content: `{"status":"executed","result":["TKT-3"]}`, Meta: &nodes.ToolMeta{Tool: "search_tickets", Status: nodes.StatusExecuted}},
		{Role: nodes.RoleTool, ToolCallID: "c2", Name: "ping", Content: `{"status":"executed","result":"pong"}`},
		{Role: nodes.RoleAssistant, ToolCalls: []nodes.ToolCall{call("c3", "ping", `{}`)}},
	}
	if _, err := m.Generate(context.Background(), msgs, tools); err != nil {
		t.Fatal(err)
	}
	want := []llms.MessageContent{
		{Role: llms.ChatMessageTypeSystem, Parts: []llms.ContentPart{llms.TextContent{Text: "Be brief."}}},
		{Role: llms.ChatMessageTypeHuman, Parts: []llms.ContentPart{llms.TextContent{Text: "find the login ticket"}}},
		{Role: llms.ChatMessageTypeAI, Parts: []llms.ContentPart{
			llms.TextContent{Text: "Looking."},
			llms.ToolCall{ID: "c1", Type: "function", FunctionCall: &llms.FunctionCall{Name: "search_tickets", Arguments: `{"query":"login"}`}},
			llms.ToolCall{ID: "c2", Type: "function", FunctionCall: &llms.FunctionCall{Name: "ping", Arguments: `{}`}},
		}},
		{Role: llms.ChatMessageTypeTool, Parts: []llms.ContentPart{llms.ToolCallResponse{ToolCallID: "c1", Name: "search_tickets", Content: `{"status":"executed","result":["TKT-3"]}`}}},
		{Role: llms.ChatMessageTypeTool, Parts: []llms.ContentPart{llms.ToolCallResponse{ToolCallID: "c2", Name: "ping", Content: `{"status":"executed","result":"pong"}`}}},
		{Role: llms.ChatMessageTypeAI, Parts: []llms.ContentPart{
			llms.ToolCall{ID: "c3", Type: "function", FunctionCall: &llms.FunctionCall{Name: "ping", Arguments: `{}`}},
		}},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("messages (-want +got):\n%s", d)
	}
	wantTools := []llms.Tool{
		{Type: "function", Function: &llms.FunctionDefinition{Name: "search_tickets", Description: "Search tickets.", Parameters: schema}},
		{Type: "function", Function: &llms.FunctionDefinition{Name: "ping", Description: "Ping.", Parameters: json.RawMessage(`{"type":"object","properties":{}}`)}},
	}
	if d := cmp.Diff(wantTools, opts.Tools); d != "" {
		t.Errorf("tools (-want +got):\n%s", d)
	}
	if opts.Temperature != 0.25 {
		t.Errorf("the adapter's call options were not passed: temperature %v", opts.Temperature)
	}
}

// TestFromLangchaingoResponse: a response back to an assistant message,
// and the adapter's errors.
func TestFromLangchaingoResponse(t *testing.T) {
	provider := errors.New("500 from the provider")
	tests := []struct {
		name string
		resp *llms.ContentResponse
		err  error
		msgs []nodes.Message
		want nodes.Message
		fail error
	}{
		{"text", &llms.ContentResponse{Choices: []*llms.ContentChoice{{Content: "Done."}, {Content: "ignored"}}}, nil, nil,
			nodes.Message{Role: nodes.RoleAssistant, Content: "Done."}, nil},
		{"tool calls", &llms.ContentResponse{Choices: []*llms.ContentChoice{{
			ToolCalls: []llms.ToolCall{
				{ID: "call_a", Type: "function", FunctionCall: &llms.FunctionCall{Name: "search_tickets", Arguments: `{"query":"login"}`}},
				{ID: "call_b", Type: "function", FunctionCall: &llms.FunctionCall{Name: "ping", Arguments: ``}},
			},
			FuncCall: &llms.FunctionCall{Name: "search_tickets", Arguments: `{"query":"login"}`},
		}}}, nil, nil,
			nodes.Message{Role: nodes.RoleAssistant, ToolCalls: []nodes.ToolCall{call("call_a", "search_tickets", `{"query":"login"}`), call("call_b", "ping", "")}}, nil},
		{"legacy function call", &llms.ContentResponse{Choices: []*llms.ContentChoice{{FuncCall: &llms.FunctionCall{Name: "ping", Arguments: `{}`}}}}, nil, nil,
			nodes.Message{Role: nodes.RoleAssistant, ToolCalls: []nodes.ToolCall{call("", "ping", `{}`)}}, nil},
		{"client error", nil, provider, nil, nodes.Message{}, provider},
		{"no choice", &llms.ContentResponse{}, nil, nil, nodes.Message{}, nodes.ErrEmptyAnswer},
		{"nil response", nil, nil, nil, nodes.Message{}, nodes.ErrEmptyAnswer},
		{"tool call without a function", &llms.ContentResponse{Choices: []*llms.ContentChoice{{ToolCalls: []llms.ToolCall{{ID: "x"}}}}}, nil, nil, nodes.Message{}, nodes.ErrMalformedAnswer},
		{"unknown role", nil, nil, []nodes.Message{{Role: "function", Content: "x"}}, nodes.Message{}, nodes.ErrBadMessage},
		{"tool result without a call", nil, nil, []nodes.Message{{Role: nodes.RoleTool, Content: "x"}}, nodes.Message{}, nodes.ErrBadMessage},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			called := false
			m := nodes.FromLangchaingo(&fakeLLM{generate: func(ctx context.Context, msgs []llms.MessageContent, o llms.CallOptions) (*llms.ContentResponse, error) {
				called = true
				return tc.resp, tc.err
			}})
			msgs := tc.msgs
			if msgs == nil {
				msgs = []nodes.Message{{Role: nodes.RoleUser, Content: "hi"}}
			}
			got, err := m.Generate(context.Background(), msgs, nil)
			if !errors.Is(err, tc.fail) || (tc.fail == nil) != (err == nil) {
				t.Fatalf("Generate: %v, want %v", err, tc.fail)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("message (-want +got):\n%s", d)
			}
			if errors.Is(tc.fail, nodes.ErrBadMessage) && called {
				t.Error("the model was called with a conversation that cannot be mapped")
			}
		})
	}
	if _, err := nodes.FromLangchaingo(nil).Generate(context.Background(), nil, nil); !errors.Is(err, nodes.ErrInvalidConfig) {
		t.Errorf("nil model: %v", err)
	}
}

// chatRequest is what the test server reads from POST /chat/completions.
type chatRequest struct {
	Model    string `json:"model"`
	Messages []struct {
		Role      string          `json:"role"`
		Content   json.RawMessage `json:"content"`
		ToolCalls []struct {
			ID       string `json:"id"`
			Type     string `json:"type"`
			Function struct {
				Name      string `json:"name"`
				Arguments string `json:"arguments"`
			} `json:"function"`
		} `json:"tool_calls"`
		ToolCallID string `json:"tool_call_id"`
	} `json:"messages"`
	Tools []struct {
		Type     string `json:"type"`
		Function struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Parameters  json.RawMessage `json:"parameters"`
		} `json:"function"`
	} `json:"tools"`
}

// text is a message's content as text (a string, null, or text parts).
func text(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Text string `json:"text"`
	}
	_ = json.Unmarshal(raw, &parts)
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(p.Text)
	}
	return b.String()
}

// chatServer speaks the chat-completions protocol with tool calls. Its
// answer to a request is answers[k], k being the assistant messages in it.
type chatServer struct {
	t       *testing.T
	answers []map[string]any // the "message" of each answer
	mu      sync.Mutex
	reqs    []chatRequest
}

func (s *chatServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/chat/completions" {
		s.t.Errorf("%s %s, want POST /chat/completions", r.Method, r.URL.Path)
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	if got := r.Header.Get("Authorization"); got != "Bearer test" {
		s.t.Errorf("Authorization %q", got)
	}
	body, err := io.ReadAll(r.Body)
	var req chatRequest
	if err == nil {
		err = json.Unmarshal(body, &req)
	}
	if err != nil {
		s.t.Errorf("request body %s: %v", body, err)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.reqs = append(s.reqs, req)
	s.mu.Unlock()
	k := 0
	for _, m := range req.Messages {
		if m.Role == "assistant" {
			k++
		}
	}
	if k >= len(s.answers) {
		http.Error(w, `{"error":{"message":"no more answers"}}`, http.StatusInternalServerError)
		return
	}
	msg := s.answers[k]
	finish := "stop"
	if _, ok := msg["tool_calls"]; ok {
		finish = "tool_calls"
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"id": fmt.Sprint("chatcmpl-", k), "object": "chat.completion", "created": 1767225600, "model": req.Model,
		"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}},
		"usage":   map[string]int{"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
	})
}

func (s *chatServer) requests() []chatRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]chatRequest(nil), s.reqs...)
}

func toolCallMsg(id, name, args string) map[string]any {
	return map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{
		map[string]any{"id": id, "type": "function", "function": map[string]any{"name": name, "arguments": args}},
	}}
}

// TestOpenAIRoundTrip: the agent on langchaingo's OpenAI-compatible
// client, against a local server that speaks chat completions with tool
// calls. The model asks for a search, the executor runs it, its result
// goes back with its tool_call_id; the model asks to close the ticket,
// which waits for a human; approved, it runs once, its result goes back,
// and the model answers. The server saw the tools with their schemas on
// every request.
func TestOpenAIRoundTrip(t *testing.T) {
	srv := &chatServer{t: t, answers: []map[string]any{
		toolCallMsg("call_1", "search_tickets", `{"query":"login"}`),
		toolCallMsg("call_2", "close_ticket", `{"ticket_id":"TKT-3"}`),
		{"role": "assistant", "content": "TKT-3 was the login ticket; it is closed now."},
	}}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	llm, err := openai.New(openai.WithBaseURL(hs.URL), openai.WithToken("test"), openai.WithModel("gpt-test"), openai.WithHTTPClient(hs.Client()))
	if err != nil {
		t.Fatal(err)
	}
	d := &desk{}
	clk := newFakeClock()
	rec := &obstest.Recorder{}
	ex, err := nodes.NewExecutor([]*nodes.Tool{d.searchTool(t), d.closeTool(t)}, nodes.WithLedger(newMemLedger(t, clk.Now)), nodes.WithObserver(rec))
	if err != nil {
		t.Fatal(err)
	}
	agent, err := nodes.NewAgent(nodes.FromLangchaingo(llm, llms.WithModel("gpt-test")), ex, nodes.AgentOptions{System: "You are a support agent."})
	if err != nil {
		t.Fatal(err)
	}
	r, err := agent.Compile(graph.WithSaver(checkpoint.NewMemorySaver(clk.Now)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	res, err := r.Invoke(ctx, "th", userSays("find the login ticket and close it"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != graph.StatusWaiting || len(res.Interrupts) != 1 || d.calls.get("search_tickets") != 1 || d.calls.get("close_ticket") != 0 {
		t.Fatalf("status %s, %d interrupts, %d searches, %d closes", res.Status, len(res.Interrupts), d.calls.get("search_tickets"), d.calls.get("close_ticket"))
	}
	req, _, err := approval.ParseRequest(res.Interrupts[0].Value)
	if err != nil || req.CallID != "call_2" || string(req.Args) != `{"ticket_id":"TKT-3"}` {
		t.Fatalf("request %+v, %v", req, err)
	}
	res, err = r.Resume(ctx, "th", graph.Command[nodes.AgentState]{ResumeByID: map[string]any{res.Interrupts[0].ID: approve(res.Interrupts[0].ID, req)}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != graph.StatusDone || d.calls.get("close_ticket:TKT-3") != 1 || d.calls.get("search_tickets") != 1 {
		t.Fatalf("status %s, %d closes, %d searches", res.Status, d.calls.get("close_ticket"), d.calls.get("search_tickets"))
	}

	// The final state.
	var got []string
	for _, m := range res.Values.Messages {
		line := string(m.Role) + ":" + m.Content
		for _, tc := range m.ToolCalls {
			line += " call " + tc.ID + " " + tc.Name + tc.Arguments
		}
		if m.ToolCallID != "" {
			line = string(m.Role) + "[" + m.ToolCallID + "]:" + string(observation(t, m).Status)
		}
		got = append(got, line)
	}
	want := []string{
		"user:find the login ticket and close it",
		`assistant: call call_1 search_tickets{"query":"login"}`,
		"tool[call_1]:executed",
		`assistant: call call_2 close_ticket{"ticket_id":"TKT-3"}`,
		"tool[call_2]:executed",
		"assistant:TKT-3 was the login ticket; it is closed now.",
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("final messages (-want +got):\n%s", d)
	}

	// What the server saw.
	reqs := srv.requests()
	if len(reqs) != 3 {
		t.Fatalf("%d requests, want 3", len(reqs))
	}
	type toolSeen struct {
		Description string
		Parameters  any // decoded, so that spacing and key order do not matter
	}
	wantTools := map[string]toolSeen{}
	for _, def := range ex.Definitions() {
		var p any
		if err := json.Unmarshal(def.Parameters, &p); err != nil {
			t.Fatal(err)
		}
		wantTools[def.Name] = toolSeen{def.Description, p}
	}
	for i, rq := range reqs {
		if rq.Model != "gpt-test" {
			t.Errorf("request %d: model %q", i, rq.Model)
		}
		sent := map[string]toolSeen{}
		for _, tl := range rq.Tools {
			if tl.Type != "function" {
				t.Errorf("request %d: tool type %q", i, tl.Type)
			}
			var p any
			if err := json.Unmarshal(tl.Function.Parameters, &p); err != nil {
				t.Errorf("request %d: parameters of %s: %v", i, tl.Function.Name, err)
			}
			sent[tl.Function.Name] = toolSeen{tl.Function.Description, p}
		}
		if d := cmp.Diff(wantTools, sent); d != "" {
			t.Errorf("request %d: tools (-want +got):\n%s", i, d)
		}
		if rq.Messages[0].Role != "system" || text(rq.Messages[0].Content) != "You are a support agent." {
			t.Errorf("request %d does not start with the system prompt", i)
		}
	}
	type seen struct {
		Role, Text, Calls, ToolCallID string
	}
	flat := func(rq chatRequest) []seen {
		var out []seen
		for _, m := range rq.Messages {
			s := seen{Role: m.Role, ToolCallID: m.ToolCallID}
			for _, tc := range m.ToolCalls {
				s.Calls += tc.ID + " " + tc.Type + " " + tc.Function.Name + tc.Function.Arguments + ";"
			}
			if m.Role != "tool" {
				s.Text = text(m.Content)
			} else {
				s.Text = string(observationOf(t, text(m.Content)).Status)
			}
			out = append(out, s)
		}
		return out
	}
	wantLast := []seen{
		{Role: "system", Text: "You are a support agent."},
		{Role: "user", Text: "find the login ticket and close it"},
		{Role: "assistant", Calls: `call_1 function search_tickets{"query":"login"};`},
		{Role: "tool", Text: "executed", ToolCallID: "call_1"},
		{Role: "assistant", Calls: `call_2 function close_ticket{"ticket_id":"TKT-3"};`},
		{Role: "tool", Text: "executed", ToolCallID: "call_2"},
	}
	for i, n := range []int{2, 4, 6} {
		if d := cmp.Diff(wantLast[:n], flat(reqs[i])); d != "" {
			t.Errorf("request %d messages (-want +got):\n%s", i, d)
		}
	}
	if c := text(reqs[1].Messages[3].Content); !strings.Contains(c, "TKT-3") {
		t.Errorf("the search result sent back is %s", c)
	}

	// Every model call was observed with the provider, the model and the
	// token counts the server reported.
	var models []observe.Event
	for _, sp := range rec.Spans() {
		if sp.Start.Kind == observe.KindModel {
			models = append(models, *sp.End)
		}
	}
	if len(models) != 3 {
		t.Fatalf("%d model calls observed, want 3", len(models))
	}
	for _, e := range models {
		if e.Provider != "openai" || e.Model != "gpt-test" || !e.Usage || e.InputTokens != 10 || e.OutputTokens != 5 || e.Outcome != observe.OutcomeDone || e.Node != nodes.AgentModelNode {
			t.Errorf("model call %+v", e)
		}
	}
}

func observationOf(t *testing.T, content string) nodes.Observation {
	t.Helper()
	var o nodes.Observation
	if err := json.Unmarshal([]byte(content), &o); err != nil {
		t.Fatalf("tool result %q: %v", content, err)
	}
	return o
}

// anthropicRequest is what the fake reads from POST /messages.
type anthropicRequest struct {
	Model    string             `json:"model"`
	System   string             `json:"system"`
	Messages []anthropicMessage `json:"messages"`
	Tools    []anthropicTool    `json:"tools"`
}

type anthropicTool struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	InputSchema any    `json:"input_schema"`
}

type anthropicMessage struct {
	Role    string           `json:"role"`
	Content []anthropicBlock `json:"content"`
}

// anthropicBlock is a content block of a request; Input is decoded so
// that spacing and key order do not matter.
type anthropicBlock struct {
	Type      string `json:"type"`
	Text      string `json:"text,omitempty"`
	ID        string `json:"id,omitempty"`
	Name      string `json:"name,omitempty"`
	Input     any    `json:"input,omitempty"`
	ToolUseID string `json:"tool_use_id,omitempty"`
	Content   string `json:"content,omitempty"`
}

// anthropicServer is a fake of Anthropic's Messages API. Its answer to the
// k-th request is the content blocks answers[k]. Like the API, it combines
// consecutive messages of one role into one turn, and refuses (400) a
// request in which a user turn's tool_result blocks do not come first or
// do not answer the tool_use blocks of the assistant turn just before, or
// a tool_use is left without its tool_result in the next turn.
type anthropicServer struct {
	t       *testing.T
	answers [][]map[string]any
	mu      sync.Mutex
	reqs    []anthropicRequest
}

func (s *anthropicServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/messages" {
		s.t.Errorf("%s %s, want POST /messages", r.Method, r.URL.Path)
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	if got := r.Header.Get("x-api-key"); got != "test" {
		s.t.Errorf("x-api-key %q", got)
	}
	body, err := io.ReadAll(r.Body)
	var req anthropicRequest
	if err == nil {
		err = json.Unmarshal(body, &req)
	}
	if err != nil {
		s.t.Errorf("request body %s: %v", body, err)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	k := len(s.reqs)
	s.reqs = append(s.reqs, req)
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if err := checkToolTurns(req.Messages); err != nil {
		w.WriteHeader(http.StatusBadRequest)
		_ = json.NewEncoder(w).Encode(map[string]any{"type": "error", "error": map[string]any{"type": "invalid_request_error", "message": err.Error()}})
		return
	}
	if k >= len(s.answers) {
		w.WriteHeader(http.StatusInternalServerError)
		_ = json.NewEncoder(w).Encode(map[string]any{"type": "error", "error": map[string]any{"type": "api_error", "message": "no more answers"}})
		return
	}
	stop := "end_turn"
	for _, b := range s.answers[k] {
		if b["type"] == "tool_use" {
			stop = "tool_use"
		}
	}
	_ = json.NewEncoder(w).Encode(map[string]any{
		"id": fmt.Sprint("msg_", k), "type": "message", "role": "assistant", "model": req.Model,
		"content": s.answers[k], "stop_reason": stop, "stop_sequence": nil,
		"usage": map[string]int{"input_tokens": 10, "output_tokens": 5},
	})
}

func (s *anthropicServer) requests() []anthropicRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]anthropicRequest(nil), s.reqs...)
}

// anthropicTurns combines consecutive messages of one role, as the
// Messages API does.
func anthropicTurns(msgs []anthropicMessage) []anthropicMessage {
	var turns []anthropicMessage
	for _, m := range msgs {
		if n := len(turns); n > 0 && turns[n-1].Role == m.Role {
			turns[n-1].Content = append(turns[n-1].Content, m.Content...)
			continue
		}
		turns = append(turns, anthropicMessage{Role: m.Role, Content: append([]anthropicBlock(nil), m.Content...)})
	}
	return turns
}

// checkToolTurns applies the Messages API's tool_use/tool_result rules to
// the combined turns.
func checkToolTurns(msgs []anthropicMessage) error {
	turns := anthropicTurns(msgs)
	for i, t := range turns {
		if t.Role != "user" {
			continue
		}
		asked := map[string]bool{}
		if i > 0 {
			for _, b := range turns[i-1].Content {
				if b.Type == "tool_use" {
					asked[b.ID] = true
				}
			}
		}
		results := true
		for _, b := range t.Content {
			if b.Type != "tool_result" {
				results = false
				continue
			}
			if !results {
				return fmt.Errorf("turn %d: tool_result %s after other content", i, b.ToolUseID)
			}
			if !asked[b.ToolUseID] {
				return fmt.Errorf("turn %d: tool_result %s answers no tool_use of the previous turn", i, b.ToolUseID)
			}
			delete(asked, b.ToolUseID)
		}
		for id := range asked {
			return fmt.Errorf("turn %d: tool_use %s has no tool_result", i, id)
		}
	}
	return nil
}

func textBlock(s string) map[string]any { return map[string]any{"type": "text", "text": s} }

func toolUseBlock(id, name string, input map[string]any) map[string]any {
	return map[string]any{"type": "tool_use", "id": id, "name": name, "input": input}
}

func newAnthropicLLM(t *testing.T, srv *anthropicServer) *anthropic.LLM {
	t.Helper()
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	llm, err := anthropic.New(anthropic.WithToken("test"), anthropic.WithBaseURL(hs.URL), anthropic.WithModel("claude-test"), anthropic.WithHTTPClient(hs.Client()))
	if err != nil {
		t.Fatal(err)
	}
	return llm
}

// TestFromLangchaingoAnthropic: what langchaingo's Anthropic client sends
// for a conversation through the adapter, and the message the adapter
// makes of the content blocks it answers with.
func TestFromLangchaingoAnthropic(t *testing.T) {
	user := nodes.Message{Role: nodes.RoleUser, Content: "find the login ticket"}
	userSent := anthropicMessage{Role: "user", Content: []anthropicBlock{{Type: "text", Text: "find the login ticket"}}}
	login := map[string]any{"query": "login"}
	tests := []struct {
		name   string
		msgs   []nodes.Message
		answer []map[string]any
		sent   []anthropicMessage // the request's messages
		want   nodes.Message
	}{{
		name:   "text only",
		msgs:   []nodes.Message{user},
		answer: []map[string]any{textBlock("Which login ticket?")},
		sent:   []anthropicMessage{userSent},
		want:   nodes.Message{Role: nodes.RoleAssistant, Content: "Which login ticket?"},
	}, {
		name:   "one tool call",
		msgs:   []nodes.Message{user},
		answer: []map[string]any{toolUseBlock("toolu_1", "search_tickets", login)},
		sent:   []anthropicMessage{userSent},
		want:   nodes.Message{Role: nodes.RoleAssistant, ToolCalls: []nodes.ToolCall{call("toolu_1", "search_tickets", `{"query":"login"}`)}},
	}, {
		name:   "text and two tool calls",
		msgs:   []nodes.Message{user},
		answer: []map[string]any{textBlock("Looking."), toolUseBlock("toolu_1", "search_tickets", login), toolUseBlock("toolu_2", "ping", map[string]any{})},
		sent:   []anthropicMessage{userSent},
		want: nodes.Message{Role: nodes.RoleAssistant, Content: "Looking.", ToolCalls: []nodes.ToolCall{
			call("toolu_1", "search_tickets", `{"query":"login"}`), call("toolu_2", "ping", `{}`),
		}},
	}, {
		name:   "thinking, two text blocks and a tool call",
		msgs:   []nodes.Message{user},
		answer: []map[string]any{{"type": "thinking", "thinking": "search first", "signature": "sig"}, textBlock("Looking "), textBlock("now."), toolUseBlock("toolu_1", "search_tickets", login)},
		sent:   []anthropicMessage{userSent},
		want:   nodes.Message{Role: nodes.RoleAssistant, Content: "Looking now.", ToolCalls: []nodes.ToolCall{call("toolu_1", "search_tickets", `{"query":"login"}`)}},
	}, {
		name: "tool results round trip",
		msgs: []nodes.Message{
			{Role: nodes.RoleSystem, Content: "Be brief."},
			user,
			{Role: nodes.RoleAssistant, Content: "Looking.", ToolCalls: []nodes.ToolCall{call("toolu_1", "search_tickets", `{"query":"login"}`), call("toolu_2", "ping", "")}},
			{Role: nodes.RoleTool, ToolCallID: "toolu_1", Name: "search_tickets", Content: `["TKT-3"]`},
			{Role: nodes.RoleTool, ToolCallID: "toolu_2", Name: "ping", Content: `"pong"`},
			{Role: nodes.RoleAssistant, ToolCalls: []nodes.ToolCall{call("toolu_3", "search_tickets", `{"query":"password"}`), call("toolu_4", "ping", `{}`)}},
			{Role: nodes.RoleTool, ToolCallID: "toolu_3", Name: "search_tickets", Content: `[]`},
			{Role: nodes.RoleTool, ToolCallID: "toolu_4", Name: "ping", Content: `"pong"`},
			{Role: nodes.RoleUser, Content: "and?"},
		},
		answer: []map[string]any{textBlock("TKT-3 is the login ticket.")},
		sent: []anthropicMessage{
			userSent,
			{Role: "assistant", Content: []anthropicBlock{{Type: "text", Text: "Looking."}}},
			{Role: "assistant", Content: []anthropicBlock{{Type: "tool_use", ID: "toolu_1", Name: "search_tickets", Input: map[string]any{"query": "login"}}}},
			{Role: "assistant", Content: []anthropicBlock{{Type: "tool_use", ID: "toolu_2", Name: "ping", Input: map[string]any{}}}},
			{Role: "user", Content: []anthropicBlock{{Type: "tool_result", ToolUseID: "toolu_1", Content: `["TKT-3"]`}}},
			{Role: "user", Content: []anthropicBlock{{Type: "tool_result", ToolUseID: "toolu_2", Content: `"pong"`}}},
			{Role: "assistant", Content: []anthropicBlock{{Type: "tool_use", ID: "toolu_3", Name: "search_tickets", Input: map[string]any{"query": "password"}}}},
			{Role: "assistant", Content: []anthropicBlock{{Type: "tool_use", ID: "toolu_4", Name: "ping", Input: map[string]any{}}}},
			{Role: "user", Content: []anthropicBlock{{Type: "tool_result", ToolUseID: "toolu_3", Content: `[]`}}},
			{Role: "user", Content: []anthropicBlock{{Type: "tool_result", ToolUseID: "toolu_4", Content: `"pong"`}}},
			{Role: "user", Content: []anthropicBlock{{Type: "text", Text: "and?"}}},
		},
		want: nodes.Message{Role: nodes.RoleAssistant, Content: "TKT-3 is the login ticket."},
	}}
	schema := json.RawMessage(`{"type":"object","properties":{"query":{"type":"string"}},"required":["query"]}`)
	tools := []nodes.Definition{{Name: "search_tickets", Description: "Search tickets.", Parameters: schema}, {Name: "ping", Description: "Ping."}}
	wantTools := []anthropicTool{
		{Name: "search_tickets", Description: "Search tickets.", InputSchema: map[string]any{"type": "object", "properties": map[string]any{"query": map[string]any{"type": "string"}}, "required": []any{"query"}}},
		{Name: "ping", Description: "Ping.", InputSchema: map[string]any{"type": "object", "properties": map[string]any{}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := &anthropicServer{t: t, answers: [][]map[string]any{tc.answer}}
			got, err := nodes.FromLangchaingo(newAnthropicLLM(t, srv)).Generate(context.Background(), tc.msgs, tools)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("message (-want +got):\n%s", d)
			}
			reqs := srv.requests()
			if len(reqs) != 1 {
				t.Fatalf("%d requests, want 1", len(reqs))
			}
			if d := cmp.Diff(tc.sent, reqs[0].Messages); d != "" {
				t.Errorf("messages sent (-want +got):\n%s", d)
			}
			if d := cmp.Diff(wantTools, reqs[0].Tools); d != "" {
				t.Errorf("tools sent (-want +got):\n%s", d)
			}
			if wantSystem := ""; len(tc.msgs) > 0 && tc.msgs[0].Role == nodes.RoleSystem {
				wantSystem = tc.msgs[0].Content
				if reqs[0].System != wantSystem {
					t.Errorf("system %q, want %q", reqs[0].System, wantSystem)
				}
			}
		})
	}
}

// TestFromLangchaingoAnthropicBadArguments: a tool call whose arguments
// the Anthropic client cannot send (it decodes them into a JSON object) is
// refused with ErrBadMessage before any request.
func TestFromLangchaingoAnthropicBadArguments(t *testing.T) {
	for _, args := range []string{`{"query":`, `["login"]`, `null`, `"login"`} {
		t.Run(args, func(t *testing.T) {
			srv := &anthropicServer{t: t, answers: [][]map[string]any{{textBlock("unused")}}}
			msgs := []nodes.Message{
				{Role: nodes.RoleUser, Content: "find it"},
				{Role: nodes.RoleAssistant, ToolCalls: []nodes.ToolCall{call("toolu_1", "search_tickets", args)}},
				{Role: nodes.RoleTool, ToolCallID: "toolu_1", Content: `{"status":"invalid_args"}`},
			}
			_, err := nodes.FromLangchaingo(newAnthropicLLM(t, srv)).Generate(context.Background(), msgs, nil)
			if !errors.Is(err, nodes.ErrBadMessage) {
				t.Fatalf("Generate: %v, want ErrBadMessage", err)
			}
			if !strings.Contains(err.Error(), `"toolu_1"`) {
				t.Errorf("the error does not name the call: %v", err)
			}
			if n := len(srv.requests()); n != 0 {
				t.Errorf("%d requests were made", n)
			}
		})
	}
}

// TestAnthropicRoundTrip: the agent on langchaingo's Anthropic client. The
// model answers with text and two tool_use blocks; both run, both results
// go back in the user turn after the assistant turn holding both calls,
// and the model answers.
func TestAnthropicRoundTrip(t *testing.T) {
	srv := &anthropicServer{t: t, answers: [][]map[string]any{
		{textBlock("Searching both."), toolUseBlock("toolu_1", "search_tickets", map[string]any{"query": "login"}), toolUseBlock("toolu_2", "search_tickets", map[string]any{"query": "password"})},
		{textBlock("TKT-3 matches both.")},
	}}
	d := &desk{}
	clk := newFakeClock()
	ex, err := nodes.NewExecutor([]*nodes.Tool{d.searchTool(t)}, nodes.WithLedger(newMemLedger(t, clk.Now)))
	if err != nil {
		t.Fatal(err)
	}
	agent, err := nodes.NewAgent(nodes.FromLangchaingo(newAnthropicLLM(t, srv)), ex, nodes.AgentOptions{System: "You are a support agent."})
	if err != nil {
		t.Fatal(err)
	}
	r, err := agent.Compile(graph.WithSaver(checkpoint.NewMemorySaver(clk.Now)))
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Invoke(context.Background(), "th", userSays("find the login and password tickets"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != graph.StatusDone || d.calls.get("search_tickets") != 2 {
		t.Fatalf("status %s, %d searches, want done after 2", res.Status, d.calls.get("search_tickets"))
	}
	reqs := srv.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want 2", len(reqs))
	}
	type block struct{ Type, Text, ID, ToolUseID string }
	var got [][]block
	for _, turn := range anthropicTurns(reqs[1].Messages) {
		var bs []block
		for _, b := range turn.Content {
			bs = append(bs, block{b.Type, b.Text, b.ID, b.ToolUseID})
		}
		got = append(got, bs)
	}
	want := [][]block{
		{{Type: "text", Text: "find the login and password tickets"}},
		{{Type: "text", Text: "Searching both."}, {Type: "tool_use", ID: "toolu_1"}, {Type: "tool_use", ID: "toolu_2"}},
		{{Type: "tool_result", ToolUseID: "toolu_1"}, {Type: "tool_result", ToolUseID: "toolu_2"}},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("turns of the second request (-want +got):\n%s", d)
	}
	last := res.Values.Messages[len(res.Values.Messages)-1]
	if last.Role != nodes.RoleAssistant || last.Content != "TKT-3 matches both." {
		t.Errorf("last message %+v", last)
	}
}

// ollamaServer is a fake of Ollama's chat API that counts requests.
type ollamaServer struct {
	mu   sync.Mutex
	reqs int
}

func (s *ollamaServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.reqs++
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"model": "llama-test", "created_at": "2026-01-01T00:00:00Z", "message": map[string]any{"role": "assistant", "content": "Hi."}, "done": true})
}

func (s *ollamaServer) requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reqs
}

// TestFromLangchaingoOllama: langchaingo's Ollama client has no tools, so
// the adapter refuses a call with tools, tool calls or tool results with a
// *ClientLimitError naming the provider and model, before any request,
// and passes a conversation without them.
func TestFromLangchaingoOllama(t *testing.T) {
	ping := []nodes.Definition{{Name: "ping", Description: "Ping."}}
	user := nodes.Message{Role: nodes.RoleUser, Content: "hi"}
	tests := []struct {
		name  string
		msgs  []nodes.Message
		tools []nodes.Definition
		want  *nodes.ClientLimitError // nil: the call goes through
	}{
		{"no tools", []nodes.Message{user}, nil, nil},
		{"tools bound", []nodes.Message{user}, ping, &nodes.ClientLimitError{Provider: "ollama", Model: "llama-test", What: `tools (1 bound, first "ping")`}},
		{"tool calls", []nodes.Message{user, {Role: nodes.RoleAssistant, ToolCalls: []nodes.ToolCall{call("c1", "ping", "{}")}}}, nil,
			&nodes.ClientLimitError{Provider: "ollama", Model: "llama-test", What: "the tool calls of message 1"}},
		{"tool result", []nodes.Message{user, {Role: nodes.RoleTool, ToolCallID: "c1", Content: "pong"}}, nil,
			&nodes.ClientLimitError{Provider: "ollama", Model: "llama-test", What: `the tool result of message 1 (call "c1")`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := &ollamaServer{}
			hs := httptest.NewServer(srv)
			defer hs.Close()
			llm, err := ollama.New(ollama.WithServerURL(hs.URL), ollama.WithModel("llama-test"), ollama.WithHTTPClient(hs.Client()))
			if err != nil {
				t.Fatal(err)
			}
			got, err := nodes.FromLangchaingo(llm, llms.WithModel("llama-test")).Generate(context.Background(), tc.msgs, tc.tools)
			if tc.want == nil {
				if err != nil || got.Content != "Hi." || srv.requests() != 1 {
					t.Fatalf("Generate: %+v, %v after %d requests", got, err, srv.requests())
				}
				return
			}
			var le *nodes.ClientLimitError
			if !errors.Is(err, nodes.ErrClientLimit) || !errors.As(err, &le) {
				t.Fatalf("Generate: %+v, %v, want a *ClientLimitError", got, err)
			}
			if d := cmp.Diff(tc.want, le); d != "" {
				t.Errorf("error (-want +got):\n%s", d)
			}
			if msg := err.Error(); !strings.Contains(msg, "ollama") || !strings.Contains(msg, `"llama-test"`) {
				t.Errorf("the error names neither the provider nor the model: %v", err)
			}
			if n := srv.requests(); n != 0 {
				t.Errorf("%d requests were made", n)
			}
		})
	}
}
