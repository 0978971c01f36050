package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/nodes"
	"github.com/lockstepgo/lockstep/nodes/scripted"
	"github.com/lockstepgo/lockstep/retry"
)

// ErrNoScript is returned by the models of this package when they have no
// script for a conversation: a thread they were not given, or an outcome
// their branches do not cover. The model node wraps it in a
// *nodes.ModelError, so the run fails loudly instead of answering
// something made up.
var ErrNoScript = errors.New("demo: no script for this conversation")

// Scripts is a nodes.Model that answers each thread with the model
// registered for it, found by the thread of the running graph task
// (graph.TaskFrom). It is safe for concurrent use as long as the map is
// not modified after it is built.
type Scripts map[string]nodes.Model

// Generate implements nodes.Model. It returns an error matching
// ErrNoScript for a thread without a model, or outside a graph run.
func (s Scripts) Generate(ctx context.Context, msgs []nodes.Message, tools []nodes.Definition) (nodes.Message, error) {
	info, ok := graph.TaskFrom(ctx)
	if !ok {
		return nodes.Message{}, fmt.Errorf("%w: called outside a graph run", ErrNoScript)
	}
	m, ok := s[info.Thread]
	if !ok {
		return nodes.Message{}, fmt.Errorf("%w: thread %q has no script", ErrNoScript, info.Thread)
	}
	return m.Generate(ctx, msgs, tools)
}

// branch is the model Branch returns.
type branch struct {
	prefix int
	head   *scripted.Model
	tails  map[nodes.Status]*scripted.Model
}

// Branch returns a scripted model that answers with the turns of prefix,
// one per assistant message so far, and then with the turns of
// branches[status], where status is the Status of the conversation's last
// tool result (see LastToolStatus). So an offline script stays true to
// what happened: a booking that a reviewer rejected is not reported as
// made. A result the ledger replayed (nodes.StatusReplayed: the call had
// run before, in a run that stopped before its step was saved) takes the
// branch of StatusExecuted unless there is one for StatusReplayed, since
// the effect did happen. A status without a branch fails with an error
// matching ErrNoScript. Like a scripted.Model, it answers from the conversation
// alone, so a resumed or restarted run answers as the first would have.
func Branch(prefix []scripted.Turn, branches map[nodes.Status][]scripted.Turn) nodes.Model {
	b := &branch{prefix: len(prefix), head: scripted.New(prefix...), tails: map[nodes.Status]*scripted.Model{}}
	for st, turns := range branches {
		b.tails[st] = scripted.New(append(slices.Clone(prefix), turns...)...)
	}
	return b
}

// Generate implements nodes.Model.
func (b *branch) Generate(ctx context.Context, msgs []nodes.Message, tools []nodes.Definition) (nodes.Message, error) {
	k := 0
	for _, m := range msgs {
		if m.Role == nodes.RoleAssistant {
			k++
		}
	}
	if k < b.prefix {
		return b.head.Generate(ctx, msgs, tools)
	}
	st, _ := LastToolStatus(msgs)
	m, ok := b.tails[st]
	if !ok && st == nodes.StatusReplayed {
		m, ok = b.tails[nodes.StatusExecuted]
	}
	if !ok {
		return nodes.Message{}, fmt.Errorf("%w: no turn follows a tool result with status %q", ErrNoScript, st)
	}
	return m.Generate(ctx, msgs, tools)
}

// LastToolStatus returns the status of the last tool message of msgs (the
// Status of its nodes.Observation), and false when there is none.
func LastToolStatus(msgs []nodes.Message) (nodes.Status, bool) {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role != nodes.RoleTool {
			continue
		}
		var obs nodes.Observation
		if err := json.Unmarshal([]byte(msgs[i].Content), &obs); err != nil {
			return "", false
		}
		return obs.Status, true
	}
	return "", false
}

// LastAnswer returns the content of the last assistant message of msgs,
// and "" when there is none.
func LastAnswer(msgs []nodes.Message) string {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == nodes.RoleAssistant {
			return msgs[i].Content
		}
	}
	return ""
}

