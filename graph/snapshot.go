package graph

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/internal/testhook"
	"github.com/lockstepgo/lockstep/interrupt"
)

// inspection is a checkpoint with its next tasks and their saved writes.
type inspection[S any] struct {
	frame      *frame[S] // with command writes applied
	tasks      []*task[S]
	status     Status
	breakpoint *checkpoint.Breakpoint
	results    map[string]map[string]json.RawMessage // task ID → field writes
}

// inspect plans the tasks that follow f and attaches the writes saved
// against it. latest says f is the thread's head: then a step whose tasks
// all finished but was not committed counts as pending, not done.
func (r *Runnable[S]) inspect(ctx context.Context, thread string, f *frame[S], pending []checkpoint.PendingWrite, latest ...bool) (*inspection[S], error) {
	cf, err := r.applyCommands(ctx, thread, f, pending, false)
	if err != nil {
		return nil, err
	}
	in := &inspection[S]{frame: cf, tasks: r.plan(cf, f.ns, f.meta.Step+1), results: map[string]map[string]json.RawMessage{}}
	if err := r.attach(ctx, thread, f.id, in.tasks, pending); err != nil {
		return nil, err
	}
	byTask := map[string][]checkpoint.PendingWrite{}
	for _, w := range pending {
		switch {
		case w.TaskID == checkpoint.NullTaskID && w.Channel == checkpoint.ChannelBreakpoint:
			bp, err := checkpoint.DecodeBreakpoint(w.Value)
			if err != nil {
				return nil, &checkpoint.CorruptError{Thread: thread, Checkpoint: f.id, What: "breakpoint marker", Err: err}
			}
			in.breakpoint = &bp
		case !checkpoint.IsSpecial(w.Channel):
			byTask[w.TaskID] = append(byTask[w.TaskID], w)
		}
	}
	for _, t := range in.tasks {
		if t.done {
			in.results[t.id] = r.fieldResult(byTask[t.id])
		}
	}
	isLatest := len(latest) > 0 && latest[0]
	failed, waiting, open := false, in.breakpoint != nil, false
	for _, t := range in.tasks {
		if t.done {
			continue
		}
		open = true
		hasPending := false
		for _, i := range t.interrupts {
			if _, ok := t.answers[i.ID]; !ok {
				hasPending = true
			}
		}
		switch {
		case hasPending:
			waiting = true
		case t.failure != nil:
			failed = true
		}
	}
	switch {
	case len(in.tasks) == 0:
		in.status = StatusDone
	case failed:
		in.status = StatusFailed
	case waiting && (open || in.breakpoint != nil):
		in.status = StatusWaiting
	case open || isLatest:
		in.status = StatusPending
	default:
		in.status = StatusDone // a committed step, seen in history
	}
	return in, nil
}

// GetState returns the thread's latest state. Like LangGraph's get_state,
// it includes the writes of tasks that finished in a step that has not been
// committed yet (their tasks leave Next). It returns ErrThreadNotFound for a
// thread with no checkpoint, ErrNoSaver without a saver, a *ConflictError
// when the saved writes of the step conflict, a *UnknownNodeError when the
// next tasks name a node the graph no longer has (see Invoke), and a
// *checkpoint.CorruptError when stored data cannot be decoded.
//
// With Subgraphs, the snapshot's subgraph tasks carry the subgraphs' own
// snapshots (Task.State), at every depth.
func (r *Runnable[S]) GetState(ctx context.Context, thread string, opts ...StateOption) (Snapshot[S], error) {
	if r.cfg.saver == nil {
		return Snapshot[S]{}, noSaver(thread)
	}
	if err := checkThread(thread); err != nil {
		return Snapshot[S]{}, err
	}
	return r.stateOf(ctx, place{saver: r.cfg.saver, thread: thread}, stateOptionsOf(opts))
}

