package workers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
)

// SubmitOption configures one Submit.
type SubmitOption func(*submitOptions)

type submitOptions struct {
	key   string
	queue bool
}

// RunKey gives the input an idempotency key: the run that applies it
// carries it (graph.RunKey), so a Submit retried after a crash or a lost
// reply applies it once, and, when it is queued, a second Submit with the
// key returns the same Ticket instead of queueing it twice. Without one,
// an input that is queued gets a unique key of the pool's (Options.IDs),
// and one that runs at once none.
func RunKey(key string) SubmitOption { return func(o *submitOptions) { o.key = key } }

// QueueIfBusy makes Submit queue the input behind the thread's current
// run when the thread is busy or waiting, instead of refusing it: the
// input is stored in the saver's database, in order, and applied once its
// turn comes (each queued input exactly once, also across crashes), by
// whichever worker of the database claims the thread. Input behind a
// thread that waits on an interrupt waits until the interrupt is answered
// and the resumed run ends.
func QueueIfBusy() SubmitOption { return func(o *submitOptions) { o.queue = true } }

// Receipt is what Submit did with input: ran it (Result) or queued it
// (Queued, Ticket).
type Receipt[S any] struct {
	// Result is the run's result when the input ran at once.
	Result graph.Result[S]
	// Queued reports that the input was queued; Ticket names it.
	Queued bool
	Ticket Ticket
}

// Ticket names a queued input, for Wait.
type Ticket struct {
	Thread string
	// ID is the queued input's ID (checkpoint.QueuedInput.ID).
	ID int64
	// Key is its run key.
	Key string
}

// Submit applies input to thread through the pool. When the thread is
// idle (new, done, or failed: new input discards a failed task, as
// graph.Runnable.Invoke does) the input runs at once, in this goroutine,
// on one of the pool's slots (Submit waits for a free one), and Submit
// returns what the run returned. While the thread is busy (a run holds
// it), waits on an interrupt or a breakpoint, has input queued before
// this one, or has unfinished work a worker is to take up (a crashed or
// handed-back run, a scheduled retry), Submit refuses the input with a
// *RefusedError (ErrRefused) saying which, applying and queueing nothing;
// with QueueIfBusy it queues the input instead and returns its Ticket
// (Receipt.Queued).
//
// A run Submit starts that is cut short (ctx ends, the database is lost)
// is not abandoned: its thread is due, and a worker of the pool, in this
// process or another, continues it. Submit returns an error wrapping
// ErrInvalidInput for input that cannot be submitted (a Goto or a Send,
// a field that does not encode, a malformed run key), the run's errors
// (see graph.Runnable.Invoke), and the store's.
func (p *Pool[S]) Submit(ctx context.Context, thread string, input graph.Update[S], opts ...SubmitOption) (Receipt[S], error) {
	var o submitOptions
	for _, f := range opts {
		f(&o)
	}
	if thread == "" {
		return Receipt[S]{}, fmt.Errorf("%w: empty thread ID", ErrInvalidInput)
	}
	if o.key != "" {
		if err := checkpoint.ValidateQueuedInput(checkpoint.QueuedInput{Thread: thread, Key: o.key, Input: []byte("{}")}); err != nil {
			return Receipt[S]{}, fmt.Errorf("%w: %w", ErrInvalidInput, err)
		}
	}
	if len(input.Gotos()) > 0 || len(input.Sends()) > 0 {
		return Receipt[S]{}, fmt.Errorf("%w: input cannot Goto or Send; add edges from START", ErrInvalidInput)
	}
	if err := p.acquire(ctx); err != nil {
		return Receipt[S]{}, err
	}
	defer p.release()
	if p.busyHere(thread) {
		return p.refuse(ctx, thread, input, o, Busy, nil)
	}
	owner := p.newID()
	p.own(owner)
	defer p.disown(owner)
	d, err := p.store.Hold(ctx, thread, checkpoint.Lease{Owner: owner, Runner: p.runner, TTL: p.ttl})
	var be *checkpoint.BusyError
	if errors.As(err, &be) {
		return p.refuse(ctx, thread, input, o, Busy, err)
	}
	if err != nil {
		return Receipt[S]{}, fmt.Errorf("workers: thread %q: claim: %w", thread, err)
	}
	p.enter(thread)
	defer p.leave(thread)
	log := p.o.Logger.With(slog.String("thread", thread), slog.String("claim", owner))
	st := checkpoint.Settlement{Thread: thread, Owner: owner, Next: checkpoint.DueKeep, Attempts: d.Attempts}
	var why Reason
	switch {
	case d.Queued > 0:
		why = Queued
	case d.Reason != "":
		why = Pending
	case d.Head != "":
		snap, err := p.r.GetState(ctx, thread)
		switch {
		case errors.Is(err, graph.ErrThreadNotFound):
		case err != nil:
			// Not due before the hold: leave it as it was.
			st.Next = checkpoint.DueNone
			p.settle(ctx, st, log)
			return Receipt[S]{}, err
		case snap.Status == graph.StatusWaiting:
			why = Waiting
			st.Next = checkpoint.DueNone
		case snap.Status == graph.StatusPending:
			// A run stopped short and nothing marked it: a worker takes
			// it up now (the hold leaves it due).
			why = Pending
		}
	}
	if why != "" {
		p.settle(ctx, st, log)
		return p.refuse(ctx, thread, input, o, why, nil)
	}
	runOpts := []graph.RunOption{graph.ClaimedBy(owner)}
	if o.key != "" {
		runOpts = append(runOpts, graph.RunKey(o.key))
	}
	res, err := p.r.Invoke(ctx, thread, input, runOpts...)
	st, _ = p.after(ctx, st, d.Head, nil, res, err, log)
	p.settle(ctx, st, log)
	if err != nil {
		return Receipt[S]{}, err
	}
	return Receipt[S]{Result: res}, nil
}

