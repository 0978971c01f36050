package observe

import (
	"context"
	"slices"
	"strconv"
	"time"
)

// Hook observes the runtime (see the package doc). Its methods must be
// safe for concurrent use.
type Hook interface {
	// Start is called when an operation of kind e.Kind begins, with the
	// context of the operation that encloses it. It returns the context
	// the operation's children run with, and that End gets; nil means
	// ctx.
	Start(ctx context.Context, e Event) context.Context
	// End is called when the operation Start began ends, with the
	// context Start returned and the event of the ending: the same Kind,
	// its outcome and what the operation learned while it ran.
	End(ctx context.Context, e Event)
	// Note reports an instant event inside the operation ctx carries.
	Note(ctx context.Context, e Event)
	// TraceParent returns the W3C traceparent of the operation ctx
	// carries ("" when there is none), for an approval request to store
	// and a later run to link to.
	TraceParent(ctx context.Context) string
}

// Inliner is a Hook that may declare that its methods never block (see
// Containment in the package doc): when Inline returns true, the runtime
// calls them on the caller's goroutine, recovering their panics, instead
// of on a goroutine of its own bounded by the operation's context. It is
// asked once, when the hook is given to a part; a panic in Inline reads
// as false.
type Inliner interface {
	Hook
	Inline() bool
}

// Inline returns h declared as never blocking: a Hook whose methods are
// h's, called inline (see Inliner). Use it only for a hook that returns
// promptly whatever happens; a call that blocks holds the run past its
// deadline. Inline(nil) is nil.
func Inline(h Hook) Hook {
	if h == nil {
		return nil
	}
	return inlined{h}
}

type inlined struct{ Hook }

func (inlined) Inline() bool { return true }

// Kind says what an event is about. The kinds up to KindApprovalResume are
// operations (Start, then End); the others are notes.
type Kind uint8

// The kinds of operations, and the fields their events set besides Kind
// and NS. Start's event carries the fields known when the operation
// begins, End's repeats them and adds the outcome.
const (
	// KindRun is one run of a thread: an Invoke, Resume, Continue,
	// Replay or Stream. Start: Thread, Run, Mode, Links. End: Outcome
	// (OutcomeDone, OutcomeWaiting, OutcomeFailed), Step (the last step
	// it ran), Interrupts (the IDs it waits on), Error, ErrorType.
	KindRun Kind = iota + 1
	// KindStep is one superstep of a run. Start: Thread, Run, Step, Tasks
	// (how many tasks it has, finished ones of an earlier run included).
	// End: Outcome (OutcomeDone: its checkpoint is saved; OutcomeWaiting;
	// OutcomeFailed), Error.
	KindStep
	// KindTask is one execution of a node in a step, its retries
	// included. Start: Thread, Run, Step, Node, TaskID. End: Attempt (the
	// attempts it made), Outcome (OutcomeDone, OutcomeWaiting,
	// OutcomeFailed, OutcomeCancelled: stopped because a sibling failed
	// or the run's context ended), Error, ErrorType.
	KindTask
	// KindSaver is one call of the checkpoint saver. Start: Thread, Run,
	// Op (OpPut, OpPutWrites, OpClaim, OpRelease, OpGet), Bytes (what
	// it writes: the encoded values of channels and writes; for OpGet,
	// set at End: what it read). End: Outcome (OutcomeDone,
	// OutcomeFailed), Error.
	KindSaver
	// KindTool is one tool call through the executor, a fallback being a
	// call inside the call that failed. Start: Thread (the call's
	// scope), Tool, CallID, FallbackFor. End: Outcome (the executor's
	// final status: "executed", "cache_hit", "replayed", "fallback",
	// "blocked", "rejected", "expired", "failed", or OutcomeWaiting when
	// the tool body asked a human), Attempt, Error.
	KindTool
	// KindModel is one call of a chat model by a model node. Start:
	// Node. End: Model, Provider, Usage, InputTokens, OutputTokens (what
	// the model's client reported: nodes.ReportUsage), Outcome
	// (OutcomeDone, OutcomeFailed), Error.
	KindModel
	// KindApprovalDecide is a decision recorded on an approval request
	// through an Inbox (a reviewer's, or an expiry). Start: Approval,
	// Thread, Tool, Risk, Rule, Links (the request's TraceParent). End:
	// Outcome (the decision's outcome, or OutcomeFailed when it was not
	// recorded), Waited (from the request's creation to the decision),
	// Error.
	KindApprovalDecide
	// KindApprovalResume is the approval worker resuming the thread of a
	// decided request. Start: Approval, Thread, Tool, Risk, Links (the
	// request's TraceParent). End: Outcome ("resumed"; "stale": the
	// thread no longer waited on it; "deferred": retried later;
	// "stopped": the worker stopped; OutcomeFailed: the store failed),
	// Waited (from the request's creation to its decision), Error.
	KindApprovalResume
)

// The kinds of notes.
const (
	// KindDecision is a decision of the tool executor inside a tool
	// call: Op is its status ("allowed" when the gate let the call pass
	// without a human, "blocked", "approved", "rejected", "expired",
	// "cache_hit", "replayed", "retry", "fallback", "executed",
	// "failed"); Tool, CallID, and where they apply Reason, Rule, Risk,
	// Attempt, Class and Delay (a retry's), FallbackFor (the tool whose
	// fallback runs, for "fallback": Tool is the fallback), Error.
	KindDecision Kind = iota + 32
	// KindRetry is a node's retry inside a task (graph.WithRetry):
	// Node, Attempt (the attempt that failed), Class ("node"), Delay,
	// Error.
	KindRetry
	// KindApprovalRaised is an approval request raised by the tool node
	// inside its task: Approval (its interrupt ID), Tool, CallID, Risk,
	// Rule, Reason (the request's kind: "gate", "fallback",
	// "outcome_unknown").
	KindApprovalRaised
	// KindLeaseConflict is a saver call refused because another runner
	// holds the thread or has moved its head on (checkpoint.ErrThreadBusy
	// or checkpoint.ErrConflict), inside the KindSaver operation: Thread,
	// Op, Holder (the lease's owner, when the saver said), Error.
	KindLeaseConflict
)

