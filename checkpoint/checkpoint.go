package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/lockstepgo/lockstep/internal/strictjson"
)

// Reserved channel names. Channels whose names start with "__" belong to the
// runtime; state channels are named after the exported fields of the state
// type.
const (
	// ChannelStart holds the input of a run until the __start__ task copies
	// it into the state.
	ChannelStart = "__start__"
	// ChannelSends holds the pending Sends (push tasks) of the next step.
	ChannelSends = "__pregel_tasks"

	// ChannelError is the pending write of a task that failed. Its value is
	// a JSON TaskError.
	ChannelError = "__error__"
	// ChannelInterrupt is the pending write of a task that paused. Its value
	// is a JSON array of interrupt.Interrupt ({"id":..., "value":...}).
	ChannelInterrupt = "__interrupt__"
	// ChannelResume holds the answers given to a task's interrupts. Its
	// value is a JSON object from interrupt ID to answer.
	ChannelResume = "__resume__"
	// ChannelBreakpoint marks a checkpoint at which a run stopped on a
	// static breakpoint. Its value is a JSON Breakpoint.
	ChannelBreakpoint = "__breakpoint__"
	// ChannelNoWrites is the write a task that finished without writing
	// anything records, so that it counts as finished.
	ChannelNoWrites = "__no_writes__"
	// ChannelStepPrefix prefixes the pending writes of durable steps inside
	// a task: "__step__:<n>" holds the result of the task's n-th step as a
	// JSON StepResult.
	ChannelStepPrefix = "__step__:"

	// BranchPrefix prefixes the trigger channel of a node: "branch:to:<node>".
	BranchPrefix = "branch:to:"
	// JoinPrefix prefixes the barrier channel of a join edge:
	// "join:<source>+<source>:<node>". Its value is the sorted JSON array of
	// the sources seen so far.
	JoinPrefix = "join:"

	// NullTaskID owns markers that belong to a checkpoint rather than to
	// a task (a breakpoint stop).
	NullTaskID = "00000000-0000-0000-0000-000000000000"
)

const commandTaskPrefix = "00000000-0000-0000-0000-"

// CommandTaskID names the task that owns the state writes of the n-th
// command (n ≥ 1) sent to a checkpoint, such as a resume's Update. Each
// command gets its own task so that later commands add to earlier ones
// instead of colliding with them; IDs sort in command order.
func CommandTaskID(n int) string { return fmt.Sprintf("%s%012x", commandTaskPrefix, n) }

// IsCommandTask reports whether id is NullTaskID or a CommandTaskID: a task
// that is not a node.
func IsCommandTask(id string) bool { return strings.HasPrefix(id, commandTaskPrefix) }

// Source says what produced a checkpoint.
type Source string

// The sources of a checkpoint, as in LangGraph.
const (
	SourceInput  Source = "input"  // new input was accepted
	SourceLoop   Source = "loop"   // a superstep completed
	SourceUpdate Source = "update" // the state was updated by hand (UpdateState)
	SourceFork   Source = "fork"   // a replay or copy of an older checkpoint
)

