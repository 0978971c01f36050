package graph

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/internal/hookcall"
	"github.com/lockstepgo/lockstep/internal/safe"
	"github.com/lockstepgo/lockstep/internal/strictjson"
	"github.com/lockstepgo/lockstep/internal/testhook"
	"github.com/lockstepgo/lockstep/interrupt"
	"github.com/lockstepgo/lockstep/observe"
)

// errStopped ends a streamed run whose consumer stopped reading.
var errStopped = errors.New("graph: stream consumer stopped")

// Invoke starts a run on thread with new input and runs it until it is
// done or waits for a human. On a thread that already has checkpoints the
// input is applied to the saved state and its pending tasks are discarded,
// unless the thread is waiting: then Invoke fails with ErrPendingInterrupt
// (see DiscardPending).
//
// A waiting run is not an error: the Result says StatusWaiting and carries
// the interrupts. Errors are a *NodeError (a node failed; its stack is in a
// *PanicError when it panicked), a *ConflictError, a *RecursionError, a
// *checkpoint.ConflictError or *checkpoint.BusyError (another runner owns the
// thread), the context's error (the run stopped between steps; the thread
// is pending), or a saver error. After a saver error (SQLite busy past its
// timeout, an I/O error, a commit whose outcome is unknown and could not be
// read back) the thread is pending, never half-saved: the runtime does not
// retry a save itself, and Continue picks the run up where it stopped. When the thread's next tasks name a node
// this graph no longer has (the graph changed since they were saved),
// Invoke, Resume, Continue and GetState return an *UnknownNodeError naming
// it, and nothing is written; UpdateState, or new input with
// DiscardPending, drops those tasks.
func (r *Runnable[S]) Invoke(ctx context.Context, thread string, input Update[S], opts ...RunOption) (Result[S], error) {
	return r.drive(ctx, thread, StartWith(input), opts, nil)
}

// Resume answers a waiting thread and runs it on. cmd.Resume answers the one
// pending interrupt, cmd.ResumeByID answers by interrupt ID (any subset of
// the pending ones; unanswered tasks pause again), and cmd.Update is applied
// first. The interrupted tasks run again from their first line; tasks that
// finished in the interrupted step keep their saved writes and do not run.
// Resume claims the thread before it reads the pending interrupts; answers
// without an Update are saved in the transaction of the run's first write
// (see the package doc), so a crash before it leaves the thread waiting as
// it was.
//
// A NodeInterrupt takes no answer: the node raises it again until the
// state changes, so resume it with cmd.Update alone (or UpdateState and
// Continue). An answer the node cannot decode into Ask's type, or refuses
// with an *interrupt.AnswerError of its own, is taken back: the resume
// fails with a *NodeError around the *interrupt.AnswerError, and the
// interrupt waits for another answer.
//
// At a static breakpoint, where nothing has asked yet, cmd.Resume is kept,
// as LangGraph keeps it: it is the answer of the first Ask of the task
// held there, which returns it without pausing (a node that never asks
// ignores it). With several tasks held, it is a *ResumeError matching
// ErrAmbiguousResume.
//
// Resume fails closed: ErrNothingToResume when the thread does not wait,
// a *ResumeError (ErrAmbiguousResume, ErrUnknownInterrupt,
// ErrAlreadyAnswered, ErrNotAnswerable for a NodeInterrupt) when the
// answers do not fit, ErrInvalidInput for a Command that answers nothing
// and changes nothing while interrupts are pending, and, when another
// runner resumed first, an error matching checkpoint.ErrThreadBusy or
// checkpoint.ErrConflict before any node runs. Otherwise it returns what
// Invoke returns.
func (r *Runnable[S]) Resume(ctx context.Context, thread string, cmd Command[S], opts ...RunOption) (Result[S], error) {
	return r.drive(ctx, thread, ResumeWith(cmd), opts, nil)
}

// Continue runs a thread's pending tasks: after a failure, a crash, a
// static breakpoint, or a NodeInterrupt whose state a reviewer updated
// (UpdateState without AsNode acts, as in LangGraph, as the node that
// wrote last, START when the interrupted node is the first, so the
// interrupted node is due again and runs with the updated state).
// Interrupted tasks run again (and pause again unless something changed).
// On a done thread it does nothing. It fails with ErrThreadNotFound on an
// unknown thread and otherwise returns what Invoke returns.
func (r *Runnable[S]) Continue(ctx context.Context, thread string, opts ...RunOption) (Result[S], error) {
	return r.drive(ctx, thread, ContinueRun[S](), opts, nil)
}

// Replay forks the thread at an older checkpoint and runs on from there
// (time travel). A "fork" checkpoint is written first; later checkpoints of
// the old branch are kept, and interrupts fire again with new IDs. It fails
// with an error matching checkpoint.ErrNotFound for an unknown checkpoint.
func (r *Runnable[S]) Replay(ctx context.Context, thread, checkpointID string, opts ...RunOption) (Result[S], error) {
	return r.drive(ctx, thread, ReplayFrom[S](checkpointID), opts, nil)
}

// Stream runs like Invoke, Resume, Continue or Replay (chosen by in) and
// yields events as they happen: values after every saved step, every
// task's update, debug task and checkpoint events, and a final
// EventInterrupt when the run stops waiting. An error ends the sequence as
// its last item. Breaking out of the loop stops the run at the next step
// boundary; the thread is then pending.
func (r *Runnable[S]) Stream(ctx context.Context, thread string, in Input[S], opts ...RunOption) iter.Seq2[Event[S], error] {
	return func(yield func(Event[S], error) bool) {
		stopped := false
		emit := func(e Event[S]) bool {
			if stopped {
				return false
			}
			if !yield(e, nil) {
				stopped = true
			}
			return !stopped
		}
		_, err := r.drive(ctx, thread, in, opts, emit)
		if stopped || errors.Is(err, errStopped) {
			return
		}
		if err != nil {
			yield(Event[S]{}, err)
		}
	}
}

// run is the state of one run.
type run[S any] struct {
	r       *Runnable[S]
	thread  string
	ns      string
	opts    resolvedRun
	lease   checkpoint.Lease
	saver   checkpoint.Saver
	fr      *frame[S]
	pending []checkpoint.PendingWrite // saved writes of fr's checkpoint
	step    int
	stop    int
	emit    func(Event[S]) bool
	floor   string      // a fork's ID must sort after this too: the thread's head
	stopped atomic.Bool // the stream's consumer stopped reading

	// nest links a subgraph's run to the run of the task that runs it
	// (subgraph.go); nil for a thread's root run. emitNested streams the
	// events of the subgraphs the run's tasks run (nil: they are not
	// streamed), and stoppedAt is the breakpoint the run stopped at.
	nest       *nestLink
	emitNested func(nestedEvent) bool
	stoppedAt  *checkpoint.Breakpoint
	// live counts the runs of the thread's runner, for take-backs
	// (request): the Runnable's own, or the root's for a subgraph's
	// state update.
	live *liveRuns

	logOnce sync.Once
	log     *slog.Logger // the configured logger with the thread and run; see logAttrs

	mu     sync.Mutex // guards leased, done, head and hb for the heartbeat
	leased bool
	// holds is leased, read without mu: the run's requests are fenced
	// while it holds the lease (see request).
	holds atomic.Bool
	done  bool
	head  string
	hb    *time.Timer

	// ended is set when finish begins: the run sends no request to the
	// saver any more (see request), whatever a goroutine it left behind
	// asks for.
	ended atomic.Bool
	// acquired is set once a request of the run succeeded: the run has
	// held the thread's lease, and takes no lease back any more (see
	// request).
	acquired atomic.Bool
	// claimed: the run works under its caller's claim (ClaimedBy): it
	// holds the lease from its start and never releases it.
	claimed bool

	// held is the run's input checkpoint, encoded but not saved yet. It is
	// saved in one transaction with the checkpoint of the __start__ step,
	// which runs no node (so D3 holds: both are committed before the first
	// node runs), or on its own before any other write and when the run
	// ends before that step is saved. heldMu is held while it is saved, so
	// that no write of a concurrent task overtakes it.
	heldMu   sync.Mutex
	held     *checkpoint.PutRequest
	heldLost bool // saving held failed: fr is not the thread's head

	// answers are a resume's __resume__ writes on the checkpoint answersOn
	// (the resumed step's starting checkpoint), not saved yet. They are
	// saved with the run's first write: in the transaction of the step's
	// checkpoint (as writes of the tasks that produced it), with the
	// interrupts or failures that end the step, or with the first pending
	// write a task saves; when the run ends without writing, on their own.
	// A resume is then one transaction with the work it unblocks, and a
	// crash before it leaves the thread waiting as it was. Guarded by
	// heldMu, which is held while they are saved, so that no write of a
	// concurrent task (a durable step's result) overtakes them.
	answers   []checkpoint.TaskWrites
	answersOn string
	// answerJoins (WithAnswerJoin) go with answers: they commit in the
	// transaction that saves them (D16), and are held again with them
	// when it fails. Guarded by heldMu.
	answerJoins []checkpoint.Join
	// joinsTaken are the answerJoins withHeld put in the request it
	// built with the answers, for lostHeld to hold again.
	joinsTaken []checkpoint.Join

	// The durability modes (see durability.go and the package doc), all
	// guarded by heldMu. inflight is the put DurabilityAsync has in
	// flight, nil when none; queued are the loop checkpoints waiting
	// behind it (queuedBytes their blobs, queuedAnswers the answers they
	// carry), committed as one chain by the next put; saveErr is the
	// first error of such a put, which every later write of the run
	// returns. deferred is set in
	// DurabilityExit while fr is the frame of a finished step, stamped
	// with its checkpoint's ID and not saved (its parent, fr.parentID, is
	// the last checkpoint saved or held); materialized is the checkpoint
	// a task's write saved it as mid-step, for the loop to record on fr
	// once the step's tasks are done (see adoptSaved).
	inflight      *inflightPut
	queued        []checkpoint.PutRequest
	queuedBytes   int
	queuedAnswers []checkpoint.TaskWrites
	saveErr       error
	deferred      bool
	materialized  *checkpoint.Checkpoint

	// repeated: the run's RunKey is that of the thread's latest input, so
	// the run reports or continues that run (see repeat); asIs is the
	// result of one that waits or is done, reported as it stands, and
	// asIsStep the step of its head.
	repeated bool
	asIs     *Result[S]
	asIsStep int

	hook func(point string) // the module's tests' crash points (internal/testhook)
}

