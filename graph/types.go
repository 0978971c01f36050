package graph

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/interrupt"
)

// Config names a checkpoint of a thread.
type Config struct {
	Thread       string
	NS           string
	CheckpointID string
}

// Status says at a glance what a thread is doing.
type Status string

// The statuses of a snapshot.
const (
	// StatusDone: no task is left to run.
	StatusDone Status = "done"
	// StatusWaiting: an interrupt waits for an answer, or the run stopped
	// at a static breakpoint. Resume (or Continue) it.
	StatusWaiting Status = "waiting"
	// StatusFailed: a task of the next step failed. Continue re-runs it;
	// new input discards it.
	StatusFailed Status = "failed"
	// StatusPending: tasks are due but nothing holds them: a run stopped
	// between steps (crash, cancellation). Continue runs them.
	StatusPending Status = "pending"
)

// Result is what a run returns when it stops without an error: either done
// or waiting.
type Result[S any] struct {
	// Values is the state. For a waiting run it includes the writes of the
	// tasks that finished in the interrupted step (which are saved as
	// pending writes, not yet in a checkpoint). Its slices and maps are
	// shared with the runtime's state cache (WithStateCache): read them,
	// and copy before changing one, as a node does with its input; a change
	// made in place would be seen by the next run of the thread.
	Values S
	// Status is StatusDone or StatusWaiting.
	Status Status
	// Interrupts are the pending interrupts when waiting on Ask or a
	// NodeInterrupt (empty at a static breakpoint).
	Interrupts []interrupt.Interrupt
	// Next names the tasks that will run when the thread continues, in
	// the order of Snapshot.Next.
	Next []string
	// Config names the thread's head checkpoint.
	Config Config
	// Repeated is set when the run's RunKey matched the thread's latest
	// run: its input was not applied again, and this is that run's result
	// (continued when it had stopped before its end).
	Repeated bool
}

// Task describes a task of a snapshot's next step.
type Task struct {
	ID   string
	Name string
	Path string // "pull", or "push:<n>" for the n-th Send
	// Error is set when the task failed.
	Error *TaskError
	// Interrupts are the interrupts the task raised at this checkpoint,
	// answered or not.
	Interrupts []interrupt.Interrupt
	// Answered maps interrupt IDs to the answers the task was given.
	Answered map[string]json.RawMessage
	// Result holds the task's field writes (JSON, by field name) once it
	// finished, and is nil until then.
	Result map[string]json.RawMessage
	// NS is set when the task's node is a subgraph (Graph.AddSubgraph):
	// the namespace its checkpoints are saved in (checkpoint.TaskNS), as
	// Config.NS names it, whether or not it has run yet. Read its state
	// with GetSubgraphState, or ask GetState and History for it
	// (Subgraphs, HistoryOptions.Subgraphs).
	NS string
	// State is the subgraph's snapshot, a Snapshot of the subgraph's state
	// type as a value (Snapshot[C]; SubgraphStateOf unpacks it), when the
	// snapshot was asked for with its subgraphs and the subgraph has saved
	// a checkpoint; nil otherwise. Its Tasks carry their own subgraphs'
	// State, at any depth.
	State any
}

// Snapshot is the state of a thread at a checkpoint.
type Snapshot[S any] struct {
	// Values is the state at the checkpoint. Like Result.Values it shares
	// its slices and maps with the runtime (and, in History, append
	// fields share their prefixes with older snapshots): copy before
	// changing one.
	Values S
	// Next names the tasks that have not finished (in History and
	// GetStateAt: every task of the step), in plan order: push tasks by
	// Send index, then the start task, then pull tasks by node name. A
	// node may appear several times, once per Send.
	Next []string
	// Tasks are the tasks of the step that follows the checkpoint, in the
	// same order as Next.
	Tasks        []Task
	Config       Config
	Metadata     checkpoint.Metadata
	CreatedAt    time.Time
	ParentConfig *Config
	// Interrupts are the interrupts still waiting for an answer.
	Interrupts []interrupt.Interrupt
	// Breakpoint is set when a run stopped at a static breakpoint here.
	// A breakpoint inside a subgraph names the node that runs the
	// subgraph; the subgraph's own snapshot says where in it.
	Breakpoint *checkpoint.Breakpoint
	Status     Status
}

// EventKind names a kind of streamed event.
type EventKind string

