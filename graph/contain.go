package graph

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/lockstepgo/lockstep/internal/safe"
	"github.com/lockstepgo/lockstep/interrupt"
	"github.com/lockstepgo/lockstep/retry"
)

// This file is where the runtime calls application code beyond the node
// functions themselves (callNode): routers, reducers (state.go), the JSON
// methods of state values, interrupt values and resume answers, the
// errors nodes return. Each call goes through package internal/safe: a
// panic becomes a *PanicError naming what panicked, and a call that
// blocks is given up on when the run's context ends, so that the run
// returns by its deadline (Runnable.Abandoned counts what was left
// running).

// Abandoned returns how many calls into application code the runnable's
// runs gave up on because they had not returned when the run's context
// ended (their error matches ErrAbandoned): a router or a reducer, a
// MarshalJSON or UnmarshalJSON method of a state value, an interrupt
// value (interrupt.Ask) or a resume answer. Go cannot stop them; they
// run on. It never fails.
func (r *Runnable[S]) Abandoned() int64 { return r.abandoned.Total() }

// AbandonedRunning returns how many of the calls Abandoned counts have not
// returned yet. It never fails.
func (r *Runnable[S]) AbandonedRunning() int64 { return r.abandoned.Running() }

// marshalApp encodes x. When x's type may call application code
// (foreign) and ctx can end, it encodes under ctx: an encoding still
// running when ctx ends is given up on and counted in ab, and the error
// matches ErrAbandoned. A MarshalJSON that panics is an error either way
// (safeMarshal).
func marshalApp(ctx context.Context, ab *safe.Counter, x any, foreign bool, what func() string) ([]byte, error) {
	if !foreign || ctx.Done() == nil {
		return safeMarshal(x)
	}
	type result struct {
		b   []byte
		err error
	}
	r, _, err := safe.Bound(ctx, ab, "the MarshalJSON method of "+what(), func() result {
		b, err := safeMarshal(x)
		return result{b, err}
	})
	if err != nil {
		return nil, err
	}
	return r.b, r.err
}

// marshalValue encodes an interrupt value or a resume answer with
// interrupt.Marshal, under ctx when its type may call application code
// (see marshalApp).
func marshalValue(ctx context.Context, ab *safe.Counter, v any, what string) (json.RawMessage, error) {
	if ctx.Done() == nil || !safe.Foreign(reflect.TypeOf(v)) {
		return interrupt.Marshal(v)
	}
	type result struct {
		b   json.RawMessage
		err error
	}
	r, _, err := safe.Bound(ctx, ab, "the MarshalJSON method of "+what, func() result {
		b, err := interrupt.Marshal(v)
		return result{b, err}
	})
	if err != nil {
		return nil, fmt.Errorf("graph: %w", err)
	}
	return r.b, r.err
}

// containCodecError reads the text of an error encoding/json returned
// (which may hold one a MarshalJSON or UnmarshalJSON method made) once,
// so that errors.Is and errors.As on it never call that method's error
// unprotected (see safe.Wrap).
func containCodecError(err error, method string) error {
	p, w := safe.Wrap(err)
	if p != nil {
		return fmt.Errorf("%s returned an error whose Error method panicked: %s", method, p)
	}
	return w
}

// appFailure reports whether err says that application code failed (it
// panicked, or did not return before the context ended) rather than that
// stored data is bad.
func appFailure(err error) bool {
	var pe *PanicError
	return errors.As(err, &pe) || errors.Is(err, ErrAbandoned)
}

// decodeFailure is the error of stored data of the checkpoint that did
// not decode: a *checkpoint.CorruptError, unless application code failed
// (appFailure): then that error, naming where.
func decodeFailure(thread, cpID, what string, err error, corrupt func(error) error) error {
	if appFailure(err) {
		return fmt.Errorf("graph: thread %q checkpoint %s: %s: %w", thread, cpID, what, err)
	}
	return corrupt(err)
}