// Metadata describes a checkpoint. It is stored as one flat JSON object:
// "source", "step", "parents", "run_id", "run-key", "topology-fp" and the
// Extra keys side by side, so that List filters can match any of them by
// equality (see MetadataMatches).
//
// Extra values come back from every saver as their JSON round trip with
// numbers decoded as json.Number, never as the Go type they were saved
// with: int(2), int64(2) and 2.0 come back as json.Number("2"), 1.5 as
// json.Number("1.5"), and uint64(1<<63+1) or 9007199254740993 keep every
// digit (read them with Int64, Float64 or strconv). A json.Number whose
// value is an integer that fits an int64 is written as that integer
// ("5.0" comes back as "5"); other numbers keep their text. Arrays and
// objects come back as []any and map[string]any. UnmarshalJSON decodes the
// same way, so a Metadata read from the SQLite saver's metadata column
// equals the one the in-memory saver returns.
type Metadata struct {
	Source  Source
	Step    int
	Parents map[string]string // namespace → checkpoint ID of the parent graph; empty at the root
	RunID   string            // the run that wrote the checkpoint
	// RunKey is the idempotency key the caller gave the run that wrote
	// this input checkpoint (graph.RunKey), stored as "run-key" (a name no
	// caller key can have, so that no metadata written before RunKey
	// existed reads as one; filter on it with RunKeyFilter); empty on
	// every other checkpoint. At most MaxRunKeyBytes of UTF-8.
	RunKey string
	// Topology is the fingerprint of the topology of the graph that
	// wrote this checkpoint (see Topology and TopologyStore), stored as
	// "topology-fp" (a name no caller key can have; filter on it with
	// TopologyFilter); empty on checkpoints written before lockstep
	// recorded it, or by code that does not. When set it is a valid
	// fingerprint (ValidFingerprint).
	Topology string
	// Durability is the durability mode of the run that wrote the
	// checkpoint (graph.WithDurability, graph.Durability): "sync",
	// "async" or "exit", stored as "durability-mode" (a name no caller
	// key can have; filter on it with DurabilityFilter). A checkpoint
	// written by UpdateState, by a subgraph's run or by a run with no
	// saver mode of its own says "sync". It is empty on checkpoints
	// written before lockstep recorded it, or by code that does not:
	// their mode is unknown (before every mode existed it was sync).
	// When set it is one of DurabilityModes.
	Durability string
	Extra      map[string]any // caller metadata: string, bool or number values (ValidateExtra)
}

// DurabilityModes are the values Metadata.Durability may hold when set,
// graph's durability modes by name.
var DurabilityModes = [...]string{"sync", "async", "exit"}

// validDurability reports whether d may be stored as Metadata.Durability.
func validDurability(d string) bool {
	return d == "" || d == DurabilityModes[0] || d == DurabilityModes[1] || d == DurabilityModes[2]
}

// DurabilityFilter is the List filter key that matches Metadata.Durability.
const DurabilityFilter = "durability-mode"

// MaxRunKeyBytes bounds Metadata.RunKey.
const MaxRunKeyBytes = 256

// RunKeyFilter is the List filter key that matches Metadata.RunKey.
const RunKeyFilter = "run-key"

// TopologyFilter is the List filter key that matches Metadata.Topology.
const TopologyFilter = "topology-fp"

var reservedMetadataKeys = map[string]bool{"source": true, "step": true, "parents": true, "run_id": true, RunKeyFilter: true, TopologyFilter: true, DurabilityFilter: true}

// MarshalJSON flattens Extra next to the fixed keys (which win over Extra
// keys of the same name), writing a json.Number that holds an integer in
// int64 range as a plain integer. It returns an error when an Extra value
// does not encode as JSON (a channel, NaN, a malformed json.Number).
func (m Metadata) MarshalJSON() ([]byte, error) {
	obj := make(map[string]any, 4+len(m.Extra))
	for k, v := range m.Extra {
		if n, ok := v.(json.Number); ok {
			v = canonicalNumber(n)
		}
		obj[k] = v
	}
	obj["source"] = m.Source
	obj["step"] = m.Step
	parents := m.Parents
	if parents == nil {
		parents = map[string]string{}
	}
	obj["parents"] = parents
	if m.RunID != "" {
		obj["run_id"] = m.RunID
	}
	if m.RunKey != "" {
		obj[RunKeyFilter] = m.RunKey
	}
	if m.Topology != "" {
		obj[TopologyFilter] = m.Topology
	}
	if m.Durability != "" {
		obj[DurabilityFilter] = m.Durability
	}
	return json.Marshal(obj)
}