// Event kinds.
const (
	// EventValues carries the state after a checkpoint was saved, and
	// once at the start of a run, before anything is saved: a new run's
	// input checkpoint is saved with its first step, so that first event
	// may name a checkpoint a crash leaves unsaved. Acknowledge saved work
	// with EventCheckpoint.
	EventValues EventKind = "values"
	// EventUpdates carries one task's writes after its step. Cached is set
	// for writes that were saved before and not computed again. As in
	// LangGraph, the hidden __start__ task streams no EventUpdates,
	// EventTask or EventTaskResult: the input shows in the values event
	// of step 0.
	EventUpdates EventKind = "updates"
	// EventTask announces a task about to run (debug).
	EventTask EventKind = "task"
	// EventTaskResult reports a task's outcome: Err, Interrupts, or neither
	// (debug).
	EventTaskResult EventKind = "task_result"
	// EventCheckpoint reports a saved checkpoint (debug).
	EventCheckpoint EventKind = "checkpoint"
	// EventInterrupt ends a run that stopped waiting: Interrupts (empty at a
	// static breakpoint) and Next.
	EventInterrupt EventKind = "interrupt"
	// EventMessages carries a chunk of a model's output as it arrives
	// (Data: the model node's chunk, nodes.MessageChunk), with the Node
	// and TaskID of the task whose model call produced it (EmitMessage).
	// Best effort: chunks are not saved; the message they make up is,
	// with the task's update.
	EventMessages EventKind = "messages"
	// EventCustom carries a value a node or tool body emitted (Emit), with
	// the Node and TaskID of its task. Best effort: it is not saved.
	EventCustom EventKind = "custom"
)

// Event is one item of a streamed run. Which fields are set depends on Kind.
type Event[S any] struct {
	Kind       EventKind
	Step       int
	Node       string
	TaskID     string
	Values     S
	Update     Update[S]
	Cached     bool
	Err        error
	Interrupts []interrupt.Interrupt
	Next       []string
	Config     Config
	// Data is what an EventMessages or EventCustom event carries.
	Data any
	// NS is the namespace of the graph the event comes from: "" for the
	// graph that was run, a subgraph's namespace (checkpoint.TaskNS) for
	// the events of its subgraphs, which a stream yields with
	// StreamSubgraphs. Step, Node, TaskID and Config are then the
	// subgraph's.
	NS string
	// Subgraph is the event as the subgraph emitted it, an Event of its
	// state type (Event[C]), for an event from a subgraph; nil otherwise.
	// Values and Update are set only when the subgraph's state type is S.
	Subgraph any
}

// RunOption configures one run (Invoke, Resume, Continue, Replay, Stream).
type RunOption func(*runOptions)

type runOptions struct {
	before, after []string
	limit         int
	limitSet      bool
	metadata      map[string]any
	discard       bool
	runKey        string
	runKeySet     bool
	subgraphs     bool
	durability    DurabilityMode
	durabilitySet bool
	answerJoins   []checkpoint.Join
	claimedBy     string
	claimedBySet  bool
}

// RunKey makes Invoke idempotent under key: retried after a crash, a
// timeout or a lost reply, it does not apply its input a second time. The
// key is stored with the run's input checkpoint (checkpoint.Metadata's
// RunKey). When the thread's latest input carries the same key, Invoke
// applies nothing and returns that run's result with Result.Repeated set:
// as it stands when it waits or is done (nothing runs, an interrupted node
// does not run again), and continued, as Continue does, when it stopped
// before its end (committed steps never run again; ErrThreadBusy while the
// process that stopped still holds the thread's lease). A run that stopped
// on a node's error is continued too, so that node runs again (call
// GetState instead to only learn the outcome). A key that started an
// earlier run of the thread, which has had other input since, or a run
// the thread was branched away from since (Replay, or UpdateState at an
// older checkpoint, forking off before the run's input), is an error
// matching ErrRunKeyReused, and nothing is applied. The key is
// looked up under the thread's lease, so two Invokes with one key at once
// apply the input once: the other returns the run's result (Repeated) or
// fails with checkpoint.ErrThreadBusy or checkpoint.ErrConflict, and its
// retry is Repeated. A repeated Stream that applies nothing yields the
// state (EventValues) and, when the run waits, its EventInterrupt. A key
// is 1 to checkpoint.MaxRunKeyBytes bytes of UTF-8 without control
// characters; anything else, a RunKey on Resume, Continue or Replay, or a
// RunKey without a saver, makes the run fail with ErrInvalidInput
// (ErrNoSaver without a saver). Finding an earlier use reads the thread's
// input checkpoints, so a keyed Invoke on a long thread costs one more
// query.
func RunKey(key string) RunOption {
	return func(o *runOptions) { o.runKey, o.runKeySet = key, true }
}

