package workers

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
)

// outcome is what the work on one claimed thread did.
type outcome int

const (
	outNothing    outcome = iota // nothing was due after all (done, or waiting with no queue)
	outContinued                 // an unfinished run went on
	outApplied                   // queued input was applied
	outParked                    // queued input waits behind an interrupt
	outDeferred                  // a failed attempt, retried later
	outHandedBack                // given back unfinished
)

// process works on a thread the pool claimed and settles it.
func (p *Pool[S]) process(ctx context.Context, d checkpoint.DueThread) outcome {
	p.enter(d.Thread)
	defer p.leave(d.Thread)
	log := p.o.Logger.With(slog.String("thread", d.Thread), slog.String("claim", d.Owner))
	log.LogAttrs(ctx, slog.LevelDebug, "claimed", slog.String("reason", string(d.Reason)), slog.Int("queued", d.Queued), slog.Int("attempts", d.Attempts))
	st, o := p.work(ctx, d, log)
	p.settle(ctx, st, log)
	return o
}

// work decides what a claimed thread needs and runs it: a thread a run
// left unfinished is continued; otherwise the oldest queued input is
// applied, unless the thread waits on an interrupt (the input is parked
// behind it) or the input's key shows it was applied already.
func (p *Pool[S]) work(ctx context.Context, d checkpoint.DueThread, log *slog.Logger) (checkpoint.Settlement, outcome) {
	st := checkpoint.Settlement{Thread: d.Thread, Owner: d.Owner, Next: checkpoint.DueKeep, Attempts: d.Attempts}
	if ctx.Err() != nil {
		return st, outHandedBack
	}
	exists := d.Head != ""
	head := d.Head
	if exists {
		snap, err := p.r.GetState(ctx, d.Thread)
		switch {
		case errors.Is(err, graph.ErrThreadNotFound):
			exists, head = false, ""
		case err != nil:
			return p.failed(ctx, st, head, nil, err, log)
		default:
			head = snap.Config.CheckpointID
			switch snap.Status {
			case graph.StatusPending:
				res, err := p.r.Continue(ctx, d.Thread, graph.ClaimedBy(d.Owner))
				st, o := p.after(ctx, st, head, nil, res, err, log)
				if o == outApplied {
					o = outContinued
				}
				if err == nil && d.Queued > 0 {
					// The run continued may be that of the oldest queued
					// input, whose worker died before it could drop it.
					st.Drop = p.appliedHead(ctx, d.Thread)
				}
				return st, o
			case graph.StatusWaiting:
				if d.Queued > 0 {
					log.LogAttrs(ctx, slog.LevelDebug, "queued input waits behind the thread's interrupt", slog.String("head", head))
				}
				return park(st, head), outParked
			}
		}
	}
	q, err := p.store.Queued(ctx, d.Thread, 1)
	if err != nil {
		return p.failed(ctx, st, head, nil, err, log)
	}
	if len(q) == 0 {
		st.Next, st.Attempts = checkpoint.DueNone, 0
		return st, outNothing
	}
	in := q[0]
	if exists {
		done, err := p.applied(ctx, d.Thread, in.Key)
		if err != nil {
			return p.failed(ctx, st, head, &in, err, log)
		}
		if done {
			log.LogAttrs(ctx, slog.LevelDebug, "queued input was applied before", slog.String("key", in.Key))
			st.Next, st.Attempts, st.Drop = checkpoint.DueNone, 0, in.ID
			return st, outNothing
		}
	}
	u, err := decodeInput[S](in.Input)
	if err != nil {
		log.LogAttrs(ctx, slog.LevelError, "queued input cannot be applied: it waits, with the input queued behind it, until the thread moves on (run it, or delete the thread)",
			slog.String("key", in.Key), slog.String("error", err.Error()))
		return park(st, head), outParked
	}
	res, err := p.r.Invoke(ctx, d.Thread, u, graph.RunKey(in.Key), graph.ClaimedBy(d.Owner))
	return p.after(ctx, st, head, &in, res, err, log)
}

// appliedHead returns the ID of the thread's oldest queued input if it
// was applied already, 0 otherwise (or when that cannot be read: the next
// claim finds out).
func (p *Pool[S]) appliedHead(ctx context.Context, thread string) int64 {
	q, err := p.store.Queued(ctx, thread, 1)
	if err != nil || len(q) == 0 {
		return 0
	}
	if ok, err := p.applied(ctx, thread, q[0].Key); err == nil && ok {
		return q[0].ID
	}
	return 0
}

// park parks the thread's queued input behind head.
func park(st checkpoint.Settlement, head string) checkpoint.Settlement {
	st.Next, st.Park, st.Attempts = checkpoint.DuePark, head, 0
	return st
}

// applied reports whether input under key was applied to the thread: an
// input checkpoint carries it as its run key.
func (p *Pool[S]) applied(ctx context.Context, thread, key string) (bool, error) {
	ts, err := p.store.List(ctx, thread, checkpoint.ListOptions{
		Filter: map[string]any{"source": string(checkpoint.SourceInput), checkpoint.RunKeyFilter: key}, Limit: 1, MetadataOnly: true,
	})
	if errors.Is(err, checkpoint.ErrNotFound) {
		return false, nil
	}
	return len(ts) > 0, err
}

