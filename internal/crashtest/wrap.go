package crashtest

import (
	"context"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/nodes/ledger"
)

// AckSaver wraps a saver so that the child acknowledges what it saved:
// after a Put returned nil, a TASK-ACK for every task of its ParentWrites
// that finished (has a regular write) and an ACK for the checkpoint; after
// a PutWrites returned nil, a TASK-ACK for every finished task. Nothing is
// acknowledged before the save returned. Give the wrapper to the graph
// (graph.WithSaver) and the unwrapped saver to everything else (an Inbox
// needs its checkpoint.InterruptLister).
func AckSaver(s checkpoint.Saver, r *Reporter) checkpoint.Saver { return &ackSaver{Saver: s, r: r} }

// JoinSaver is a saver that runs joins in its transactions (the SQLite and
// Postgres savers).
type JoinSaver interface {
	checkpoint.Saver
	checkpoint.Joiner
}

// AckJoiner is AckSaver for a saver that is a checkpoint.Joiner: the
// wrapper is one too, so that the work the graph joins to its saves (an
// approval consumed with the answer it carries, a ledger outcome with the
// step's result, D16) still commits in the saver's transactions, and a
// fenced ledger's intents in its fenced ones. (AckSaver hides Fenced: on
// its wrapper the graph joins nothing.)
func AckJoiner(s JoinSaver, r *Reporter) JoinSaver {
	return &ackJoiner{ackSaver: ackSaver{Saver: s, r: r}, j: s}
}

type ackJoiner struct {
	ackSaver
	j checkpoint.Joiner
}

func (a *ackJoiner) Fenced(ctx context.Context, thread, owner string, j checkpoint.Join) error {
	return a.j.Fenced(ctx, thread, owner, j)
}

type ackSaver struct {
	checkpoint.Saver
	r *Reporter
}

func (a *ackSaver) Put(ctx context.Context, req checkpoint.PutRequest) error {
	if err := a.Saver.Put(ctx, req); err != nil {
		return err
	}
	a.tasks(req.Thread, req.ParentWrites)
	a.r.Ack(req.Thread, req.Checkpoint.ID)
	return nil
}

func (a *ackSaver) PutWrites(ctx context.Context, req checkpoint.WritesRequest) error {
	if err := a.Saver.PutWrites(ctx, req); err != nil {
		return err
	}
	a.tasks(req.Ref.Thread, req.Tasks)
	return nil
}

func (a *ackSaver) tasks(thread string, tws []checkpoint.TaskWrites) {
	for _, tw := range tws {
		if Finished(tw) {
			a.r.TaskAck(thread, tw.TaskID)
		}
	}
}

// Finished reports whether tw holds the writes of a task that finished: a
// node's task (not a command's) with a regular write. Interrupts, errors,
// resume answers, breakpoint markers and durable step results are special
// writes of a task that has not finished and may run again.
func Finished(tw checkpoint.TaskWrites) bool {
	if checkpoint.IsCommandTask(tw.TaskID) {
		return false
	}
	for _, w := range tw.Writes {
		if !checkpoint.IsSpecial(w.Channel) {
			return true
		}
	}
	return false
}

// AckLedger wraps an idempotency ledger so that the child acknowledges
// every outcome it recorded: "EFFECT-ACK <key>" after Complete or Resolve
// returned nil. An acknowledged effect must have happened exactly once.
func AckLedger(l ledger.Ledger, r *Reporter) ledger.Ledger { return &ackLedger{Ledger: l, r: r} }

type ackLedger struct {
	ledger.Ledger
	r *Reporter
}

// Fenced forwards the wrapped ledger's fence (ledger.Joiner), so that the
// executor checks the run's lease before a fenced intent as it does on
// the ledger itself.
func (a *ackLedger) Fenced() bool {
	j, ok := a.Ledger.(ledger.Joiner)
	return ok && j.Fenced()
}

// CompleteJoin records no outcome in the saver's transaction: the
// executor then calls Complete (fenced by the wrapped ledger when it is),
// after whose commit the outcome is acknowledged.
func (a *ackLedger) CompleteJoin(string, string, ledger.Outcome) func(ctx context.Context, tx any) error {
	return nil
}

func (a *ackLedger) Complete(ctx context.Context, key, owner string, o ledger.Outcome) error {
	if err := a.Ledger.Complete(ctx, key, owner, o); err != nil {
		return err
	}
	if o.Failure == nil {
		a.r.EffectAck(key)
	}
	return nil
}

func (a *ackLedger) Resolve(ctx context.Context, key string, o ledger.Outcome) error {
	if err := a.Ledger.Resolve(ctx, key, o); err != nil {
		return err
	}
	if o.Failure == nil {
		a.r.EffectAck(key)
	}
	return nil
}