// InterruptBefore adds breakpoints before the named nodes for this run
// ("*" for all).
func InterruptBefore(nodes ...string) RunOption {
	return func(o *runOptions) { o.before = append(o.before, nodes...) }
}

// InterruptAfter adds breakpoints after the named nodes for this run ("*"
// for all).
func InterruptAfter(nodes ...string) RunOption {
	return func(o *runOptions) { o.after = append(o.after, nodes...) }
}

// RecursionLimit overrides the compiled recursion limit for this run. A
// limit below 1 makes the run fail with ErrInvalidInput.
func RecursionLimit(n int) RunOption {
	return func(o *runOptions) { o.limit, o.limitSet = n, true }
}

// Metadata attaches caller metadata (string, bool or number values) to every
// checkpoint the run writes. History can filter on it.
func Metadata(m map[string]any) RunOption {
	return func(o *runOptions) {
		if o.metadata == nil {
			o.metadata = map[string]any{}
		}
		maps.Copy(o.metadata, m)
	}
}

// StreamSubgraphs makes a stream yield the events of the subgraphs its
// graph runs, at any depth, as well as its own (LangGraph's
// stream(subgraphs=True)): each names the namespace it comes from
// (Event.NS). They arrive as the subgraphs run, from the goroutines of
// the tasks that run them, one at a time. Without it a stream yields the
// events of its own graph only. It changes nothing else about a run.
func StreamSubgraphs() RunOption { return func(o *runOptions) { o.subgraphs = true } }

// DiscardPending lets new input replace a thread's pending interrupts or
// breakpoint. Without it Invoke on a waiting thread fails with
// ErrPendingInterrupt (LangGraph discards silently; lockstep fails closed).
func DiscardPending() RunOption { return func(o *runOptions) { o.discard = true } }

// resolvedRun holds a run's options merged with the compiled ones.
type resolvedRun struct {
	before, after map[string]bool
	limit         int
	limitSet      bool // RecursionLimit was given: subgraphs take it too
	metadata      map[string]any
	discard       bool
	runKey        string
	subgraphs     bool
	// durability is the run's mode; "" (a subgraph's run) is
	// DurabilitySync.
	durability  DurabilityMode
	answerJoins []checkpoint.Join
	// claimedBy is the owner of the lease the run works under
	// (ClaimedBy); "" for a run that takes its own.
	claimedBy string
}

func (r *Runnable[S]) resolveRun(opts []RunOption) (resolvedRun, error) {
	var o runOptions
	for _, f := range opts {
		f(&o)
	}
	// The compiled breakpoints are shared; a run that adds its own gets
	// copies.
	rr := resolvedRun{before: r.before, after: r.after, limit: r.cfg.recursionLimit, metadata: o.metadata, discard: o.discard, runKey: o.runKey, subgraphs: o.subgraphs, durability: r.cfg.durability,
		answerJoins: o.answerJoins, claimedBy: o.claimedBy}
	if o.durabilitySet {
		if err := checkDurability(o.durability); err != nil {
			return rr, err
		}
		rr.durability = o.durability
	}
	if len(o.before) > 0 {
		rr.before = maps.Clone(r.before)
		if rr.before == nil {
			rr.before = map[string]bool{}
		}
	}
	if len(o.after) > 0 {
		rr.after = maps.Clone(r.after)
		if rr.after == nil {
			rr.after = map[string]bool{}
		}
	}
	if (len(o.before) > 0 || len(o.after) > 0) && r.cfg.saver == nil {
		return rr, fmt.Errorf("%w: breakpoints (InterruptBefore, InterruptAfter) need one to resume from", ErrNoSaver)
	}
	if o.limitSet {
		if o.limit < 1 {
			return rr, fmt.Errorf("%w: recursion limit %d is below 1", ErrInvalidInput, o.limit)
		}
		rr.limit, rr.limitSet = o.limit, true
	}
	for _, set := range []struct {
		m     map[string]bool
		names []string
	}{{rr.before, o.before}, {rr.after, o.after}} {
		for _, n := range set.names {
			if _, ok := r.nodes[n]; !ok && n != "*" {
				return rr, &UnknownNodeError{Name: n, From: "breakpoint of the run"}
			}
			set.m[n] = true
		}
	}
	if err := checkpoint.ValidateExtra(o.metadata); err != nil {
		return rr, fmt.Errorf("%w: %w", ErrInvalidInput, err)
	}
	if o.runKeySet {
		if err := checkRunKey(o.runKey); err != nil {
			return rr, err
		}
	}
	if o.claimedBySet {
		switch {
		case o.claimedBy == "":
			return rr, fmt.Errorf("%w: ClaimedBy: an empty lease owner", ErrInvalidInput)
		case r.cfg.saver == nil:
			return rr, fmt.Errorf("%w: ClaimedBy: a run works under a claim on the thread's lease, which the saver keeps", ErrNoSaver)
		}
	}
	if len(o.answerJoins) > 0 {
		if slices.IndexFunc(o.answerJoins, func(j checkpoint.Join) bool { return j == nil }) >= 0 {
			return rr, fmt.Errorf("%w: WithAnswerJoin: a nil Join", ErrInvalidInput)
		}
		if _, ok := r.cfg.saver.(checkpoint.Joiner); !ok {
			return rr, fmt.Errorf("graph: WithAnswerJoin: %w: the graph's saver (%T) has no transaction the work could join; nothing was run", checkpoint.ErrNotJoinable, r.cfg.saver)
		}
	}
	return rr, nil
}