// Enqueue queues input for thread whatever the thread is doing, to be
// applied in order by whichever worker of the database claims the thread
// (in this process or another), and returns its Ticket at once; a second
// Enqueue (or a queueing Submit) with the same RunKey returns the first
// one's Ticket and queues nothing. It returns an error wrapping
// ErrInvalidInput for input that cannot be queued (a Goto or a Send, a
// field that does not encode, a malformed thread or run key) and the
// store's error.
func (p *Pool[S]) Enqueue(ctx context.Context, thread string, input graph.Update[S], opts ...SubmitOption) (Ticket, error) {
	var o submitOptions
	for _, f := range opts {
		f(&o)
	}
	if thread == "" {
		return Ticket{}, fmt.Errorf("%w: empty thread ID", ErrInvalidInput)
	}
	return p.enqueue(ctx, thread, input, o.key)
}

// Input is one thread's input for EnqueueAll.
type Input[S any] struct {
	Thread string
	Update graph.Update[S]
	// Key is the input's run key (as RunKey); "" gets a unique one.
	Key string
}

// EnqueueAll queues the inputs of ins, each as Enqueue queues its input
// (in the order given; an input whose key is queued already for its
// thread, or earlier in ins, gets the first one's Ticket), all in one
// transaction of the store (checkpoint.InputBatcher): one commit for the
// lot, and the workers of the database see all of it or none. It returns
// the Tickets in the order of ins. It returns an error wrapping
// ErrInvalidInput, naming the input, for one Enqueue refuses (nothing is
// queued then), one matching ErrUnsupported when the pool's store queues
// no batch (the memory, SQLite and Postgres savers do), and the store's
// error (see checkpoint.InputBatcher.EnqueueAll).
func (p *Pool[S]) EnqueueAll(ctx context.Context, ins []Input[S]) ([]Ticket, error) {
	qb, ok := p.store.(checkpoint.InputBatcher)
	if !ok {
		return nil, fmt.Errorf("%w: %T queues no batch of input (it does not implement checkpoint.InputBatcher); queue each input with Enqueue", ErrUnsupported, p.store)
	}
	batch := make([]checkpoint.QueuedInput, len(ins))
	for i, in := range ins {
		if in.Thread == "" {
			return nil, fmt.Errorf("%w: input %d: empty thread ID", ErrInvalidInput, i)
		}
		b, err := encodeInput(in.Update)
		if err != nil {
			return nil, fmt.Errorf("workers: input %d, thread %q: %w", i, in.Thread, err)
		}
		key := in.Key
		if key == "" {
			key = p.newID()
		}
		batch[i] = checkpoint.QueuedInput{Thread: in.Thread, Key: key, Input: b}
	}
	if len(batch) == 0 {
		return nil, ctx.Err()
	}
	out, _, err := qb.EnqueueAll(ctx, batch)
	if errors.Is(err, checkpoint.ErrInvalid) {
		return nil, fmt.Errorf("%w: %w", ErrInvalidInput, err)
	}
	if err != nil {
		return nil, fmt.Errorf("workers: queue %d inputs: %w", len(batch), err)
	}
	p.signal()
	ts := make([]Ticket, len(out))
	for i, q := range out {
		ts[i] = Ticket{Thread: q.Thread, ID: q.ID, Key: q.Key}
	}
	return ts, nil
}

// refuse refuses input to a busy or waiting thread, or queues it with
// QueueIfBusy.
func (p *Pool[S]) refuse(ctx context.Context, thread string, input graph.Update[S], o submitOptions, why Reason, cause error) (Receipt[S], error) {
	if !o.queue {
		return Receipt[S]{}, &RefusedError{Thread: thread, Reason: why, Err: cause}
	}
	t, err := p.enqueue(ctx, thread, input, o.key)
	if err != nil {
		return Receipt[S]{}, err
	}
	return Receipt[S]{Queued: true, Ticket: t}, nil
}

