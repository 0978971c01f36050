package nodes_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/tmc/langchaingo/llms"
	"github.com/tmc/langchaingo/llms/openai"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/nodes"
)

// streamServer speaks OpenAI's streamed chat completions: each request
// gets the next answer as chunks (server-sent events), and it records
// whether the request asked for a stream.
type streamServer struct {
	mu      sync.Mutex
	answers [][]map[string]any // deltas per request
	n       int
	streams []bool
}

func (s *streamServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Stream bool `json:"stream"`
	}
	_ = json.NewDecoder(r.Body).Decode(&req)
	s.mu.Lock()
	deltas := s.answers[s.n%len(s.answers)]
	s.n++
	s.streams = append(s.streams, req.Stream)
	s.mu.Unlock()
	if !req.Stream {
		// Not streamed: the joined answer, as one completion.
		msg := map[string]any{"role": "assistant"}
		content := ""
		var calls []map[string]any
		for _, d := range deltas {
			if c, ok := d["content"].(string); ok {
				content += c
			}
			for _, tc := range toolCallsOf(d) {
				if tc["type"] != nil {
					calls = append(calls, map[string]any{"id": tc["id"], "type": "function", "function": map[string]any{"name": fn(tc)["name"], "arguments": fn(tc)["arguments"]}})
				} else {
					last := fn(calls[len(calls)-1])
					last["arguments"] = last["arguments"].(string) + fn(tc)["arguments"].(string)
				}
			}
		}
		msg["content"] = content
		if len(calls) > 0 {
			msg["tool_calls"] = calls
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"id": "c", "object": "chat.completion", "created": 1, "model": "gpt-test",
			"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": "stop"}}})
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	for i, d := range deltas {
		var finish any
		if i == len(deltas)-1 {
			finish = "stop"
		}
		b, _ := json.Marshal(map[string]any{"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "gpt-test",
			"choices": []any{map[string]any{"index": 0, "delta": d, "finish_reason": finish}}})
		fmt.Fprintf(w, "data: %s\n\n", b)
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}

func toolCallsOf(d map[string]any) []map[string]any {
	var out []map[string]any
	if tcs, ok := d["tool_calls"].([]any); ok {
		for _, tc := range tcs {
			out = append(out, tc.(map[string]any))
		}
	}
	return out
}

func fn(tc map[string]any) map[string]any { return tc["function"].(map[string]any) }

func newCall(id, name string) map[string]any {
	return map[string]any{"tool_calls": []any{map[string]any{"index": 0, "id": id, "type": "function", "function": map[string]any{"name": name, "arguments": ""}}}}
}

func moreArgs(args string) map[string]any {
	return map[string]any{"tool_calls": []any{map[string]any{"index": 0, "function": map[string]any{"arguments": args}}}}
}

// TestStreamTokens: the agent on langchaingo's OpenAI-compatible client,
// against a local server that streams its answers in chunks, a tool call
// among them. A streamed run gets a messages event per chunk, with the
// node, the task and the message; the joined chunks equal the final
// messages. A run that is not streamed does not ask for a stream.
func TestStreamTokens(t *testing.T) {
	srv := &streamServer{answers: [][]map[string]any{
		{{"role": "assistant", "content": "Let me "}, {"content": "search."}, newCall("call_1", "search_tickets"), moreArgs(`{"query"`), moreArgs(`:"login"}`)},
		{{"role": "assistant", "content": "TKT-3 is "}, {"content": "the login "}, {"content": "ticket."}},
	}}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	llm, err := openai.New(openai.WithBaseURL(hs.URL), openai.WithToken("test"), openai.WithModel("gpt-test"), openai.WithHTTPClient(hs.Client()))
	if err != nil {
		t.Fatal(err)
	}
	d := &desk{}
	ex, err := nodes.NewExecutor([]*nodes.Tool{d.searchTool(t)})
	if err != nil {
		t.Fatal(err)
	}
	agent, err := nodes.NewAgent(nodes.FromLangchaingo(llm, llms.WithModel("gpt-test")), ex, nodes.AgentOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := agent.Compile(graph.WithSaver(checkpoint.NewMemorySaver(nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	type joined struct {
		Task    string
		Content string
		Calls   map[int]nodes.ToolCall
	}
	msgs := map[string]*joined{}
	var order []string
	var final []nodes.Message
	for e, err := range r.Stream(ctx, "th", graph.StartWith(userSays("find the login ticket"))) {
		if err != nil {
			t.Fatal(err)
		}
		switch e.Kind {
		case graph.EventMessages:
			c, ok := e.Data.(nodes.MessageChunk)
			if !ok || e.Node != nodes.AgentModelNode || c.Node != e.Node || !strings.HasPrefix(c.MessageID, e.TaskID+"/") {
				t.Fatalf("messages event %+v (data %T)", e, e.Data)
			}
			j := msgs[c.MessageID]
			if j == nil {
				j = &joined{Task: e.TaskID, Calls: map[int]nodes.ToolCall{}}
				msgs[c.MessageID] = j
				order = append(order, c.MessageID)
			}
			j.Content += c.Content
			if tc := c.ToolCall; tc != nil {
				call := j.Calls[tc.Index]
				if tc.ID != "" {
					call.ID = tc.ID
				}
				if tc.Name != "" {
					call.Name = tc.Name
				}
				call.Arguments += tc.Args
				j.Calls[tc.Index] = call
			}
		case graph.EventValues:
			final = e.Values.Messages
		}
	}
	var assistants []nodes.Message
	for _, m := range final {
		if m.Role == nodes.RoleAssistant {
			assistants = append(assistants, m)
		}
	}
	if len(assistants) != 2 || len(order) != 2 {
		t.Fatalf("%d assistant messages, %d streamed messages; want 2 and 2", len(assistants), len(order))
	}
	for i, id := range order {
		j, m := msgs[id], assistants[i]
		var calls []nodes.ToolCall
		for k := range len(j.Calls) {
			calls = append(calls, j.Calls[k])
		}
		got := nodes.Message{Role: nodes.RoleAssistant, Content: j.Content, ToolCalls: calls}
		want := nodes.Message{Role: m.Role, Content: m.Content, ToolCalls: m.ToolCalls}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("message %d: joined chunks differ from the final message (-want +got):\n%s", i, diff)
		}
	}
	if msgs[order[0]].Task == msgs[order[1]].Task {
		t.Errorf("both messages name task %s: want each its model task's", msgs[order[0]].Task)
	}

	// Not streamed: the client is not asked for a stream.
	if _, err := r.Invoke(ctx, "th2", userSays("find the login ticket")); err != nil {
		t.Fatal(err)
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if diff := cmp.Diff([]bool{true, true, false, false}, srv.streams); diff != "" {
		t.Errorf("requests that asked for a stream (-want +got):\n%s", diff)
	}
}