func (r *Runnable[S]) drive(ctx context.Context, thread string, in Input[S], opts []RunOption, emit func(Event[S]) bool) (res Result[S], err error) {
	var zero Result[S]
	if err := checkThread(thread); err != nil {
		return zero, err
	}
	ro, err := r.resolveRun(opts)
	if err != nil {
		return zero, err
	}
	owner := ro.claimedBy
	if owner == "" {
		owner = r.cfg.runIDs()
	}
	lease, leave := r.lease(owner)
	defer leave() // after finish: the lease is released (or its release failed)
	var closeEmit func()
	if emit != nil {
		// Events of subgraphs, and what nodes emit (Emit, EmitMessage),
		// come from the tasks, on their goroutines: the consumer gets
		// them one at a time, and none after the run returned.
		emit, closeEmit = serialized(emit)
		defer closeEmit()
	}
	ru := &run[S]{
		r: r, thread: thread, opts: ro, saver: r.cfg.saver, emit: emit,
		lease: lease, hook: testhook.From(ctx), live: &r.live, claimed: ro.claimedBy != "",
	}
	if ru.claimed {
		// The caller holds the lease: every request is fenced by it from
		// the first, and none takes a lease back (see ClaimedBy).
		ru.holds.Store(true)
		ru.acquired.Store(true)
	}
	if emit != nil && ro.subgraphs {
		ru.emitNested = func(ne nestedEvent) bool {
			ru.send(eventOf[S](ne))
			return !ru.stopped.Load()
		}
	}
	if r.obs != nil {
		e := ru.event(observe.KindRun)
		e.Mode, e.Links = modeOf(in.kind), observe.Links(ctx)
		sp := r.obs.Start(ctx, e)
		ctx = sp.Ctx
		defer func() { r.obs.End(sp, ru.runEnd(e, res, err)) }() // after finish: the release is the run's
	}
	defer ru.finish(ctx)
	if ru.saver == nil && in.kind != inputStart {
		return zero, fmt.Errorf("%w: cannot resume, continue or replay thread %q", ErrNoSaver, thread)
	}
	if len(ro.answerJoins) > 0 && in.kind != inputResume {
		return zero, fmt.Errorf("%w: thread %q: WithAnswerJoin applies to a resume's answers, not to new input, a continue or a replay", ErrInvalidInput, thread)
	}
	if ro.runKey != "" {
		switch {
		case in.kind != inputStart:
			return zero, fmt.Errorf("%w: thread %q: RunKey applies to new input (Invoke, StartWith), not to a resume, continue or replay", ErrInvalidInput, thread)
		case ru.saver == nil:
			return zero, fmt.Errorf("%w: thread %q: a run key is kept with the thread's checkpoints", ErrNoSaver, thread)
		}
	}
	switch in.kind {
	case inputStart:
		err = ru.startInput(ctx, in.update)
	case inputResume:
		err = ru.startResume(ctx, in.command)
	case inputContinue:
		err = ru.startContinue(ctx)
	case inputReplay:
		err = ru.startReplay(ctx, in.checkpoint)
	}
	if err != nil {
		return zero, err
	}
	if res := ru.asIs; res != nil {
		// A stream of the repeated run gets what a fresh one would end
		// with: the state and, when it waits, its interrupts.
		ru.send(Event[S]{Kind: EventValues, Step: ru.asIsStep, Values: res.Values, Config: res.Config})
		if res.Status == StatusWaiting {
			ru.send(Event[S]{Kind: EventInterrupt, Step: ru.asIsStep + 1, Interrupts: res.Interrupts, Next: res.Next, Config: res.Config})
		}
		return *res, nil
	}
	res, err = ru.loop(ctx)
	if _, ferr := ru.flushHeld(ctx); ferr != nil && !errors.Is(err, ferr) {
		// The run ended before its __start__ step, or its first write
		// after a resume, was saved (cancelled, stopped, or the step
		// failed), and the input or the answers could not be saved either;
		// or a checkpoint written in the background (DurabilityAsync), or
		// the one the run ends on (DurabilityExit), could not be saved:
		// the run failed, whatever the loop says.
		res, err = zero, errors.Join(ferr, err)
	}
	ru.adoptSaved()
	if ru.saver != nil && ru.fr != nil && len(ru.fr.dirty) == 0 && !ru.heldLost && ru.saveErr == nil {
		r.cache.put(thread, "", ru.fr) // the last saved frame: the thread's head
	}
	if err == nil {
		res.Repeated = ru.repeated
	}
	return res, err
}

// serialized returns emit guarded by a mutex, with a stop it reports
// once for every later event, and close, after which it emits nothing
// (a node the run left behind cannot reach a consumer that is gone).
func serialized[S any](emit func(Event[S]) bool) (send func(Event[S]) bool, close func()) {
	var mu sync.Mutex
	stopped := false
	send = func(e Event[S]) bool {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return false
		}
		stopped = !emit(e)
		return !stopped
	}
	close = func() {
		mu.Lock()
		stopped = true
		mu.Unlock()
	}
	return send, close
}

// sameRun reports whether key is the RunKey of the thread's latest input
// checkpoint: the caller is repeating the Invoke that started the thread's
// latest run. A key on an earlier input is an error matching
// ErrRunKeyReused; a thread without checkpoints has no run to repeat.
func (r *Runnable[S]) sameRun(ctx context.Context, thread, key string) (bool, error) {
	input := string(checkpoint.SourceInput)
	latest, err := r.cfg.saver.List(ctx, thread, checkpoint.ListOptions{Filter: map[string]any{"source": input}, Limit: 1, MetadataOnly: true})
	switch {
	case errors.Is(err, checkpoint.ErrNotFound):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("graph: thread %q: look up the run key: %w", thread, err)
	case len(latest) == 0:
		return false, nil
	case latest[0].Checkpoint.Metadata.RunKey == key:
		id, err := r.branchedBelow(ctx, thread, latest[0].Checkpoint.ID)
		if err != nil || id == "" {
			return err == nil, err
		}
		return false, fmt.Errorf("%w (thread %q, checkpoint %q: checkpoint %q, written since by Replay or UpdateState at an older checkpoint, branched off before it, so the current branch may not hold that run's input)",
			ErrRunKeyReused, thread, latest[0].Checkpoint.ID, id)
	}
	earlier, err := r.cfg.saver.List(ctx, thread, checkpoint.ListOptions{Filter: map[string]any{"source": input, checkpoint.RunKeyFilter: key}, Limit: 1, MetadataOnly: true})
	if err != nil {
		return false, fmt.Errorf("graph: thread %q: look up the run key: %w", thread, err)
	}
	if len(earlier) > 0 {
		return false, fmt.Errorf("%w (thread %q, checkpoint %q; the thread's latest input is checkpoint %q)",
			ErrRunKeyReused, thread, earlier[0].Checkpoint.ID, latest[0].Checkpoint.ID)
	}
	return false, nil
}

// branchedBelow returns the ID of a fork or update checkpoint newer than
// input whose parent is older than input, "" when there is none. Every
// other checkpoint newer than input descends from it, so without one the
// head's branch holds input; with one it may not (Replay, or UpdateState
// at an older checkpoint, branched the thread off before input).
func (r *Runnable[S]) branchedBelow(ctx context.Context, thread, input string) (string, error) {
	const page = 16
	for _, src := range []checkpoint.Source{checkpoint.SourceFork, checkpoint.SourceUpdate} {
		before := ""
	pages:
		for {
			ts, err := r.cfg.saver.List(ctx, thread, checkpoint.ListOptions{Filter: map[string]any{"source": string(src)}, Before: before, Limit: page, MetadataOnly: true})
			if err != nil {
				return "", fmt.Errorf("graph: thread %q: look up the run key: %w", thread, err)
			}
			for _, t := range ts {
				if t.Checkpoint.ID <= input {
					break pages
				}
				if t.Checkpoint.ParentID < input {
					return t.Checkpoint.ID, nil
				}
			}
			if len(ts) < page {
				break
			}
			before = ts[len(ts)-1].Checkpoint.ID
		}
	}
	return "", nil
}

// finish releases the lease if the run still holds it and stops the
// heartbeat.
// It runs with ctx's values (the run's observer span) and without its
// cancellation.
func (ru *run[S]) finish(ctx context.Context) {
	ru.ended.Store(true)
	ru.mu.Lock()
	ru.done = true
	if ru.nest != nil {
		// A subgraph's run writes under the lease of the run that runs
		// it, which renews and releases it.
		ru.leased = false
		ru.mu.Unlock()
		return
	}
	if ru.hb != nil {
		ru.hb.Stop()
	}
	leased := ru.leased && !ru.claimed // a claim's lease is its caller's to release
	ru.leased = false
	ru.holds.Store(false)
	ru.mu.Unlock()
	if leased && ru.saver != nil {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		sc := ru.startSaver(ctx, observe.OpRelease, nil)
		err := ru.saver.Release(ctx, ru.thread, ru.ns, ru.lease.Owner)
		ru.endSaver(sc, 0, err)
		if err != nil {
			ru.logAttrs(ctx, slog.LevelWarn, "could not release the thread's lease; it expires on its own", slog.String("error", err.Error()))
		}
	}
}

// releasing stops the heartbeat's renewals before a save that releases
// the lease, and returns what undoes that when the save fails (the run
// then still holds the thread, and its end releases it). A renewal that
// ran after the release committed, and before the run recorded it, took
// the thread again for a run that had ended (the next run of another
// runner found it busy for a whole lease); a renewal now renews only a
// lease the run holds (see request), and without this it would fail and
// warn of a lost lease that was given back on purpose.
func (ru *run[S]) releasing() (restore func()) {
	ru.mu.Lock()
	defer ru.mu.Unlock()
	was := ru.leased
	ru.leased = false
	return func() {
		ru.mu.Lock()
		defer ru.mu.Unlock()
		ru.leased = was
	}
}

// setLeased records the head and whether the run holds the thread's lease.
// While it does, a heartbeat renews the lease every TTL/3 (saves do not
// renew it), so a run longer than the TTL keeps the thread; a renewal
// never takes a lease the run no longer holds.
func (ru *run[S]) setLeased(head string, leased bool) {
	ru.mu.Lock()
	defer ru.mu.Unlock()
	ru.head, ru.leased = head, leased
	ru.holds.Store(leased)
	if leased && ru.hb == nil && !ru.done && ru.nest == nil {
		ru.hb = time.AfterFunc(ru.lease.TTL/3, ru.beat)
	}
}

func (ru *run[S]) beat() {
	ru.mu.Lock()
	defer ru.mu.Unlock()
	if ru.done {
		return
	}
	if ru.leased {
		ctx, cancel := context.WithTimeout(context.Background(), ru.lease.TTL/3)
		ref := checkpoint.Ref{Thread: ru.thread, NS: ru.ns, ID: ru.head}
		err := ru.request(func(l checkpoint.Lease) error { return ru.saver.Claim(ctx, ref, l) })
		cancel()
		if err != nil {
			ru.logAttrs(ctx, slog.LevelWarn, "lease renewal failed", slog.String("error", err.Error()))
		}
	}
	ru.hb.Reset(ru.lease.TTL / 3)
}

// load reads a checkpoint of the thread's root namespace with the
// configured saver (see loadAt).
func (r *Runnable[S]) load(ctx context.Context, thread, id string) (*frame[S], *checkpoint.Tuple, error) {
	return r.loadAt(ctx, r.cfg.saver, thread, "", id)
}

// loadAt reads a checkpoint of namespace ns of the thread from saver (the
// head when id is "") and decodes it, reusing the cached latest frame of
// the namespace where the versions match. It returns ErrThreadNotFound
// (wrapping checkpoint.ErrNotFound) when the namespace has no checkpoint.
func (r *Runnable[S]) loadAt(ctx context.Context, saver checkpoint.Saver, thread, ns, id string) (*frame[S], *checkpoint.Tuple, error) {
	base := r.cache.get(thread, ns)
	var opts checkpoint.GetOptions
	if base != nil {
		opts.Have = base.versions
	}
	var sc saverCall
	if r.obs != nil {
		sc = saverCall{sp: r.obs.Start(ctx, observe.Event{Kind: observe.KindSaver, NS: ns, Thread: thread, Op: observe.OpGet}), op: observe.OpGet}
	}
	tp, err := saver.Get(ctx, checkpoint.Ref{Thread: thread, NS: ns, ID: id}, opts)
	if sc.sp.Open() {
		r.endSaverCall(sc, observe.Event{Kind: observe.KindSaver, NS: ns, Thread: thread}, tupleBytes(tp), err)
	}
	if errors.Is(err, checkpoint.ErrNotFound) {
		if id != "" {
			return nil, nil, fmt.Errorf("graph: %s checkpoint %s: %w", placeName(thread, ns), id, err)
		}
		return nil, nil, fmt.Errorf("%w: %s: %w", ErrThreadNotFound, placeNameQ(thread, ns), err)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("graph: %s: load checkpoint: %w", placeName(thread, ns), err)
	}
	f, err := r.newDecoder(thread).frame(ctx, tp, base, true)
	if err != nil {
		return nil, nil, err
	}
	if id == "" {
		r.cache.put(thread, ns, f)
	}
	return f, tp, nil
}

