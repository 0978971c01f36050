package graph

import (
	"context"
	"errors"
	"time"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/internal/hookcall"
	"github.com/lockstepgo/lockstep/internal/safe"
	"github.com/lockstepgo/lockstep/observe"
)

// WithObserver reports every run, superstep, task and saver call of the
// Runnable's runs to h, and every lease conflict and node retry (see
// package observe for the events and what they carry). Nodes run with
// their task's context, so the tool and model calls they make (package
// nodes, given the same hook) nest under their task. A run started with a
// context that carries observe.WithLinks reports those traceparents in
// its run event: the approval worker links a resume to its request so.
//
// h is application code: a panic in it loses the event and is logged at
// Warn on the Runnable's logger; a call still running when the run's
// context ends is given up on (Abandoned counts it) and h is not called
// again. A hook that declares it never blocks (observe.Inliner, as
// otelobserve's Options.Inline does) is called on the run's goroutine
// instead, its panics still recovered: no goroutine per event, but no
// bound on a call that blocks. Without an observer (the default; a nil h) a run pays a nil
// check per event and allocates nothing for it.
func WithObserver(h observe.Hook) Option { return func(c *config) { c.observer = h } }

// modeOf is the observe.Mode of a run started with kind.
func modeOf(kind inputKind) string {
	switch kind {
	case inputResume:
		return observe.ModeResume
	case inputContinue:
		return observe.ModeContinue
	case inputReplay:
		return observe.ModeReplay
	}
	return observe.ModeInput
}

// errFields sets e's Error and ErrorType from err, which the runtime
// made or contained already (its text is read once, as for logging).
func errFields(e *observe.Event, err error) {
	if err == nil {
		return
	}
	e.Error, e.ErrorType = err.Error(), safe.TypeName(err)
}

// runEnd is the event that ends a run with res and err: a run its
// caller stopped (its context ended, or the stream's consumer stopped
// reading) is cancelled, not failed.
func (ru *run[S]) runEnd(e observe.Event, res Result[S], err error) observe.Event {
	e.Step = ru.step - 1
	switch {
	case errors.Is(err, errStopped), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// Stopped by its caller: the thread is pending, nothing failed.
		e.Outcome = observe.OutcomeCancelled
		errFields(&e, err)
	case err != nil:
		e.Outcome = observe.OutcomeFailed
		errFields(&e, err)
	case res.Status == StatusWaiting:
		e.Outcome = observe.OutcomeWaiting
		for _, in := range res.Interrupts {
			e.Interrupts = append(e.Interrupts, in.ID)
		}
	default:
		e.Outcome = observe.OutcomeDone
	}
	return e
}

// endStep tells the observer the step of sp ended: done when err is nil
// and res is zero (its checkpoint is saved), else as the run ends.
func (ru *run[S]) endStep(sp hookcall.Span, tasks int, res Result[S], err error) {
	e := ru.event(observe.KindStep)
	e.Tasks = tasks
	switch {
	case err != nil:
		e.Outcome = observe.OutcomeFailed
		errFields(&e, err)
	case res.Status == StatusWaiting:
		e.Outcome = observe.OutcomeWaiting
	default:
		e.Outcome = observe.OutcomeDone
	}
	ru.r.obs.End(sp, e)
}

// event is an event of kind k with the run's thread, run ID and
// namespace.
func (ru *run[S]) event(k observe.Kind) observe.Event {
	return observe.Event{Kind: k, NS: ru.ns, Thread: ru.thread, Run: ru.lease.Owner, Step: ru.step}
}

// taskOutcome is the outcome of a task that ran: stopped says the step's
// context ended (a sibling failed, or the run's context ended).
func taskOutcome[S any](t *task[S], stopped bool) (string, error) {
	switch {
	case t.err != nil && stopped && !t.done && (errors.Is(t.err, context.Canceled) || errors.Is(t.err, context.DeadlineExceeded)):
		return observe.OutcomeCancelled, nil
	case t.err != nil:
		return observe.OutcomeFailed, t.err
	case len(t.interrupts) > 0 && !t.done:
		return observe.OutcomeWaiting, nil
	}
	return observe.OutcomeDone, nil
}