// UnmarshalJSON reads the flat form written by MarshalJSON; keys other
// than the fixed ones go to Extra, numbers as json.Number. It is as
// strict as MarshalJSON's output: it returns an error for JSON that
// MarshalJSON could not have written (a duplicate key, invalid UTF-8, a
// lone surrogate escape, null or another type for a fixed key, a step
// that is not an integer, a missing source, step or parents), naming the
// key whose value does not decode.
func (m *Metadata) UnmarshalJSON(b []byte) error {
	if err := strictjson.CheckJSON(b); err != nil {
		return err
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	if raw == nil {
		return errors.New("metadata is null")
	}
	*m = Metadata{}
	for _, k := range [...]string{"source", "step", "parents"} {
		if _, ok := raw[k]; !ok {
			return fmt.Errorf("metadata has no %q", k)
		}
	}
	for k, v := range raw {
		var err error
		if reservedMetadataKeys[k] && string(v) == "null" {
			return fmt.Errorf("metadata key %q: null, which MarshalJSON never writes", k)
		}
		switch k {
		case "source":
			err = json.Unmarshal(v, &m.Source)
		case "step":
			err = json.Unmarshal(v, &m.Step)
		case "parents":
			m.Parents, err = decodeParents(v)
		case "run_id":
			err = json.Unmarshal(v, &m.RunID)
		case RunKeyFilter:
			err = json.Unmarshal(v, &m.RunKey)
		case TopologyFilter:
			err = json.Unmarshal(v, &m.Topology)
		case DurabilityFilter:
			if err = json.Unmarshal(v, &m.Durability); err == nil && (m.Durability == "" || !validDurability(m.Durability)) {
				err = fmt.Errorf("durability mode %q is not one of %q", m.Durability, DurabilityModes)
			}
		default:
			var x any
			if x, err = decodeValue(v); err == nil {
				if m.Extra == nil {
					m.Extra = make(map[string]any)
				}
				m.Extra[k] = x
			}
		}
		if err != nil {
			return fmt.Errorf("metadata key %q: %w", k, err)
		}
	}
	return nil
}

// decodeParents decodes the parents object: namespace → checkpoint ID,
// every ID a string (json.Unmarshal would read null as "").
func decodeParents(v json.RawMessage) (map[string]string, error) {
	var ps map[string]json.RawMessage
	if err := json.Unmarshal(v, &ps); err != nil {
		return nil, err
	}
	out := make(map[string]string, len(ps))
	for ns, id := range ps {
		if len(id) == 0 || id[0] != '"' {
			return nil, fmt.Errorf("parent of namespace %q is not a string", ns)
		}
		var s string
		if err := json.Unmarshal(id, &s); err != nil {
			return nil, err
		}
		out[ns] = s
	}
	return out, nil
}

// ValidateExtra checks caller metadata: keys must match the filter-key rule
// (see ValidFilterKey) and must not shadow a fixed key, and values must be
// strings, bools or numbers that JSON can hold (finite floats, json.Number
// holding a JSON number). It returns an error wrapping ErrInvalid naming
// the key.
func ValidateExtra(extra map[string]any) error {
	for k, v := range extra {
		if !ValidFilterKey(k) || reservedMetadataKeys[k] {
			return fmt.Errorf("%w: metadata key %q is reserved or not [A-Za-z0-9_]{1,64}", ErrInvalid, k)
		}
		switch v := v.(type) {
		case string, bool, int, int32, int64, uint, uint32, uint64:
		case float32:
			if !finite(float64(v)) {
				return fmt.Errorf("%w: metadata key %q: %v is not a JSON number", ErrInvalid, k, v)
			}
		case float64:
			if !finite(v) {
				return fmt.Errorf("%w: metadata key %q: %v is not a JSON number", ErrInvalid, k, v)
			}
		case json.Number:
			if _, _, _, ok := decimalOf(string(v)); !ok || !json.Valid([]byte(v)) {
				return fmt.Errorf("%w: metadata key %q: %q is not a JSON number", ErrInvalid, k, string(v))
			}
		default:
			return fmt.Errorf("%w: metadata key %q: value of type %T (want string, bool or number)", ErrInvalid, k, v)
		}
	}
	return nil
}

// ValidFilterKey reports whether k may be used as a metadata key in a List
// filter: 1 to 64 characters from [A-Za-z0-9_], RunKeyFilter,
// TopologyFilter or DurabilityFilter. Savers must reject other keys (they
// are never interpolated into a query).
func ValidFilterKey(k string) bool {
	if k == RunKeyFilter || k == TopologyFilter || k == DurabilityFilter {
		return true
	}
	if len(k) == 0 || len(k) > 64 {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return false
		}
	}
	return true
}

// Blob is one stored piece of a channel's value. A channel whose value was
// replaced has one blob holding the whole value; a channel that was appended
// to stores only the appended items, as an Append blob whose Base is the
// version it extends. Reading a channel walks Base links back to a blob that
// is not an Append (or to an Append whose Base is empty: appended to
// nothing) and concatenates the items oldest first. Base may be any
// earlier version of the channel's chain, not only the previous one: the
// graph runtime stores the items appended since an earlier version in one
// blob, or the whole value again, so that the chain to read stays short.
type Blob struct {
	Version string          // ID of the checkpoint that wrote this blob
	Base    string          // Append only: version of the value this extends; "" = the empty value
	Append  bool            // Data is a JSON array of items appended to the Base value
	Data    json.RawMessage // the value, or for Append the appended items
}