// place is a namespace of a thread on a saver: where a graph's
// checkpoints are, the root graph's or a subgraph's.
type place struct {
	saver      checkpoint.Saver
	thread, ns string
}

// StateOption configures GetState and GetStateAt.
type StateOption func(*stateOptions)

type stateOptions struct{ subgraphs bool }

func stateOptionsOf(opts []StateOption) stateOptions {
	var so stateOptions
	for _, o := range opts {
		o(&so)
	}
	return so
}

// Subgraphs makes a snapshot carry the state of the subgraphs its tasks
// run, at every depth: each subgraph task's Task.State holds the
// subgraph's latest snapshot (LangGraph's get_state(subgraphs=True)),
// read with one more read of the saver per subgraph task.
func Subgraphs() StateOption { return func(o *stateOptions) { o.subgraphs = true } }

// stateOf is GetState at the head of pl.
func (r *Runnable[S]) stateOf(ctx context.Context, pl place, so stateOptions) (Snapshot[S], error) {
	f, tp, err := r.loadAt(ctx, pl.saver, pl.thread, pl.ns, "")
	if err != nil {
		return Snapshot[S]{}, err
	}
	if err := r.checkNext(pl.thread, f); err != nil {
		return Snapshot[S]{}, err
	}
	return r.snapshot(ctx, pl, f, tp, true, true, so.subgraphs)
}

// GetStateAt returns the state at one checkpoint of the thread, before the
// writes of the step that followed it (as history shows it). Its status is
// that of History. It returns an error matching checkpoint.ErrNotFound for
// an unknown checkpoint.
func (r *Runnable[S]) GetStateAt(ctx context.Context, thread, checkpointID string, opts ...StateOption) (Snapshot[S], error) {
	if r.cfg.saver == nil {
		return Snapshot[S]{}, noSaver(thread)
	}
	if err := checkThread(thread); err != nil {
		return Snapshot[S]{}, err
	}
	if checkpointID == "" {
		return Snapshot[S]{}, fmt.Errorf("%w: empty checkpoint ID", ErrInvalidInput)
	}
	pl := place{saver: r.cfg.saver, thread: thread}
	f, tp, err := r.loadAt(ctx, pl.saver, thread, "", checkpointID)
	if err != nil {
		return Snapshot[S]{}, err
	}
	head, err := r.headID(ctx, pl)
	if err != nil {
		return Snapshot[S]{}, err
	}
	return r.snapshot(ctx, pl, f, tp, false, f.id == head, stateOptionsOf(opts).subgraphs)
}

// headID returns the ID of the head checkpoint of pl ("" when it has
// none). The head is the namespace's newest checkpoint (savers accept a
// checkpoint only if its ID sorts after the head's).
func (r *Runnable[S]) headID(ctx context.Context, pl place) (string, error) {
	tps, err := pl.saver.List(ctx, pl.thread, checkpoint.ListOptions{NS: pl.ns, Limit: 1, MetadataOnly: true})
	if err != nil {
		return "", fmt.Errorf("graph: %s: read the head: %w", placeName(pl.thread, pl.ns), err)
	}
	if len(tps) == 0 {
		return "", nil
	}
	return tps[0].Checkpoint.ID, nil
}

// HistoryOptions filter History.
type HistoryOptions struct {
	// Filter keeps checkpoints whose metadata has these keys with equal
	// values ("source", "step", "run_id" or caller metadata).
	Filter map[string]any
	// Before keeps checkpoints older than this checkpoint ID.
	Before string
	// Limit caps the number of snapshots; 0 means all.
	Limit int
	// Subgraphs makes each snapshot's subgraph tasks carry the subgraph's
	// latest snapshot (Task.State), as GetState with Subgraphs does.
	Subgraphs bool
}