// claimHead takes the lease on the thread's head and then reads the head
// again, so that every decision the run makes (which tasks finished, which
// interrupts are answered) rests on data no other runner can change while
// this run holds the lease. Reading first and claiming after would let two
// runners decide on the same stale read: two resumes of one task's
// interrupts would each replace the other's answers. It returns
// ErrThreadNotFound for a thread with no checkpoint.
//
// When this process knows the thread's head (its frame cache holds the
// last frame it saved or read), the claim goes first, on that head, and the
// head is read once, under the lease; a claim refused because the head has
// moved on falls back to reading first.
func (ru *run[S]) claimHead(ctx context.Context) (*frame[S], *checkpoint.Tuple, error) {
	if ru.nest != nil {
		// The run of the task that runs this subgraph holds the thread.
		return ru.r.loadAt(ctx, ru.saver, ru.thread, ru.ns, "")
	}
	if known := ru.r.cache.get(ru.thread, ru.ns); known != nil {
		err := ru.claim(ctx, known.id)
		switch {
		case err == nil:
			return ru.readClaimed(ctx, known.id)
		case !errors.Is(err, checkpoint.ErrConflict):
			return nil, nil, err
		}
	}
	f, _, err := ru.r.loadAt(ctx, ru.saver, ru.thread, ru.ns, "")
	if err != nil {
		return nil, nil, err
	}
	if err := ru.claim(ctx, f.id); err != nil {
		return nil, nil, err
	}
	return ru.readClaimed(ctx, f.id)
}

// readClaimed reads the head of a thread claimed on head.
func (ru *run[S]) readClaimed(ctx context.Context, head string) (*frame[S], *checkpoint.Tuple, error) {
	f2, tp, err := ru.r.loadAt(ctx, ru.saver, ru.thread, ru.ns, "")
	if err != nil {
		return nil, nil, err
	}
	if f2.id != head { // cannot happen while the lease is held
		return nil, nil, &checkpoint.ConflictError{Thread: ru.thread, NS: ru.ns, Expected: head, Head: f2.id}
	}
	return f2, tp, nil
}

// startInput prepares a run with new input: the input checkpoint is
// prepared and held, to be saved (claiming a new thread) with the
// __start__ step's checkpoint, before any node runs.
func (ru *run[S]) startInput(ctx context.Context, input Update[S]) error {
	r := ru.r
	start, err := r.encodeInput(ctx, input)
	if err != nil {
		return fmt.Errorf("graph: thread %q: input: %w", ru.thread, err)
	}
	prevStep := -2
	var head *frame[S]
	if ru.saver != nil {
		// A new thread needs no claim: the input checkpoint's compare-and-
		// swap on an empty head admits one runner. An existing one is
		// claimed before its pending work is judged.
		f, tp, err := ru.claimHead(ctx)
		switch {
		case errors.Is(err, ErrThreadNotFound):
			if ru.mode() == DurabilityExit {
				// Nothing is saved before the run ends: the new thread is
				// claimed now, so that of two runs started on it at once
				// the second fails before it runs any node, as in the
				// other modes (there the input's save claims it).
				if err := ru.claim(ctx, ""); err != nil {
					return err
				}
			}
		case err != nil:
			return err
		default:
			if ru.opts.runKey != "" {
				// Under the lease, so that no other runner applies the
				// same key between this look-up and the input's save.
				same, err := r.sameRun(ctx, ru.thread, ru.opts.runKey)
				if err != nil {
					return err
				}
				if same {
					return ru.repeat(ctx, f, tp)
				}
			}
			head, prevStep = f, f.meta.Step
			if !ru.opts.discard {
				if err := r.checkNext(ru.thread, f); err != nil {
					return err
				}
			}
			waiting, err := r.waiting(ctx, ru.thread, f, tp.Pending)
			if err != nil {
				return err
			}
			if waiting && !ru.opts.discard {
				return fmt.Errorf("%w (thread %q, checkpoint %s)", ErrPendingInterrupt, ru.thread, f.id)
			}
		}
	}
	var f *frame[S]
	if head == nil {
		f = newFrame[S]()
		f.thread, f.ns = ru.thread, ru.ns
	} else {
		f = head.derive(true)
		r.consume(f, r.plan(head, ru.ns, prevStep+1))
		r.dropOrphans(f) // with DiscardPending: tasks of nodes removed since
		f.parentID = head.id
	}
	f.start = start
	f.markInternal(checkpoint.ChannelStart)
	ru.step = prevStep + 1
	ru.stop = ru.step + ru.opts.limit + 1
	if ru.saver == nil {
		f.id = ru.nextID("")
		f.meta = checkpoint.Metadata{Source: checkpoint.SourceInput, Step: ru.step, Parents: ru.parents()}
		f.dirty = nil
		ru.fr = f
		ru.step++
		return nil
	}
	// The input checkpoint is held and saved with the __start__ step's.
	req, err := ru.prepareSave(ctx, f, checkpoint.SourceInput, nil, nil, false)
	if err != nil {
		return err
	}
	f.markSaved(&req.Checkpoint)
	ru.held = &req
	ru.fr = f
	ru.step++
	return nil
}

// repeat sets up a keyed Invoke whose key is that of the claimed head's
// latest input: the input was applied by an earlier call. A run that waits
// or is done is reported as it stands (ru.asIs); one that stopped before
// its end is continued, as Continue does.
func (ru *run[S]) repeat(ctx context.Context, f *frame[S], tp *checkpoint.Tuple) error {
	ru.repeated = true
	if err := ru.r.checkNext(ru.thread, f); err != nil {
		return err
	}
	snap, err := ru.r.snapshot(ctx, place{saver: ru.saver, thread: ru.thread, ns: ru.ns}, f, tp, true, true, false)
	if err != nil {
		return err
	}
	if snap.Status == StatusWaiting || snap.Status == StatusDone {
		res := Result[S]{Values: snap.Values, Status: snap.Status, Interrupts: snap.Interrupts, Next: snap.Next, Config: snap.Config, Repeated: true}
		if snap.Status == StatusDone {
			res.Interrupts, res.Next = nil, nil
		}
		ru.asIs, ru.asIsStep = &res, snap.Metadata.Step
		return nil
	}
	return ru.resumeFrom(ctx, f, tp.Pending)
}

// encodeInput checks and encodes the input fields for the __start__
// channel.
func (r *Runnable[S]) encodeInput(ctx context.Context, input Update[S]) (*startInput, error) {
	if len(input.gotos) > 0 || len(input.sends) > 0 {
		return nil, fmt.Errorf("%w: input cannot Goto or Send; add edges from START", ErrInvalidInput)
	}
	in := &startInput{fields: map[string]json.RawMessage{}}
	v := reflectValue(&input.value)
	for _, name := range input.Fields() {
		i, ok := r.schema.lookup(name)
		if !ok {
			return nil, &UnknownFieldError{Field: name}
		}
		fl := &r.schema.fields[i]
		name = fl.name // stored by its Go name, whichever name the caller used
		b, err := encodeValue(ctx, r.abandoned, v.Field(fl.index), fl, where{prefix: "input field", field: name}, r.cfg.maxValueBytes)
		if err != nil {
			return nil, err
		}
		in.fields[name] = b
	}
	return in, nil
}

// waiting reports whether the checkpoint's status is StatusWaiting.
func (r *Runnable[S]) waiting(ctx context.Context, thread string, f *frame[S], pending []checkpoint.PendingWrite) (bool, error) {
	in, err := r.inspect(ctx, thread, f, pending)
	if err != nil {
		return false, err
	}
	return in.status == StatusWaiting, nil
}

// pendingInterrupts lists the unanswered interrupts of unfinished tasks.
func pendingInterrupts[S any](tasks []*task[S]) []interrupt.Interrupt {
	var out []interrupt.Interrupt
	for _, t := range tasks {
		if t.done {
			continue
		}
		for _, in := range t.interrupts {
			if _, ok := t.answers[in.ID]; !ok {
				out = append(out, in)
			}
		}
	}
	return out
}

// startResume claims the thread and validates a resume command against
// the pending interrupts before any node runs. A command with an Update
// saves it and the answers at once; answers alone are held (run.answers)
// and saved with the run's first write.
func (ru *run[S]) startResume(ctx context.Context, cmd Command[S]) error {
	f, tp, err := ru.claimHead(ctx)
	if err != nil {
		return err
	}
	return ru.resumeAt(ctx, f, tp, cmd)
}