// ClaimedBy makes the run work under a lease its caller already holds on
// the thread (a claim of package workers' pool: checkpoint.DueWork's
// ClaimDue or Hold with this Runnable's runner), owned by owner, instead
// of taking one of its own: the run's ID is owner, and every request it
// sends, the first included, is fenced by that lease (checkpoint.Lease.Held,
// D17): it commits only while owner still holds the lease under the epoch
// it was claimed with. So the run never takes the claim over (no second
// claim, no new epoch), and a claim that was lost before the run began
// (its lease lapsed and another worker took the thread) lands nothing:
// the run fails with an error matching checkpoint.ErrThreadBusy before any
// node runs. The run renews the lease while it runs, as any run does, but
// does not release it when it ends: the lease stays the caller's, to
// release when it settles the claim (checkpoint.DueWork.Settle), so that
// no other worker claims the thread between the run's end and the
// settlement.
//
// An empty owner makes the run fail with ErrInvalidInput, a Runnable
// without a saver with ErrNoSaver; nothing runs then. The caller must hold
// the lease under the Runnable's runner (Runnable.Runner) and TTL
// (Runnable.LeaseTTL), and must not start two runs under one claim at
// once.
func ClaimedBy(owner string) RunOption {
	return func(o *runOptions) { o.claimedBy, o.claimedBySet = owner, true }
}

// WithAnswerJoin makes joins commit in the transaction of the write that
// saves a resume's answers (D16): the checkpoint of the resumed step, the
// pending writes that end it, or the first pending write a task saves,
// whichever comes first, or, with Command.Update, the write that saves the
// update with them. Work of another store on the saver's database (an
// approval consumed with the save that carries its decision, as
// approval.ResumeGraphConsuming does) so lands exactly when the answers do:
// after a crash, both or neither; and, since that write is fenced by the
// run's lease (D17), neither when the run has lost the thread. An error of
// a join fails the write, which saves nothing, and the run, with that
// error.
//
// It applies to Resume with answers (Command.Resume or ResumeByID): on
// any other run, or a Resume that answers nothing, the run fails with
// ErrInvalidInput, and on a saver that is not a checkpoint.Joiner
// (MemorySaver, or no saver) with an error matching
// checkpoint.ErrNotJoinable; a nil join is ErrInvalidInput. Nothing runs
// then.
func WithAnswerJoin(joins ...checkpoint.Join) RunOption {
	return func(o *runOptions) { o.answerJoins = append(o.answerJoins, joins...) }
}

// checkRunKey validates a RunKey: 1 to checkpoint.MaxRunKeyBytes bytes of
// UTF-8 without control characters.
func checkRunKey(key string) error {
	if key == "" || len(key) > checkpoint.MaxRunKeyBytes || !utf8.ValidString(key) || strings.IndexFunc(key, unicode.IsControl) >= 0 {
		return fmt.Errorf("%w: a run key is 1 to %d bytes of UTF-8 without control characters", ErrInvalidInput, checkpoint.MaxRunKeyBytes)
	}
	return nil
}

// checkThread validates a thread ID: 1 to MaxNameBytes bytes of UTF-8
// without control characters.
func checkThread(thread string) error {
	if thread == "" {
		return fmt.Errorf("%w: empty thread ID", ErrInvalidInput)
	}
	if len(thread) > MaxNameBytes {
		return fmt.Errorf("%w: thread ID of %d bytes (max %d)", ErrInvalidInput, len(thread), MaxNameBytes)
	}
	if !utf8.ValidString(thread) {
		return fmt.Errorf("%w: thread ID is not valid UTF-8", ErrInvalidInput)
	}
	for _, r := range thread {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("%w: thread ID %s contains a control character", ErrInvalidInput, quoteShort(thread))
		}
	}
	return nil
}