// after settles a run (a Continue, or an Invoke of queued input in) from
// what it returned: done or waiting, the thread is settled (and in
// dropped); cut short by the pool's stop, or by another runner holding
// the thread, it is handed back; failed, it is settled from what the run
// left (see failed).
func (p *Pool[S]) after(ctx context.Context, st checkpoint.Settlement, head string, in *checkpoint.QueuedInput, res graph.Result[S], err error, log *slog.Logger) (checkpoint.Settlement, outcome) {
	if in != nil {
		st.Drop = 0
	}
	switch {
	case err == nil:
		if in != nil {
			st.Drop = in.ID
		}
		if res.Status == graph.StatusWaiting {
			return park(st, res.Config.CheckpointID), outApplied
		}
		st.Next, st.Attempts = checkpoint.DueNone, 0
		return st, outApplied
	case ctx.Err() != nil:
		log.LogAttrs(context.WithoutCancel(ctx), slog.LevelDebug, "handed back", slog.String("error", err.Error()))
		return st, outHandedBack
	case errors.Is(err, checkpoint.ErrThreadBusy) || errors.Is(err, checkpoint.ErrConflict):
		// Another runner holds the thread: it is due again when that
		// runner lets it go, or its lease lapses.
		log.LogAttrs(ctx, slog.LevelDebug, "another runner holds the thread", slog.String("error", err.Error()))
		return st, outHandedBack
	case in != nil && errors.Is(err, graph.ErrRunKeyReused):
		st.Next, st.Attempts, st.Drop = checkpoint.DueNone, 0, in.ID
		return st, outNothing
	}
	return p.failed(ctx, st, head, in, err, log)
}

// failed settles an attempt that failed with err from what it left: the
// input applied (in dropped), and the thread failed (a node's error: it
// waits for a human, and the queue goes on), waiting (parked) or done.
// An attempt that made no progress (the thread pending, or the input not
// applied: a store error, a lost database) is retried after the backoff,
// up to the retry policy's attempts; then the thread stays as it is and
// its queue waits.
func (p *Pool[S]) failed(ctx context.Context, st checkpoint.Settlement, head string, in *checkpoint.QueuedInput, err error, log *slog.Logger) (checkpoint.Settlement, outcome) {
	if ctx.Err() != nil {
		return st, outHandedBack
	}
	applied := false
	snap, serr := p.r.GetState(ctx, st.Thread)
	if serr == nil {
		head = snap.Config.CheckpointID
		if in != nil {
			applied, serr = p.applied(ctx, st.Thread, in.Key)
		}
	}
	if serr == nil && (applied || in == nil) {
		if applied {
			st.Drop = in.ID
		}
		switch snap.Status {
		case graph.StatusFailed:
			log.LogAttrs(ctx, slog.LevelWarn, "the run failed; the thread waits for someone to continue it", slog.String("error", err.Error()))
			st.Next, st.Attempts = checkpoint.DueNone, 0
			return st, outApplied
		case graph.StatusWaiting:
			return park(st, head), outApplied
		case graph.StatusDone:
			st.Next, st.Attempts = checkpoint.DueNone, 0
			return st, outApplied
		}
	}
	attempts := st.Attempts + 1
	if attempts >= p.o.Retry.Attempts() {
		log.LogAttrs(ctx, slog.LevelError, "giving up on the thread: it stays as it is, with its queued input, until someone continues it",
			slog.Int("attempts", attempts), slog.String("error", err.Error()))
		return park(st, head), outDeferred
	}
	delay := p.backoff(ctx, attempts)
	log.LogAttrs(ctx, slog.LevelWarn, "the attempt failed; retrying later", slog.Int("attempts", attempts), slog.Duration("after", delay), slog.String("error", err.Error()))
	st.Next, st.After, st.Attempts = checkpoint.DueLater, delay, attempts
	return st, outDeferred
}

// settleTimeout bounds the writes that settle a claim.
const settleTimeout = 10 * time.Second

// settle records st, retrying a failed write twice. A claim that another
// replaced meanwhile is not an error (the other's settle counts); one that
// cannot be settled stays due, for the next claim once its lease ends.
func (p *Pool[S]) settle(ctx context.Context, st checkpoint.Settlement, log *slog.Logger) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	var err error
	for i := range 3 {
		if err = p.store.Settle(sctx, st); err == nil || errors.Is(err, checkpoint.ErrClaimLost) {
			break
		}
		select {
		case <-sctx.Done():
		case <-time.After(time.Duration(100<<(2*i)) * time.Millisecond):
		}
	}
	switch {
	case err == nil:
		log.LogAttrs(sctx, slog.LevelDebug, "settled", slog.String("next", st.Next.String()), slog.Int64("dropped", st.Drop))
		if st.Drop != 0 {
			p.notify(st.Drop)
		}
		if st.Next == checkpoint.DueNone || st.Next == checkpoint.DueKeep {
			p.signal() // more input may be due at once
		}
	case errors.Is(err, checkpoint.ErrClaimLost):
		log.LogAttrs(sctx, slog.LevelDebug, "another worker claimed the thread since", slog.String("error", err.Error()))
	default:
		log.LogAttrs(sctx, slog.LevelWarn, "could not settle the thread; it stays due, for the next claim once its lease ends", slog.String("error", err.Error()))
	}
}

// notify wakes the Waits on a queued input that was dropped.
func (p *Pool[S]) notify(id int64) {
	p.mu.Lock()
	chs := p.waiters[id]
	delete(p.waiters, id)
	p.mu.Unlock()
	for _, ch := range chs {
		close(ch)
	}
}
