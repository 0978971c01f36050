// Package graph builds typed state graphs and runs them in supersteps,
// saving a checkpoint after every one.
//
// A graph is built over a state struct S ([New]); each exported field is a
// channel, named by its Go name (stored and shown so) or, wherever a
// channel is named, by its json tag's key, with a [Reducer] (last value by default; append and merge by
// struct tag or [Graph.Reducer]; custom with [ReduceFunc]). Nodes return the
// fields they write ([Set]) and may route with [Update.Goto] and
// [Update.Send]; routers after a node choose the next nodes
// ([Graph.AddConditionalEdges]), Sends ([Graph.AddSendEdges]) or both at
// once ([Graph.AddRouteEdges]). [Graph.Compile] validates the graph and
// returns a [Runnable].
//
// # Supersteps
//
// A run repeats, until no task is due:
//
//  1. Plan: the due tasks are the nodes whose trigger was written in the
//     last step (an edge, a route, a Goto), the nodes whose join edge has
//     heard from every source, and one task per pending Send. They are
//     listed (in Next, Tasks and Interrupts) as LangGraph plans them:
//     Sends by index first, then pull tasks by node name.
//  2. Run: the tasks run in parallel (up to the concurrency option) against
//     the frozen state of the step. A task that finishes while others run
//     has its writes saved at once, so a failure or a crash in a sibling
//     does not run it again.
//  3. Apply: the writes are applied in a fixed order, pull tasks by node
//     name then Sends by index, whatever order the tasks finished in. Two
//     writes to a last-value field are a [*ConflictError].
//  4. Checkpoint: the new state, the changed channels and the writes that
//     produced them are saved in one transaction before the next step
//     (while it runs, or when the run stops, in the other durability
//     modes: see Durability below).
//
// A run starts with an input checkpoint (step -1 on a new thread) and a
// __start__ step (step 0) that copies the input into the state, as in
// LangGraph. Where the saver can ([checkpoint.ChainPutter]), those two
// checkpoints are committed in one transaction: the __start__ step runs no
// node, so both are still saved before the first node runs. When the
// __start__ step fails (a router on START returns an error) the input
// checkpoint is saved alone, with the failure. The recursion limit bounds
// the supersteps of one run.
//
// # Durability
//
// When checkpoints are written is the run's durability mode
// ([WithDurability] for every run of a graph, [Durability] for one run;
// LangGraph's durability). Whatever the mode, a write is reported saved
// only after its commit returned, a thread is never half-saved, and a
// side effect behind the ledger (package nodes: keyed by thread, tool and
// arguments), an approval (always answered on a saved, waiting
// checkpoint) or a durable step (its fence saves the checkpoint its
// result hangs on before it runs) never runs twice. What the modes change
// is what a crash costs:
//
//   - [DurabilitySync], the default: each step's checkpoint commits
//     before the next step starts, and a task that finishes while its
//     siblings run has its writes saved at once. A crash costs the step in
//     progress, less its finished tasks.
//   - [DurabilityAsync]: a step's checkpoint is encoded before the next
//     step starts and committed while it runs, one save in flight at a
//     time and in order, so each still commits only on its parent (the
//     compare-and-swap holds). The checkpoints of steps that finish
//     while a save is in flight queue behind it (up to 8, or 4 MiB) and
//     commit together, in one transaction, by the next save; past that
//     bound the run waits. The run's last checkpoint, and its input's
//     with the __start__ step's, are committed before it goes on. A run
//     never returns, and an interrupt never reaches the caller (nor a
//     stream as [EventInterrupt]), before every checkpoint up to it is
//     durable; a stream's [EventValues] and [EventCheckpoint] of a step may
//     come before its commit. Finished tasks' writes are saved as in
//     sync mode (as LangGraph does), each once the checkpoint it is
//     written on has committed. A save that fails is the run's error, a
//     [*SaveError] naming the thread, step and checkpoint; the run stops at
//     the first step's end after the failure and writes nothing more. A
//     crash costs at most the steps in flight (those being saved, those
//     queued and the one running: 1 + 8 + 1 at most), which
//     [Runnable.Continue] runs again.
//   - [DurabilityExit]: only the checkpoint a run ends, pauses or fails on
//     is saved (with the run's input checkpoint, in the same transaction;
//     LangGraph saves no input checkpoint here), and the pending writes of
//     the step it stopped in: finished tasks' writes, the failure or the
//     interrupts, so a resume runs only the unfinished nodes again. A
//     durable step, or a subgraph's first write, saves the checkpoint its
//     step started from first. A new thread is claimed (its lease taken)
//     before the first node runs, so that a second run started on it at
//     once fails before its nodes run, as in the other modes. A crash
//     costs every step since the last saved checkpoint: Continue runs them
//     again. A run started with new input lost that input too, and a
//     resume its answers (the thread waits as it did): give them again
//     (with a [RunKey], Invoke is safe to repeat).
//
// A subgraph's run saves every step, whatever the mode (it runs under its
// task, which waits for it).
//
// Every checkpoint records the mode that wrote it in
// [checkpoint.Metadata.Durability] ("sync" for a subgraph's run and for
// [Runnable.UpdateState], which commits at once), so that what a crash
// could have cost a thread can be read from its history (`lockstep state`
// and `lockstep history` show it).
//
// A node given [WithRetry] runs again in the same step when it fails, up
// to its [retry.Policy]'s attempts and after its backoff ([WithRetryOn]
// chooses which errors are retried); a pause and the run's context
// ending never are. Every attempt reads the state of the step.
//
// # Pausing and resuming
//
// A node pauses the run by calling interrupt.Ask or returning an
// *interrupt.NodeInterrupt; a static breakpoint ([WithInterruptBefore],
// [InterruptAfter]) pauses it around named nodes. A paused run is not an
// error: its [Result] says [StatusWaiting]. [Runnable.Resume] delivers
// answers (by interrupt ID when several wait); [Runnable.Continue] re-runs
// pending tasks after a failure, a crash or a state update. Only the
// unfinished tasks of the interrupted step run again, from their first
// line; [Durable] keeps work inside a node from running twice.
//
// A resume claims the thread, then reads and checks the pending
// interrupts, so two resumes of one interrupt cannot both run. Its
// answers are then held and saved with the run's first write, in that
// write's transaction: the resumed step's checkpoint (as writes of the
// task that produced it), the interrupts or failure that end the step, a
// finished sibling's writes, or the fence of the first [Durable] step, so
// that a durable step's result is never saved without the answer it was
// computed from. When that write fails the answers stay held for the
// next one, and the run saves them on its own before it returns. A crash
// before any write leaves the thread waiting with no answer saved.
//
// A caller that cannot tell whether an Invoke took effect (its process
// died, its reply was lost) retries it with the same [RunKey]: the input
// is applied once, and the retry returns that run's result
// ([Result].Repeated), continuing the run if it stopped.
//
// # Subgraphs
//
// A compiled graph can be a node of another ([Graph.AddSubgraph]): over
// the same state type ([Subgraph]: the parent's state is its input, and
// what it changed is written back), or over another with a pair of
// mapping functions ([SubgraphMap]), nested to any depth. A subgraph runs
// in its parent's thread, under the parent run's lease and on its saver,
// and saves its checkpoints in the namespace of the task that runs it
// (checkpoint.TaskNS: "<node>:<task ID>", nested with "|", LangGraph's
// checkpoint_ns); they are listed, pruned and deleted with the thread.
// An Ask or a NodeInterrupt inside a subgraph, at any depth, pauses the
// whole thread with the same interrupt ID, saved as the interrupt of the
// waiting task at every level; [Runnable.Resume] answers it by ID from the
// root, and the task's subgraph goes on from its latest checkpoint, so
// that only the interrupted subgraph node runs again: never the
// subgraph's finished steps, never the parent's finished siblings.
// [TaskInfo].NS names the namespace a node runs in; package nodes keys a
// thread-scoped write by it, so that idempotency keys are unique per
// subgraph task, and [Durable] steps are saved with the task in its own
// namespace. [Task].NS names a subgraph task's namespace in a snapshot;
// [Subgraphs] ([HistoryOptions].Subgraphs) adds the subgraph's own
// snapshot ([Task].State, [SubgraphStateOf]); [GetSubgraphState],
// [SubgraphHistory] and [UpdateSubgraphState] read and change one
// subgraph's state; [StreamSubgraphs] streams its events, each naming
// its namespace ([Event].NS); [ToParent] lets a subgraph's node route in
// its parent. A graph's [Topology] holds its subgraphs' topologies.
//
// # Streaming
//
// [Runnable.Stream] yields values, updates and debug events (task, task
// result, checkpoint, interrupt) as a run makes them. Any node or tool
// body can add its own with [Emit] (an [EventCustom] event), and model
// nodes stream their model's output with [EmitMessage]
// ([EventMessages]); both carry the task's node and ID, and they are best
// effort: not saved, sent again by a task that runs again, and not sent
// at all (a nil check, [Streaming] reports false) when the run is not
// streamed.
//
// # Inspecting
//
// [Runnable.GetState] and [Runnable.History] return [Snapshot] values:
// state, next tasks, tasks with their errors and interrupts, metadata and a
// [Status] (done, waiting, failed, pending). [Runnable.UpdateState] edits
// state as a node would ([Runnable.BulkUpdateState]: several steps of
// updates at once, all or nothing); [Runnable.Replay] forks from an older checkpoint.
// [Runnable.Mermaid] draws the graph.
//
// # Topology
//
// A compiled graph has a [Topology]: its name ([WithName]; the state
// type by default), nodes, edges, joins, routers with their declared
// destinations and compile-time breakpoints, and a fingerprint of its
// canonical encoding, the same in every process and changed by nothing
// but the topology. The first time a [Runnable] writes to a saver that
// keeps topologies (checkpoint.TopologyStore: the memory and SQLite
// savers do), it stores its topology there once ([Runnable.SaveTopology]),
// and every checkpoint it writes names the fingerprint in its metadata.
// The lockstep CLI draws a thread's graph from the database alone, and
// says when a waiting thread was saved under another version of its graph
// than the newest one stored: the topology of the same name that a
// Runnable stored last. Call SaveTopology when a process starts, so that
// a deploy is recorded before it runs any thread.
//
// # Stored state and changing the state type
//
// State is stored as the JSON json.Marshal writes for each field, and read
// back strictly: JSON that Marshal never writes for the field's type
// (duplicate keys, keys that are not exactly a field's JSON name, null for
// a struct or a number, invalid UTF-8) is a *checkpoint.CorruptError
// naming the thread and the checkpoint, never a silently different or
// zero value. So a state type can grow: new fields, at any depth, read as
// their zero value from older checkpoints, and a removed top-level field
// is ignored. But removing or renaming a field of a struct stored inside
// the state makes the checkpoints that hold it unreadable: keep the old
// field until those threads are done, or give the type an UnmarshalJSON
// method (types with their own JSON methods are only checked for
// well-formed JSON). Next tasks of a node the graph no longer has fail
// with an [*UnknownNodeError] (see [Runnable.Invoke]).
//
// # Concurrency
//
// A [Graph] is not safe for concurrent use; a [Runnable] is. Runs on one
// thread are serialised by the saver's lease: a second run gets an error
// matching checkpoint.ErrThreadBusy (a [*checkpoint.BusyError] naming the
// run and runner that hold the thread, the lease's epoch and end, and what
// to do) or checkpoint.ErrConflict before any of its nodes run. Each run
// owns the lease under its run ID, for a runner: the Runnable
// ([WithRunner]). A runner takes back at once a lease of one of its own
// runs that ended without releasing it (a release that failed on a full
// disk); a lease of another runner, or of a run of its own that still
// runs, is waited out: two runs of one Runnable on a thread are kept apart
// exactly as two runners are, whichever asked first. The take-back names
// the one run the saver named as the holder, once that run is known to
// have ended, and the saver takes the lease over only from that run; a
// run that held the thread and lost it takes nothing back, and an ended
// run writes nothing more. Every claim that passes the lease to a new run
// grows the thread's lease epoch: the run that holds the lease is the
// successor of every earlier run of the thread, and resolves what they
// left unfinished at once ([TaskInfo.Leased]; package nodes treats a
// ledger intent of an earlier run as of unknown outcome). Nodes receive
// the state by value but share its slices and maps with the runtime and
// must not modify them.
//
// # Application code
//
// Every call the runtime makes into application code is contained: node
// functions, routers and send routers, reducer functions, a node's
// RetryOn function and its retry policy's Rand reader, the JSON methods
// of state values, Send arguments, durable step results, interrupt
// values and resume answers, and the methods of the errors nodes and
// routers return. A panic in any of them
// is a [*PanicError] whose Node and Call name what panicked (Call is ""
// for the node function itself), with its stack; it never unwinds into
// the caller or kills the process. A node's error is read once where it
// comes back (its text, what [*NodeError] and the saved failure show);
// errors.Is and errors.As still see it, and a panic in its Is or As
// method reads as no match.
//
// Calls that run on the run's goroutine without a context of their own
// (routers, reducers, RetryOn, a retry policy's Rand, and the JSON
// methods of values whose types are not plain data: an interface, a
// MarshalJSON or UnmarshalJSON method outside lockstep and the standard
// library) run under the run's
// context: one still running when the context ends (after a grace of
// 100 ms) is given up on, the run returns an error matching
// [ErrAbandoned] and the context's error, nothing the run had not saved
// is written, and [Runnable.Abandoned] counts the call, which Go cannot
// stop, until it returns. Reads (GetState, History) do the same with
// their context. Node functions themselves are not given up on: they get
// the run's context and must honour it, and a node left running past the
// run could still act (its durable steps, its tools) after another
// runner took the thread.
//
// # Errors
//
// Runs return [*NodeError] (wrapping the node's error; a panic is a
// [*PanicError] with its stack), [*ConflictError], [*RecursionError],
// [*ResumeError] (matching [ErrAmbiguousResume], [ErrUnknownInterrupt],
// [ErrAlreadyAnswered] or [ErrNotAnswerable]), [*UnknownNodeError],
// [*UnknownFieldError], [*SizeError], [*EncodeError], the sentinels
// [ErrThreadNotFound], [ErrNothingToResume], [ErrPendingInterrupt],
// [ErrRunKeyReused], [ErrNoSaver], [ErrInvalidInput], errors matching
// [ErrAbandoned] (see Application code), and saver errors from package
// checkpoint. [Runnable.UpdateState] also returns [ErrAmbiguousUpdate]
// when it cannot tell which node an update is from. A snapshot's failed
// task carries a [*TaskError], the message and type saved with it. Compile
// returns [*CompileError] values joined together. Match them with
// errors.Is and errors.As.
package graph