// String returns the kind's name ("run", "step", ..., "lease_conflict"),
// or "kind(N)" for an unknown one.
func (k Kind) String() string {
	switch k {
	case KindRun:
		return "run"
	case KindStep:
		return "step"
	case KindTask:
		return "task"
	case KindSaver:
		return "saver"
	case KindTool:
		return "tool"
	case KindModel:
		return "model"
	case KindApprovalDecide:
		return "approval_decide"
	case KindApprovalResume:
		return "approval_resume"
	case KindDecision:
		return "decision"
	case KindRetry:
		return "retry"
	case KindApprovalRaised:
		return "approval_raised"
	case KindLeaseConflict:
		return "lease_conflict"
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// How a run started (Event.Mode).
const (
	ModeInput    = "input"    // Invoke, or Stream with new input
	ModeResume   = "resume"   // Resume: answers to interrupts, or a Command
	ModeContinue = "continue" // Continue: pending tasks run on
	ModeReplay   = "replay"   // Replay: a fork of an older checkpoint
)

// Outcomes of operations (Event.Outcome) that several kinds share.
const (
	OutcomeDone      = "done"      // finished
	OutcomeWaiting   = "waiting"   // paused for a human: not an error
	OutcomeFailed    = "failed"    // failed: Error says why
	OutcomeCancelled = "cancelled" // stopped before it finished, not by its own failure
)

// Saver calls (Event.Op of KindSaver and KindLeaseConflict).
const (
	OpPut       = "put"        // a checkpoint, or a chain of them, with its writes
	OpPutWrites = "put_writes" // pending writes of tasks
	OpClaim     = "claim"      // the thread's lease, without writing
	OpRelease   = "release"    // the lease given back
	OpGet       = "get"        // a checkpoint read
)

// Event is what the runtime tells a Hook. Each Kind says which fields it
// sets; the others are zero.
type Event struct {
	Kind Kind
	// NS is the subgraph namespace the operation runs in ("" for the
	// root graph).
	NS     string
	Thread string
	Run    string // the run's ID (graph.WithRunIDs), the lease owner
	Mode   string // KindRun: how the run started (ModeInput, ...)
	Step   int
	Tasks  int
	Node   string
	TaskID string
	// Attempt counts attempts: a task's or a tool call's at End, the
	// failed attempt of a retry.
	Attempt int
	// Outcome is how an operation ended (End only).
	Outcome string
	// Op is a saver call's operation or an executor decision's status.
	Op string
	// Bytes is what a saver call writes or reads.
	Bytes       int
	Tool        string
	CallID      string
	FallbackFor string
	Reason      string
	Rule        string
	Risk        string
	Class       string        // a retry's error class ("transient", "node")
	Delay       time.Duration // the wait before a retry
	Model       string
	Provider    string
	// Usage reports that InputTokens and OutputTokens were reported by
	// the model's client (they are zero otherwise).
	Usage        bool
	InputTokens  int
	OutputTokens int
	Approval     string        // an approval's ID (its interrupt's ID)
	Waited       time.Duration // an approval: from its request to its decision
	Holder       string        // a lease conflict: who holds the thread
	// Links are W3C traceparents of operations this one follows from
	// (the approval request a resume answers).
	Links []string
	// Interrupts are the IDs of the interrupts a waiting run stopped on.
	Interrupts []string
	// Error is the text of the error that ended the operation, read once
	// and with the secrets the runtime knows redacted; ErrorType is its
	// Go type (as fmt's %T).
	Error     string
	ErrorType string
}

// linksKey carries WithLinks's traceparents.
type linksKey struct{}

// WithLinks returns a copy of ctx that carries traceparents: the next run
// started with it (or a context derived from it) reports them in its
// KindRun event's Links, after those ctx carried already. Empty strings
// are dropped; with none left, ctx is returned as is.
func WithLinks(ctx context.Context, traceparents ...string) context.Context {
	var add []string
	for _, tp := range traceparents {
		if tp != "" {
			add = append(add, tp)
		}
	}
	if len(add) == 0 {
		return ctx
	}
	return context.WithValue(ctx, linksKey{}, append(slices.Clone(Links(ctx)), add...))
}

// Links returns the traceparents WithLinks put in ctx, or nil. The slice
// belongs to the caller.
func Links(ctx context.Context) []string {
	l, _ := ctx.Value(linksKey{}).([]string)
	return slices.Clone(l)
}

// ValidTraceParent reports whether s is a W3C traceparent of version 00
// ("00-" 32 hex digits "-" 16 hex digits "-" 2 hex digits, lower case)
// whose trace and span IDs are not all zeros: the form an approval
// request stores.
func ValidTraceParent(s string) bool {
	if len(s) != 55 || s[:3] != "00-" || s[35] != '-' || s[52] != '-' {
		return false
	}
	hex := func(p string) (nonzero, ok bool) {
		for i := 0; i < len(p); i++ {
			c := p[i]
			switch {
			case c >= '1' && c <= '9', c >= 'a' && c <= 'f':
				nonzero = true
			case c == '0':
			default:
				return false, false
			}
		}
		return nonzero, true
	}
	tid, ok1 := hex(s[3:35])
	sid, ok2 := hex(s[36:52])
	_, ok3 := hex(s[53:55])
	return ok1 && ok2 && ok3 && tid && sid
}
