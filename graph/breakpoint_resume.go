package graph

import (
	"slices"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/interrupt"
)

// breakpointAnswer places a plain resume value given while the thread
// stands at a static breakpoint, where no interrupt is pending yet. As
// LangGraph keeps such a value and hands it to the first interrupt() the
// run reaches, lockstep saves it as the answer to the first Ask of the
// task held at the breakpoint (the interrupt ID interrupt.ID(task, 0)),
// so that Ask returns it at once. It returns that ID and its task; ok is
// false when the thread is not at a breakpoint or no task waits there
// (the caller then fails with ErrNothingToResume). Several tasks held at
// the breakpoint are a *ResumeError matching ErrAmbiguousResume: which of
// them asks first is a race, and a value must reach one Ask.
func breakpointAnswer[S any](thread string, pending []checkpoint.PendingWrite, tasks []*task[S]) (id string, owner *task[S], ok bool, err error) {
	var bp *checkpoint.Breakpoint
	for _, w := range pending {
		if w.TaskID == checkpoint.NullTaskID && w.Channel == checkpoint.ChannelBreakpoint {
			b, derr := checkpoint.DecodeBreakpoint(w.Value)
			if derr != nil {
				return "", nil, false, &checkpoint.CorruptError{Thread: thread, What: "breakpoint marker", Err: derr}
			}
			bp = &b
		}
	}
	if bp == nil {
		return "", nil, false, nil
	}
	var held []*task[S]
	for _, t := range tasks {
		if t.done || t.name == START {
			continue
		}
		if t.failure != nil {
			return "", nil, false, nil // failed, not waiting: nothing to answer
		}
		if bp.When == "before" && !slices.Contains(bp.Nodes, t.name) {
			continue
		}
		held = append(held, t)
	}
	switch len(held) {
	case 0:
		return "", nil, false, nil
	case 1:
		return interrupt.ID(held[0].id, 0), held[0], true, nil
	}
	return "", nil, false, &ResumeError{Thread: thread, Kind: ErrAmbiguousResume}
}