// enqueue queues input and wakes this process's claim loop.
func (p *Pool[S]) enqueue(ctx context.Context, thread string, input graph.Update[S], key string) (Ticket, error) {
	b, err := encodeInput(input)
	if err != nil {
		return Ticket{}, fmt.Errorf("workers: thread %q: %w", thread, err)
	}
	if key == "" {
		key = p.newID()
	}
	in, _, err := p.store.Enqueue(ctx, checkpoint.QueuedInput{Thread: thread, Key: key, Input: b})
	if errors.Is(err, checkpoint.ErrInvalid) {
		return Ticket{}, fmt.Errorf("%w: thread %q: %w", ErrInvalidInput, thread, err)
	}
	if err != nil {
		return Ticket{}, fmt.Errorf("workers: thread %q: queue the input: %w", thread, err)
	}
	p.signal()
	return Ticket{Thread: thread, ID: in.ID, Key: in.Key}, nil
}

// Wait waits until the queued input t names has been applied and the run
// that applied it has ended (done, waiting or failed: read the thread's
// state for which), whichever worker applied it. It returns nil then, an
// error matching ErrDropped when the input left the queue without being
// applied (its thread was deleted), ctx's error when ctx ends first, and
// the store's error.
func (p *Pool[S]) Wait(ctx context.Context, t Ticket) error {
	ch := make(chan struct{})
	p.mu.Lock()
	p.waiters[t.ID] = append(p.waiters[t.ID], ch)
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		if i := slices.Index(p.waiters[t.ID], ch); i >= 0 {
			p.waiters[t.ID] = slices.Delete(p.waiters[t.ID], i, i+1)
			if len(p.waiters[t.ID]) == 0 {
				delete(p.waiters, t.ID)
			}
		}
		p.mu.Unlock()
	}()
	tick := time.NewTicker(p.o.Poll)
	defer tick.Stop()
	for {
		q, err := p.store.Queued(ctx, t.Thread, 0)
		if err != nil {
			return fmt.Errorf("workers: wait for input %q of thread %q: %w", t.Key, t.Thread, err)
		}
		if !slices.ContainsFunc(q, func(in checkpoint.QueuedInput) bool { return in.ID == t.ID }) {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
			ch = make(chan struct{})
			p.mu.Lock()
			p.waiters[t.ID] = append(p.waiters[t.ID], ch)
			p.mu.Unlock()
		case <-tick.C:
		}
	}
	ok, err := p.applied(ctx, t.Thread, t.Key)
	switch {
	case err != nil:
		return fmt.Errorf("workers: wait for input %q of thread %q: %w", t.Key, t.Thread, err)
	case !ok:
		return fmt.Errorf("%w: input %q of thread %q", ErrDropped, t.Key, t.Thread)
	}
	return nil
}

// resumeApproval is the approval.Worker's ResumeFunc: it resumes rec's
// thread on one of the pool's slots under a claim of the pool, so that a
// resume cut short is taken up by a worker and the thread's queued input
// goes on after it.
func (p *Pool[S]) resumeApproval(ctx context.Context, rec approval.Record) error {
	if err := p.acquire(ctx); err != nil {
		return err
	}
	defer p.release()
	owner := p.newID()
	p.own(owner)
	defer p.disown(owner)
	d, err := p.store.Hold(ctx, rec.Thread, checkpoint.Lease{Owner: owner, Runner: p.runner, TTL: p.ttl})
	if err != nil {
		return fmt.Errorf("workers: thread %q: claim: %w", rec.Thread, err)
	}
	p.enter(rec.Thread)
	defer p.leave(rec.Thread)
	log := p.o.Logger.With(slog.String("thread", rec.Thread), slog.String("claim", owner), slog.String("approval", rec.ID))
	st := checkpoint.Settlement{Thread: rec.Thread, Owner: owner, Next: checkpoint.DueKeep, Attempts: d.Attempts}
	rerr := approval.ResumeGraph(p.r, graph.ClaimedBy(owner))(ctx, rec)
	if rerr != nil && ctx.Err() == nil && !errors.Is(rerr, checkpoint.ErrThreadBusy) && !errors.Is(rerr, checkpoint.ErrConflict) {
		// The thread no longer waits on the approval, or the resume
		// failed: settle from what the thread is now.
		st, _ = p.failed(ctx, st, d.Head, nil, rerr, log)
	} else {
		st, _ = p.after(ctx, st, d.Head, nil, graph.Result[S]{}, rerr, log)
	}
	if rerr == nil {
		// A waiting result is not known here: read it.
		if snap, err := p.r.GetState(ctx, rec.Thread); err == nil && snap.Status == graph.StatusWaiting {
			st = park(st, snap.Config.CheckpointID)
		}
	}
	p.settle(ctx, st, log)
	return rerr
}