// resumeAt validates a resume command against the pending interrupts of
// f, the claimed head, and sets the run up to go on from it (see
// startResume).
func (ru *run[S]) resumeAt(ctx context.Context, f *frame[S], tp *checkpoint.Tuple, cmd Command[S]) error {
	r := ru.r
	var err error
	if err := r.checkNext(ru.thread, f); err != nil {
		return err
	}
	tasks := r.plan(f, ru.ns, f.meta.Step+1)
	if err := r.attach(ctx, ru.thread, f.id, tasks, tp.Pending); err != nil {
		return err
	}
	breakpoint := false
	for _, w := range tp.Pending {
		if w.TaskID == checkpoint.NullTaskID && w.Channel == checkpoint.ChannelBreakpoint {
			breakpoint = true
		}
	}
	pending := pendingInterrupts(tasks)
	owner := map[string]*task[S]{}
	answeredBefore := map[string]bool{}
	for _, t := range tasks {
		for _, in := range t.interrupts {
			owner[in.ID] = t
		}
		for id := range t.answers {
			answeredBefore[id] = true
		}
	}
	pendingIDs := make([]string, len(pending))
	for i, p := range pending {
		pendingIDs[i] = p.ID
	}
	answers := map[string]any{}
	switch {
	case cmd.Resume != nil && cmd.ResumeByID != nil:
		return fmt.Errorf("%w: set Resume or ResumeByID, not both", ErrInvalidInput)
	case cmd.Resume != nil:
		switch len(pending) {
		case 0:
			id, t, ok, err := breakpointAnswer(ru.thread, tp.Pending, tasks)
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("%w: thread %q has no pending interrupt to answer", ErrNothingToResume, ru.thread)
			}
			answers[id], owner[id] = cmd.Resume, t
		case 1:
			answers[pending[0].ID] = cmd.Resume
		default:
			return &ResumeError{Thread: ru.thread, Kind: ErrAmbiguousResume, Pending: pendingIDs}
		}
	case len(cmd.ResumeByID) > 0:
		for id, v := range cmd.ResumeByID {
			switch {
			case answeredBefore[id]:
				return &ResumeError{Thread: ru.thread, Kind: ErrAlreadyAnswered, InterruptID: id}
			case !slices.Contains(pendingIDs, id):
				return &ResumeError{Thread: ru.thread, Kind: ErrUnknownInterrupt, InterruptID: id, Pending: pendingIDs}
			}
			answers[id] = v
		}
	default:
		if len(pending) == 0 && !breakpoint {
			return fmt.Errorf("%w: thread %q is not waiting", ErrNothingToResume, ru.thread)
		}
		if len(pending) > 0 && cmd.Update.empty() {
			return fmt.Errorf("%w: thread %q: the Command answers nothing and changes nothing: set Resume or ResumeByID, or Update (Continue runs the interrupted tasks again as they are)", ErrInvalidInput, ru.thread)
		}
	}
	for id := range answers {
		t := owner[id]
		if t == nil {
			continue
		}
		ok := id != interrupt.ID(t.id, -1)
		if spec := r.nodes[t.name]; ok && spec != nil && spec.sub != nil && ru.saver != nil {
			// An interrupt of a subgraph: the subgraph knows what raised it.
			if ok, err = spec.sub.answerable(ctx, ru.saver, ru.thread, checkpoint.TaskNS(ru.ns, t.name, t.id), id); err != nil {
				return err
			}
		}
		if !ok {
			// A NodeInterrupt is raised again by the node until the state
			// changes; an answer would hide it and leave the thread stuck.
			return &ResumeError{Thread: ru.thread, Kind: ErrNotAnswerable, InterruptID: id}
		}
	}
	// Answers are saved per task, merged with earlier answers.
	byTask := map[*task[S]]map[string]json.RawMessage{}
	for id, v := range answers {
		what := fmt.Sprintf("answer to interrupt %s of thread %q", id, ru.thread)
		b, err := marshalValue(ctx, r.abandoned, v, what)
		if errors.Is(err, ErrAbandoned) {
			return err // nothing was written: the thread waits as it did
		}
		if err == nil {
			// An answer from outside (a json.RawMessage a reviewer typed)
			// is refused as strictly as a stored value is read: a
			// duplicate key or a lone surrogate escape would be saved,
			// then read back as something else.
			if serr := strictjson.CheckJSON(b); serr != nil {
				err = &interrupt.ValueError{Path: "$", Err: serr}
			}
		}
		if err != nil {
			// An *EncodeError (ErrNotSerializable) around the
			// *interrupt.ValueError that locates the problem.
			return &EncodeError{What: fmt.Sprintf("answer to interrupt %s of thread %q", id, ru.thread), Err: err}
		}
		if len(b) > r.cfg.maxValueBytes {
			// Refused before it is saved: a stored answer the node cannot
			// write would fail every later run of the node the same way.
			return &SizeError{What: fmt.Sprintf("answer to interrupt %s of thread %q", id, ru.thread), Size: len(b), Limit: r.cfg.maxValueBytes}
		}
		t := owner[id]
		if byTask[t] == nil {
			byTask[t] = map[string]json.RawMessage{}
			for k, old := range t.answers {
				byTask[t][k] = old
			}
		}
		byTask[t][id] = b
	}
	var writes []checkpoint.TaskWrites
	for _, t := range tasks {
		a, ok := byTask[t]
		if !ok {
			continue
		}
		b, err := json.Marshal(a)
		if err != nil {
			return err
		}
		writes = append(writes, checkpoint.TaskWrites{TaskID: t.id, Node: t.name, Path: t.path(), Writes: []checkpoint.Write{{Channel: checkpoint.ChannelResume, Value: b}}})
	}
	if !cmd.Update.IsZero() {
		commands := map[string]bool{}
		for _, w := range tp.Pending {
			if checkpoint.IsCommandTask(w.TaskID) && w.TaskID != checkpoint.NullTaskID {
				commands[w.TaskID] = true
			}
		}
		nt := &task[S]{id: checkpoint.CommandTaskID(len(commands) + 1), push: -1}
		nt.writes, err = r.resolve(ctx, nt, cmd.Update, f, false)
		if err != nil {
			return fmt.Errorf("graph: thread %q: Command.Update: %w", ru.thread, err)
		}
		ws, err := r.encodeWrites(ctx, nt)
		if err != nil {
			return fmt.Errorf("graph: thread %q: Command.Update: %w", ru.thread, err)
		}
		writes = append(writes, checkpoint.TaskWrites{TaskID: nt.id, Writes: ws})
	}
	if len(ru.opts.answerJoins) > 0 && len(byTask) == 0 {
		return fmt.Errorf("%w: thread %q: WithAnswerJoin needs answers to join (Command.Resume or ResumeByID); nothing was saved", ErrInvalidInput, ru.thread)
	}
	switch {
	case len(writes) == 0:
	case cmd.Update.IsZero():
		// Only answers: they are saved with the resumed run's first write
		// (see run.answers). The claim above already made this run the
		// only one that can resume the thread.
		ru.answers, ru.answersOn, ru.answerJoins = writes, f.id, ru.opts.answerJoins
	default:
		if err := ru.putWrites(ctx, f.id, writes, false, ru.opts.answerJoins); err != nil {
			return err
		}
	}
	pendingAll := slices.Clone(tp.Pending)
	for _, tw := range writes {
		for _, w := range tw.Writes {
			pendingAll = append(pendingAll, checkpoint.PendingWrite{TaskID: tw.TaskID, Node: tw.Node, Path: tw.Path, Channel: w.Channel, Value: w.Value})
		}
	}
	return ru.resumeFrom(ctx, f, pendingAll)
}

// startContinue claims the thread and runs its pending tasks.
func (ru *run[S]) startContinue(ctx context.Context) error {
	f, tp, err := ru.claimHead(ctx)
	if err != nil {
		return err
	}
	if err := ru.r.checkNext(ru.thread, f); err != nil {
		return err
	}
	return ru.resumeFrom(ctx, f, tp.Pending)
}

// startReplay writes a fork of an older checkpoint and runs from it.
func (ru *run[S]) startReplay(ctx context.Context, id string) error {
	if id == "" {
		return fmt.Errorf("%w: replay needs a checkpoint ID", ErrInvalidInput)
	}
	head, _, err := ru.r.load(ctx, ru.thread, "")
	if err != nil {
		return err
	}
	src, _, err := ru.r.load(ctx, ru.thread, id)
	if err != nil {
		return err
	}
	ru.floor = head.id
	f := src.derive(false)
	f.parentID = src.id
	if err := ru.save(ctx, f, checkpoint.SourceFork, nil, nil, false, true); err != nil {
		return err
	}
	if err := ru.resumeFrom(ctx, f, nil); err != nil {
		return err
	}
	ru.stop-- // the budget counts from the replayed checkpoint, as in LangGraph
	return nil
}

// resumeFrom sets the run up to continue from f: the command writes saved
// on it are applied, breakpoints are passed once, and the step budget is
// LangGraph's (a resumed run gets one superstep more than a fresh one).
func (ru *run[S]) resumeFrom(ctx context.Context, f *frame[S], pending []checkpoint.PendingWrite) error {
	f, err := ru.r.applyCommands(ctx, ru.thread, f, pending, true)
	if err != nil {
		return err
	}
	f.mark = f.maxVersion()
	ru.fr, ru.pending = f, pending
	ru.step = f.meta.Step + 1
	ru.stop = ru.step + ru.opts.limit + 1
	return nil
}

// logAttrs logs msg with the thread and the run ID when the configured
// logger takes level. The logger carrying them is made at the first
// message, so that a run that logs nothing (the default) pays nothing.
func (ru *run[S]) logAttrs(ctx context.Context, level slog.Level, msg string, attrs ...slog.Attr) {
	l := ru.r.cfg.logger
	if !l.Enabled(ctx, level) {
		return
	}
	ru.logOnce.Do(func() {
		ru.log = l.With(slog.String("thread", ru.thread), slog.String("run", ru.lease.Owner))
	})
	ru.log.LogAttrs(ctx, level, msg, attrs...)
}

// refuseAnswer takes back the answer a task's node could not decode (Ask
// failed with an *interrupt.AnswerError): the answer leaves the task's
// answers and the resume's held ones, and the write it returns (the
// task's __resume__ write without it, which replaces the saved one) goes
// with the task's error, so that the interrupt waits again for an answer
// of the right type instead of failing every later run the same way.
func (ru *run[S]) refuseAnswer(t *task[S]) (checkpoint.Write, bool) {
	var ae *interrupt.AnswerError
	if !errors.As(t.err, &ae) {
		return checkpoint.Write{}, false
	}
	if _, ok := t.answers[ae.ID]; !ok {
		return checkpoint.Write{}, false
	}
	kept := maps.Clone(t.answers)
	delete(kept, ae.ID)
	t.answers = kept
	b, err := json.Marshal(kept)
	if err != nil {
		return checkpoint.Write{}, false
	}
	w := checkpoint.Write{Channel: checkpoint.ChannelResume, Value: b}
	ru.heldMu.Lock()
	defer ru.heldMu.Unlock()
	for i := range ru.answers {
		if ru.answers[i].TaskID != t.id {
			continue
		}
		held := slices.Clone(ru.answers[i].Writes)
		for j := range held {
			if held[j].Channel == checkpoint.ChannelResume {
				held[j] = w
			}
		}
		ru.answers[i].Writes = held
	}
	return w, true
}

// detached returns ctx without its cancellation: ctx itself when it has
// none (context.WithoutCancel allocates, and most callers pass a context
// that cannot be cancelled).
func detached(ctx context.Context) context.Context {
	if _, ok := ctx.Deadline(); !ok && ctx.Done() == nil {
		return ctx
	}
	return context.WithoutCancel(ctx)
}

// claim takes the thread's lease without writing.
func (ru *run[S]) claim(ctx context.Context, head string) error {
	ref := checkpoint.Ref{Thread: ru.thread, NS: ru.ns, ID: head}
	sc := ru.startSaver(ctx, observe.OpClaim, nil)
	err := ru.request(func(l checkpoint.Lease) error { return ru.saver.Claim(ctx, ref, l) })
	ru.endSaver(sc, 0, err)
	if err != nil {
		return fmt.Errorf("graph: thread %q: claim: %w", ru.thread, err)
	}
	ru.setLeased(head, true)
	return nil
}

// putWrites saves pending writes on the head, claiming or renewing the
// lease (and releasing it when release is set).
func (ru *run[S]) putWrites(ctx context.Context, head string, tasks []checkpoint.TaskWrites, release bool, joins []checkpoint.Join) error {
	// Work that already happened is saved even when the caller has
	// cancelled: cancellation takes effect at the next step boundary.
	ctx = detached(ctx)
	ru.heldMu.Lock()
	if err := ru.settle(ctx); err != nil {
		ru.heldMu.Unlock()
		return err
	}
	if ru.deferred && head == ru.fr.id {
		// DurabilityExit: the writes are the first of the step that
		// started from the deferred frame, which is saved with them.
		defer ru.heldMu.Unlock()
		return ru.saveDeferred(ctx, tasks, release, joins)
	}
	if ru.held == nil && ru.answers == nil {
		ru.heldMu.Unlock()
		return ru.writePending(ctx, head, tasks, release, joins)
	}
	defer ru.heldMu.Unlock()
	if err := ru.flushInput(ctx); err != nil {
		return err
	}
	if ru.answers == nil || ru.answersOn != head {
		if err := ru.flushAnswers(ctx); err != nil {
			return err
		}
		return ru.writePending(ctx, head, tasks, release, joins)
	}
	answers, answerJoins := ru.answers, ru.answerJoins
	ru.answers, ru.answerJoins = nil, nil
	if err := ru.writePending(ctx, head, mergeTaskWrites(answers, tasks), release, append(slices.Clip(answerJoins), joins...)); err != nil {
		ru.answers, ru.answerJoins = answers, answerJoins // saved when the run ends, if the thread allows
		return err
	}
	return nil
}

// writePending saves pending writes on the head (see putWrites).
func (ru *run[S]) writePending(ctx context.Context, head string, tasks []checkpoint.TaskWrites, release bool, joins []checkpoint.Join) error {
	if err := ru.beforeWrite(ctx); err != nil {
		return err
	}
	if err := ru.saveTopology(ctx); err != nil {
		return fmt.Errorf("graph: thread %q: %w", ru.thread, err)
	}
	release = release && ru.nest == nil && !ru.claimed // a subgraph's run never lets the thread go, nor one under a claim
	restore := func() {}
	if release {
		restore = ru.releasing()
	}
	var sc saverCall
	if ru.r.obs != nil {
		sc = ru.startSaver(ctx, observe.OpPutWrites, func() int { return writesBytes(tasks) })
	}
	err := ru.request(func(l checkpoint.Lease) error {
		return ru.saver.PutWrites(ctx, checkpoint.WritesRequest{
			Ref:   checkpoint.Ref{Thread: ru.thread, NS: ru.ns, ID: head},
			Tasks: tasks, Lease: l, Release: release, Joins: joins,
		})
	})
	ru.endSaver(sc, 0, err)
	if err != nil {
		restore()
		return fmt.Errorf("graph: thread %q checkpoint %s: save pending writes: %w", ru.thread, head, err)
	}
	ru.setLeased(head, !release)
	return nil
}

