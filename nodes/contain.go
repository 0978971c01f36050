package nodes

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/internal/safe"
)

// This file is where the executor and the tool node call application
// code: tool bodies' errors, Reconcile and NaturalKey functions, the gate
// policy, the secret provider, the memo store, the reviewer-context
// function, the outcome recorder and a retry policy's Rand. Each call
// goes through package internal/safe: a panic becomes a typed error of
// the call (a *PanicError naming the tool and what panicked), and a call
// that blocks is given up on when the call's context ends (see
// Executor.Abandoned).

// bodyError is an error that a tool's own code returned (its body, its
// Reconcile function), read once, on the goroutine that ran the code and
// under recover: its text, its retry class, its largest Retry-After and
// whether it is indeterminate. errors.Is and errors.As see the tool's
// error through it; a panic in the tool error's Is or As method reads as
// no match.
type bodyError struct {
	err    *safe.Error
	class  Class
	after  time.Duration
	unsure bool
}

// Error returns the tool error's text, as read when it was returned.
func (e *bodyError) Error() string { return e.err.Error() }

// Is reports whether the tool's error matches target (false when its Is
// method panics).
func (e *bodyError) Is(target error) bool { return e.err.Is(target) }

// As finds the first error in the tool error's tree that matches target
// (false when its As method panics).
func (e *bodyError) As(target any) bool { return e.err.As(target) }

// RetryClass implements Classifier: the class of the tool's error.
func (e *bodyError) RetryClass() Class { return e.class }

// Indeterminate reports whether the tool's error says that the attempt
// may have taken effect.
func (e *bodyError) Indeterminate() bool { return e.unsure }

// contain reads err, which t's code (what: "body", "Reconcile function")
// returned, once: its text, class, Retry-After and indeterminacy. A pause
// (an interrupt, a *ConfirmationRequired) is returned as it is; any other
// error as a *bodyError. When a method of err panics (its Error method, a
// typed nil's above all, or Unwrap, Is, As, RetryClass, Timeout,
// Indeterminate while it is classified), the call's error is a
// *PanicError naming the tool and the method.
func (e *Executor) contain(t *Tool, what string, err error) error {
	if err == nil {
		return nil
	}
	p, w := safe.Wrap(err)
	if p != nil {
		return e.panicked(t, "the Error method of the error its "+what+" returned", p)
	}
	se, _ := w.(*safe.Error)
	if se == nil {
		return w
	}
	be := &bodyError{err: se}
	if p := safe.Call(func() { be.class, be.after, be.unsure = classifyUnsafe(err), retryAfter(err), indeterminate(err) }); p != nil {
		return e.panicked(t, "a method of the error its "+what+" returned", p)
	}
	if be.class == ClassPause {
		return err // a question or a confirmation: handed on unchanged
	}
	return be
}

// panicked is the *PanicError of a panic p in t's code (in says where, ""
// for the body itself), with its value and stack redacted.
func (e *Executor) panicked(t *Tool, in string, p *safe.Panic) *PanicError {
	return e.panickedIn(t.name, in, p)
}

// retryWait is the wait after t's failed-th failed attempt. A policy with
// a Rand reads the application's reader, under ctx: a panic is a
// *PanicError of the tool, a read still running when ctx ends is given up
// on (an error wrapping ctx's).
func (e *Executor) retryWait(ctx context.Context, t *Tool, failed int) (time.Duration, error) {
	p := t.retry
	if p.Rand == nil {
		return p.Wait(failed), nil
	}
	d, pn, err := safe.Bound(ctx, &e.aband, fmt.Sprintf("the Rand reader of tool %q's retry policy", t.name), func() time.Duration { return p.Wait(failed) })
	switch {
	case pn != nil:
		return 0, e.panicked(t, "the Rand reader of its retry policy", pn)
	case err != nil:
		return 0, fmt.Errorf("nodes: tool %q: %w", t.name, err)
	}
	return d, nil
}

