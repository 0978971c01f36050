package checkpoint

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// Saver stores the checkpoints and pending writes of threads. Every
// implementation must be safe for concurrent use, must pass the conformance
// suite in package checkpointtest, and must enforce one writer per thread:
//
//   - Put accepts a checkpoint only when its ParentID is the thread's head
//     (or the thread is new and ParentID is ""), unless Fork is set (then
//     the parent must exist and the new ID must sort after the head, which
//     is always the checkpoint with the largest ID); a
//     PutWrites or Claim naming a checkpoint other than the head fails the
//     same way. Either failure is a *ConflictError and writes nothing.
//   - Put, PutWrites and Claim acquire the thread's lease for the request's
//     owner (until now + TTL) when it is free or expired, or when the
//     request takes back the lease of the one ended run of its own runner
//     that it names (Lease.TakeBack, Lease.TakesBack), and
//     fail with a *BusyError (writing nothing) when another owner holds
//     it. When the owner already holds a live lease, Claim renews it and
//     Put and PutWrites keep it as it is, so that a save need not write
//     the lease: a runner renews with Claim while it works (every TTL/3).
//   - A thread has one lease, whatever the namespace of the request: the
//     head a request names is its namespace's (each namespace has its
//     own head), but the lease it acquires, keeps, renews or releases is
//     the thread's, shared by all its namespaces, with one epoch. The run
//     that holds a thread writes the checkpoints of its subgraphs under
//     the lease it already holds; no other owner writes any namespace of
//     the thread meanwhile.
//   - Every acquisition by an owner that did not hold the lease grows the
//     thread's lease epoch by one and records the request's Runner;
//     renewals keep both (see Lease).
//   - A request with Lease.Held is fenced: it commits only while its owner
//     still holds the lease at the epoch it took it, and otherwise fails
//     with a *BusyError and writes nothing (D17).
//   - Put and PutWrites store only what the runtime writes (see the
//     package doc): besides ValidatePut and ValidateWrites, a Put whose
//     step is not greater than its parent's, and writes that raise an
//     interrupt ID another task of the checkpoint raised, fail with an
//     error wrapping ErrInvalid and write nothing. Get and List report
//     anything else they find (VerifyTuple, and the step against the
//     parent's when they read it) as a *CorruptError.
//
// Returned tuples belong to the caller; their byte slices may be shared with
// other tuples of the same call and must not be modified.
type Saver interface {
	// Get returns the checkpoint ref names, or the thread's head when ref.ID
	// is "", with every channel materialised (see Checkpoint) and its
	// pending writes. opts.Have lets a caller that holds decoded values skip
	// reading them again (see GetOptions). It returns an error matching
	// ErrNotFound when there is no such checkpoint, and a *CorruptError when
	// stored data cannot be read.
	Get(ctx context.Context, ref Ref, opts GetOptions) (*Tuple, error)

	// List returns a thread's checkpoints newest first (descending ID),
	// filtered by opts, each with its channels and pending writes. A thread
	// with no checkpoints gives an empty list and no error. It returns an
	// error wrapping ErrInvalid for an empty thread or a bad filter key and
	// a *CorruptError when stored data cannot be read.
	List(ctx context.Context, thread string, opts ListOptions) ([]*Tuple, error)

	// Put adds a checkpoint, its changed channels and the request's writes
	// in one transaction, and makes it the thread's head. It returns a
	// *ConflictError or a *BusyError as the Saver rules above say, an error
	// wrapping ErrInvalid for a request ValidatePut rejects, and writes
	// nothing on any of them.
	Put(ctx context.Context, req PutRequest) error

	// PutWrites saves pending writes of tasks against the head checkpoint.
	// A regular write whose (task, WriteIndex) exists is ignored; a special
	// one (IsSpecial) replaces it. Saving the same writes twice, also across
	// a reopen, stores them once. It returns a *ConflictError when
	// req.Ref.ID is not the head, a *BusyError when another owner holds the
	// lease and an error wrapping ErrInvalid for a request ValidateWrites
	// rejects, and writes nothing on any of them.
	PutWrites(ctx context.Context, req WritesRequest) error

	// Claim acquires or renews (to now + TTL) the lease on a thread whose
	// head is ref.ID ("" for a thread with no checkpoints) without writing
	// anything else. It returns a *ConflictError when ref.ID is not the
	// head, a *BusyError when another owner holds the lease, and an error
	// wrapping ErrInvalid for an empty thread or owner.
	Claim(ctx context.Context, ref Ref, lease Lease) error

	// Release drops owner's lease on the thread, if owner holds it: the
	// thread's one lease, whatever ns names. It is not an error when the
	// lease has already expired or passed on.
	Release(ctx context.Context, thread, ns, owner string) error

	// DeleteThread removes every checkpoint, write and lease of the thread
	// in every namespace (its subgraphs' included). Deleting a missing
	// thread is not an error; an empty thread is (ErrInvalid).
	DeleteThread(ctx context.Context, thread string) error
}

