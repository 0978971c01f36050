package graph

import (
	"errors"
	"fmt"
	"strings"

	"github.com/lockstepgo/lockstep/internal/safe"
)

// Sentinel errors. Typed errors below match them with errors.Is.
var (
	// ErrInvalidGraph matches every *CompileError.
	ErrInvalidGraph = errors.New("graph: invalid graph")
	// ErrUnknownNode: an edge, a route, a Goto, a Send or an update names a
	// node the graph does not have. Matches *UnknownNodeError.
	ErrUnknownNode = errors.New("graph: unknown node")
	// ErrUnknownField: an update names a field the state type does not have.
	ErrUnknownField = errors.New("graph: unknown state field")
	// ErrConflictingWrites: two tasks of one step wrote a last-value field.
	ErrConflictingWrites = errors.New("graph: conflicting writes in one step")
	// ErrRecursionLimit: the run needed more supersteps than allowed.
	ErrRecursionLimit = errors.New("graph: recursion limit reached")
	// ErrNodePanic matches *PanicError.
	ErrNodePanic = errors.New("graph: node panicked")
	// ErrNoSaver: the operation needs a checkpoint saver and none was given.
	ErrNoSaver = errors.New("graph: no checkpoint saver configured")
	// ErrThreadNotFound: the thread has no checkpoints.
	ErrThreadNotFound = errors.New("graph: thread not found")
	// ErrNothingToResume: Resume on a thread with no pending interrupt or
	// breakpoint.
	ErrNothingToResume = errors.New("graph: nothing to resume")
	// ErrAmbiguousResume: one plain resume value while several interrupts
	// are pending (answer by interrupt ID), or while several tasks are held
	// at a static breakpoint (Continue, then answer what each asks).
	ErrAmbiguousResume = errors.New("graph: several interrupts are pending; resume by interrupt ID")
	// ErrUnknownInterrupt: a resume answers an interrupt ID that is not
	// pending on the thread.
	ErrUnknownInterrupt = errors.New("graph: unknown interrupt ID")
	// ErrAlreadyAnswered: a resume answers an interrupt that already has an
	// answer.
	ErrAlreadyAnswered = errors.New("graph: interrupt already answered")
	// ErrNotAnswerable: a resume answers an interrupt raised by
	// interrupt.NodeInterrupt, which takes no answer: update the state
	// (Command.Update, or UpdateState) and continue instead.
	ErrNotAnswerable = errors.New("graph: a NodeInterrupt takes no answer; update the state and continue")
	// ErrPendingInterrupt: new input sent to a thread that waits for an
	// answer or at a breakpoint; resume it, or pass DiscardPending.
	ErrPendingInterrupt = errors.New("graph: thread is waiting; resume it or discard the pending work explicitly")
	// ErrRunKeyReused: Invoke's RunKey started a run that is not the
	// thread's current one: other input came since, or the thread was
	// branched (Replay, UpdateState at an older checkpoint) off before that
	// run's input. Nothing was applied.
	ErrRunKeyReused = errors.New("graph: the run key started an earlier run of this thread")
	// ErrInvalidInput: a malformed argument (empty or oversized thread ID,
	// bad option, wrong Send argument...).
	ErrInvalidInput = errors.New("graph: invalid input")
	// ErrStateTooLarge: an encoded state value or write exceeds the size cap.
	ErrStateTooLarge = errors.New("graph: state too large")
	// ErrNotSerializable: a write, Send argument or durable step result does
	// not encode as JSON.
	ErrNotSerializable = errors.New("graph: value is not serialisable as JSON")
	// ErrAmbiguousUpdate: UpdateState could not tell which node the update
	// is from; pass AsNode.
	ErrAmbiguousUpdate = errors.New("graph: ambiguous update; specify AsNode")
	// ErrAbandoned: a call into application code (a router, a reducer,
	// the MarshalJSON or UnmarshalJSON method of a state value, an
	// interrupt value or a resume answer; in package nodes, a gate
	// policy, a secret provider...) had not returned when the run's
	// context ended, so the run returned without it; the call was left
	// running (Runnable.Abandoned counts it). An error matching it also
	// matches the context's error (context.DeadlineExceeded,
	// context.Canceled).
	ErrAbandoned = safe.ErrAbandoned
)

// CompileError reports one problem found by Compile. Compile returns every
// problem it finds, joined with errors.Join. It matches ErrInvalidGraph.
type CompileError struct {
	Problem string // what is wrong, e.g. "duplicate node"
	Node    string // the node concerned, if any
	Field   string // the state field concerned, if any
	Err     error  // the cause, if any (a *retry.PolicyError for "invalid retry policy")
}

