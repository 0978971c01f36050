package graph

import (
	"context"
	"errors"
	"fmt"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/internal/testhook"
)

// StateUpdate is one update of a BulkUpdateState step: Update applied as
// AsNode would return it (see UpdateOptions.AsNode; the special values
// AsInput, AsCopy and END are for UpdateState alone).
type StateUpdate[S any] struct {
	Update Update[S]
	AsNode string
}

// BulkUpdateOptions say where BulkUpdateState starts.
type BulkUpdateOptions struct {
	// CheckpointID starts from an older checkpoint instead of the head;
	// the result starts a new branch that becomes the thread's head.
	CheckpointID string
}

// BulkUpdateState applies several updates as successive supersteps in one
// call, LangGraph's bulk_update_state: each element of steps is one
// superstep and writes one "update" checkpoint, the parent of the next,
// and the updates of one step are applied together, as the writes of
// parallel tasks are (two writes to a last-value field are a
// *ConflictError). Each step is applied as UpdateState applies one
// update: the first on the head with its saved writes applied first (or
// on opts.CheckpointID, as a new branch), every later one on the
// checkpoint of the step before it. It is all or nothing: every step is
// computed before anything is saved, and the checkpoints are saved in one
// transaction where the saver can (checkpoint.ChainPutter: both savers
// of this module); any error leaves the thread as it was.
//
// A step with one update may leave AsNode empty: on the first step it is
// resolved as UpdateState resolves it; on a later one it is the node of
// the step before, when that step had one. A step with several updates
// needs AsNode on each. It returns the config of the last checkpoint, or
// ErrInvalidInput for no steps, an empty step, an empty AsNode in a step
// of several updates, or AsInput, AsCopy or END; ErrAmbiguousUpdate; a
// *UnknownNodeError for an unknown AsNode; the errors of the updates
// themselves (*UnknownFieldError, *ConflictError...); and, when another
// runner owns the thread, an error matching checkpoint.ErrThreadBusy or
// checkpoint.ErrConflict.
func (r *Runnable[S]) BulkUpdateState(ctx context.Context, thread string, steps [][]StateUpdate[S], opts BulkUpdateOptions) (Config, error) {
	var zero Config
	if r.cfg.saver == nil {
		return zero, noSaver(thread)
	}
	if err := checkThread(thread); err != nil {
		return zero, err
	}
	if err := r.checkBulk(thread, steps); err != nil {
		return zero, err
	}
	lease, leave := r.lease(r.cfg.runIDs())
	defer leave() // after finish
	pl := place{saver: r.cfg.saver, thread: thread}
	ru := &run[S]{r: r, thread: thread, saver: pl.saver, lease: lease, live: &r.live, log: r.cfg.logger, hook: testhook.From(ctx)}
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
		f, tp = newFrame[S](), &checkpoint.Tuple{Thread: thread}
		f.thread = thread
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
	reqs := make([]checkpoint.PutRequest, 0, len(steps))
	base, prevNode := f, ""
	for i, step := range steps {
		nodes := make([]string, len(step))
		for k, su := range step {
			nodes[k] = su.AsNode
		}
		if len(step) == 1 && nodes[0] == "" {
			switch {
			case i == 0:
				if nodes[0], err = r.defaultAsNode(ctx, pl, f, fresh); err != nil {
					return zero, err
				}
			case prevNode != "":
				nodes[0] = prevNode
			default:
				return zero, fmt.Errorf("%w (thread %q: step %d of the bulk update follows a step of several updates; set AsNode)", ErrAmbiguousUpdate, thread, i)
			}
		}
		var pending []checkpoint.PendingWrite
		if i == 0 && opts.CheckpointID == "" && !fresh {
			pending = tp.Pending
		}
		ru.step = base.meta.Step + 1
		if fresh && i == 0 {
			ru.step = 0
		}
		n, tasks, err := r.bulkStep(ctx, thread, "", base, pending, step, nodes, ru.step)
		if err != nil {
			return zero, fmt.Errorf("graph: thread %q: step %d of the bulk update: %w", thread, i, err)
		}
		n.parentID = base.id
		req, err := ru.prepareSave(ctx, n, checkpoint.SourceUpdate, tasks, nil, i == len(steps)-1, fork && i == 0)
		if err != nil {
			return zero, err
		}
		n.markSaved(&req.Checkpoint) // the next step's parent
		reqs = append(reqs, req)
		base, prevNode = n, ""
		if len(nodes) == 1 {
			prevNode = nodes[0]
		}
	}
	ru.heldMu.Lock()
	err = ru.put(ctx, reqs)
	ru.heldMu.Unlock()
	if err != nil {
		return zero, err
	}
	ru.fr = base
	return ru.config(), nil
}

