package nodes

import (
	"context"
	"errors"
	"log/slog"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/internal/hookcall"
	"github.com/lockstepgo/lockstep/internal/safe"
	"github.com/lockstepgo/lockstep/interrupt"
	"github.com/lockstepgo/lockstep/observe"
)

// WithObserver reports every tool call to h as an operation
// (observe.KindTool; a fallback is a call inside the call that failed),
// the executor's decisions inside it as notes (observe.KindDecision: the
// gate's verdict, a memo hit, a ledger replay, a retry with its class and
// delay, a fallback, a failure), and, from the tool nodes built on the
// executor, every approval request they raise (observe.KindApprovalRaised),
// whose TraceParent the request stores. A prebuilt agent (NewAgent)
// reports its model calls to h too (observe.KindModel). A tool body runs
// with its call's context, so what it traces itself nests under the call.
// Events carry tool names and call IDs with the known secrets redacted,
// never arguments or results.
//
// h is application code: a panic in it loses the event and is logged at
// Warn on the executor's logger; a call still running when the tool
// call's context ends is given up on (counted in Abandoned) and h is not
// called again. Without an observer (the default; a nil h) a call pays a
// nil check per event.
func WithObserver(h observe.Hook) ExecutorOption { return func(e *Executor) { e.observer = h } }

// Observer returns the executor's observer (WithObserver), or nil.
func (e *Executor) Observer() observe.Hook { return e.observer }

// label is s as events carry it: known secrets redacted, cut.
func (e *Executor) label(s string) string { return cutLong(e.red.String(s)) }

// toolEvent is the KindTool event of c.
func (e *Executor) toolEvent(c *Call) observe.Event {
	ev := observe.Event{Kind: observe.KindTool, Thread: c.Scope, Tool: e.label(c.Tool), CallID: e.label(c.ID), FallbackFor: c.FallbackFor}
	return ev
}

// toolEnd is the event that ends c's operation with res and err.
func (e *Executor) toolEnd(c *Call, res Result, err error) observe.Event {
	ev := e.toolEvent(c)
	if err == nil {
		ev.Outcome, ev.Attempt = string(res.Status), res.Attempts
		return ev
	}
	ev.Outcome = toolOutcome(err)
	ev.Error, ev.ErrorType = cutAt(e.red.String(err.Error()), maxErrLog), safe.TypeName(err)
	return ev
}

// toolOutcome is the observe outcome of a call that returned err.
func toolOutcome(err error) string {
	var (
		cr *ConfirmationRequired
		de *DecisionError
	)
	switch {
	case errors.As(err, &cr), errors.Is(err, ErrApprovalMismatch):
		return string(StatusBlocked)
	case errors.As(err, &de):
		if de.Outcome == approval.Expired {
			return string(StatusExpired)
		}
		return string(StatusRejected)
	case interrupt.Is(err):
		return observe.OutcomeWaiting
	}
	return string(StatusFailed)
}

// note tells the observer of a decision with status st about c, with
// the decision's log attributes.
func (e *Executor) note(ctx context.Context, st string, c *Call, attrs []slog.Attr) {
	ev := observe.Event{Kind: observe.KindDecision, Op: st, Thread: c.Scope, Tool: e.label(c.Tool), CallID: e.label(c.ID), FallbackFor: c.FallbackFor}
	for _, a := range attrs {
		switch a.Key {
		case "reason":
			ev.Reason = a.Value.String()
		case "rule":
			ev.Rule = a.Value.String()
		case "risk":
			ev.Risk = a.Value.String()
		case "class":
			ev.Class = a.Value.String()
		case "wait":
			if a.Value.Kind() == slog.KindDuration {
				ev.Delay = a.Value.Duration()
			}
		case "attempt", "attempts":
			if a.Value.Kind() == slog.KindInt64 {
				ev.Attempt = int(a.Value.Int64())
			}
		case "fallback":
			// The fallback runs: it is the tool of the decision, for the
			// tool that failed.
			ev.Tool, ev.FallbackFor = e.label(a.Value.String()), e.label(c.Tool)
		case "error":
			ev.Error = a.Value.String() // redacted and cut (errAttr)
		}
	}
	e.obs.Note(ctx, ev)
}

// noteRaised tells the observer the tool node raised req for call tc,
// under interrupt ID id, inside its task.
func (e *Executor) noteRaised(ctx context.Context, thread, id string, tc ToolCall, req approval.Request) {
	if e.obs == nil {
		return
	}
	kind := req.Kind
	if kind == "" {
		kind = approval.KindGate
	}
	e.obs.Note(ctx, observe.Event{Kind: observe.KindApprovalRaised, Thread: thread, Approval: id, Tool: e.label(req.Tool), CallID: e.label(tc.ID),
		Risk: string(req.Risk), Rule: req.Rule, Reason: string(kind), FallbackFor: req.FallbackFor})
}

// modelCaller returns the caller of the executor's observer for a model
// node, or nil.
func (e *Executor) modelCaller() *hookcall.Caller { return e.obs }
