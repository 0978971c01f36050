// Package checkpoint defines how lockstep saves threads: the Saver
// interface, the records it stores, the rules every saver follows, and an
// in-memory saver (MemorySaver) that follows them exactly. The SQLite saver
// lives in checkpoint/sqlite; checkpoint/checkpointtest is the conformance
// suite both pass.
//
// # Records
//
// A thread is a sequence of checkpoints, one per superstep boundary. A
// [Checkpoint] has an ID that sorts in creation order ([IDGenerator]), a
// parent, [Metadata] (source, step, parents, run ID, caller keys), and a map
// of channel versions. A channel is a state field or a scheduling slot of
// the runtime (names starting with "__", "branch:to:" and "join:"). Its
// version is the ID of the checkpoint that last changed it.
//
// # Storage proportional to writes
//
// A checkpoint carries blobs only for the channels it changed. A channel
// that was appended to stores only the new items, as an Append [Blob] that
// names the version it extends; reading it walks those links back to a full
// value and concatenates. So the bytes a thread takes grow with what its
// nodes wrote, not with steps times state size, and reading the latest state
// costs the size of the state. [GetOptions.Have] lets a reader that holds
// decoded values skip them.
//
// # Pending writes
//
// While a superstep runs, each finished task's writes are saved against
// the checkpoint the step started from ([Saver.PutWrites]), keyed by task ID
// and [WriteIndex]. Regular writes are insert-if-absent, so saving twice
// stores once; special writes (errors, interrupts, resume answers,
// breakpoint markers, durable step results: [IsSpecial]) replace. When the
// step commits, the writes of the tasks not saved yet travel in the same
// transaction as the new checkpoint ([PutRequest.ParentWrites]). A saver
// that implements [ChainPutter] can commit several checkpoints of a thread
// in one transaction ([PutChain]); the runtime commits a run's input
// checkpoint with its __start__ step's that way.
//
// # What stored data may hold
//
// Put and PutWrites (ValidatePut, ValidateWrites) accept only what the
// runtime writes, and readers report anything else as a *CorruptError
// (VerifyTuple, VerifyCheckpoint, VerifyPending; savers check what they
// read, package graph and Inspect check again): JSON as json.Marshal
// writes it (valid UTF-8, no escape of a lone surrogate, no duplicate
// key); special writes that decode strictly as their type
// (DecodeInterrupts, DecodeAnswers, DecodeTaskError, DecodeBreakpoint,
// DecodeStepResult: no null, no unknown or case-variant key); interrupt
// IDs non-empty and unique within a checkpoint; a step from -1 to MaxStep
// that is greater than the parent's; an ID that sorts after the parent's;
// versions no newer than the checkpoint; channels that name their node
// ("branch:to:" alone names none). Only corruption (a disk, a bug, a
// hand edit whose checksum was recomputed) can store anything else, and
// a reader that decoded it leniently would see a thread with fewer
// interrupts than it has. The memory saver holds only what it accepted,
// and does not check again when it reads.
//
// # One writer per thread
//
// A checkpoint is accepted only when its parent is the thread's head, or as
// an explicit fork; every write also carries a [Lease] that the saver grants
// to one owner (a run) at a time. A runner that lost the race gets a
// [*ConflictError] or a [*BusyError] and nothing is written, so two runners
// can never fork a thread by accident. A [*BusyError] says which run of
// which runner holds the thread, under which epoch, until when, and what to
// do.
//
// A thread has one lease, shared by all its namespaces: the checkpoints a
// subgraph saves in its own namespace (see TaskNS) are written under the
// lease of the run that holds the thread, and a claim in any namespace
// claims the whole thread.
//
// Each time the lease passes to an owner that did not hold it, the
// thread's lease epoch grows by one: the run holding the lease is the
// successor of every run that held a smaller epoch, and what those runs
// left unfinished is its to resolve. A lease names the runner its run
// belongs to; a runner may take back a live lease of one of its own runs
// that has ended without releasing it, as after a release that failed on
// a full disk: [Lease.TakeBack] names that one run, and the saver takes
// the lease over only while that run still holds it, so that two live
// runs of one runner are kept apart by the lease exactly as two runners
// are. [LeaseInspector] reports a thread's
// lease (owner, runner, epoch, end) to operators' tools.
//
// # Other stores' work in the saver's transaction
//
// A saver that is a [Joiner] runs other stores' work ([Join]) in its own
// transaction: the Joins of a PutRequest or WritesRequest, after the
// request's checks and before its commit, and work fenced by a thread's
// lease ([Joiner.Fenced]). An approval store or a ledger opened on the
// saver's database so commits with the save that carries its result, and
// only while the run's lease holds (D16, D17). MemorySaver is no Joiner:
// it refuses a request with Joins ([ErrNotJoinable]).
//
// # Topologies
//
// A saver that implements [TopologyStore] keeps the topology of every
// graph that writes to it (package graph stores it before a compiled
// graph's first write), once per distinct topology, under its
// fingerprint ([TopologyFingerprint]: a hash of the canonical encoding
// graph writes, the same in every process). Every checkpoint the graph
// writes names it in [Metadata.Topology], so that tools can draw the
// graph a thread ran under from the database alone, and tell that a
// waiting thread was saved under another version of its graph than the
// newest one stored ([TopologyStore.LatestTopology]).
//
// # Work for a pool of workers
//
// A saver may also record which threads have work due ([DueWork]: a
// runner died mid-run, a run was handed back or cut short, a retry is
// scheduled, input is queued) and keep input queued per thread
// ([InputQueue]), so that any number of workers sharing its database
// claim due threads with no coordinator (package workers). A claim is the
// thread's lease; a thread stays marked due until the claim is settled,
// so a worker that dies leaves its threads due once their leases lapse.
//
// # Errors
//
// Savers return errors matching [ErrNotFound], [ErrConflict],
// [ErrThreadBusy], [ErrCorrupt] (a [*CorruptError] naming thread and
// checkpoint: stored data never silently decodes to a zero value),
// [ErrInvalid] and [ErrClosed]. Savers are safe for concurrent use.
package checkpoint