// naturalKeyOf runs t's NaturalKey function on args, under ctx. It
// returns an *ArgsError when the arguments do not decode or the key is
// empty, a *ToolError around a *PanicError when the function (or the
// arguments' decoding) panics, and an error wrapping ctx's when the
// function is still running when ctx ends (it is given up on).
func (e *Executor) naturalKeyOf(ctx context.Context, t *Tool, args []byte) (string, error) {
	type result struct {
		nk  string
		err error
	}
	r, p, err := safe.Bound(ctx, &e.aband, fmt.Sprintf("the NaturalKey function of tool %q", t.name), func() result {
		nk, err := t.naturalKey(args)
		if err != nil {
			// The arguments did not decode: an UnmarshalJSON method of
			// the argument type may have made the error; read it here.
			var p *safe.Panic
			if p, err = safe.Wrap(err); p != nil {
				panic(p.Value)
			}
		}
		return result{nk, err}
	})
	switch {
	case p != nil:
		pe := e.panicked(t, "its NaturalKey function", p)
		return "", &ToolError{Tool: t.name, Class: ClassPermanent, Err: pe, msg: pe.Error()}
	case err != nil:
		return "", fmt.Errorf("nodes: tool %q: %w", t.name, err)
	case r.err != nil || r.nk == "":
		return "", &ArgsError{Tool: t.name, Path: "$", Reason: "the tool's natural idempotency key is empty", Err: r.err}
	}
	return r.nk, nil
}

// reconcileCall runs t's Reconcile function once under t's timeout, like
// an attempt of the body: a panic is a *PanicError, a function still
// running when the timeout fires is given up on (a *TimeoutError), and
// its error is read once (see contain).
func (e *Executor) reconcileCall(ctx context.Context, t *Tool, args []byte, env Env) (json.RawMessage, bool, error) {
	rctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	type result struct {
		out   json.RawMessage
		found bool
		err   error
	}
	r, p, err := safe.Bound(rctx, &e.aband, fmt.Sprintf("the Reconcile function of tool %q", t.name), func() result {
		out, found, err := t.reconcile(e.bodyContext(rctx), args, env)
		return result{out, found, e.contain(t, "Reconcile function", err)}
	})
	switch {
	case p != nil:
		return nil, false, e.panicked(t, "its Reconcile function", p)
	case err != nil && ctx.Err() == nil:
		return nil, false, &TimeoutError{Tool: t.name, After: t.timeout, Attempt: 1}
	case err != nil:
		return nil, false, err
	}
	if r.err == nil && r.found {
		// A late context error after the answer is not the answer's.
		return r.out, true, nil
	}
	return r.out, r.found, r.err
}

// secret asks the secret provider for name under ctx. The provider's
// error text is never read (it may quote the value); a panic (whose value
// may quote it too) and a call still running when ctx ends are errors
// that say only that.
func (e *Executor) secret(ctx context.Context, name string) (string, error) {
	type result struct {
		v   string
		err error
	}
	r, p, err := safe.Bound(ctx, &e.aband, "the secret provider", func() result {
		v, err := e.secrets.Secret(ctx, name)
		return result{v, err}
	})
	switch {
	case p != nil:
		return "", errProviderPanicked
	case err != nil:
		return "", err
	}
	return r.v, r.err
}

var errProviderPanicked = fmt.Errorf("the secret provider panicked")

// verdict asks the policy about a call of t with args, under ctx. A
// policy that panics denies (rule "policy_panic"); one still running when
// ctx ends is given up on, and the call fails with an error wrapping
// ctx's.
func (e *Executor) verdict(ctx context.Context, t *Tool, args []byte) (Verdict, error) {
	v, p, err := safe.Bound(ctx, &e.aband, fmt.Sprintf("the gate policy, for tool %q", t.name), func() Verdict {
		return e.policy.Gate(t.info, args)
	})
	switch {
	case err != nil:
		return Verdict{}, fmt.Errorf("nodes: tool %q: %w", t.name, err)
	case p != nil:
		e.log.LogAttrs(ctx, slog.LevelWarn, logMessage, slog.String("status", string(StatusBlocked)), slog.String("tool", t.name),
			slog.String("reason", "the gate policy panicked; the call needs a human"), slog.String("panic", cutAt(e.red.String(p.String()), maxErrLog)))
		return Verdict{Need: true, Rule: "policy_panic", Risk: t.risk}, nil
	}
	return v, nil
}

// memoGet reads the memo; a store that panics reads as a miss.
func (e *Executor) memoGet(ctx context.Context, m MemoStore, key string) (entry MemoEntry, ok bool) {
	if p := safe.Call(func() { entry, ok = m.Get(key) }); p != nil {
		e.memoPanic(ctx, "get", p)
		return MemoEntry{}, false
	}
	return entry, ok
}