// Error states the problem found when compiling.
func (e *CompileError) Error() string {
	var b strings.Builder
	b.WriteString("graph: ")
	b.WriteString(e.Problem)
	if e.Node != "" {
		fmt.Fprintf(&b, " (node %q)", e.Node)
	}
	if e.Field != "" {
		fmt.Fprintf(&b, " (field %q)", e.Field)
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Is makes errors.Is(err, ErrInvalidGraph) true.
func (e *CompileError) Is(target error) bool { return target == ErrInvalidGraph }

// Unwrap returns the cause, if any.
func (e *CompileError) Unwrap() error { return e.Err }

// UnknownNodeError names a node that does not exist. It matches
// ErrUnknownNode, and ErrInvalidGraph when Compile returned it.
type UnknownNodeError struct {
	Name string // the unknown name (quoted and truncated in the message)
	From string // where it was named: "edge", "route of node x", "AsNode"...

	compile bool // found by Compile: also an invalid graph
}

// Error names the unknown node and where it was named.
func (e *UnknownNodeError) Error() string {
	return fmt.Sprintf("graph: unknown node %s in %s", quoteShort(e.Name), e.From)
}

// Is makes errors.Is(err, ErrUnknownNode) true, and errors.Is(err,
// ErrInvalidGraph) too when Compile found it.
func (e *UnknownNodeError) Is(target error) bool {
	return target == ErrUnknownNode || e.compile && target == ErrInvalidGraph
}

// UnknownFieldError names a state field that does not exist. It matches
// ErrUnknownField.
type UnknownFieldError struct {
	Field string
	Node  string // the node whose update named it ("" for input)
}

// Error names the unknown field and, when known, the node that wrote it.
func (e *UnknownFieldError) Error() string {
	if e.Node == "" {
		return fmt.Sprintf("graph: unknown state field %s", quoteShort(e.Field))
	}
	return fmt.Sprintf("graph: node %q wrote unknown state field %s", e.Node, quoteShort(e.Field))
}

// Is makes errors.Is(err, ErrUnknownField) true.
func (e *UnknownFieldError) Is(target error) bool { return target == ErrUnknownField }

// ConflictError reports several writes to a last-value field in one step.
// The step is not committed; the tasks' writes stay pending on the step's
// starting checkpoint. It matches ErrConflictingWrites.
type ConflictError struct {
	Field string
	Nodes []string // the writers, in write order
	Step  int
}

// Error names the step, the field and the nodes that all wrote it.
func (e *ConflictError) Error() string {
	return fmt.Sprintf("graph: step %d: field %q can take one write per step (it has no reducer) but nodes %s all wrote it",
		e.Step, e.Field, strings.Join(quoteAll(e.Nodes), ", "))
}

// Is makes errors.Is(err, ErrConflictingWrites) true.
func (e *ConflictError) Is(target error) bool { return target == ErrConflictingWrites }

// RecursionError reports a run that needed more supersteps than its limit.
// It matches ErrRecursionLimit.
type RecursionError struct {
	Thread string
	Limit  int
	Step   int
}

// Error names the thread, the limit and the step it was reached at.
func (e *RecursionError) Error() string {
	return fmt.Sprintf("graph: thread %q: recursion limit of %d supersteps reached at step %d without finishing", e.Thread, e.Limit, e.Step)
}

// Is makes errors.Is(err, ErrRecursionLimit) true.
func (e *RecursionError) Is(target error) bool { return target == ErrRecursionLimit }

// NodeError wraps the error a node (or its router) returned, with where it
// happened. Unwrap gives the node's error as the runtime holds it: its
// text read once, and errors.Is and errors.As see the node's error
// through it (a panic in its Is or As method reads as no match).
type NodeError struct {
	Thread string
	Node   string
	TaskID string
	Step   int
	Err    error
}

// Error names the thread, step and node, then the node's error.
func (e *NodeError) Error() string {
	return fmt.Sprintf("graph: thread %q step %d node %q: %v", e.Thread, e.Step, e.Node, e.Err)
}

// Unwrap returns the node's error.
func (e *NodeError) Unwrap() error { return e.Err }

// PanicError is a recovered panic in application code the runtime
// called, with its stack: a node, or (Call) another function or method
// of the application's: the node's router or retry policy, the Error
// method of the error it returned, a reducer, the MarshalJSON or
// UnmarshalJSON method of a value. It matches ErrNodePanic.
type PanicError struct {
	// Node is the node that panicked, or whose router, retry policy or
	// error did; "" for code that belongs to no node (a reducer, a
	// stored value's UnmarshalJSON).
	Node string
	// Call names what panicked when it is not the node function itself
	// ("" for the node), for example "router" or `the reducer of field
	// "Log"`.
	Call  string
	Value any
	Stack []byte
}

// Error names the node and what panicked, and the value it panicked with.
func (e *PanicError) Error() string {
	switch {
	case e.Call == "":
		return fmt.Sprintf("graph: node %q panicked: %v", e.Node, e.Value)
	case e.Node == "":
		return fmt.Sprintf("graph: %s panicked: %v", e.Call, e.Value)
	}
	return fmt.Sprintf("graph: node %q: %s panicked: %v", e.Node, e.Call, e.Value)
}

// Is makes errors.Is(err, ErrNodePanic) true.
func (e *PanicError) Is(target error) bool { return target == ErrNodePanic }

// Unwrap returns the panic value when it is an error (read once, and asked
// under recover: see the package doc).
func (e *PanicError) Unwrap() error {
	if err, ok := e.Value.(error); ok {
		_, w := safe.Wrap(err)
		return w
	}
	return nil
}

// TaskError is a task failure read back from a checkpoint: the error's
// message and type as saved. It is what Snapshot tasks carry, since the
// original error value does not survive storage.
type TaskError struct {
	Node    string
	Type    string
	Message string
}

// Error names the node and the saved failure message.
func (e *TaskError) Error() string {
	return fmt.Sprintf("graph: node %q failed: %s", e.Node, e.Message)
}

// ResumeError reports a resume command that does not fit the thread's
// pending interrupts. It matches ErrAmbiguousResume, ErrUnknownInterrupt,
// ErrAlreadyAnswered or ErrNotAnswerable (Kind).
type ResumeError struct {
	Thread      string
	Kind        error  // one of the four sentinels above
	InterruptID string // the ID concerned, if any
	Pending     []string
}

// Error states the kind of resume failure, the thread and, when known,
// the interrupt.
func (e *ResumeError) Error() string {
	s := fmt.Sprintf("%v (thread %q", e.Kind, e.Thread)
	if e.InterruptID != "" {
		s += ", interrupt " + quoteShort(e.InterruptID)
	}
	if len(e.Pending) > 0 {
		s += ", pending: " + strings.Join(e.Pending, ", ")
	}
	return s + ")"
}

// Is matches the error's Kind.
func (e *ResumeError) Is(target error) bool { return target == e.Kind }

// SizeError reports an encoded value over the size cap. It matches
// ErrStateTooLarge.
type SizeError struct {
	What  string // "field Log", "send argument", ...
	Size  int
	Limit int
}

// Error names the value, its encoded size and the cap it exceeds.
func (e *SizeError) Error() string {
	return fmt.Sprintf("graph: %s encodes to %d bytes, over the %d-byte cap (WithMaxValueBytes)", e.What, e.Size, e.Limit)
}

// Is makes errors.Is(err, ErrStateTooLarge) true.
func (e *SizeError) Is(target error) bool { return target == ErrStateTooLarge }

// EncodeError reports a value that does not encode as JSON. It matches
// ErrNotSerializable.
type EncodeError struct {
	What string
	Err  error
}

// Error names the value that does not encode and why.
func (e *EncodeError) Error() string {
	return fmt.Sprintf("graph: %s does not encode as JSON: %v", e.What, e.Err)
}

// Unwrap returns the encoding error.
func (e *EncodeError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrNotSerializable) true.
func (e *EncodeError) Is(target error) bool { return target == ErrNotSerializable }

const maxQuoted = 64

// quoteShort quotes s, truncating it so that hostile names (1 MB of text,
// NULs) cannot flood a message.
func quoteShort(s string) string {
	if len(s) > maxQuoted {
		return fmt.Sprintf("%q...(%d bytes)", s[:maxQuoted], len(s))
	}
	return fmt.Sprintf("%q", s)
}

func quoteAll(xs []string) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = quoteShort(x)
	}
	return out
}

// noSaver is ErrNoSaver naming the thread an operation needed it for.
func noSaver(thread string) error {
	return fmt.Errorf("%w (thread %s)", ErrNoSaver, quoteShort(thread))
}