// Checkpoint is the saved state of a thread at a superstep boundary.
//
// Versions maps every channel that has a value to its version, which is the
// ID of the checkpoint that last changed it. Channels maps channels to
// their data: in a PutRequest it holds exactly the channels this checkpoint
// changed (those whose version is the checkpoint's own ID), one Blob each;
// in a Tuple returned by a saver it holds every channel in Versions as its
// chain of blobs, oldest first.
type Checkpoint struct {
	ID        string
	ParentID  string
	CreatedAt time.Time
	Metadata  Metadata
	Versions  map[string]string
	Channels  map[string][]Blob
	// Mark is the highest channel version at the time the thread last
	// passed a static breakpoint or was resumed. A breakpoint fires only
	// when some channel is newer than Mark.
	Mark string
}

// Ref names a checkpoint. An empty ID means the thread's head.
type Ref struct {
	Thread string
	NS     string // "" is the root graph
	ID     string
}

// String describes the ref for messages: the quoted thread, then the
// namespace and checkpoint ID when they are set.
func (r Ref) String() string {
	s := "thread " + strconv.Quote(r.Thread)
	if r.NS != "" {
		s += " ns " + strconv.Quote(r.NS)
	}
	if r.ID != "" {
		s += " checkpoint " + strconv.Quote(r.ID)
	}
	return s
}

// Write is one pending write of a task: a value for a channel.
type Write struct {
	Channel string
	Value   json.RawMessage
}

// TaskWrites are the writes of one task, saved together.
type TaskWrites struct {
	TaskID string
	Node   string // the node the task runs; "" for the null task
	Path   string // "pull" or "push:<n>", for display
	Writes []Write
}

// PendingWrite is a saved write of a task against a checkpoint.
type PendingWrite struct {
	TaskID  string
	Node    string
	Path    string
	Channel string
	Value   json.RawMessage
}

// Tuple is a checkpoint with the writes saved against it.
type Tuple struct {
	Thread     string
	NS         string
	Checkpoint Checkpoint
	// Pending holds the writes saved against the checkpoint, ordered by
	// task ID, then by WriteIndex.
	Pending []PendingWrite
}

// Ref returns the tuple's reference.
func (t *Tuple) Ref() Ref { return Ref{Thread: t.Thread, NS: t.NS, ID: t.Checkpoint.ID} }

// Lease is a run's claim on a thread. Only the lease owner may add
// checkpoints or pending writes; a lease that is not renewed within TTL may
// be taken over by another owner.
//
// Every time the lease passes to an owner that does not hold it (it was
// free, expired, or taken back), the thread's lease epoch grows by one; a
// renewal, and a save by the holder, keep it. The epoch so counts the
// claims on the thread: the run holding epoch n is the successor of every
// run that held an epoch below it. [LeaseInspector] reports it.
type Lease struct {
	// Owner is the run that claims the thread (the graph runtime's run ID).
	Owner string
	// Runner is the runner the run belongs to: the graph runtime's
	// Runnable (see graph.WithRunner). Optional; it is stored with the
	// lease, named in a *BusyError, and lets TakeBack work.
	Runner string
	TTL    time.Duration
	// Held fences the request (D17): it commits only while this owner
	// still holds the lease it took (live, or lapsed with nobody having
	// taken it since, so that the thread's epoch is still the one the
	// owner took it under). A Put, PutWrites or Claim with Held fails with
	// a *BusyError, writing nothing, when another owner holds the lease or
	// has released it since (Owner is then ""), so that a runner that lost
	// the thread (paused past its lease while another took over) is told
	// so, even when the runner that took it over has finished, and none of
	// its writes lands. The graph runtime sets it on every write and claim
	// of a run after the first that took the lease; a Claim with Held
	// renews only.
	Held bool
	// TakeBack names the one run whose live lease the request may take
	// over: a run of the same, non-empty Runner that has ended without
	// giving the lease back (its release failed: a full disk, an I/O
	// error), or a run of a killed process that had the same runner name.
	// The runner states that this run is not running; the saver takes
	// the lease over only while that run still holds it, so that a lease
	// that passed to another run since, even one of the same runner, is
	// waited out as any other. A runner learns whom to name from the
	// *BusyError that refused a request without TakeBack (SameRunner),
	// never by guessing: naming a run it cannot prove has ended would let
	// two live runs of the thread both write. "" takes nothing back; it
	// is ignored with Held. See TakesBack.
	TakeBack string
}

