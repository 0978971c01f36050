package nodes

import (
	"encoding/json"
	"maps"
	"slices"
	"sync"

	"github.com/lockstepgo/lockstep/internal/canon"
)

// MemoEntry is a memoised read result. It is stored in the agent's state
// (a merge field), so a thread's memo is checkpointed with it and a resumed
// or later run still hits. Results are redacted before they are stored.
type MemoEntry struct {
	Tool    string          `json:"tool"`
	Version string          `json:"version"`
	Result  json.RawMessage `json:"result"`
}

// MemoStore is where the executor reads and writes memo entries for one
// call. It must be safe for concurrent use.
type MemoStore interface {
	// Get returns the entry under key.
	Get(key string) (MemoEntry, bool)
	// Put stores an entry.
	Put(key string, e MemoEntry)
}

// Memo is a MemoStore over a thread's saved entries (read-only) plus the
// entries added during one node execution, which the node writes back to
// the state.
type Memo struct {
	mu    sync.Mutex
	saved map[string]MemoEntry
	added map[string]MemoEntry
}

// NewMemo returns a Memo that reads saved (which it does not modify).
func NewMemo(saved map[string]MemoEntry) *Memo {
	return &Memo{saved: saved, added: map[string]MemoEntry{}}
}

// Get implements MemoStore.
func (m *Memo) Get(key string) (MemoEntry, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.added[key]; ok {
		return e, true
	}
	e, ok := m.saved[key]
	return e, ok
}

// Put implements MemoStore.
func (m *Memo) Put(key string, e MemoEntry) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e.Result = slices.Clone(e.Result)
	m.added[key] = e
}

// Added returns the entries put since NewMemo (a copy), or nil.
func (m *Memo) Added() map[string]MemoEntry {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.added) == 0 {
		return nil
	}
	return maps.Clone(m.added)
}

// MemoKey is the memo key of a call: a length-prefixed SHA-256 (canon.Hash)
// over a domain tag, the tool's name, its version and the canonical
// arguments. So key order, number spelling and whitespace do not change
// it, and a new tool version never sees an old version's results.
func MemoKey(tool, version string, canonArgs []byte) string {
	return canon.Hash([]byte("lockstep/memo/v1"), []byte(tool), []byte(version), canonArgs)
}

// IdempotencyKey is the idempotency key of a write: a length-prefixed
// SHA-256 over a domain tag, the scope (the thread, or a user), the tool's
// name and the canonical arguments. It is deterministic (the same in every
// process, never random or time-based) and injective over its tuple: no
// two different (scope, tool, arguments) share a key, whatever bytes they
// hold.
func IdempotencyKey(scope, tool string, canonArgs []byte) string {
	return canon.Hash([]byte("lockstep/idempotency/v1"), []byte(scope), []byte(tool), canonArgs)
}

// IdempotencyKeyNS is the idempotency key of a write made inside a
// subgraph (graph.TaskInfo.NS), scoped by the thread it runs in: as
// IdempotencyKey, over the namespace too, under its own domain tag. The
// namespace names the task that runs the subgraph, so the same write in
// two subgraph tasks of a thread (two runs of a subgraph node, or two
// subgraph nodes) is two operations, and the same task run again after a
// crash or a pause is the same one. With an empty ns it is
// IdempotencyKey(scope, tool, canonArgs).
func IdempotencyKeyNS(scope, ns, tool string, canonArgs []byte) string {
	if ns == "" {
		return IdempotencyKey(scope, tool, canonArgs)
	}
	return canon.Hash([]byte("lockstep/idempotency/ns/v1"), []byte(scope), []byte(ns), []byte(tool), canonArgs)
}

// NaturalIdempotencyKey is the idempotency key of a write whose tool names
// a natural key (NaturalKey): a length-prefixed SHA-256 over a domain tag,
// the tool's name and the natural key, without the thread, so the same
// natural key is one operation across threads.
func NaturalIdempotencyKey(tool, natural string) string {
	return canon.Hash([]byte("lockstep/idempotency/natural/v1"), []byte(tool), []byte(natural))
}