// Decision is one "tool decision" event of a nodes.Executor (see the
// package doc of nodes, Logging).
type Decision struct {
	Status nodes.Status
	Tool   string
	CallID string
	Thread string
	// Args are the logged arguments (canonical JSON, redacted).
	Args string
	// Attrs holds the other attributes (key, attempt, wait, reviewer,
	// rule, reason, error...), as text.
	Attrs map[string]string
}

// DecisionLog records the decision events of the executors whose logger
// it is (Logger). It is safe for concurrent use.
type DecisionLog struct {
	mu     sync.Mutex
	events []Decision
}

// Logger returns a logger that records "tool decision" events in l and
// drops everything else; pass it to nodes.WithLogger.
func (l *DecisionLog) Logger() *slog.Logger { return slog.New(decisionHandler{l}) }

// Events returns the recorded events, oldest first (a copy).
func (l *DecisionLog) Events() []Decision {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.events)
}

// Count returns how many events of tool had status st.
func (l *DecisionLog) Count(tool string, st nodes.Status) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, e := range l.events {
		if e.Tool == tool && e.Status == st {
			n++
		}
	}
	return n
}

// Statuses returns "tool:status" for every event, oldest first.
func (l *DecisionLog) Statuses() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]string, len(l.events))
	for i, e := range l.events {
		out[i] = e.Tool + ":" + string(e.Status)
	}
	return out
}

// decisionHandler is the slog.Handler of DecisionLog.Logger.
type decisionHandler struct{ log *DecisionLog }

// Enabled implements slog.Handler: every level.
func (h decisionHandler) Enabled(context.Context, slog.Level) bool { return true }

// Handle implements slog.Handler: it records "tool decision" events.
func (h decisionHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "tool decision" {
		return nil
	}
	d := Decision{Attrs: map[string]string{}}
	r.Attrs(func(a slog.Attr) bool {
		v := a.Value.Resolve().String()
		switch a.Key {
		case "status":
			d.Status = nodes.Status(v)
		case "tool":
			d.Tool = v
		case "call_id":
			d.CallID = v
		case "thread":
			d.Thread = v
		case "args":
			d.Args = v
		default:
			d.Attrs[a.Key] = v
		}
		return true
	})
	h.log.mu.Lock()
	h.log.events = append(h.log.events, d)
	h.log.mu.Unlock()
	return nil
}

// WithAttrs implements slog.Handler (the executor logs without them).
func (h decisionHandler) WithAttrs([]slog.Attr) slog.Handler { return h }

// WithGroup implements slog.Handler (the executor logs without them).
func (h decisionHandler) WithGroup(string) slog.Handler { return h }

// Prefix returns a thread filter that keeps the threads whose ID starts
// with p.
func Prefix(p string) func(thread string) bool {
	return func(thread string) bool { return strings.HasPrefix(thread, p) }
}

// Unresumed returns the decided approvals of s waiting to be resumed
// whose thread owns keeps: what an approval.Worker limited to those threads
// (WorkerOptions.Threads) would pick up.
func Unresumed(ctx context.Context, s approval.Store, owns func(thread string) bool) ([]approval.Record, error) {
	all, err := s.Unresumed(ctx, 0)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(all, func(r approval.Record) bool { return !owns(r.Thread) }), nil
}

// Undelivered looks among ids (the interrupts a thread's tasks raised)
// for an approval that is decided in s and whose decision the approval
// worker has not delivered yet, and says why not: an earlier run of the
// program claimed it and was stopped before it finished (its claim holds
// until after), or its last attempt failed (the next may start at
// after), or it is due now. ok is false when there is none.
func Undelivered(ctx context.Context, s approval.Store, ids []string) (rec approval.Record, why string, after time.Time, ok bool, err error) {
	for _, id := range ids {
		r, err := s.Get(ctx, id)
		if errors.Is(err, approval.ErrNotFound) {
			continue
		}
		if err != nil {
			return approval.Record{}, "", time.Time{}, false, err
		}
		if !r.Resume.At.IsZero() {
			continue
		}
		now := s.Now()
		after, why = now, "it is due now"
		if r.Resume.NotBefore.After(now) {
			after = r.Resume.NotBefore
			why = "an earlier run of this program claimed it and was stopped before it finished; its claim holds until " + after.UTC().Format(time.RFC3339)
		}
		if r.Resume.LastError != "" {
			why = "its last attempt failed (" + r.Resume.LastError + "); the next may start at " + after.UTC().Format(time.RFC3339)
		}
		return r, why, after, true, nil
	}
	return approval.Record{}, "", time.Time{}, false, nil
}