// TakesBack reports whether l may take over a live lease that owner of
// runner holds: l names owner in TakeBack, does not set Held, and names
// the same, non-empty runner. Savers apply this rule, in the transaction
// that reads the lease.
func (l Lease) TakesBack(owner, runner string) bool {
	return l.TakeBack != "" && l.TakeBack == owner && !l.Held && l.Runner != "" && l.Runner == runner
}

// LeaseInfo is a thread's lease as a saver stores it ([LeaseInspector]).
type LeaseInfo struct {
	Thread string
	NS     string
	// Owner is the run holding the lease (it may have expired: see Live);
	// "" once released.
	Owner string
	// Runner is the runner of Owner ("" when the owner named none, and
	// once released).
	Runner string
	// Epoch counts the claims on the thread (see Lease): the holder's, or
	// the last holder's once released. 0: never leased. Epochs start again
	// from 1 when a thread is deleted and written again.
	Epoch uint64
	// Until is when the lease ends unless renewed; zero once released.
	Until time.Time
}

// Live reports whether the lease is held at now.
func (l LeaseInfo) Live(now time.Time) bool { return l.Owner != "" && now.Before(l.Until) }

// PutRequest asks a saver to add a checkpoint to a thread.
type PutRequest struct {
	Thread     string
	NS         string
	Checkpoint Checkpoint
	// ParentWrites are the writes of the tasks that produced this
	// checkpoint. They are saved as pending writes of the parent checkpoint
	// in the same transaction, so history shows each task's result.
	ParentWrites []TaskWrites
	// Writes are saved as pending writes of the new checkpoint itself, in
	// the same transaction (a breakpoint marker, for example).
	Writes []TaskWrites
	// Fork accepts a parent that is not the thread's head (an update of an
	// older checkpoint, or a replay). Without it the parent must be the head.
	Fork bool
	// Lease is acquired when free or expired, and kept when the owner holds
	// it (Claim renews it).
	Lease Lease
	// Release drops the lease after the commit.
	Release bool
	// Joins run in the request's transaction, after its checks passed
	// and before it commits (see Join): only on a saver that is a
	// Joiner; package graph sets them on no other.
	Joins []Join
}

// WritesRequest asks a saver to add pending writes to the thread's head.
type WritesRequest struct {
	Ref     Ref // Ref.ID must be the head
	Tasks   []TaskWrites
	Lease   Lease
	Release bool
	// Joins run in the request's transaction, after its checks passed
	// and before it commits (see Join): only on a saver that is a
	// Joiner; package graph sets them on no other.
	Joins []Join
}

// GetOptions tune Get.
type GetOptions struct {
	// Have maps channels to versions the caller already holds. For a
	// channel whose version equals Have[ch], a saver may leave the chain
	// out of Tuple.Checkpoint.Channels; for an append chain that passes
	// through Have[ch], it may return only the blobs after it (the first
	// returned blob is then an Append whose Base is Have[ch]). Savers may
	// ignore Have and return whole chains; callers must accept both.
	Have map[string]string
}

// ListOptions filter a thread's checkpoints.
type ListOptions struct {
	// NS selects the namespace; AllNamespaces lists every namespace.
	NS            string
	AllNamespaces bool
	// Filter keeps checkpoints whose metadata has every key with an equal
	// value, as MetadataMatches decides (numbers compare by exact value
	// whatever their Go type, strings exactly). Keys must satisfy
	// ValidFilterKey.
	Filter map[string]any
	// Before keeps checkpoints whose ID is strictly smaller.
	Before string
	// Limit caps the result after filtering; 0 means no limit.
	Limit int
	// MetadataOnly asks for each checkpoint's ID, parent, creation time,
	// metadata and versions without its channels (Checkpoint.Channels
	// nil) or pending writes (Tuple.Pending nil): a look-up of history
	// that reads no state. A saver may ignore it and return whole tuples.
	MetadataOnly bool
}