// containNodeError reads the error a node (or its router) returned once
// (see safe.Wrap): what the runtime keeps. When its Error method panics,
// the error is a *PanicError of the node naming call.
func containNodeError(node, call string, err error) error {
	p, w := safe.Wrap(err)
	if p != nil {
		return &PanicError{Node: node, Call: call, Value: p.Value, Stack: p.Stack}
	}
	return w
}

// callRouter runs the router (what: "router", "send router") after node
// under ctx: a panic, or a panic in its error's Error method, is a
// *PanicError of the node; a router still running when ctx ends is given
// up on (an error matching ErrAbandoned and ctx's); its error is read
// once.
func callRouter[T any](ctx context.Context, ab *safe.Counter, node, what string, route func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	var zero T
	r, p, err := safe.Bound(ctx, ab, fmt.Sprintf("the %s after node %q", what, node), func() result {
		v, err := route()
		if err != nil {
			err = containNodeError(node, "the Error method of the error its "+what+" returned", err)
		}
		return result{v, err}
	})
	switch {
	case p != nil:
		return zero, &PanicError{Node: node, Call: what, Value: p.Value, Stack: p.Stack}
	case err != nil:
		return zero, fmt.Errorf("graph: %w", err)
	case r.err != nil:
		var pe *PanicError
		if errors.As(r.err, &pe) {
			return zero, r.err
		}
		return zero, fmt.Errorf("graph: %s after node %q: %w", what, node, r.err)
	}
	return r.v, nil
}

// retryOn asks a node's WithRetryOn function whether err is worth another
// attempt, under ctx: a panic is a *PanicError of the node, a function
// still running when ctx ends is given up on.
func (r *Runnable[S]) retryOn(ctx context.Context, node string, fn func(error) bool, err error) (bool, error) {
	again, p, aerr := safe.Bound(ctx, r.abandoned, fmt.Sprintf("the RetryOn function of node %q", node), func() bool { return fn(err) })
	switch {
	case p != nil:
		return false, &PanicError{Node: node, Call: "its RetryOn function", Value: p.Value, Stack: p.Stack}
	case aerr != nil:
		return false, fmt.Errorf("graph: %w", aerr)
	}
	return again, nil
}

// retryWait is the wait after a node's failed-th failed attempt. A policy
// with a Rand reads the application's reader, under ctx: a panic is a
// *PanicError of the node, a read still running when ctx ends is given up
// on.
func (r *Runnable[S]) retryWait(ctx context.Context, node string, p retry.Policy, failed int) (time.Duration, error) {
	if p.Rand == nil {
		return p.Wait(failed), nil
	}
	d, pn, err := safe.Bound(ctx, r.abandoned, fmt.Sprintf("the Rand reader of node %q's retry policy", node), func() time.Duration { return p.Wait(failed) })
	switch {
	case pn != nil:
		return 0, &PanicError{Node: node, Call: "the Rand reader of its retry policy", Value: pn.Value, Stack: pn.Stack}
	case err != nil:
		return 0, fmt.Errorf("graph: %w", err)
	}
	return d, nil
}

// unmarshalApp decodes data into a new T, under ctx when T may call
// application code: a panic in an UnmarshalJSON method is a *PanicError
// naming what, one still running when ctx ends is given up on.
func unmarshalApp[T any](ctx context.Context, ab *safe.Counter, data []byte, what string) (T, error) {
	var zero T
	if !safe.Foreign(reflect.TypeFor[T]()) {
		var v T
		err := json.Unmarshal(data, &v)
		return v, err
	}
	type result struct {
		v   T
		err error
	}
	r, p, err := safe.Bound(ctx, ab, "the UnmarshalJSON method of "+what, func() result {
		var v T
		if err := json.Unmarshal(data, &v); err != nil {
			return result{err: containCodecError(err, "UnmarshalJSON")}
		}
		return result{v: v}
	})
	switch {
	case p != nil:
		return zero, &PanicError{Call: "the UnmarshalJSON method of " + what, Value: p.Value, Stack: p.Stack}
	case err != nil:
		return zero, fmt.Errorf("graph: %w", err)
	}
	return r.v, r.err
}