// checkBulk refuses the shapes BulkUpdateState does not take, before the
// thread is claimed.
func (r *Runnable[S]) checkBulk(thread string, steps [][]StateUpdate[S]) error {
	if len(steps) == 0 {
		return fmt.Errorf("%w: thread %q: a bulk update of no steps", ErrInvalidInput, thread)
	}
	for i, step := range steps {
		if len(step) == 0 {
			return fmt.Errorf("%w: thread %q: step %d of the bulk update has no update", ErrInvalidInput, thread, i)
		}
		for _, su := range step {
			switch su.AsNode {
			case AsInput, AsCopy, END:
				return fmt.Errorf("%w: thread %q: step %d of the bulk update: AsNode %s is for UpdateState alone", ErrInvalidInput, thread, i, su.AsNode)
			case "":
				if len(step) > 1 {
					return fmt.Errorf("%w: thread %q: step %d of the bulk update has several updates: each needs AsNode", ErrInvalidInput, thread, i)
				}
			default:
				if _, ok := r.nodes[su.AsNode]; !ok && su.AsNode != START {
					return &UnknownNodeError{Name: su.AsNode, From: fmt.Sprintf("StateUpdate.AsNode of step %d of a bulk update of thread %s", i, quoteShort(thread))}
				}
			}
		}
	}
	return nil
}

// bulkStep applies one step of updates on f, the checkpoint of namespace
// ns, as nodes (UpdateState's one update as a node, and each step of
// BulkUpdateState): the saved writes in pending first (a Command's
// update, the tasks that finished in a stopped step), then the updates as
// tasks of nodes, together, after the pending triggers they do not set
// again are dropped (join barriers keep what they have seen). It returns
// the new frame and the update tasks.
func (r *Runnable[S]) bulkStep(ctx context.Context, thread, ns string, f *frame[S], pending []checkpoint.PendingWrite, step []StateUpdate[S], nodes []string, stepNo int) (*frame[S], []*task[S], error) {
	n := f.derive(true)
	r.dropOrphans(n)
	base := f
	if len(pending) > 0 {
		var err error
		if n, err = r.applyCommands(ctx, thread, n, pending, true); err != nil {
			return nil, nil, err
		}
		_, finished, err := r.nextTasks(ctx, thread, f, pending)
		if err != nil {
			return nil, nil, err
		}
		if len(finished) > 0 {
			r.consume(n, finished)
			if n, err = r.applyWrites(ctx, n, finished, stepNo, true, false); err != nil {
				return nil, nil, err
			}
		}
		base = n
	}
	tasks := make([]*task[S], len(step))
	for k, su := range step {
		name := "update:" + nodes[k]
		if k > 0 {
			name = fmt.Sprintf("update:%s:%d", nodes[k], k)
		}
		t := &task[S]{name: nodes[k], push: -1}
		t.id = checkpoint.TaskID(thread, f.id, ns, stepNo, name, "pull", nil)
		var err error
		if t.writes, err = r.resolve(ctx, t, su.Update, base, false); err != nil {
			return nil, nil, err
		}
		// Encoded before they are applied, as a node's are: a field that
		// takes a written value as it is stores the write's bytes
		// (field.taken) rather than encoding a big value twice.
		if t.encoded, err = r.encodeWrites(ctx, t); err != nil {
			return nil, nil, fmt.Errorf("graph: thread %q step %d: %w", thread, stepNo, err)
		}
		t.done = true
		tasks[k] = t
	}
	n.triggers, n.sends, n.start = nil, nil, nil
	for ch := range n.versions {
		if isTrigger(ch) {
			n.clearInternal(ch)
		}
	}
	n, err := r.applyWrites(ctx, n, tasks, stepNo, true, false)
	if err != nil {
		return nil, nil, err
	}
	return n, tasks, nil
}