// TaskError is the JSON value of an __error__ write.
type TaskError struct {
	Node    string `json:"node,omitempty"`
	Type    string `json:"type,omitempty"`
	Message string `json:"message"`
}

// Breakpoint is the JSON value of a __breakpoint__ write.
type Breakpoint struct {
	When  string   `json:"when"` // "before" or "after"
	Nodes []string `json:"nodes"`
}

// StepResult is the JSON value of a durable step's "__step__:<n>" write.
type StepResult struct {
	Name   string          `json:"name"`
	Result json.RawMessage `json:"result"`
}

// IsSpecial reports whether a write to channel replaces an earlier write of
// the same task to the same channel (error, interrupt, resume, breakpoint and
// durable step writes) instead of being ignored when one exists.
func IsSpecial(channel string) bool {
	switch channel {
	case ChannelError, ChannelInterrupt, ChannelResume, ChannelBreakpoint:
		return true
	}
	return stepSlot(channel) >= 0
}

// stepSlot returns n for a "__step__:<n>" channel and -1 otherwise.
func stepSlot(channel string) int {
	n, ok := strings.CutPrefix(channel, ChannelStepPrefix)
	if !ok {
		return -1
	}
	k, err := strconv.Atoi(n)
	if err != nil || k < 0 || strconv.Itoa(k) != n {
		return -1
	}
	return k
}

// WriteIndex is the position key a saver stores a write under, within its
// task: special channels have fixed negative indexes (error -1, interrupt
// -3, resume -4, breakpoint -5, durable step n -(1000+n)); other writes use
// their position pos in the task's write list. A write whose (task, index)
// already exists is replaced when IsSpecial, and otherwise ignored, so
// saving the same writes twice stores them once.
func WriteIndex(channel string, pos int) int {
	switch channel {
	case ChannelError:
		return -1
	case ChannelInterrupt:
		return -3
	case ChannelResume:
		return -4
	case ChannelBreakpoint:
		return -5
	}
	if k := stepSlot(channel); k >= 0 {
		return -(1000 + k)
	}
	return pos
}

// ThreadInfo summarises a thread for listing.
type ThreadInfo struct {
	Thread    string
	NS        string
	Head      string // ID of the head checkpoint
	Step      int
	Source    Source
	UpdatedAt time.Time
}

// PendingInterrupt is an interrupt that waits for an answer: it was raised
// by a task of a thread's head checkpoint, has not been answered, and the
// task has not finished since.
type PendingInterrupt struct {
	Thread       string
	NS           string
	CheckpointID string
	TaskID       string
	Node         string
	InterruptID  string
	Value        json.RawMessage
	// CreatedAt is when the task's interrupt write was first saved on
	// the checkpoint; saving the write again does not change it.
	CreatedAt time.Time
}

// InterruptQuery pages through pending interrupts, oldest first: in the
// order the tasks' interrupt writes were first saved (then by thread and
// interrupt ID). Pages are stable: a walk from "" to the last page lists
// each pending interrupt at most once, however often its write is saved
// again meanwhile (a write saved again keeps its place). An interrupt
// raised meanwhile by a new write is listed on a later page; one that a
// task adds by saving its interrupt write again comes at that write's
// place, so a walk already past it misses it (the next walk lists it).
type InterruptQuery struct {
	// After is the cursor returned by the previous page; "" starts at the
	// beginning.
	After string
	// Limit caps the page; 0 means 100.
	Limit int
}

