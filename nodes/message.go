package nodes

import (
	"encoding/json"
)

// Role says who wrote a message.
type Role string

// The roles, as in the chat APIs (and langchaingo's ChatMessageType:
// system, human, ai, tool).
const (
	RoleSystem    Role = "system"
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// ToolCall is one tool call requested by the model: langchaingo's
// llms.ToolCall with its FunctionCall flattened.
type ToolCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"` // JSON text, as the model sent it
}

// Message is one chat message: JSON-friendly, and mappable to and from
// langchaingo's llms.MessageContent (text parts, tool calls, tool call
// responses).
type Message struct {
	Role    Role   `json:"role"`
	Content string `json:"content,omitempty"`
	// ToolCalls are the calls an assistant message requests.
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	// ToolCallID is the call a tool message answers.
	ToolCallID string `json:"tool_call_id,omitempty"`
	// Name is the tool's name on a tool message (optional otherwise).
	Name string `json:"name,omitempty"`
	// Meta records what the executor did for a tool message. It is for
	// the runtime and for people; adapters do not send it to the model.
	Meta *ToolMeta `json:"meta,omitempty"`
}

// ToolMeta is the executor's account of one tool message.
type ToolMeta struct {
	Tool     string `json:"tool"`                // the tool called (exact name)
	ArgsHash string `json:"args_hash,omitempty"` // approval.ArgsHash of the arguments run (or asked about)
	Status   Status `json:"status"`              // what was decided
	// Approval is the outcome of the approval asked for this call, if one
	// was asked ("approved", "rejected", "edited", "expired").
	Approval string `json:"approval,omitempty"`
	// Asked counts the approval requests raised for this call.
	Asked int `json:"asked,omitempty"`
	// Key is the idempotency key of a write.
	Key string `json:"idempotency_key,omitempty"`
	// Fallback names the fallback tool that produced the result.
	Fallback string `json:"fallback,omitempty"`
}

// Observation is the content of a tool message: what the model reads.
type Observation struct {
	Status Status          `json:"status"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  string          `json:"error,omitempty"`
	// Note tells the model what the status means for what it does next.
	Note string `json:"note,omitempty"`
	// ReviewerNote is the human reviewer's note on a decision.
	ReviewerNote string `json:"reviewer_note,omitempty"`
	Fallback     string `json:"fallback,omitempty"`
	Key          string `json:"idempotency_key,omitempty"`
}

// AgentState is a ready-made agent state: the conversation (appended to)
// and the thread's memo (merged into), both checkpointed with the thread.
type AgentState struct {
	Messages []Message            `lockstep:"append"`
	Memo     map[string]MemoEntry `lockstep:"merge"`
}

// LastToolCalls returns the tool calls of the last message when it is an
// assistant message, and nil otherwise: the router after a model node
// sends the run to the tool node when it is not empty.
func LastToolCalls(msgs []Message) []ToolCall {
	if len(msgs) == 0 {
		return nil
	}
	last := msgs[len(msgs)-1]
	if last.Role != RoleAssistant {
		return nil
	}
	return last.ToolCalls
}