// memoPut writes the memo; a store that panics keeps nothing.
func (e *Executor) memoPut(ctx context.Context, m MemoStore, key string, entry MemoEntry) {
	if p := safe.Call(func() { m.Put(key, entry) }); p != nil {
		e.memoPanic(ctx, "put", p)
	}
}

func (e *Executor) memoPanic(ctx context.Context, op string, p *safe.Panic) {
	e.log.LogAttrs(ctx, slog.LevelWarn, "memo store panicked; the read runs without it", slog.String("op", op),
		slog.String("panic", cutAt(e.red.String(p.String()), maxErrLog)))
}

// reviewContext runs the tool node's reviewer-context function for call
// tc of tool under ctx: a panic is a *PanicError, its error is read once,
// and a function still running when ctx ends is given up on (an error
// wrapping ctx's).
func (n *toolNode) reviewContext(ctx context.Context, tool string, tc ToolCall, msgs []Message) (json.RawMessage, error) {
	type result struct {
		rc  json.RawMessage
		err error
	}
	r, p, err := safe.Bound(ctx, &n.ex.aband, "the reviewer-context function (WithReviewContext)", func() result {
		rc, err := n.review(ctx, tc, msgs)
		if err != nil {
			var p *safe.Panic
			if p, err = safe.Wrap(err); p != nil {
				return result{err: n.ex.panickedIn(tool, "the Error method of the error the reviewer-context function returned", p)}
			}
		}
		return result{rc, err}
	})
	switch {
	case p != nil:
		return nil, n.ex.panickedIn(tool, "the reviewer-context function (WithReviewContext)", p)
	case err != nil:
		return nil, err
	}
	return r.rc, r.err
}

// recordOutcome reports ran to the outcome recorder under ctx: a panic
// is a *PanicError, the recorder's error is read once, and a recorder
// still running when ctx ends is given up on (an error wrapping ctx's).
func (n *toolNode) recordOutcome(ctx context.Context, tool, id string, ran approval.Execution) error {
	err, p, aerr := safe.Bound(ctx, &n.ex.aband, "the outcome recorder (WithOutcomeRecorder)", func() error {
		err := n.recorder.RecordOutcome(ctx, id, ran)
		if err != nil {
			var p *safe.Panic
			if p, err = safe.Wrap(err); p != nil {
				return n.ex.panickedIn(tool, "the Error method of the outcome recorder's error", p)
			}
		}
		return err
	})
	switch {
	case p != nil:
		return n.ex.panickedIn(tool, "the outcome recorder (WithOutcomeRecorder)", p)
	case aerr != nil:
		return aerr
	}
	return err
}

// readRecorded reads approval id's record from the outcome recorder (an
// approval store) under ctx, like recordOutcome: a panic is a
// *PanicError, its error is read once, a read still running when ctx
// ends is given up on.
func (n *toolNode) readRecorded(ctx context.Context, rr decisionReader, tool, id string) (approval.Record, error) {
	type result struct {
		rec approval.Record
		err error
	}
	r, p, aerr := safe.Bound(ctx, &n.ex.aband, "the outcome recorder's Get (WithOutcomeRecorder)", func() result {
		rec, err := rr.Get(ctx, id)
		if err != nil {
			var p *safe.Panic
			if p, err = safe.Wrap(err); p != nil {
				return result{err: n.ex.panickedIn(tool, "the Error method of the outcome recorder's error", p)}
			}
		}
		return result{rec, err}
	})
	switch {
	case p != nil:
		return approval.Record{}, n.ex.panickedIn(tool, "the outcome recorder's Get (WithOutcomeRecorder)", p)
	case aerr != nil:
		return approval.Record{}, aerr
	}
	return r.rec, r.err
}

// panickedIn is panicked for a tool known by name.
func (e *Executor) panickedIn(tool, in string, p *safe.Panic) *PanicError {
	return &PanicError{Tool: tool, In: in, Value: e.red.String(p.String()), Stack: e.red.Bytes(p.Stack)}
}

// callPanic is the error of a call of the tool node whose goroutine
// panicked outside the executor's own containment (a MemoStore, a
// logger's handler, a bug): the call fails with it and the node with the
// call, instead of the process.
func (n *toolNode) callPanic(tc ToolCall, p *safe.Panic) error {
	return fmt.Errorf("nodes: tool node: call %s of %q: %w", quote(tc.ID), tc.Name, n.ex.panickedIn(tc.Name, "the tool node, running the call", p))
}