// mergeTaskWrites returns the writes of held and tasks, one entry per
// task: held writes are appended to a task's own. Neither input is
// modified.
func mergeTaskWrites(held, tasks []checkpoint.TaskWrites) []checkpoint.TaskWrites {
	out := slices.Clone(tasks)
	for _, h := range held {
		i := slices.IndexFunc(out, func(tw checkpoint.TaskWrites) bool { return tw.TaskID == h.TaskID })
		if i < 0 {
			out = append(out, h)
			continue
		}
		out[i].Writes = append(slices.Clip(out[i].Writes), h.Writes...)
	}
	return out
}

// save writes f as a new checkpoint whose parent is f.parentID. unsaved are
// the tasks whose writes produced it and are not saved yet; they are saved
// as pending writes of the parent in the same transaction. A held input
// checkpoint (the parent) is saved in the same transaction too.
//
// In DurabilityAsync a loop checkpoint that neither ends the run
// (release) nor carries the held input is written in the background
// (putAsync): f is marked saved at once, and the save's outcome is
// collected by the run's next write (settle).
func (ru *run[S]) save(ctx context.Context, f *frame[S], source checkpoint.Source, unsaved []*task[S], writes []checkpoint.TaskWrites, release bool, fork ...bool) error {
	req, err := ru.prepareSave(ctx, f, source, unsaved, writes, release, fork...)
	if err != nil {
		return err
	}
	ru.heldMu.Lock()
	defer ru.heldMu.Unlock()
	if ru.mode() == DurabilityAsync && source == checkpoint.SourceLoop && !release && ru.held == nil {
		if err := ru.saveBehind(ctx, req); err != nil {
			return err
		}
	} else {
		// Committed now, with the checkpoints queued before it.
		if err := ru.awaitInflight(); err != nil {
			return err
		}
		reqs, answers, err := ru.withHeld(ctx, req)
		if err != nil {
			return err
		}
		reqs, answers = ru.takeQueued(reqs, answers)
		if err := ru.putNow(ctx, reqs); err != nil {
			ru.lostHeld(reqs, answers)
			return err
		}
	}
	f.markSaved(&req.Checkpoint)
	for _, t := range unsaved {
		t.saved = true
	}
	return nil
}

// withHeld returns req preceded by the held input checkpoint, if any,
// and with a resume's held answers on req's parent as its ParentWrites
// (answers on another checkpoint are saved first, on their own). It
// returns the answers it took, for lostHeld. The caller holds heldMu.
func (ru *run[S]) withHeld(ctx context.Context, req checkpoint.PutRequest) ([]checkpoint.PutRequest, []checkpoint.TaskWrites, error) {
	reqs := []checkpoint.PutRequest{req}
	if ru.held != nil {
		reqs = []checkpoint.PutRequest{*ru.held, req}
		ru.held = nil
	}
	answers := ru.answers
	if answers != nil {
		if ru.answersOn != req.Checkpoint.ParentID {
			if err := ru.flushAnswers(ctx); err != nil {
				return nil, nil, err
			}
			answers = nil
		} else {
			ru.answers = nil
			// The answers are writes of the tasks that produced the
			// checkpoint: pending writes of its parent, as ParentWrites are.
			reqs[len(reqs)-1].ParentWrites = mergeTaskWrites(answers, req.ParentWrites)
			// Their joins commit with them (WithAnswerJoin).
			last := &reqs[len(reqs)-1]
			last.Joins = append(slices.Clip(last.Joins), ru.answerJoins...)
			ru.joinsTaken, ru.answerJoins = ru.answerJoins, nil
		}
	}
	return reqs, answers, nil
}

// lostHeld records that reqs, built by withHeld, were not saved: the
// held input is lost (fr is not the thread's head) and the answers are
// held again, to be saved when the run ends if the thread allows. The
// caller holds heldMu.
func (ru *run[S]) lostHeld(reqs []checkpoint.PutRequest, answers []checkpoint.TaskWrites) {
	ru.heldLost = ru.heldLost || len(reqs) > 1
	if ru.answers == nil {
		ru.answers = answers
		if answers != nil {
			ru.answerJoins = ru.joinsTaken
		}
	}
}

// prepareSave encodes f as the request of a new checkpoint (see save).
func (ru *run[S]) prepareSave(ctx context.Context, f *frame[S], source checkpoint.Source, unsaved []*task[S], writes []checkpoint.TaskWrites, release bool, fork ...bool) (checkpoint.PutRequest, error) {
	id := ru.stamp(f, source, max(f.parentID, ru.floor))
	return ru.encodeSave(ctx, f, id, unsaved, writes, release, len(fork) > 0 && fork[0])
}

// stamp sets f's metadata and creation time for a new checkpoint of
// source and returns the checkpoint's ID, which sorts after after.
func (ru *run[S]) stamp(f *frame[S], source checkpoint.Source, after string) string {
	step := ru.step
	if source == checkpoint.SourceFork {
		step = f.meta.Step + 1
	}
	// A new checkpoint sorts after its parent and, when it forks from an
	// older checkpoint, after the thread's head, so that it becomes the
	// head in every process whatever its clock says.
	id := ru.nextID(after)
	f.meta = checkpoint.Metadata{Source: source, Step: step, Parents: ru.parents(), RunID: ru.lease.Owner, Topology: ru.r.topoFP,
		Durability: string(ru.mode()), Extra: ru.opts.metadata}
	if source == checkpoint.SourceInput {
		f.meta.RunKey = ru.opts.runKey
	}
	f.createdAt = ru.now()
	return id
}

// encodeSave encodes f, stamped (stamp), as the request of checkpoint id.
func (ru *run[S]) encodeSave(ctx context.Context, f *frame[S], id string, unsaved []*task[S], writes []checkpoint.TaskWrites, release, fork bool) (checkpoint.PutRequest, error) {
	r := ru.r
	step := f.meta.Step
	cp, err := r.encodeFrame(ctx, f, id)
	if err != nil {
		return checkpoint.PutRequest{}, fmt.Errorf("graph: thread %q step %d: %w", ru.thread, step, err)
	}
	var parentWrites []checkpoint.TaskWrites
	for _, t := range unsaved {
		ws, err := r.encodeWrites(ctx, t)
		if err != nil {
			return checkpoint.PutRequest{}, fmt.Errorf("graph: thread %q step %d: %w", ru.thread, step, err)
		}
		parentWrites = append(parentWrites, checkpoint.TaskWrites{TaskID: t.id, Node: t.name, Path: t.path(), Writes: ws})
	}
	return checkpoint.PutRequest{
		Thread: ru.thread, NS: ru.ns, Checkpoint: cp,
		ParentWrites: parentWrites, Writes: writes,
		Fork: fork, Lease: ru.lease, Release: release && ru.nest == nil && !ru.claimed,
	}, nil
}

// put saves reqs, a chain of checkpoints, in one transaction where the
// saver can (checkpoint.PutChain), and records the last as the head. It
// returns a *SaveError when the saver refused or failed. The caller holds
// heldMu.
func (ru *run[S]) put(ctx context.Context, reqs []checkpoint.PutRequest) error {
	if err := ru.settle(ctx); err != nil {
		return err
	}
	return ru.putNow(ctx, reqs)
}

// putNow is put once nothing is in flight or queued.
func (ru *run[S]) putNow(ctx context.Context, reqs []checkpoint.PutRequest) error {
	pc, err := ru.beginPut(ctx, reqs)
	if err != nil {
		return err
	}
	return ru.endPut(pc, ru.commitPut(pc))
}

// putCall is one put: begun on the run's goroutine (beginPut), committed
// there or in the background (commitPut), ended where its outcome is
// collected (endPut).
type putCall struct {
	ctx     context.Context
	reqs    []checkpoint.PutRequest
	id      string
	step    int
	release bool
	restore func()
	sc      saverCall
}

// inflightPut is a put committing in the background (DurabilityAsync);
// err is set before done is closed.
type inflightPut struct {
	pc      *putCall
	answers []checkpoint.TaskWrites
	done    chan struct{}
	err     error
}

// beginPut does what comes before a put's transaction: the enclosing
// graph's held writes, the topology, the hook and the observer's span.
func (ru *run[S]) beginPut(ctx context.Context, reqs []checkpoint.PutRequest) (*putCall, error) {
	last := &reqs[len(reqs)-1]
	pc := &putCall{ctx: ctx, reqs: reqs, id: last.Checkpoint.ID, step: last.Checkpoint.Metadata.Step, release: last.Release, restore: func() {}}
	if err := ru.beforeWrite(ctx); err != nil {
		return nil, err
	}
	// The graph's topology is stored before the first checkpoint that
	// names it (once per Runnable: then this is one atomic load).
	if err := ru.saveTopology(ctx); err != nil {
		return nil, fmt.Errorf("graph: thread %q step %d: %w", ru.thread, pc.step, err)
	}
	ru.hit(testhook.GraphBeforeSave)
	if pc.release {
		pc.restore = ru.releasing()
	}
	if ru.r.obs != nil {
		pc.sc = ru.startSaver(ctx, observe.OpPut, func() int { return putBytes(reqs) })
	}
	return pc, nil
}

// commitPut runs a put's transaction and, when it committed, records its
// last checkpoint as the head. It touches nothing heldMu guards, so it
// may run in the background while the run goes on.
func (ru *run[S]) commitPut(pc *putCall) error {
	reqs := pc.reqs
	err := ru.request(func(l checkpoint.Lease) error {
		for i := range reqs {
			reqs[i].Lease = l
		}
		return checkpoint.PutChain(detached(pc.ctx), ru.saver, reqs...)
	})
	if err != nil && ru.committedAnyway(err, pc.id) {
		err = nil
	}
	if err != nil {
		return err
	}
	ru.hit(testhook.GraphAfterSave)
	ru.setLeased(pc.id, !pc.release)
	return nil
}

// endPut ends a put whose transaction returned err: it closes the
// observer's span, logs, and turns a failure into a *SaveError.
func (ru *run[S]) endPut(pc *putCall, err error) error {
	ru.endSaver(pc.sc, 0, err)
	if err != nil {
		pc.restore()
		return &SaveError{Thread: ru.thread, NS: ru.ns, Checkpoint: pc.id, Step: pc.step, Durability: ru.mode(), Err: err}
	}
	for i := range pc.reqs {
		cp := &pc.reqs[i].Checkpoint
		ru.logAttrs(pc.ctx, slog.LevelDebug, "checkpoint saved", slog.Int("step", cp.Metadata.Step), slog.String("source", string(cp.Metadata.Source)), slog.String("checkpoint", cp.ID))
	}
	return nil
}

// putAsync begins a put and commits it in the background
// (DurabilityAsync). The caller holds heldMu and has settled the put
// before (one is in flight at a time, so the saver gets them in order
// and each one's parent is the head when it commits).
func (ru *run[S]) putAsync(ctx context.Context, reqs []checkpoint.PutRequest, answers []checkpoint.TaskWrites) error {
	pc, err := ru.beginPut(ctx, reqs)
	if err != nil {
		ru.lostHeld(reqs, answers)
		return err
	}
	in := &inflightPut{pc: pc, answers: answers, done: make(chan struct{})}
	ru.inflight = in
	go func() {
		defer close(in.done)
		in.err = ru.commitPut(pc)
	}()
	return nil
}

