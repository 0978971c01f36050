package nodes

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"sync"

	"github.com/lockstepgo/lockstep/graph"
)

// MessageChunk is a piece of a model's answer as it arrives: the Data of
// a graph.EventMessages event. Joined in order, the Content of a
// message's chunks is the message's Content, and the Args of the chunks
// of one tool call (by Index) are its Arguments.
type MessageChunk struct {
	// MessageID names the message the chunk belongs to: the task's ID
	// and the model call's number among the node's calls in this process
	// ("<task ID>/<n>"), so that a node's retry streams a new message.
	MessageID string
	Node      string // the model node
	Content   string // text of the answer
	// ToolCall is set on a chunk of a tool call the model asks for.
	ToolCall *ToolCallChunk
}

// ToolCallChunk is a piece of a tool call as it arrives: Index numbers
// the calls of the message from 0; ID and Name come with a call's first
// chunk, Args with any.
type ToolCallChunk struct {
	Index int
	ID    string
	Name  string
	Args  string
}

// streamKey carries a model call's *chunker.
type streamKey struct{}

// chunker streams the chunks of one model call.
type chunker struct {
	mu      sync.Mutex
	id      string
	node    string
	ctx     context.Context // the task's, for graph.EmitMessage
	calls   int             // tool calls started so far
	stopped bool
}

// StreamChunk sends c, a piece of the answer of the model call ctx
// belongs to, to the run's stream (graph.EventMessages), filling its
// MessageID and Node. A Model implementation calls it while Generate
// runs; FromLangchaingo's adapter does, from its client's streaming
// callback. It reports false, doing nothing, when the run is not
// streamed (see Streamed) or its consumer stopped reading.
func StreamChunk(ctx context.Context, c MessageChunk) bool {
	ch, _ := ctx.Value(streamKey{}).(*chunker)
	if ch == nil {
		return false
	}
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.stopped {
		return false
	}
	c.MessageID, c.Node = ch.id, ch.node
	if !graph.EmitMessage(ch.ctx, c) {
		ch.stopped = true
	}
	return !ch.stopped
}

// Streamed reports whether a model call made with ctx is streamed: a
// Model asks its client for a token stream only then (a run that is not
// streamed costs nothing extra).
func Streamed(ctx context.Context) bool {
	ch, _ := ctx.Value(streamKey{}).(*chunker)
	return ch != nil
}

// streamCall returns ctx for the model call n of node's task, carrying a
// chunker when the run is streamed.
func streamCall(ctx context.Context, node string, n int) context.Context {
	if !graph.Streaming(ctx) {
		return ctx
	}
	info, _ := graph.TaskFrom(ctx)
	return context.WithValue(ctx, streamKey{}, &chunker{id: info.TaskID + "/" + strconv.Itoa(n), node: node, ctx: ctx})
}

// toolDelta is one element of the tool-call delta langchaingo's OpenAI
// client hands its streaming callback (a JSON array of them).
type toolDelta struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function *struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// streamLangchaingo is the streaming callback of a langchaingo call: a
// chunk is the text of the answer, or, for the OpenAI-compatible client,
// the JSON array of the tool-call deltas it received (a new call has a
// type; a delta without one continues the last call's arguments).
func streamLangchaingo(ctx context.Context, chunk []byte) {
	ch, _ := ctx.Value(streamKey{}).(*chunker)
	if ch == nil || len(chunk) == 0 {
		return
	}
	if deltas, ok := toolDeltas(chunk); ok {
		for _, d := range deltas {
			ch.mu.Lock()
			if d.Type != "" {
				ch.calls++
			}
			idx := max(ch.calls-1, 0)
			ch.mu.Unlock()
			tc := &ToolCallChunk{Index: idx, ID: d.ID, Args: d.Function.Arguments}
			if d.Type != "" {
				tc.Name = d.Function.Name
			}
			StreamChunk(ctx, MessageChunk{ToolCall: tc})
		}
		return
	}
	StreamChunk(ctx, MessageChunk{Content: string(chunk)})
}

// toolDeltas parses chunk as the OpenAI client's tool-call deltas: a JSON
// array of objects that each have a function.
func toolDeltas(chunk []byte) ([]toolDelta, bool) {
	if !strings.HasPrefix(string(chunk), `[{`) {
		return nil, false
	}
	var ds []toolDelta
	if json.Unmarshal(chunk, &ds) != nil || len(ds) == 0 {
		return nil, false
	}
	for _, d := range ds {
		if d.Function == nil {
			return nil, false
		}
	}
	return ds, true
}