// TaskInterrupts returns the IDs of every interrupt the tasks of a
// snapshot raised, answered or not.
func TaskInterrupts[S any](snap graph.Snapshot[S]) []string {
	var ids []string
	for _, t := range snap.Tasks {
		for _, in := range t.Interrupts {
			ids = append(ids, in.ID)
		}
	}
	return ids
}

// Printer writes a narrative and keeps the first write error, so that a
// story of many lines checks its output once (Err).
type Printer struct {
	w   io.Writer
	err error
}

// NewPrinter returns a printer to w.
func NewPrinter(w io.Writer) *Printer { return &Printer{w: w} }

// Printf writes a formatted line (or part of one) unless a write failed
// before.
func (p *Printer) Printf(format string, args ...any) {
	if p.err != nil {
		return
	}
	_, p.err = fmt.Fprintf(p.w, format, args...)
}

// Err returns the first write error, or nil.
func (p *Printer) Err() error { return p.err }

// Inspect reads a thread's head as the lockstep CLI does, from stored data
// alone (checkpoint.Inspect): status, next tasks, pending interrupts and
// values. It returns an error matching checkpoint.ErrNotFound for an
// unknown thread.
func Inspect(ctx context.Context, s checkpoint.Saver, thread string) (*checkpoint.Inspection, error) {
	tp, err := s.Get(ctx, checkpoint.Ref{Thread: thread}, checkpoint.GetOptions{})
	if err != nil {
		return nil, err
	}
	return checkpoint.Inspect(tp, true)
}

// Stopped reports whether a thread with status st was left mid-run by an
// earlier run: pending (it stopped between steps: Ctrl-C, a crash) or
// failed (a task's error). Continue takes such a thread on.
func Stopped(st graph.Status) bool { return st == graph.StatusPending || st == graph.StatusFailed }

// Continue takes on a thread that an earlier run left stopped (see
// Stopped) from where it stopped, with graph.Runnable.Continue: the steps
// it saved do not run again, and a side effect whose step was not saved is
// answered by the ledger. It says so on p and returns the thread's
// snapshot after the run. A thread that is not stopped is returned as
// snap, and nothing runs. It returns the error of Continue or GetState
// (which name the thread), for instance when the failed task fails again.
func Continue[S any](ctx context.Context, r *graph.Runnable[S], p *Printer, thread string, snap graph.Snapshot[S]) (graph.Snapshot[S], error) {
	if !Stopped(snap.Status) {
		return snap, nil
	}
	p.Printf("  Found it %s (next %v) after an interrupted earlier run: continuing it from there.\n", snap.Status, snap.Next)
	if _, err := r.Continue(ctx, thread); err != nil {
		return snap, err
	}
	return r.GetState(ctx, thread)
}

// WorkerOptions returns the approval worker's options of an example: only
// its threads (owns), and with lease > 0 (a crash test's short lease) that
// lease for the worker's claims and half of it as the wait before a failed
// resume is tried again. The default wait (a second, doubling) is short
// next to the graph's default 30 s lease, but not next to a lease of a
// second: a resume refused because a killed runner still held the thread
// would then wait much longer than that runner's lease.
func WorkerOptions(lease time.Duration, owns func(thread string) bool) approval.WorkerOptions {
	o := approval.WorkerOptions{Threads: owns}
	if lease > 0 {
		o.Lease = lease
		o.Retry = &retry.Policy{Initial: lease / 2, Multiplier: 1, Max: lease / 2}
	}
	return o
}