// Bounds of the checkpoints DurabilityAsync queues behind the put in
// flight: past either, the run waits for that put before it goes on.
const (
	maxQueuedCheckpoints = 8
	maxQueuedBytes       = 4 << 20
)

// saveBehind saves req, a loop checkpoint, in the background
// (DurabilityAsync): it is queued behind the put in flight and
// committed, with the others queued, by the put that follows it. The
// run waits only when the queue is full: then for the put in flight,
// before it puts the queue in flight. The caller holds heldMu.
func (ru *run[S]) saveBehind(ctx context.Context, req checkpoint.PutRequest) error {
	if err := ru.collect(false); err != nil {
		return err
	}
	reqs, answers, err := ru.withHeld(ctx, req)
	if err != nil {
		return err
	}
	ru.queued = append(ru.queued, reqs...)
	ru.queuedAnswers = append(ru.queuedAnswers, answers...)
	ru.queuedBytes += putBytes(reqs)
	if ru.inflight != nil && len(ru.queued) < maxQueuedCheckpoints && ru.queuedBytes < maxQueuedBytes {
		return nil
	}
	if err := ru.awaitInflight(); err != nil {
		return err
	}
	reqs, answers = ru.takeQueued(nil, nil)
	return ru.putAsync(ctx, reqs, answers)
}

// takeQueued returns the queued checkpoints followed by reqs, and their
// answers followed by answers, and empties the queue. The caller holds
// heldMu.
func (ru *run[S]) takeQueued(reqs []checkpoint.PutRequest, answers []checkpoint.TaskWrites) ([]checkpoint.PutRequest, []checkpoint.TaskWrites) {
	if len(ru.queued) == 0 {
		return reqs, answers
	}
	reqs = append(ru.queued, reqs...)
	answers = append(ru.queuedAnswers, answers...)
	ru.queued, ru.queuedAnswers, ru.queuedBytes = nil, nil, 0
	return reqs, answers
}

// collect ends the put in flight if it is done (waiting for it when
// wait is set) and returns the run's save error: the first put that
// failed in the background fails every later write of the run, so that
// nothing is written on a checkpoint that is not there. The caller holds
// heldMu.
func (ru *run[S]) collect(wait bool) error {
	in := ru.inflight
	if in == nil {
		return ru.saveErr
	}
	if !wait {
		select {
		case <-in.done:
		default:
			return ru.saveErr
		}
	}
	<-in.done
	ru.inflight = nil
	if err := ru.endPut(in.pc, in.err); err != nil {
		ru.lostHeld(in.pc.reqs, in.answers)
		ru.saveErr = err
		// What was queued behind it cannot commit on it.
		_, answers := ru.takeQueued(nil, nil)
		ru.lostHeld(nil, answers)
	}
	return ru.saveErr
}

// awaitInflight waits for the put in flight, if any (see collect).
func (ru *run[S]) awaitInflight() error { return ru.collect(true) }

// settle makes every checkpoint the run saved in the background durable
// (DurabilityAsync): it waits for the put in flight and commits the
// queued checkpoints. It returns the run's save error (see collect).
// Every write of the run but a queued checkpoint settles first, so a
// pending write lands on a committed checkpoint, and a run returns, or
// reports an interrupt, only once all its checkpoints are durable. The
// caller holds heldMu.
func (ru *run[S]) settle(ctx context.Context) error {
	if err := ru.awaitInflight(); err != nil {
		return err
	}
	if len(ru.queued) == 0 {
		return nil
	}
	reqs, answers := ru.takeQueued(nil, nil)
	if err := ru.putNow(detached(ctx), reqs); err != nil {
		ru.lostHeld(reqs, answers)
		ru.saveErr = err
		return err
	}
	return nil
}

// mode is the run's durability mode: DurabilitySync without a saver, and
// for a subgraph's run (it saves every step; see the package doc).
func (ru *run[S]) mode() DurabilityMode {
	if ru.saver == nil || ru.nest != nil || ru.opts.durability == "" {
		return DurabilitySync
	}
	return ru.opts.durability
}

// saveDeferred saves the deferred frame (DurabilityExit) with writes as
// its own pending writes, in one transaction with the held input and a
// resume's answers. The frame is left as it is, for the tasks of the step
// that may still read it; the checkpoint is recorded on it by adoptSaved.
// The caller holds heldMu.
func (ru *run[S]) saveDeferred(ctx context.Context, writes []checkpoint.TaskWrites, release bool, joins []checkpoint.Join) error {
	f := *ru.fr
	// Encoding takes over a versions map the frame owns; the copy must
	// not take the map the step's frame still holds.
	f.versionsOwner = versionsShared
	req, err := ru.encodeSave(ctx, &f, ru.fr.id, nil, writes, release, false)
	if err != nil {
		return err
	}
	ru.deferred = false // saved now, or lost with the rest of the run's work
	req.Joins = joins
	reqs, answers, err := ru.withHeld(ctx, req)
	if err != nil {
		return err
	}
	if err := ru.put(ctx, reqs); err != nil {
		ru.lostHeld(reqs, answers)
		return err
	}
	ru.materialized = &reqs[len(reqs)-1].Checkpoint
	return nil
}

// adoptSaved records on fr the checkpoint saveDeferred saved it as, once
// no task reads fr any more.
func (ru *run[S]) adoptSaved() {
	ru.heldMu.Lock()
	defer ru.heldMu.Unlock()
	if cp := ru.materialized; cp != nil {
		ru.materialized = nil
		ru.fr.markSaved(cp)
	}
}

// deferSave stamps next, the frame of a finished step, as the checkpoint
// DurabilityExit saves when the run stops (or a write needs it) instead
// of saving it now: its parent is the last checkpoint saved or held.
func (ru *run[S]) deferSave(next *frame[S]) {
	if ru.deferred {
		next.parentID = ru.fr.parentID
	}
	next.id = ru.stamp(next, checkpoint.SourceLoop, max(ru.fr.id, ru.floor))
	ru.heldMu.Lock()
	ru.deferred = true
	ru.heldMu.Unlock()
}

// flushHeld saves what the run holds on its own: the input checkpoint,
// then a resume's answers. The run calls it when it ends, and a durable
// step's fence before it runs. It returns the checkpoint the answers were
// saved on ("" when there were none).
//
// It first settles the put in flight (DurabilityAsync) and saves the
// deferred frame (DurabilityExit), with what the run holds; it then
// returns that frame's checkpoint, whose save confirmed the run's lease.
func (ru *run[S]) flushHeld(ctx context.Context) (answeredOn string, err error) {
	ru.heldMu.Lock()
	defer ru.heldMu.Unlock()
	if err := ru.settle(ctx); err != nil {
		return "", err
	}
	if ru.deferred {
		id := ru.fr.id
		if err := ru.saveDeferred(detached(ctx), nil, false, nil); err != nil {
			return "", err
		}
		return id, nil
	}
	if err := ru.flushInput(ctx); err != nil {
		return "", err
	}
	if ru.answers == nil {
		return "", nil
	}
	on := ru.answersOn
	if err := ru.flushAnswers(ctx); err != nil {
		return "", err
	}
	return on, nil
}

// flushInput saves the held input checkpoint on its own, if there is one.
// The caller holds heldMu.
func (ru *run[S]) flushInput(ctx context.Context) error {
	if ru.held == nil {
		return nil
	}
	req := *ru.held
	ru.held = nil
	if err := ru.put(ctx, []checkpoint.PutRequest{req}); err != nil {
		ru.heldLost = true
		return err
	}
	return nil
}

// flushAnswers saves a resume's held answers on their own, if there are
// any. The caller holds heldMu.
func (ru *run[S]) flushAnswers(ctx context.Context) error {
	if ru.answers == nil {
		return nil
	}
	if err := ru.writePending(detached(ctx), ru.answersOn, ru.answers, false, ru.answerJoins); err != nil {
		return err // still held: the next write, or the run's end, saves them
	}
	ru.answers, ru.answerJoins = nil, nil
	return nil
}

