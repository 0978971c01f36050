package graph

import "slices"

// Update is what a node returns: the state fields it writes and, optionally,
// where the run goes next (LangGraph's Command(update, goto)). The zero
// Update writes nothing and goes nowhere beyond the node's edges.
//
// A node writes exactly the fields it names, including zero values:
//
//	return graph.Set(State{Count: 0}, "Count"), nil // resets Count
//
// Fields with an append or merge reducer receive the items or keys to add,
// not the whole new value.
type Update[S any] struct {
	value     S
	fields    []string
	overwrite []string
	gotos     []string
	sends     []Send[S]
}

// empty reports whether u changes nothing: no field, no Goto, no Send.
func (u Update[S]) empty() bool {
	return len(u.fields) == 0 && len(u.overwrite) == 0 && len(u.gotos) == 0 && len(u.sends) == 0
}

// Set returns an Update that writes the named fields of value. A field is
// named by its Go name or by the key of its json tag (the state key a
// LangGraph user knows it by): a field Count tagged json:"count" is
// "Count" or "count". Either way it is stored and shown (Task.Result,
// Runnable.Fields, the CLI) by its Go name. Naming a field that S does
// not have is an *UnknownFieldError when the update is applied.
func Set[S any](value S, fields ...string) Update[S] {
	return Update[S]{value: value, fields: fields}
}

// Goto returns an Update that writes nothing and sends the run to nodes
// (END is allowed and means nothing). Naming an unknown node is an
// *UnknownNodeError when the update is applied.
func Goto[S any](nodes ...string) Update[S] {
	return Update[S]{gotos: nodes}
}

// Goto adds nodes to run in the next superstep, in addition to the node's
// edges.
func (u Update[S]) Goto(nodes ...string) Update[S] {
	u.gotos = append(slices.Clip(u.gotos), nodes...)
	return u
}

// Send adds push tasks: each runs its node once in the next superstep with
// its Arg as the node's state (map fan-out).
func (u Update[S]) Send(sends ...Send[S]) Update[S] {
	u.sends = append(slices.Clip(u.sends), sends...)
	return u
}

// Overwrite writes the named fields from the update's value, replacing the
// current value instead of reducing into it (LangGraph's Overwrite): an
// append field then holds exactly the written slice. Two overwrites of one
// field in a step are a *ConflictError.
func (u Update[S]) Overwrite(fields ...string) Update[S] {
	u.overwrite = append(slices.Clip(u.overwrite), fields...)
	return u
}

// Value returns the update's value. Only the fields in Fields are written.
func (u Update[S]) Value() S { return u.value }

// Fields returns the names of the written fields, overwrites included.
func (u Update[S]) Fields() []string {
	out := slices.Clone(u.fields)
	for _, f := range u.overwrite {
		if !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out
}

// Overwrites returns the names of the fields written with Overwrite.
func (u Update[S]) Overwrites() []string { return slices.Clone(u.overwrite) }

// Gotos returns the nodes the update sends the run to.
func (u Update[S]) Gotos() []string { return slices.Clone(u.gotos) }

// Sends returns the update's push tasks.
func (u Update[S]) Sends() []Send[S] { return slices.Clone(u.sends) }

// IsZero reports whether the update writes nothing and routes nowhere.
func (u Update[S]) IsZero() bool {
	return len(u.fields) == 0 && len(u.overwrite) == 0 && len(u.gotos) == 0 && len(u.sends) == 0
}

// Send runs Node once in the next superstep with Arg as its state. Several
// Sends to one node run as separate tasks, in order.
type Send[S any] struct {
	Node string
	Arg  S
}

// Command resumes a waiting thread.
type Command[S any] struct {
	// Resume answers the one pending interrupt. Nil means no answer. With
	// several interrupts pending, use ResumeByID.
	Resume any
	// ResumeByID answers pending interrupts by ID.
	ResumeByID map[string]any
	// Update is applied before the run continues, as if written by no node
	// (its Goto and Send targets run in the next superstep).
	Update Update[S]
}

type inputKind int

const (
	inputStart inputKind = iota
	inputResume
	inputContinue
	inputReplay
)

// Input says how a streamed run starts: see StartWith, ResumeWith,
// ContinueRun and ReplayFrom.
type Input[S any] struct {
	kind       inputKind
	update     Update[S]
	command    Command[S]
	checkpoint string
}

// StartWith starts a run with new input, as Runnable.Invoke does.
func StartWith[S any](input Update[S]) Input[S] { return Input[S]{kind: inputStart, update: input} }

// ResumeWith resumes a waiting thread, as Runnable.Resume does.
func ResumeWith[S any](cmd Command[S]) Input[S] { return Input[S]{kind: inputResume, command: cmd} }

// ContinueRun runs a thread's pending tasks, as Runnable.Continue does.
func ContinueRun[S any]() Input[S] { return Input[S]{kind: inputContinue} }

// ReplayFrom forks the thread at an older checkpoint and runs from there, as
// Runnable.Replay does.
func ReplayFrom[S any](checkpointID string) Input[S] {
	return Input[S]{kind: inputReplay, checkpoint: checkpointID}
}