// ChainPutter is implemented by savers that can add several checkpoints of
// one thread, each the parent of the next, in one transaction. The graph
// runtime uses it to commit a run's input checkpoint together with the
// checkpoint of its __start__ step, which runs no node: one transaction
// instead of two, and the same history.
type ChainPutter interface {
	// PutChain saves reqs as Put would, one after the other, but all of
	// them or none. reqs must pass ValidateChain. It returns what Put
	// returns for the request that could not be saved; nothing is written
	// on any error but an indeterminate commit.
	PutChain(ctx context.Context, reqs []PutRequest) error
}

// PutChain saves reqs on s: in one transaction when s implements
// ChainPutter, otherwise with one Put per request, in order, which can
// leave the first requests saved when a later one fails. It returns an
// error wrapping ErrInvalid when reqs are not a chain (ValidateChain), and
// otherwise what Put returns.
func PutChain(ctx context.Context, s Saver, reqs ...PutRequest) error {
	if cp, ok := s.(ChainPutter); ok {
		return cp.PutChain(ctx, reqs)
	}
	if err := ValidateChain(reqs); err != nil {
		return err
	}
	for _, req := range reqs {
		if err := s.Put(ctx, req); err != nil {
			return err
		}
	}
	return nil
}

// LeaseInspector is implemented by savers that can report a thread's
// lease: who holds it, for which runner, under which epoch and until when.
// Operators' tools (the lockstep CLI's state command) read it to say why a
// thread waits.
type LeaseInspector interface {
	// Lease returns the thread's lease as stored, live or not
	// (LeaseInfo.Live tells): the one lease every namespace shares, so
	// that ns changes only LeaseInfo.NS. It returns an error matching
	// ErrNotFound when the saver holds nothing of the thread (no
	// checkpoint and no lease), and one wrapping ErrInvalid for an empty
	// thread.
	Lease(ctx context.Context, thread, ns string) (LeaseInfo, error)
}

// ThreadLister is implemented by savers that can list their threads.
type ThreadLister interface {
	// Threads returns every thread's root-namespace head, most recently
	// updated first, skipping the first offset and returning at most limit
	// (0 means all). A thread is listed once, whatever namespaces it has:
	// a write in any of them (a subgraph's) counts as an update of the
	// thread, and a thread with no root-namespace checkpoint is not
	// listed. It fails only when the store does, or with a *CorruptError
	// for a record it cannot read.
	Threads(ctx context.Context, offset, limit int) ([]ThreadInfo, error)
}

// InterruptLister is implemented by savers that can find every pending
// interrupt across threads with one query.
type InterruptLister interface {
	// PendingInterrupts returns a page of pending interrupts (see
	// PendingInterrupt) of all threads' root namespaces, oldest first, and
	// the cursor of the next page ("" when this is the last). Interrupts
	// saved in other namespaces are not listed: an interrupt raised inside
	// a subgraph waits at the root as an interrupt of the task that runs
	// the subgraph (package graph saves it there, under the same ID), and
	// is listed once, there. It returns an error wrapping ErrInvalid for a
	// malformed cursor.
	PendingInterrupts(ctx context.Context, q InterruptQuery) ([]PendingInterrupt, string, error)
}