// startTask tells the observer t begins; its span's context is what the
// node runs with.
func (ru *run[S]) startTask(ctx context.Context, t *task[S]) hookcall.Span {
	if ru.r.obs == nil {
		return hookcall.Span{Ctx: ctx}
	}
	e := ru.event(observe.KindTask)
	e.Node, e.TaskID = t.name, t.id
	return ru.r.obs.Start(ctx, e)
}

// endTask tells the observer t ended.
func (ru *run[S]) endTask(sp hookcall.Span, t *task[S], stopped bool) {
	if !sp.Open() {
		return
	}
	e := ru.event(observe.KindTask)
	e.Node, e.TaskID, e.Attempt = t.name, t.id, t.attempts
	var err error
	e.Outcome, err = taskOutcome(t, stopped)
	errFields(&e, err)
	ru.r.obs.End(sp, e)
}

// saverCall is a saver call in progress (see startSaver).
type saverCall struct {
	sp hookcall.Span
	op string
}

// startSaver tells the observer a saver call of op, writing bytes (a
// function, so that nothing is counted without an observer), begins.
func (ru *run[S]) startSaver(ctx context.Context, op string, bytes func() int) saverCall {
	if ru.r.obs == nil {
		return saverCall{}
	}
	e := ru.event(observe.KindSaver)
	e.Op = op
	if bytes != nil {
		e.Bytes = bytes()
	}
	return saverCall{sp: ru.r.obs.Start(ctx, e), op: op}
}

// endSaver tells the observer the call ended with err (read bytes for a
// get), and notes a lease conflict.
func (ru *run[S]) endSaver(sc saverCall, read int, err error) {
	if !sc.sp.Open() {
		return
	}
	ru.r.endSaverCall(sc, ru.event(observe.KindSaver), read, err)
}

// endSaverCall ends a saver call of e's thread.
func (r *Runnable[S]) endSaverCall(sc saverCall, e observe.Event, read int, err error) {
	e.Op, e.Bytes = sc.op, read
	if sc.op == observe.OpGet && errors.Is(err, checkpoint.ErrNotFound) {
		err = nil // an answer: a new thread, or an unknown checkpoint
		e.Reason = "not found"
	}
	if err != nil {
		e.Outcome = observe.OutcomeFailed
		errFields(&e, err)
		if errors.Is(err, checkpoint.ErrThreadBusy) || errors.Is(err, checkpoint.ErrConflict) {
			n := e
			n.Kind, n.Outcome = observe.KindLeaseConflict, ""
			var be *checkpoint.BusyError
			if errors.As(err, &be) {
				n.Holder = be.Owner
			}
			r.obs.Note(sc.sp.Ctx, n)
		}
	} else {
		e.Outcome = observe.OutcomeDone
	}
	r.obs.End(sc.sp, e)
}

// putBytes is what a chain of put requests writes: the channels' values
// and the writes.
func putBytes(reqs []checkpoint.PutRequest) int {
	n := 0
	for i := range reqs {
		for _, bs := range reqs[i].Checkpoint.Channels {
			for _, b := range bs {
				n += len(b.Data)
			}
		}
		n += writesBytes(reqs[i].ParentWrites) + writesBytes(reqs[i].Writes)
	}
	return n
}

// writesBytes is the size of the values of tasks' writes.
func writesBytes(tasks []checkpoint.TaskWrites) int {
	n := 0
	for _, tw := range tasks {
		for _, w := range tw.Writes {
			n += len(w.Value)
		}
	}
	return n
}

// tupleBytes is what a read returned: channel values and pending writes.
func tupleBytes(tp *checkpoint.Tuple) int {
	if tp == nil {
		return 0
	}
	n := 0
	for _, bs := range tp.Checkpoint.Channels {
		for _, b := range bs {
			n += len(b.Data)
		}
	}
	for _, w := range tp.Pending {
		n += len(w.Value)
	}
	return n
}

// noteRetry tells the observer a node's attempt failed and another
// follows after wait.
func (r *Runnable[S]) noteRetry(ctx context.Context, node string, attempt int, wait time.Duration, err error) {
	if r.obs == nil {
		return
	}
	e := observe.Event{Kind: observe.KindRetry, Node: node, Attempt: attempt, Class: "node", Delay: wait}
	if info, ok := TaskFrom(ctx); ok {
		e.Thread, e.Run, e.Step, e.TaskID = info.Thread, info.Run, info.Step, info.TaskID
	}
	errFields(&e, err)
	r.obs.Note(ctx, e)
}