// Sentinel errors returned by savers. Match them with errors.Is.
var (
	// ErrNotFound: the thread or checkpoint does not exist.
	ErrNotFound = errors.New("checkpoint: not found")
	// ErrConflict: the parent of a new checkpoint (or the checkpoint a
	// write or claim names) is not the thread's head. Nothing was written.
	ErrConflict = errors.New("checkpoint: conflict: not the thread's head")
	// ErrThreadBusy: another run holds a live lease on the thread (or
	// took the thread from the requesting run). Matches *BusyError.
	ErrThreadBusy = errors.New("checkpoint: thread is busy (leased by another run)")
	// ErrCorrupt: stored data does not decode or fails its checksum.
	ErrCorrupt = errors.New("checkpoint: corrupt data")
	// ErrInvalid: a request is malformed (empty thread, bad filter key...).
	ErrInvalid = errors.New("checkpoint: invalid request")
	// ErrClosed: the saver was closed.
	ErrClosed = errors.New("checkpoint: saver is closed")
	// ErrNotJoinable: the work of another store cannot commit in the
	// saver's transaction (D16): the saver keeps none it shares (it is
	// not a Joiner: MemorySaver), or the store is on another database.
	// Nothing was written.
	ErrNotJoinable = errors.New("checkpoint: the store's work cannot join the saver's transaction")
)

// ConflictError reports a compare-and-swap failure on a thread's head. It
// matches ErrConflict.
type ConflictError struct {
	Thread   string
	NS       string
	Expected string // the parent the writer assumed ("" = no checkpoint yet)
	Head     string // the actual head ("" = none)
}

// Error names the thread, the head the writer expected and the actual one.
func (e *ConflictError) Error() string {
	return fmt.Sprintf("checkpoint: conflict on thread %q: expected head %q, head is %q (another runner advanced or deleted the thread)",
		e.Thread, e.Expected, e.Head)
}

// Is makes errors.Is(err, ErrConflict) true.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// BusyError reports a lease on the thread held by another run, so that
// the request was refused and nothing was written. It matches
// ErrThreadBusy. Its fields say who holds the thread and until when; its
// message says what to do.
type BusyError struct {
	Thread string
	NS     string
	// Owner is the run holding the lease; "" when the requesting run had
	// lost the thread (a Held Claim) and the run that took it over has
	// released it since.
	Owner string
	// Runner is the runner of Owner ("" when unknown).
	Runner string
	// Epoch is the holder's lease epoch (see Lease).
	Epoch uint64
	// Until is when the holder's lease ends unless renewed.
	Until time.Time
	// SameRunner reports that the holder belongs to the requesting runner
	// (Lease.Runner). The runner takes the lease back when it knows that
	// run has ended (Lease.TakeBack names it); otherwise it is one of its
	// own runs that is still running.
	SameRunner bool
}

// Error names the thread, the run and runner holding its lease, the
// epoch, and until when, and says what to do: retry after the lease's end
// (rounded up to the second), and, for another runner's lease, that the
// lease ends on its own if that runner was killed.
func (e *BusyError) Error() string {
	if e.Owner == "" {
		return fmt.Sprintf("checkpoint: thread %q: this run lost the thread: its lease passed to another run, which has released it since; nothing was written: run the thread again (Continue) to go on from its saved state", e.Thread)
	}
	who := "run " + e.Owner
	if e.Runner != "" {
		who += " of runner " + e.Runner
	}
	until := e.Until.UTC()
	after := until.Truncate(time.Second)
	if after.Before(until) {
		after = after.Add(time.Second)
	}
	s := fmt.Sprintf("checkpoint: thread %q is leased to %s (lease epoch %d) until %s; nothing was written: retry after %s",
		e.Thread, who, e.Epoch, until.Format(time.RFC3339Nano), after.Format(time.RFC3339))
	if e.SameRunner {
		return s + " (that run belongs to this runner and is still running)"
	}
	return s + " (it is another runner's lease; if that runner was killed, the lease ends on its own then)"
}

// Is makes errors.Is(err, ErrThreadBusy) true.
func (e *BusyError) Is(target error) bool { return target == ErrThreadBusy }

// CorruptError reports stored data that cannot be trusted. It matches
// ErrCorrupt and wraps the underlying decoding error, if any.
type CorruptError struct {
	Thread     string
	Checkpoint string
	What       string // which part: "checkpoint", "channel Log", "write"...
	Err        error
}

// Error names the corrupt part, its thread and checkpoint (when it
// belongs to one: a stored topology does not), and the cause.
func (e *CorruptError) Error() string {
	s := fmt.Sprintf("checkpoint: corrupt %s in thread %q checkpoint %q", e.What, e.Thread, e.Checkpoint)
	if e.Thread == "" && e.Checkpoint == "" {
		s = "checkpoint: corrupt " + e.What
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the underlying error.
func (e *CorruptError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrCorrupt) true.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }
