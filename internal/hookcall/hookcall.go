// Package hookcall calls an observe.Hook the way the runtime calls any
// application code: a panic in it is recovered and logged, and a call
// still running when its context ends is given up on (counted, logged),
// after which the hook is not called again. A hook that declares it
// never blocks (observe.Inliner) is called on the caller's goroutine,
// its panics still recovered, and is never given up on. graph, nodes and approval
// emit their events through a *Caller; a nil *Caller is the unset hook,
// and its methods cost a nil check and allocate nothing.
package hookcall

import (
	"context"
	"log/slog"
	"runtime/debug"
	"sync/atomic"

	"github.com/lockstepgo/lockstep/internal/safe"
	"github.com/lockstepgo/lockstep/observe"
)

// Caller calls one hook. It is safe for concurrent use.
type Caller struct {
	h   observe.Hook
	ab  *safe.Counter // calls given up on (the owner's abandoned counter)
	log *slog.Logger
	off atomic.Bool // a call was given up on: the hook is not called again
	// inline: the hook declared it never blocks (observe.Inliner); its
	// calls run on the caller's goroutine, whatever their context.
	inline bool
}

// New returns a Caller of h that counts abandoned calls in ab (nil: not
// counted) and logs containment at Warn on log (nil: not logged), or nil
// when h is nil.
func New(h observe.Hook, ab *safe.Counter, log *slog.Logger) *Caller {
	if h == nil {
		return nil
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Caller{h: h, ab: ab, log: log}
	if in, ok := h.(observe.Inliner); ok {
		if p := safe.Call(func() { c.inline = in.Inline() }); p != nil {
			c.inline = false
			log.Warn("the observer's Inline panicked; it is called as a hook that may block", slog.String("panic", p.String()))
		}
	}
	return c
}

// Span is an operation Start began: the context its children run with,
// and whether End must be called.
type Span struct {
	Ctx context.Context
	ok  bool
}

// Open reports whether the span was started (End will tell the hook).
func (s Span) Open() bool { return s.ok }

// Start tells the hook e began under ctx. The span's Ctx is what the
// operation's children run with: ctx itself when c is nil, the hook
// panicked or was given up on.
func (c *Caller) Start(ctx context.Context, e observe.Event) Span {
	if c == nil || c.off.Load() {
		return Span{Ctx: ctx}
	}
	return c.start(ctx, e)
}

// End tells the hook the operation of s ended with e. It does nothing for
// a span that was not started.
func (c *Caller) End(s Span, e observe.Event) {
	if c == nil || !s.ok || c.off.Load() {
		return
	}
	c.end(s.Ctx, e)
}

// Note tells the hook e happened inside the operation ctx carries.
func (c *Caller) Note(ctx context.Context, e observe.Event) {
	if c == nil || c.off.Load() {
		return
	}
	c.note(ctx, e)
}

// TraceParent asks the hook for the traceparent of the operation ctx
// carries; "" when c is nil, or the hook failed or returned a value that
// is not a traceparent (observe.ValidTraceParent).
func (c *Caller) TraceParent(ctx context.Context) string {
	if c == nil || c.off.Load() {
		return ""
	}
	tp := c.traceParent(ctx)
	if !observe.ValidTraceParent(tp) {
		return ""
	}
	return tp
}

func (c *Caller) start(ctx context.Context, e observe.Event) Span {
	var (
		out context.Context
		ok  bool
	)
	if c.direct(ctx) {
		var p *safe.Panic
		out, p = startDirect(c.h, ctx, e)
		ok = c.outcome(ctx, "Start", e.Kind, p, nil)
	} else {
		out, ok = c.startBounded(ctx, e)
	}
	if !ok {
		return Span{Ctx: ctx}
	}
	if out == nil {
		out = ctx
	}
	return Span{Ctx: out, ok: true}
}

func (c *Caller) end(ctx context.Context, e observe.Event) {
	if c.direct(ctx) {
		c.outcome(ctx, "End", e.Kind, endDirect(c.h, ctx, e), nil)
		return
	}
	c.endBounded(ctx, e)
}

func (c *Caller) note(ctx context.Context, e observe.Event) {
	if c.direct(ctx) {
		c.outcome(ctx, "Note", e.Kind, noteDirect(c.h, ctx, e), nil)
		return
	}
	c.noteBounded(ctx, e)
}

// startBounded, endBounded and noteBounded call the hook bounded by ctx
// (call); their closures take the event to the heap, which the direct
// calls above avoid.
func (c *Caller) startBounded(ctx context.Context, e observe.Event) (context.Context, bool) {
	return call(c, ctx, "Start", e.Kind, func() context.Context { return c.h.Start(ctx, e) })
}

func (c *Caller) endBounded(ctx context.Context, e observe.Event) {
	call(c, ctx, "End", e.Kind, func() struct{} { c.h.End(ctx, e); return struct{}{} })
}

func (c *Caller) noteBounded(ctx context.Context, e observe.Event) {
	call(c, ctx, "Note", e.Kind, func() struct{} { c.h.Note(ctx, e); return struct{}{} })
}

func (c *Caller) traceParent(ctx context.Context) string {
	tp, _ := call(c, ctx, "TraceParent", 0, func() string { return c.h.TraceParent(ctx) })
	return tp
}

// direct reports whether a call under ctx runs on the caller's
// goroutine: the hook never blocks, or ctx cannot end.
func (c *Caller) direct(ctx context.Context) bool { return c.inline || ctx.Done() == nil }

// startDirect, endDirect and noteDirect call the hook on the caller's
// goroutine, recovering its panic. They take the event by value and
// build no closure, so that an event (a few hundred bytes) is not moved
// to the heap for every call, as a closure that safe.Bound may hand to
// another goroutine must.
func startDirect(h observe.Hook, ctx context.Context, e observe.Event) (out context.Context, p *safe.Panic) {
	defer recovered(&p)
	return h.Start(ctx, e), nil
}

func endDirect(h observe.Hook, ctx context.Context, e observe.Event) (p *safe.Panic) {
	defer recovered(&p)
	h.End(ctx, e)
	return nil
}

func noteDirect(h observe.Hook, ctx context.Context, e observe.Event) (p *safe.Panic) {
	defer recovered(&p)
	h.Note(ctx, e)
	return nil
}

// recovered, deferred, turns a panic into *p, as safe.Call does.
func recovered(p **safe.Panic) {
	if r := recover(); r != nil {
		*p = &safe.Panic{Value: r, Stack: debug.Stack()}
	}
}

// call runs fn, a method of the hook, contained: inline when ctx cannot
// end or the hook never blocks (recovering its panic), else bounded by
// ctx (safe.Bound). ok is false when it panicked or was given up on.
func call[T any](c *Caller, ctx context.Context, method string, k observe.Kind, fn func() T) (T, bool) {
	var (
		v   T
		p   *safe.Panic
		err error
	)
	if c.direct(ctx) {
		p = safe.Call(func() { v = fn() })
	} else {
		v, p, err = safe.Bound(ctx, c.ab, "the observer's "+method, fn)
	}
	return v, c.outcome(ctx, method, k, p, err)
}

// outcome logs a call that panicked (p) or was given up on (err, after
// which the hook is not called again), and reports whether it returned.
func (c *Caller) outcome(ctx context.Context, method string, k observe.Kind, p *safe.Panic, err error) bool {
	switch {
	case p != nil:
		c.log.LogAttrs(ctx, slog.LevelWarn, "the observer panicked; the event is lost", slog.String("method", method),
			slog.String("kind", k.String()), slog.String("panic", p.String()))
		return false
	case err != nil:
		if c.off.CompareAndSwap(false, true) {
			c.log.LogAttrs(ctx, slog.LevelWarn, "the observer did not return before the context ended; it is not called again",
				slog.String("method", method), slog.String("kind", k.String()), slog.String("error", err.Error()))
		}
		return false
	}
	return true
}

// Off reports whether the hook was given up on (tests).
func (c *Caller) Off() bool { return c != nil && c.off.Load() }