// Pruner is implemented by savers that can drop old checkpoints.
type Pruner interface {
	// Prune keeps the newest keep checkpoints of the thread's namespace ns
	// (at least 1) and the head, and deletes older ones, except checkpoints
	// with pending interrupts or pending writes that no child has
	// committed. The blobs kept checkpoints need (the bases of their append
	// chains) stay, whether or not the checkpoints that wrote them do, so
	// every kept checkpoint reads back exactly. The namespaces nested
	// below ns (NestedIn) whose first checkpoint names, in its
	// Metadata.Parents[ns], a checkpoint Prune deleted go as a whole: they
	// hold the subgraphs that tasks of that checkpoint ran, which nothing
	// reaches any more. It returns how many checkpoints were deleted,
	// those of the nested namespaces included, and an error wrapping
	// ErrInvalid when keep < 1 or the thread is empty.
	Prune(ctx context.Context, thread, ns string, keep int) (int, error)
}

// Vacuumer is implemented by savers that can give freed space back.
type Vacuumer interface {
	// Vacuum reclaims free pages; pages is a bound on the work (0 = all).
	// It returns an error wrapping ErrInvalid when pages < 0.
	Vacuum(ctx context.Context, pages int) error
}

// PendingInterrupts computes the interrupts of checkpoint id of thread
// that still wait for an answer, from its pending writes: those of tasks
// that have an __interrupt__ write, whose ID has no entry in the task's
// __resume__ write, and which have no regular writes (a task with regular
// writes finished). Savers share this rule through it; the result is in
// task order, then in the order the task raised them, with Thread,
// CheckpointID, TaskID, Node, InterruptID and Value set. It returns a
// *CorruptError naming thread, checkpoint, task and channel when a write
// of a task does not decode strictly (an interrupt or resume write as
// DecodeInterrupts and DecodeAnswers say, any other as VerifyPending
// does) or an interrupt ID is raised by two tasks: a write that cannot be
// read never silently stops an interrupt from waiting.
func PendingInterrupts(thread, id string, writes []PendingWrite) ([]PendingInterrupt, error) {
	type taskState struct {
		node       string
		interrupts []PendingInterrupt
		answered   map[string]json.RawMessage
		finished   bool
	}
	tasks := map[string]*taskState{}
	var order []string
	var raisedBy map[string]string // interrupt ID → task
	get := func(w PendingWrite) *taskState {
		t, ok := tasks[w.TaskID]
		if !ok {
			t = &taskState{node: w.Node}
			tasks[w.TaskID] = t
			order = append(order, w.TaskID)
		}
		return t
	}
	corrupt := func(w PendingWrite, err error) error {
		return &CorruptError{Thread: thread, Checkpoint: id,
			What: fmt.Sprintf("pending write of task %q channel %q", w.TaskID, w.Channel), Err: err}
	}
	for _, w := range writes {
		if IsCommandTask(w.TaskID) {
			continue
		}
		t := get(w)
		switch {
		case w.Channel == ChannelInterrupt:
			list, err := DecodeInterrupts(w.Value)
			if err != nil {
				return nil, corrupt(w, err)
			}
			if raisedBy == nil {
				raisedBy = map[string]string{}
			}
			for _, in := range list {
				if other, dup := raisedBy[in.ID]; dup && other != w.TaskID {
					return nil, corrupt(w, fmt.Errorf("tasks %q and %q both raised interrupt %q", other, w.TaskID, in.ID))
				}
				raisedBy[in.ID] = w.TaskID
				t.interrupts = append(t.interrupts, PendingInterrupt{Thread: thread, CheckpointID: id, TaskID: w.TaskID, Node: w.Node, InterruptID: in.ID, Value: in.Value})
			}
		case w.Channel == ChannelResume:
			answers, err := DecodeAnswers(w.Value)
			if err != nil {
				return nil, corrupt(w, err)
			}
			t.answered = answers
		default:
			// Every write read is read strictly, whatever it decides.
			if err := checkWrite(w.Channel, w.Value); err != nil {
				return nil, corrupt(w, err)
			}
			t.finished = t.finished || !IsSpecial(w.Channel)
		}
	}
	var out []PendingInterrupt
	for _, id := range order {
		t := tasks[id]
		if t.finished {
			continue
		}
		for _, in := range t.interrupts {
			if _, ok := t.answered[in.InterruptID]; !ok {
				out = append(out, in)
			}
		}
	}
	return out, nil
}

// Clock returns the current time. Savers and the runtime take one so that
// tests can pin time.
type Clock func() time.Time