// History returns the thread's snapshots, newest first. Snapshots show the
// state at each checkpoint before the step that followed it, and every task
// of that step in Next. The head's status is the one GetState gives (or
// would give, when the head's step writes conflict): a step whose tasks
// all finished but that was never committed is pending there, where an
// older checkpoint reads done. Values of append fields share their prefixes, so a
// long history costs time and memory proportional to what was written, not
// to steps times state size. A thread with no checkpoints gives an empty
// list. It fails with ErrNoSaver without a saver, and with ErrInvalidInput
// for a malformed thread ID, a negative Limit or a Filter the saver refuses
// (that error also matches checkpoint.ErrInvalid).
func (r *Runnable[S]) History(ctx context.Context, thread string, opts HistoryOptions) ([]Snapshot[S], error) {
	if r.cfg.saver == nil {
		return nil, noSaver(thread)
	}
	if err := checkThread(thread); err != nil {
		return nil, err
	}
	return r.history(ctx, place{saver: r.cfg.saver, thread: thread}, opts)
}

// history is History of pl.
func (r *Runnable[S]) history(ctx context.Context, pl place, opts HistoryOptions) ([]Snapshot[S], error) {
	thread := pl.thread
	if opts.Limit < 0 {
		return nil, fmt.Errorf("%w: %s: history: negative Limit %d", ErrInvalidInput, placeName(thread, pl.ns), opts.Limit)
	}
	tps, err := pl.saver.List(ctx, thread, checkpoint.ListOptions{NS: pl.ns, Filter: opts.Filter, Before: opts.Before, Limit: opts.Limit})
	if errors.Is(err, checkpoint.ErrInvalid) {
		return nil, fmt.Errorf("%w: %s: history: %w", ErrInvalidInput, placeName(thread, pl.ns), err)
	}
	if err != nil {
		return nil, fmt.Errorf("graph: %s: history: %w", placeName(thread, pl.ns), err)
	}
	// The head is the newest checkpoint: the first listed unless Before or
	// Filter may have left it out.
	head := ""
	if len(tps) > 0 {
		head = tps[0].Checkpoint.ID
		if opts.Before != "" || len(opts.Filter) > 0 {
			if head, err = r.headID(ctx, pl); err != nil {
				return nil, err
			}
		}
	}
	d := r.newDecoder(thread)
	out := make([]Snapshot[S], 0, len(tps))
	// Oldest first, so append values extend the previous snapshot's array.
	for i := len(tps) - 1; i >= 0; i-- {
		f, err := d.frame(ctx, tps[i], nil, false)
		if err != nil {
			return nil, err
		}
		s, err := r.snapshot(ctx, pl, f, tps[i], false, tps[i].Checkpoint.ID == head, opts.Subgraphs)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	slices.Reverse(out)
	return out, nil
}

// snapshot describes f. latest applies the writes of the step's finished
// tasks and leaves them out of Next (GetState); head says f is the
// thread's head, which decides the status of a step whose tasks all
// finished (pending on the head, done on an older checkpoint).
//
// With subgraphs, each subgraph task's State is the subgraph's snapshot
// (read from pl's saver).
func (r *Runnable[S]) snapshot(ctx context.Context, pl place, f *frame[S], tp *checkpoint.Tuple, latest, head, subgraphs bool) (Snapshot[S], error) {
	thread := pl.thread
	in, err := r.inspect(ctx, thread, f, tp.Pending, head)
	if err != nil {
		return Snapshot[S]{}, err
	}
	values := in.frame.state
	if latest {
		var finished []*task[S]
		for _, t := range in.tasks {
			if t.done {
				finished = append(finished, t)
			}
		}
		if len(finished) > 0 {
			nf, err := r.applyWrites(ctx, in.frame, finished, f.meta.Step+1, false, false)
			if err != nil {
				return Snapshot[S]{}, fmt.Errorf("graph: thread %q checkpoint %s: %w", thread, f.id, err)
			}
			values = nf.state
		}
	}
	s := Snapshot[S]{
		Values:     r.view(values),
		Config:     Config{Thread: thread, NS: tp.NS, CheckpointID: f.id},
		Metadata:   f.meta,
		CreatedAt:  f.createdAt,
		Breakpoint: in.breakpoint,
		Status:     in.status,
	}
	if f.parentID != "" {
		s.ParentConfig = &Config{Thread: thread, NS: tp.NS, CheckpointID: f.parentID}
	}
	for _, t := range in.tasks {
		task := Task{ID: t.id, Name: t.name, Path: t.path(), Interrupts: t.interrupts, Answered: t.answers}
		if t.failure != nil {
			task.Error = &TaskError{Node: t.failure.Node, Type: t.failure.Type, Message: t.failure.Message}
		}
		if t.done {
			task.Result = in.results[t.id]
		}
		if spec := r.nodes[t.name]; spec != nil && spec.sub != nil {
			task.NS = checkpoint.TaskNS(tp.NS, t.name, t.id)
			if subgraphs && pl.saver != nil {
				if task.State, err = spec.sub.snapshotAny(ctx, pl.saver, thread, task.NS); err != nil {
					return Snapshot[S]{}, err
				}
			}
		}
		s.Tasks = append(s.Tasks, task)
		if !t.done || !latest {
			s.Next = append(s.Next, t.name)
		}
	}
	s.Interrupts = pendingInterrupts(in.tasks)
	return s, nil
}

// Special values of UpdateOptions.AsNode.
const (
	// AsInput applies the update as new input (an "input" checkpoint) without
	// running anything.
	AsInput = "__input__"
	// AsCopy copies the checkpoint as a sibling fork, without changes.
	AsCopy = "__copy__"
)

// UpdateOptions say how UpdateState applies an update.
type UpdateOptions struct {
	// AsNode is the node the update acts as: its writes go through the
	// reducers and the node's edges (routers included) choose the next
	// tasks, as if the node had returned the update. START applies it as
	// the start step would; END (with a zero update) finishes the pending
	// step with the writes its tasks already saved; AsInput and AsCopy are
	// described with them. Empty means, as in LangGraph, the node that
	// wrote last: START on a thread with no checkpoint, otherwise the node
	// whose step produced the checkpoint (START after the start step;
	// ErrAmbiguousUpdate when several nodes wrote in that step). A node
	// that raised a NodeInterrupt has not written, so an update without
	// AsNode acts as the node before it and the interrupted node runs
	// again on Continue, with the updated state.
	AsNode string
	// CheckpointID updates an older checkpoint instead of the head; the
	// result starts a new branch that becomes the thread's head.
	CheckpointID string
}

// UpdateState writes u into the thread's state as a new "update"
// checkpoint and returns its config. On the head (no CheckpointID), the
// writes saved there are applied first, as LangGraph does: a Command's
// update, and the tasks that finished in the step an interrupt or a
// failure stopped, which then do not run again. Pending tasks the update
// does not trigger again are dropped (join barriers keep their state). It
// returns a
// *UnknownNodeError for an unknown AsNode, ErrAmbiguousUpdate, the errors of
// the update itself (*UnknownFieldError...), and, when another runner owns
// the thread, an error matching checkpoint.ErrThreadBusy or
// checkpoint.ErrConflict.
func (r *Runnable[S]) UpdateState(ctx context.Context, thread string, u Update[S], opts UpdateOptions) (Config, error) {
	if r.cfg.saver == nil {
		return Config{}, noSaver(thread)
	}
	if err := checkThread(thread); err != nil {
		return Config{}, err
	}
	lease, leave := r.lease(r.cfg.runIDs())
	defer leave() // after finish
	return r.updateAt(ctx, place{saver: r.cfg.saver, thread: thread}, lease, &r.live, u, opts)
}

// updateAt is UpdateState on pl, under lease (whose runner's runs live
// counts).
func (r *Runnable[S]) updateAt(ctx context.Context, pl place, lease checkpoint.Lease, live *liveRuns, u Update[S], opts UpdateOptions) (Config, error) {
	var zero Config
	thread := pl.thread
	ru := &run[S]{r: r, thread: thread, ns: pl.ns, saver: pl.saver, lease: lease, live: live, log: r.cfg.logger, hook: testhook.From(ctx)}
	defer ru.finish(ctx)
	var f *frame[S]
	var tp *checkpoint.Tuple
	var err error
	if opts.CheckpointID == "" {
		f, tp, err = ru.claimHead(ctx) // the update judges pending work: read it under the lease
	} else {
		f, tp, err = r.loadAt(ctx, pl.saver, thread, pl.ns, opts.CheckpointID)
	}
	fresh := errors.Is(err, ErrThreadNotFound)
	if err != nil && !fresh {
		return zero, err
	}
	if fresh {
		f, tp = newFrame[S](), &checkpoint.Tuple{Thread: thread, NS: pl.ns}
		f.thread, f.ns = thread, pl.ns
		f.meta.Step = -1
	}
	fork := opts.CheckpointID != ""
	if fork {
		head, _, herr := r.loadAt(ctx, pl.saver, thread, pl.ns, "")
		if herr == nil && head.id == f.id {
			fork = false
		}
		if herr == nil {
			ru.floor = head.id // the branch must sort after the head to become it
		}
	}
	asNode := opts.AsNode
	if asNode == "" {
		asNode, err = r.defaultAsNode(ctx, pl, f, fresh)
		if err != nil {
			return zero, err
		}
	}
	n := f.derive(true)
	r.dropOrphans(n) // tasks of nodes removed since: the update replaces them
	n.parentID = f.id
	ru.step = f.meta.Step + 1
	if fresh {
		ru.step = 0
	}
	source := checkpoint.SourceUpdate
	var parentWrites []*task[S]
	switch asNode {
	case AsCopy:
		if ru.floor == "" {
			ru.floor = f.id // the copy is a sibling: it must still sort after the head
		}
		if !u.IsZero() {
			return zero, fmt.Errorf("%w: AsCopy takes a zero update", ErrInvalidInput)
		}
		if fresh {
			return zero, fmt.Errorf("%w: %q", ErrThreadNotFound, thread)
		}
		n.parentID = f.parentID
		ru.step = f.meta.Step + 1
		if err := ru.saveUpdate(ctx, n, checkpoint.SourceFork, nil, true); err != nil {
			return zero, err
		}
		return ru.config(), nil
	case AsInput:
		start, err := r.encodeInput(ctx, u)
		if err != nil {
			return zero, err
		}
		r.consume(n, r.plan(f, f.ns, f.meta.Step+1))
		n.start = start
		n.markInternal(checkpoint.ChannelStart)
		source = checkpoint.SourceInput
		if fresh {
			ru.step = -1 // as a run's input checkpoint: its first step is 0
		}
	case END:
		if !u.IsZero() {
			return zero, fmt.Errorf("%w: AsNode END takes a zero update", ErrInvalidInput)
		}
		tasks, finished, err := r.nextTasks(ctx, thread, f, tp.Pending)
		if err != nil {
			return zero, err
		}
		r.consume(n, tasks)
		if n, err = r.applyWrites(ctx, n, finished, ru.step, true, false); err != nil {
			return zero, err
		}
		n.triggers, n.sends, n.start = nil, nil, nil
		for ch := range n.versions {
			if isTrigger(ch) {
				n.clearInternal(ch)
			}
		}
	default:
		if _, ok := r.nodes[asNode]; !ok && asNode != START {
			return zero, &UnknownNodeError{Name: asNode, From: "UpdateOptions.AsNode for thread " + quoteShort(thread)}
		}
		// As LangGraph's bulk_update_state on the head: the writes saved
		// there (a Command's update, the tasks that finished in the step
		// an interrupt or a failure stopped) are applied first, so the
		// update builds on them and the finished tasks do not run again.
		var pending []checkpoint.PendingWrite
		if opts.CheckpointID == "" && !fresh {
			pending = tp.Pending
		}
		if n, parentWrites, err = r.bulkStep(ctx, thread, pl.ns, f, pending, []StateUpdate[S]{{Update: u}}, []string{asNode}, ru.step); err != nil {
			return zero, err
		}
	}
	n.parentID = f.id
	ru.fr = f
	if err := ru.saveUpdate(ctx, n, source, parentWrites, fork); err != nil {
		return zero, err
	}
	return ru.config(), nil
}

// nextTasks plans the step after f with its saved pending writes attached,
// and returns the tasks and those of them that finished.
func (r *Runnable[S]) nextTasks(ctx context.Context, thread string, f *frame[S], pending []checkpoint.PendingWrite) (tasks, finished []*task[S], err error) {
	tasks = r.plan(f, f.ns, f.meta.Step+1)
	if err := r.attach(ctx, thread, f.id, tasks, pending); err != nil {
		return nil, nil, err
	}
	for _, t := range tasks {
		if t.done {
			finished = append(finished, t)
		}
	}
	return tasks, finished, nil
}

func isTrigger(ch string) bool {
	return len(ch) > len(checkpoint.BranchPrefix) && ch[:len(checkpoint.BranchPrefix)] == checkpoint.BranchPrefix ||
		ch == checkpoint.ChannelSends || ch == checkpoint.ChannelStart
}

func (ru *run[S]) saveUpdate(ctx context.Context, n *frame[S], source checkpoint.Source, tasks []*task[S], fork bool) error {
	if err := ru.save(ctx, n, source, tasks, nil, true, fork); err != nil {
		return err
	}
	ru.fr = n
	return nil
}

// defaultAsNode resolves an empty AsNode as LangGraph resolves as_node:
// START on a fresh thread; otherwise the node that wrote last, the one
// whose task produced the checkpoint (START for the start step), found in
// the pending writes its parent holds. A node that raised a NodeInterrupt
// did not write, so the update acts as the node before it and the
// interrupted node is due again. There is no shortcut for a graph of one
// node: LangGraph's counts __start__ among its nodes, so that its rule
// never applies to a state graph.
func (r *Runnable[S]) defaultAsNode(ctx context.Context, pl place, f *frame[S], fresh bool) (string, error) {
	thread := pl.thread
	if fresh {
		return START, nil
	}
	if f.parentID == "" {
		return "", fmt.Errorf("%w (thread %q: checkpoint %s has no parent)", ErrAmbiguousUpdate, thread, f.id)
	}
	tp, err := pl.saver.Get(ctx, checkpoint.Ref{Thread: thread, NS: pl.ns, ID: f.parentID}, checkpoint.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("%w (thread %q: cannot read parent checkpoint: %w)", ErrAmbiguousUpdate, thread, err)
	}
	var nodes []string
	for _, w := range tp.Pending {
		if w.Node == "" || checkpoint.IsSpecial(w.Channel) || slices.Contains(nodes, w.Node) {
			continue
		}
		nodes = append(nodes, w.Node)
	}
	if len(nodes) != 1 {
		return "", fmt.Errorf("%w (thread %q: the step before checkpoint %s ran %v)", ErrAmbiguousUpdate, thread, f.id, nodes)
	}
	return nodes[0], nil
}

// Interrupts returns the thread's pending interrupts (a shortcut for
// GetState(...).Interrupts). It fails as GetState does (ErrThreadNotFound,
// ErrNoSaver, a *checkpoint.CorruptError, ...).
func (r *Runnable[S]) Interrupts(ctx context.Context, thread string) ([]interrupt.Interrupt, error) {
	s, err := r.GetState(ctx, thread)
	if err != nil {
		return nil, err
	}
	return s.Interrupts, nil
}