// committedAnyway resolves an ambiguous commit: when Put failed with an
// error that may have come after the commit, the head is read back and the
// save counts as done if the head is the checkpoint just written.
func (ru *run[S]) committedAnyway(err error, id string) bool {
	if errors.Is(err, checkpoint.ErrThreadBusy) || errors.Is(err, checkpoint.ErrInvalid) {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	tp, gerr := ru.saver.Get(ctx, checkpoint.Ref{Thread: ru.thread, NS: ru.ns}, checkpoint.GetOptions{Have: map[string]string{}})
	return gerr == nil && tp.Checkpoint.ID == id
}

// loop runs supersteps until the thread is done, waits, or fails.
func (ru *run[S]) loop(ctx context.Context) (res Result[S], err error) {
	r := ru.r
	var zero Result[S]
	first := true
	var step hookcall.Span // the observer's span of the step in progress
	stepTasks := 0
	defer func() {
		if step.Open() {
			ru.endStep(step, stepTasks, res, err)
		}
	}()
	ru.send(Event[S]{Kind: EventValues, Step: ru.step - 1, Values: r.view(ru.fr.state), Config: ru.config()})
	for {
		if err := ctx.Err(); err != nil {
			return zero, fmt.Errorf("graph: thread %q: stopped before step %d: %w", ru.thread, ru.step, context.Cause(ctx))
		}
		if ru.stopped.Load() {
			return zero, errStopped
		}
		tasks := r.plan(ru.fr, ru.ns, ru.step)
		if first {
			first = false
			if err := r.attach(ctx, ru.thread, ru.fr.id, tasks, ru.pending); err != nil {
				return zero, err
			}
			for _, t := range tasks {
				if t.cached {
					ru.send(Event[S]{Kind: EventUpdates, Step: ru.step, Node: t.name, TaskID: t.id, Update: r.updateOf(t), Cached: true})
				}
			}
		}
		// As in LangGraph, the budget is checked before looking at the
		// tasks: a run that used it all fails even if nothing is left.
		if ru.step > ru.stop {
			return zero, &RecursionError{Thread: ru.thread, Limit: ru.opts.limit, Step: ru.step}
		}
		if len(tasks) == 0 {
			return ru.result(StatusDone, ru.fr.state, nil, nil), nil
		}
		if names := breakpointHits(ru.opts.before, tasks, true); len(names) > 0 && ru.changedSinceMark() {
			return ru.stopAtBreakpoint(ctx, "before", names, tasks)
		}
		sctx := ctx // the step's context: the observer's step span
		if r.obs != nil {
			e := ru.event(observe.KindStep)
			e.Tasks, stepTasks = len(tasks), len(tasks)
			step = r.obs.Start(ctx, e)
			sctx = step.Ctx
		}
		if err := ru.runTasks(sctx, tasks); err != nil {
			return zero, err
		}
		if ru.mode() == DurabilityExit {
			ru.adoptSaved()
		}
		abandoned := slices.ContainsFunc(tasks, func(t *task[S]) bool { return t.abandoned })
		if ctx.Err() != nil && abandoned {
			// Cancelled mid-step: keep what finished, leave the rest pending.
			if err := ru.saveUnsaved(sctx, tasks); err != nil {
				return zero, err
			}
			return zero, fmt.Errorf("graph: thread %q: stopped in step %d: %w", ru.thread, ru.step, context.Cause(ctx))
		}
		if ru.stopped.Load() && abandoned {
			// A subgraph stopped because the stream's consumer did: as
			// at a step boundary, what finished stays pending.
			if err := ru.saveUnsaved(ctx, tasks); err != nil {
				return zero, err
			}
			return zero, errStopped
		}
		if i := slices.IndexFunc(tasks, func(t *task[S]) bool { return t.toParent != nil }); i >= 0 {
			// A node sent an update to the graph that runs this one: this
			// run ends there, and what finished stays pending.
			if err := ru.saveUnsaved(ctx, tasks); err != nil {
				return zero, err
			}
			return zero, &toParentError{cmd: tasks[i].toParent, node: tasks[i].name}
		}
		var failed *task[S]
		paused := false
		for _, t := range tasks {
			if t.err != nil && failed == nil {
				failed = t
			}
			if len(t.interrupts) > 0 && !t.done || t.breakpoint != nil {
				paused = true
			}
		}
		if failed != nil || paused {
			return ru.stopStep(sctx, tasks, failed)
		}
		next, err := r.applyWrites(sctx, ru.fr, tasks, ru.step, true, true)
		if err != nil {
			var ce *ConflictError
			if errors.As(err, &ce) || appFailure(err) {
				// The tasks finished: their writes stay pending, and
				// Continue applies them again (a conflict, a reducer that
				// panicked or did not return before the run's context
				// ended).
				if perr := ru.saveUnsaved(sctx, tasks); perr != nil {
					return zero, perr
				}
				return zero, fmt.Errorf("graph: thread %q: %w", ru.thread, err)
			}
			return zero, err
		}
		next.parentID = ru.fr.id
		due := r.due(next)
		after := breakpointHits(ru.opts.after, tasks, false)
		var marker []checkpoint.TaskWrites
		if len(after) > 0 && due {
			b, _ := json.Marshal(checkpoint.Breakpoint{When: "after", Nodes: after})
			marker = []checkpoint.TaskWrites{{TaskID: checkpoint.NullTaskID, Writes: []checkpoint.Write{{Channel: checkpoint.ChannelBreakpoint, Value: b}}}}
		}
		var unsaved []*task[S]
		for _, t := range tasks {
			if !t.saved {
				unsaved = append(unsaved, t)
			}
		}
		last := !due || len(marker) > 0
		switch {
		case ru.saver == nil:
		case ru.mode() == DurabilityExit && !last:
			ru.deferSave(next)
		default:
			if ru.deferred {
				// DurabilityExit, the run's last checkpoint: the steps
				// since the last one saved are in it.
				next.parentID, unsaved = ru.fr.parentID, nil
				ru.heldMu.Lock()
				ru.deferred = false
				ru.heldMu.Unlock()
			}
			if err := ru.save(sctx, next, checkpoint.SourceLoop, unsaved, marker, last); err != nil {
				return zero, err
			}
		}
		if ru.saver == nil {
			next.id = ru.nextID(ru.fr.id)
			next.meta = checkpoint.Metadata{Source: checkpoint.SourceLoop, Step: ru.step, Parents: ru.parents()}
			next.dirty = nil
		}
		ru.fr = next
		if step.Open() {
			ru.endStep(step, stepTasks, Result[S]{}, nil)
			step = hookcall.Span{}
		}
		ru.send(Event[S]{Kind: EventCheckpoint, Step: ru.step, Config: ru.config()})
		ru.send(Event[S]{Kind: EventValues, Step: ru.step, Values: r.view(next.state), Config: ru.config()})
		ru.step++
		if len(marker) > 0 {
			ru.stoppedAt = &checkpoint.Breakpoint{When: "after", Nodes: after}
			return ru.waitResult(ctx, nil, r.plan(ru.fr, ru.ns, ru.step), ru.fr.state)
		}
	}
}

// changedSinceMark reports whether some channel changed since the thread
// last passed a breakpoint or was resumed (a breakpoint fires only then).
// A deferred frame (DurabilityExit) has not had its versions moved on:
// its dirty channels are those a saved checkpoint would have.
func (ru *run[S]) changedSinceMark() bool {
	return ru.fr.maxVersion() > ru.fr.mark || ru.deferred && len(ru.fr.dirty) > 0
}

// breakpointHits returns the names of tasks that hit a breakpoint in set.
// before selects only tasks that have not run yet.
func breakpointHits[S any](set map[string]bool, tasks []*task[S], before bool) []string {
	if len(set) == 0 {
		return nil
	}
	var names []string
	for _, t := range tasks {
		if t.name == START || (before && t.done) {
			continue
		}
		if (set["*"] || set[t.name]) && !slices.Contains(names, t.name) {
			names = append(names, t.name)
		}
	}
	return names
}

func (ru *run[S]) config() Config {
	return Config{Thread: ru.thread, NS: ru.ns, CheckpointID: ru.fr.id}
}

// send streams an event. A consumer that stops reading is honoured at the
// next step boundary, so the step in progress is still saved. Events of
// the hidden __start__ task are not streamed (hiddenEvent).
func (ru *run[S]) send(e Event[S]) {
	if ru.emit != nil && !ru.stopped.Load() && !hiddenEvent(e) && !ru.emit(e) {
		ru.stopped.Store(true)
	}
}

// sendLive streams an event a node emitted mid-step and reports whether
// the consumer took it.
func (ru *run[S]) sendLive(e Event[S]) bool {
	if ru.stopped.Load() {
		return false
	}
	ru.send(e)
	return !ru.stopped.Load()
}

func (ru *run[S]) result(st Status, values S, interrupts []interrupt.Interrupt, next []string) Result[S] {
	return Result[S]{Values: ru.r.view(values), Status: st, Interrupts: interrupts, Next: next, Config: ru.config()}
}

// stopAtBreakpoint saves a breakpoint marker on the head and returns a
// waiting result.
func (ru *run[S]) stopAtBreakpoint(ctx context.Context, when string, names []string, tasks []*task[S]) (Result[S], error) {
	if ru.saver != nil {
		b, _ := json.Marshal(checkpoint.Breakpoint{When: when, Nodes: names})
		w := []checkpoint.TaskWrites{{TaskID: checkpoint.NullTaskID, Writes: []checkpoint.Write{{Channel: checkpoint.ChannelBreakpoint, Value: b}}}}
		if err := ru.putWrites(ctx, ru.fr.id, w, true, nil); err != nil {
			var zero Result[S]
			return zero, err
		}
	}
	ru.stoppedAt = &checkpoint.Breakpoint{When: when, Nodes: names}
	return ru.waitResult(ctx, nil, tasks, ru.fr.state)
}

func (ru *run[S]) waitResult(ctx context.Context, interrupts []interrupt.Interrupt, tasks []*task[S], values S) (Result[S], error) {
	// No interrupt reaches the caller before the checkpoints up to it
	// are durable (DurabilityAsync).
	ru.heldMu.Lock()
	err := ru.settle(ctx)
	ru.heldMu.Unlock()
	if err != nil {
		return Result[S]{}, err
	}
	var next []string
	for _, t := range tasks {
		if !t.done {
			next = append(next, t.name)
		}
	}
	res := ru.result(StatusWaiting, values, interrupts, next)
	ru.send(Event[S]{Kind: EventInterrupt, Step: ru.step, Interrupts: interrupts, Next: next, Config: res.Config})
	return res, nil
}

// stopStep ends a step in which a task failed or paused: the finished
// tasks' writes, the failure and the interrupts are saved on the step's
// starting checkpoint, and the lease is released.
func (ru *run[S]) stopStep(ctx context.Context, tasks []*task[S], failed *task[S]) (Result[S], error) {
	r := ru.r
	var zero Result[S]
	var writes []checkpoint.TaskWrites
	var interrupts []interrupt.Interrupt
	var bp *checkpoint.Breakpoint // subgraphs that stopped at a breakpoint
	for _, t := range tasks {
		if t.breakpoint != nil && t.err == nil {
			if bp == nil {
				bp = &checkpoint.Breakpoint{When: t.breakpoint.When}
			}
			if !slices.Contains(bp.Nodes, t.name) {
				bp.Nodes = append(bp.Nodes, t.name)
			}
		}
		tw := checkpoint.TaskWrites{TaskID: t.id, Node: t.name, Path: t.path()}
		switch {
		case t.done && !t.saved:
			ws, err := r.encodeWrites(ctx, t)
			if err != nil {
				return zero, err
			}
			tw.Writes = ws
		case t.err != nil:
			// t.err is contained (containNodeError): its text was read once.
			b, _ := json.Marshal(checkpoint.TaskError{Node: t.name, Type: safe.TypeName(t.err), Message: t.err.Error()})
			tw.Writes = []checkpoint.Write{{Channel: checkpoint.ChannelError, Value: b}}
			if w, ok := ru.refuseAnswer(t); ok {
				tw.Writes = append(tw.Writes, w)
			}
		case len(t.interrupts) > 0 && !t.done:
			b, err := json.Marshal(t.interrupts)
			if err != nil {
				return zero, err
			}
			tw.Writes = []checkpoint.Write{{Channel: checkpoint.ChannelInterrupt, Value: b}}
			for _, in := range t.interrupts {
				if _, ok := t.answers[in.ID]; !ok {
					interrupts = append(interrupts, in)
				}
			}
		}
		if len(tw.Writes) > 0 {
			writes = append(writes, tw)
		}
	}
	if bp != nil && failed == nil {
		// Saved as a breakpoint of this graph, on the task's node: the
		// thread waits, and Continue runs the subgraph on past it.
		b, _ := json.Marshal(bp)
		writes = append(writes, checkpoint.TaskWrites{TaskID: checkpoint.NullTaskID, Writes: []checkpoint.Write{{Channel: checkpoint.ChannelBreakpoint, Value: b}}})
		ru.stoppedAt = bp
	}
	if ru.saver != nil && len(writes) > 0 {
		if err := ru.putWrites(ctx, ru.fr.id, writes, true, nil); err != nil {
			return zero, err
		}
		for _, t := range tasks {
			if t.done {
				t.saved = true
			}
		}
	}
	if failed != nil {
		ru.logAttrs(ctx, slog.LevelWarn, "node failed", slog.String("node", failed.name), slog.Int("step", ru.step), slog.String("error", failed.err.Error()))
		return zero, &NodeError{Thread: ru.thread, Node: failed.name, TaskID: failed.id, Step: ru.step, Err: failed.err}
	}
	values := ru.fr.state
	var finished []*task[S]
	for _, t := range tasks {
		if t.done {
			finished = append(finished, t)
		}
	}
	if len(finished) > 0 {
		if nf, err := r.applyWrites(ctx, ru.fr, finished, ru.step, false, false); err == nil {
			values = nf.state
		}
	}
	return ru.waitResult(ctx, interrupts, tasks, values)
}

// saveUnsaved saves the finished tasks' writes when a step cannot be
// committed, so that they stay pending on its starting checkpoint.
func (ru *run[S]) saveUnsaved(ctx context.Context, tasks []*task[S]) error {
	if ru.saver == nil {
		return nil
	}
	var writes []checkpoint.TaskWrites
	for _, t := range tasks {
		if t.done && !t.saved {
			ws, err := ru.r.encodeWrites(ctx, t)
			if err != nil {
				return err
			}
			writes = append(writes, checkpoint.TaskWrites{TaskID: t.id, Node: t.name, Path: t.path(), Writes: ws})
		}
	}
	if len(writes) == 0 {
		return nil
	}
	return ru.putWrites(ctx, ru.fr.id, writes, true, nil)
}

// runTasks executes the tasks that have not finished. One task runs on the
// calling goroutine; several run in parallel, bounded by the concurrency
// option. A task that finishes while siblings still run has its writes
// saved at once (batched with others that finish meanwhile), so a later
// failure or crash does not run it again; the last task's writes go into
// the step's checkpoint. The first failure cancels the siblings still
// running.
func (ru *run[S]) runTasks(ctx context.Context, tasks []*task[S]) error {
	r := ru.r
	var todo []*task[S]
	for _, t := range tasks {
		if !t.done {
			todo = append(todo, t)
		}
	}
	if len(todo) == 0 {
		return nil
	}
	for _, t := range todo {
		ru.send(Event[S]{Kind: EventTask, Step: ru.step, Node: t.name, TaskID: t.id})
	}
	if len(todo) == 1 {
		t := todo[0]
		sp := ru.startTask(ctx, t)
		r.safeExecute(sp.Ctx, t, ru.fr, ru.scratchFor(t), len(tasks) == 1)
		abandonStopped(t)
		ru.endTask(sp, t, ctx.Err() != nil)
		ru.hit(testhook.GraphAfterTask)
		abandonCancelled(ctx, todo)
		ru.reportTasks(todo)
		return nil
	}
	stepCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	fl := &flusher[S]{ru: ru}
	var wg sync.WaitGroup
	var left atomic.Int32
	left.Store(int32(len(todo)))
	sem := make(chan struct{}, r.cfg.concurrency)
	for _, t := range todo {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			sp := ru.startTask(stepCtx, t)
			r.safeExecute(sp.Ctx, t, ru.fr, ru.scratchFor(t), false)
			abandonStopped(t)
			ru.endTask(sp, t, stepCtx.Err() != nil)
			ru.hit(testhook.GraphAfterTask)
			remaining := left.Add(-1)
			if t.err != nil {
				cancel()
				return
			}
			if t.done && remaining > 0 && ru.saver != nil && ru.mode() != DurabilityExit {
				fl.add(stepCtx, t)
			}
		}()
	}
	wg.Wait()
	if ctx.Err() == nil {
		for _, t := range todo {
			if t.err != nil && stepCtx.Err() != nil && errors.Is(t.err, context.Canceled) && !t.done {
				t.err, t.abandoned = nil, true // cancelled because a sibling failed
			}
		}
	}
	abandonCancelled(ctx, todo)
	if err := fl.wait(); err != nil {
		return err
	}
	ru.reportTasks(todo)
	return nil
}

func (ru *run[S]) reportTasks(todo []*task[S]) {
	r := ru.r
	if len(todo) > 1 {
		todo = slices.Clone(todo)
		slices.SortFunc(todo, func(a, b *task[S]) int {
			if a.before(b) {
				return -1
			}
			return 1
		})
	}
	for _, t := range todo {
		switch {
		case t.err != nil:
			ru.logAttrs(context.Background(), slog.LevelDebug, "task failed", slog.String("node", t.name), slog.Int("step", ru.step))
		case len(t.interrupts) > 0 && !t.done:
			ru.logAttrs(context.Background(), slog.LevelDebug, "task paused", slog.String("node", t.name), slog.Int("step", ru.step))
		default:
			ru.logAttrs(context.Background(), slog.LevelDebug, "task done", slog.String("node", t.name), slog.Int("step", ru.step))
		}
		ru.send(Event[S]{Kind: EventTaskResult, Step: ru.step, Node: t.name, TaskID: t.id, Err: t.err, Interrupts: t.interrupts})
		if t.done {
			ru.send(Event[S]{Kind: EventUpdates, Step: ru.step, Node: t.name, TaskID: t.id, Update: r.updateOf(t)})
		}
	}
}

// confirmOwner confirms, with a write, that the run still owns the thread
// whose head is head: it renews the lease (or takes it again if it lapsed
// and nobody else took it). It fails with an error matching
// checkpoint.ErrThreadBusy or checkpoint.ErrConflict when another runner
// has taken the thread over, as after this process was paused past its
// lease. Durable calls it before running a step.
func (ru *run[S]) confirmOwner(ctx context.Context, head string) error {
	answeredOn, err := ru.flushHeld(ctx)
	if err != nil {
		return fmt.Errorf("graph: thread %q: the run could not confirm it owns the thread: %w", ru.thread, err)
	}
	if answeredOn == head {
		// Saving the held answers on head under the run's lease was the
		// confirming write.
		return nil
	}
	if ru.ended.Load() {
		return ru.endedError()
	}
	ru.mu.Lock()
	defer ru.mu.Unlock()
	// Held: renew only a lease nobody else took since, so that a run that
	// lost the thread learns it even when the runner that took it over
	// has paused or failed since, leaving the head where it was.
	l := ru.lease
	l.Held = true
	if err := ru.saver.Claim(ctx, checkpoint.Ref{Thread: ru.thread, NS: ru.ns, ID: head}, l); err != nil {
		return fmt.Errorf("graph: thread %q: the run no longer owns the thread: %w", ru.thread, err)
	}
	return nil
}

// scratchFor builds the per-execution scratchpad of a task, wired to save
// durable step results on the head.
func (ru *run[S]) scratchFor(t *task[S]) *scratch {
	sp := &scratch{
		info: TaskInfo{Thread: ru.thread, NS: ru.ns, CheckpointID: ru.fr.id, Step: ru.step, Node: t.name, TaskID: t.id,
			Run: ru.lease.Owner, Leased: ru.saver != nil},
		answers: t.answers, steps: maps.Clone(t.steps), slots: t.stepSlots, maxBytes: ru.r.cfg.maxValueBytes,
		aband: ru.r.abandoned,
	}
	if ru.emit != nil {
		step, node, id := ru.step, t.name, t.id
		sp.stream = func(kind EventKind, data any) bool {
			return ru.sendLive(Event[S]{Kind: kind, Step: step, Node: node, TaskID: id, Data: data, Config: Config{Thread: ru.thread, NS: ru.ns}})
		}
	}
	if spec := ru.r.nodes[t.name]; spec != nil && spec.sub != nil {
		sp.outer = ru.outer()
	}
	if ru.saver != nil {
		sp.saved = &taskSaver[S]{ru: ru, head: ru.fr.id, t: t}
		_, sp.joinable = ru.saver.(checkpoint.Joiner)
	}
	return sp
}

// stepSaver is what a task's durable steps need of its run: fence
// confirms the run still owns the thread, persist saves a step's result
// (slot n) as a pending write of the checkpoint the task runs on.
type stepSaver interface {
	fence(ctx context.Context) error
	persist(ctx context.Context, n int, sr checkpoint.StepResult, joins []checkpoint.Join) error
}

// taskSaver is the stepSaver of task t of run ru, on checkpoint head:
// one allocation a task, where two closures were two or three.
type taskSaver[S any] struct {
	ru   *run[S]
	head string
	t    *task[S]
}

func (ts *taskSaver[S]) fence(ctx context.Context) error { return ts.ru.confirmOwner(ctx, ts.head) }

func (ts *taskSaver[S]) persist(ctx context.Context, n int, sr checkpoint.StepResult, joins []checkpoint.Join) error {
	b, err := json.Marshal(sr)
	if err != nil {
		return err
	}
	t := ts.t
	return ts.ru.putWrites(ctx, ts.head, []checkpoint.TaskWrites{{TaskID: t.id, Node: t.name, Path: t.path(),
		Writes: []checkpoint.Write{{Channel: fmt.Sprintf("%s%d", checkpoint.ChannelStepPrefix, n), Value: b}}}}, false, joins)
}

// updateOf rebuilds a task's update for events: what the node returned, or
// for cached writes their field values.
func (r *Runnable[S]) updateOf(t *task[S]) Update[S] {
	if !t.cached {
		return t.update
	}
	var u Update[S]
	v := reflectValue(&u.value)
	for _, w := range t.writes {
		if w.field < 0 {
			continue
		}
		v.Field(r.schema.fields[w.field].index).Set(w.value)
		u.fields = append(u.fields, w.channel)
	}
	return u
}

// flusher saves the writes of tasks that finish while siblings run, batching
// those that finish while a save is in flight (group commit).
type flusher[S any] struct {
	ru       *run[S]
	mu       sync.Mutex
	queue    []*task[S]
	flushing bool
	err      error
	wg       sync.WaitGroup
}

func (fl *flusher[S]) add(ctx context.Context, t *task[S]) {
	fl.mu.Lock()
	fl.queue = append(fl.queue, t)
	if fl.flushing {
		fl.mu.Unlock()
		return
	}
	fl.flushing = true
	fl.wg.Add(1)
	defer fl.wg.Done()
	for len(fl.queue) > 0 {
		batch := fl.queue
		fl.queue = nil
		fl.mu.Unlock()
		err := fl.save(ctx, batch)
		fl.mu.Lock()
		if err != nil && fl.err == nil {
			fl.err = err
		}
	}
	fl.flushing = false
	fl.mu.Unlock()
}

func (fl *flusher[S]) save(ctx context.Context, batch []*task[S]) error {
	var writes []checkpoint.TaskWrites
	for _, t := range batch {
		ws, err := fl.ru.r.encodeWrites(ctx, t)
		if err != nil {
			return err
		}
		writes = append(writes, checkpoint.TaskWrites{TaskID: t.id, Node: t.name, Path: t.path(), Writes: ws})
	}
	if err := fl.ru.putWrites(detached(ctx), fl.ru.fr.id, writes, false, nil); err != nil {
		return err
	}
	for _, t := range batch {
		t.saved = true
	}
	return nil
}

func (fl *flusher[S]) wait() error {
	fl.wg.Wait()
	fl.mu.Lock()
	defer fl.mu.Unlock()
	return fl.err
}

// applyCommands applies the state writes of the commands saved on a
// checkpoint, one command after the other (a later command's last-value
// write wins over an earlier one's).
func (r *Runnable[S]) applyCommands(ctx context.Context, thread string, f *frame[S], pending []checkpoint.PendingWrite, own bool) (*frame[S], error) {
	byTask := map[string][]checkpoint.PendingWrite{}
	var ids []string
	for _, w := range pending {
		if checkpoint.IsCommandTask(w.TaskID) && !checkpoint.IsSpecial(w.Channel) {
			if _, ok := byTask[w.TaskID]; !ok {
				ids = append(ids, w.TaskID)
			}
			byTask[w.TaskID] = append(byTask[w.TaskID], w)
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		ws, err := r.decodeWrites(ctx, byTask[id])
		if err != nil {
			return nil, decodeFailure(thread, f.id, "command writes", err, func(err error) error {
				return &checkpoint.CorruptError{Thread: thread, Checkpoint: f.id, What: "command writes", Err: err}
			})
		}
		f, err = r.applyWrites(ctx, f, []*task[S]{{id: id, push: -1, writes: ws}}, f.meta.Step+1, own, false)
		if err != nil {
			return nil, err
		}
	}
	return f, nil
}

// due reports whether f has tasks to run, without planning them.
func (r *Runnable[S]) due(f *frame[S]) bool {
	if f.start != nil || len(f.sends) > 0 || len(f.triggers) > 0 {
		return true
	}
	for ch, seen := range f.joins {
		if j := r.joins[ch]; j != nil && joinComplete(j, seen) {
			return true
		}
	}
	return false
}

func reflectValue[S any](p *S) reflect.Value { return reflect.ValueOf(p).Elem() }

// abandonStopped marks a task whose subgraph stopped because the stream's
// consumer stopped reading as not run: that is no failure of the node.
func abandonStopped[S any](t *task[S]) {
	if t.err != nil && !t.done && errors.Is(t.err, errStopped) {
		t.err, t.abandoned = nil, true
	}
}

// abandonCancelled marks tasks that stopped because the run's context ended
// as not run: their context error is not a failure of the node.
func abandonCancelled[S any](ctx context.Context, todo []*task[S]) {
	if ctx.Err() == nil {
		return
	}
	for _, t := range todo {
		if t.err != nil && !t.done && (errors.Is(t.err, context.Canceled) || errors.Is(t.err, context.DeadlineExceeded)) {
			t.err, t.abandoned = nil, true
		}
	}
}

// hit calls the test hook the run's context carried, if any.
func (ru *run[S]) hit(point string) {
	if ru.hook != nil {
		ru.hook(point)
	}
}
