package otelobserve

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/observe"
)

// ScopeName is the instrumentation scope of the adapter's tracer and
// meter.
const ScopeName = "github.com/lockstepgo/lockstep/observe/otelobserve"

// ErrInvalidOptions is matched by New's errors.
var ErrInvalidOptions = errors.New("otelobserve: invalid options")

// PendingCounter counts pending approval requests by tool and risk tier:
// *approval.Inbox does (CountPending).
type PendingCounter interface {
	CountPending(ctx context.Context, limit int) ([]approval.PendingGroup, bool, error)
}

// Options configures New. The zero value records nothing: give it a
// TracerProvider for spans and a MeterProvider for metrics.
type Options struct {
	// TracerProvider makes the spans (nil: no spans). The adapter never
	// reads OpenTelemetry's global providers.
	TracerProvider trace.TracerProvider
	// MeterProvider makes the metrics (nil: no metrics).
	MeterProvider metric.MeterProvider
	// Pending, if set, is read at every metric collection for the
	// lockstep.approval.pending gauge (by tool and risk tier), at most
	// PendingLimit requests each time (0: approval.DefaultCountLimit).
	// An error it returns is returned to the reader (the gauge is not
	// observed for that collection).
	Pending      PendingCounter
	PendingLimit int
	// Now is the clock of the duration histograms (nil: time.Now).
	Now func() time.Time
	// Inline declares that the providers never block: spans go to
	// batching span processors (sdktrace.WithBatcher, which drops spans
	// rather than wait when its queue is full), metrics to the SDK's
	// readers, Now returns at once. The runtime then calls the Hook on
	// the caller's goroutine (observe.Inliner) instead of on a goroutine
	// of its own per event, which saves most of what tracing costs a run
	// beyond the SDK's own work. Leave it false with a processor that
	// exports as a span ends (sdktrace.WithSyncer) or an exporter that
	// may wait: a call that blocks would then hold the run past its
	// deadline, where without Inline it is given up on.
	Inline bool
	// SaverSpans makes every saver call a span of its own ("lockstep.saver
	// OP", a child of the step, run or task it happens under) instead of
	// an event of that span (EventSaver), the default. A span per call
	// shows the call's duration on a timeline; it costs a span's start,
	// end and export per call (a run of ten steps makes twelve).
	SaverSpans bool
	// SpanDelay bounds how long an ended span of a run's steps, tasks,
	// tool and model calls waits before it is handed to the span
	// processors (0: DefaultSpanDelay; negative: none waits). A run
	// holds those spans, each stamped with its own end time, and hands
	// them on together when it ends, when SpanDelay has passed since the
	// first of them ended, or when 256 are held: a batching processor
	// (sdktrace.WithBatcher) then wakes its goroutine about once a run
	// rather than once a span, which costs a traced run more CPU than
	// making its spans (see the package doc, Cost). A process that dies
	// loses what its runs hold, as it loses what its batching processor
	// queued; a provider's ForceFlush does not reach them.
	SpanDelay time.Duration
}

// DefaultSpanDelay is Options.SpanDelay's default.
const DefaultSpanDelay = time.Second

// Hook is an observe.Hook that turns lockstep's events into
// OpenTelemetry spans and metrics (see the package doc). It is safe for
// concurrent use.
type Hook struct {
	tracer  trace.Tracer
	inline  bool          // Options.Inline
	saverSp bool          // Options.SaverSpans
	delay   time.Duration // Options.SpanDelay, its default applied
	traced  bool          // a TracerProvider was given
	// internal and client are the span kinds' start options, boxed once.
	internal, client trace.SpanStartOption
	// taskNames holds "lockstep.task NODE" by node, made once a node.
	taskNames sync.Map
	// stepRec and taskRec hold the record options of the step and task
	// duration histograms, by outcome (stepRec) and by node and outcome
	// (taskRec, keyed by a [2]string): each an attribute set made, and
	// its option boxed, once.
	stepRec, taskRec sync.Map
	// bufs holds *optBufs, reused across spans and events.
	bufs    sync.Pool
	metered bool // a MeterProvider was given
	now     func() time.Time

	stepDur, taskDur, decisionTime, tokens, modelDur metric.Float64Histogram
	toolCalls, decisions, retries, conflicts         metric.Int64Counter
	reg                                              metric.Registration
}

var _ observe.Inliner = (*Hook)(nil)

// Inline reports Options.Inline: whether the runtime may call the Hook
// on the caller's goroutine (observe.Inliner).
func (h *Hook) Inline() bool { return h.inline }

// New returns a Hook over opts' providers. It fails, with an error
// matching ErrInvalidOptions, when PendingLimit is negative, and with the
// MeterProvider's error when an instrument cannot be made.
func New(opts Options) (*Hook, error) {
	if opts.PendingLimit < 0 {
		return nil, errorf("PendingLimit %d is negative", opts.PendingLimit)
	}
	h := &Hook{now: opts.Now, inline: opts.Inline, saverSp: opts.SaverSpans, delay: opts.SpanDelay}
	if h.delay == 0 {
		h.delay = DefaultSpanDelay
	}
	if h.now == nil {
		h.now = time.Now
	}
	tp := opts.TracerProvider
	h.traced = tp != nil
	if tp == nil {
		tp = tracenoop.NewTracerProvider()
	}
	h.tracer = tp.Tracer(ScopeName)
	h.internal, h.client = trace.WithSpanKind(trace.SpanKindInternal), trace.WithSpanKind(trace.SpanKindClient)
	mp := opts.MeterProvider
	h.metered = mp != nil
	if mp == nil {
		mp = metricnoop.NewMeterProvider()
	}
	m := mp.Meter(ScopeName)
	var errs []error
	hist := func(name, unit, desc string, bounds ...float64) metric.Float64Histogram {
		o := []metric.Float64HistogramOption{metric.WithUnit(unit), metric.WithDescription(desc)}
		if len(bounds) > 0 {
			o = append(o, metric.WithExplicitBucketBoundaries(bounds...))
		}
		x, err := m.Float64Histogram(name, o...)
		errs = append(errs, err)
		return x
	}
	count := func(name, unit, desc string) metric.Int64Counter {
		x, err := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return x
	}
	secs := []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}
	h.stepDur = hist("lockstep.step.duration", "s", "Duration of a superstep, its checkpoint included.", secs...)
	h.taskDur = hist("lockstep.task.duration", "s", "Duration of a task: one node's execution in a step, its retries included.", secs...)
	h.decisionTime = hist("lockstep.approval.decision_time", "s", "Time from an approval request to its decision.",
		1, 10, 60, 300, 900, 3600, 4*3600, 24*3600, 7*24*3600)
	h.tokens = hist("gen_ai.client.token.usage", "{token}", "Tokens a model call used, as its client reported them.",
		1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304)
	h.modelDur = hist("gen_ai.client.operation.duration", "s", "Duration of a model call.", secs...)
	h.toolCalls = count("lockstep.tool.calls", "{call}", "Tool calls through the executor, by tool and outcome.")
	h.decisions = count("lockstep.tool.decisions", "{decision}", "The executor's decisions, by tool and decision.")
	h.retries = count("lockstep.retries", "{retry}", "Retries of tool calls and nodes, by class.")
	h.conflicts = count("lockstep.lease.conflicts", "{conflict}", "Saver calls refused because another runner holds the thread.")
	if opts.Pending != nil {
		g, err := m.Int64ObservableGauge("lockstep.approval.pending", metric.WithUnit("{request}"),
			metric.WithDescription("Approval requests waiting for a decision, by tool and risk tier."))
		errs = append(errs, err)
		if err == nil {
			limit := opts.PendingLimit
			h.reg, err = m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
				groups, _, err := opts.Pending.CountPending(ctx, limit)
				if err != nil {
					return err
				}
				for _, gr := range groups {
					o.ObserveInt64(g, int64(gr.Count), metric.WithAttributes(keyTool.String(gr.Tool), keyRisk.String(string(gr.Risk))))
				}
				return nil
			}, g)
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return h, nil
}

// Close unregisters the pending gauge's callback (the MeterProvider's
// shutdown does too). It returns the MeterProvider's error.
func (h *Hook) Close() error {
	if h.reg == nil {
		return nil
	}
	return h.reg.Unregister()
}

func errorf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidOptions}, args...)...)
}

// The attribute keys the adapter sets besides the semantic conventions'.
const (
	keyThread      = attribute.Key("lockstep.thread")
	keyRun         = attribute.Key("lockstep.run.id")
	keyMode        = attribute.Key("lockstep.run.mode")
	keyNS          = attribute.Key("lockstep.namespace")
	keyStep        = attribute.Key("lockstep.step")
	keyTasks       = attribute.Key("lockstep.step.tasks")
	keyNode        = attribute.Key("lockstep.node")
	keyTaskID      = attribute.Key("lockstep.task.id")
	keyAttempts    = attribute.Key("lockstep.attempts")
	keyOutcome     = attribute.Key("lockstep.outcome")
	keyOp          = attribute.Key("lockstep.saver.operation")
	keyBytes       = attribute.Key("lockstep.saver.bytes")
	keySaverDur    = attribute.Key("lockstep.saver.duration_ms")
	keyTool        = attribute.Key("lockstep.tool")
	keyFallbackFor = attribute.Key("lockstep.tool.fallback_for")
	keyDecision    = attribute.Key("lockstep.decision")
	keyReason      = attribute.Key("lockstep.reason")
	keyRule        = attribute.Key("lockstep.approval.rule")
	keyRisk        = attribute.Key("lockstep.approval.risk")
	keyApproval    = attribute.Key("lockstep.approval.id")
	keyClass       = attribute.Key("lockstep.retry.class")
	keyDelay       = attribute.Key("lockstep.retry.delay_ms")
	keyAttempt     = attribute.Key("lockstep.attempt")
	keyHolder      = attribute.Key("lockstep.lease.holder")
	keyInterrupts  = attribute.Key("lockstep.interrupts")
	keyWaited      = attribute.Key("lockstep.approval.waited_ms")
	keyError       = attribute.Key("lockstep.error")
)

// Span names.
const (
	SpanRun            = "lockstep.run"
	SpanStep           = "lockstep.step"
	SpanTask           = "lockstep.task"
	SpanSaver          = "lockstep.saver" // with Options.SaverSpans
	SpanApprovalDecide = "lockstep.approval.decide"
	SpanApprovalResume = "lockstep.approval.resume"
	// Tool calls are "execute_tool {tool}" and model calls "chat
	// {model}", as the GenAI conventions name them.
)

// Event names, of the span events notes become.
const (
	EventDecision       = "lockstep.decision"
	EventRetry          = "lockstep.retry"
	EventApprovalRaised = "lockstep.approval.raised"
	EventLeaseConflict  = "lockstep.lease_conflict"
	// EventSaver is a saver call, an event of the span it happens under
	// (unless Options.SaverSpans).
	EventSaver = "lockstep.saver"
)

// opKey finds an operation's timedCtx.
type opKey struct{}

// timedCtx carries an operation's start time from Start to End (for its
// duration metric).
type timedCtx struct {
	context.Context
	start time.Time
}

// Value returns c for opKey, else what its parent holds.
func (c *timedCtx) Value(key any) any {
	if key == (opKey{}) {
		return c
	}
	return c.Context.Value(key)
}

// saverCtx is the context of a saver call that becomes an event
// (EventSaver): what End needs of its start.
type saverCtx struct {
	context.Context
	start time.Time
	bytes int // what the call writes
}

// optBufs are the attributes and options of a span's start or end, or an
// event. They are reused once the call they are given to returns: the
// API copies the attributes of trace.WithAttributes when an
// implementation reads the options (trace.NewSpanStartConfig,
// trace.NewEventConfig), the SDK reads them during the call, and its
// spans copy what SetAttributes is given (sdkSpan).
type optBufs struct {
	attrs [maxAttrs]attribute.KeyValue
	// with[n] is trace.WithAttributes(attrs[:n]...), boxed once (an
	// option is an interface: boxing a slice allocates).
	with  [maxAttrs + 1]trace.SpanStartEventOption
	opts  [3]trace.SpanStartOption
	event [1]trace.EventOption
}

// maxAttrs is the most attributes a start, an end or an event sets.
const maxAttrs = 10

// getBufs returns buffers from the pool, empty.
func (h *Hook) getBufs() *optBufs {
	if b, ok := h.bufs.Get().(*optBufs); ok {
		return b
	}
	b := new(optBufs)
	for n := range b.with {
		b.with[n] = trace.WithAttributes(b.attrs[:n]...)
	}
	return b
}

// putBufs clears b (it holds no strings of past events) and pools it.
func (h *Hook) putBufs(b *optBufs) {
	b.attrs, b.opts, b.event = [maxAttrs]attribute.KeyValue{}, [3]trace.SpanStartOption{}, [1]trace.EventOption{}
	h.bufs.Put(b)
}

// withAttrs is trace.WithAttributes(attrs...): one of b.with when attrs
// are b.attrs' first.
func (b *optBufs) withAttrs(attrs []attribute.KeyValue) trace.SpanStartEventOption {
	if n := len(attrs); n > 0 && n <= maxAttrs && &attrs[0] == &b.attrs[0] {
		return b.with[n]
	}
	return trace.WithAttributes(attrs...)
}

// sdkSpan reports whether sp is the OpenTelemetry SDK's span, which
// copies what SetAttributes is given (only the SDK's types implement
// sdktrace.ReadOnlySpan).
func sdkSpan(sp trace.Span) bool {
	_, ok := sp.(sdktrace.ReadOnlySpan)
	return ok
}

// Start begins a span for e under the one ctx carries; a saver call
// (unless Options.SaverSpans) only notes its start for End's event.
func (h *Hook) Start(ctx context.Context, e observe.Event) context.Context {
	if e.Kind == observe.KindSaver && !h.saverSp {
		if !h.traced {
			return ctx
		}
		return &saverCtx{Context: ctx, start: h.now(), bytes: e.Bytes}
	}
	if e.Kind < observe.KindRun || e.Kind > observe.KindApprovalResume {
		return ctx
	}
	if h.metered {
		ctx = &timedCtx{Context: ctx, start: h.now()}
	}
	if !h.traced {
		return ctx
	}
	b := h.getBufs()
	defer h.putBufs(b)
	var name string
	attrs := b.attrs[:0]
	kind := h.internal
	switch e.Kind {
	case observe.KindRun:
		name = SpanRun
		attrs = append(attrs, keyThread.String(e.Thread), keyRun.String(e.Run), keyMode.String(e.Mode))
	case observe.KindStep:
		name = SpanStep
	case observe.KindTask:
		name = h.taskName(e.Node)
	case observe.KindSaver:
		name = SpanSaver + " " + e.Op
		attrs = append(attrs, keyOp.String(e.Op))
		if e.Op != observe.OpGet && e.Op != observe.OpClaim && e.Op != observe.OpRelease {
			attrs = append(attrs, keyBytes.Int(e.Bytes))
		}
	case observe.KindTool:
		name = "execute_tool " + e.Tool
		attrs = append(attrs, semconv.GenAIOperationNameExecuteTool, semconv.GenAIToolName(e.Tool), semconv.GenAIToolCallID(e.CallID))
		if e.FallbackFor != "" {
			attrs = append(attrs, keyFallbackFor.String(e.FallbackFor))
		}
	case observe.KindModel:
		name = "chat"
		kind = h.client
		attrs = append(attrs, semconv.GenAIOperationNameChat, keyNode.String(e.Node))
	case observe.KindApprovalDecide, observe.KindApprovalResume:
		name = SpanApprovalDecide
		if e.Kind == observe.KindApprovalResume {
			name = SpanApprovalResume
		}
		attrs = append(attrs, keyApproval.String(e.Approval), keyThread.String(e.Thread), keyTool.String(e.Tool), keyRisk.String(e.Risk))
		if e.Rule != "" {
			attrs = append(attrs, keyRule.String(e.Rule))
		}
	}
	if e.NS != "" && e.Kind != observe.KindStep && e.Kind != observe.KindTask {
		attrs = append(attrs, keyNS.String(e.NS))
	}
	opts := append(b.opts[:0], kind)
	if len(attrs) > 0 {
		opts = append(opts, b.withAttrs(attrs))
	}
	if links := spanLinks(e.Links); len(links) > 0 {
		opts = append(opts, trace.WithLinks(links...))
	}
	ctx, sp := h.tracer.Start(ctx, name, opts...)
	if e.Kind == observe.KindRun && h.delay >= 0 && sp.IsRecording() {
		return &runCtx{Context: ctx, delay: h.delay}
	}
	return ctx
}

// taskName is the span name of node's tasks.
func (h *Hook) taskName(node string) string {
	if n, ok := h.taskNames.Load(node); ok {
		return n.(string)
	}
	n, _ := h.taskNames.LoadOrStore(node, SpanTask+" "+node)
	return n.(string)
}

// runCtx is the context of a run's span. It holds the ends of the spans
// under it (its steps', tasks', tool and model calls'), each stamped with
// its own end time, and hands them to the span processors together: when
// the run ends, when Options.SpanDelay has passed since the first of them
// ended, or when maxHeld are held. A batching processor
// (sdktrace.WithBatcher) wakes its goroutine for every span it is handed
// while that goroutine waits, which costs a traced run more CPU than
// making its spans; a run's spans handed on back to back wake it about
// once.
type runCtx struct {
	context.Context
	delay     time.Duration
	mu        sync.Mutex
	held      []heldEnd
	first     [w1Held]heldEnd // held's first array
	usedFirst bool            // held has had first
	timer     *time.Timer     // hands held spans on after delay; nil until needed
	closed    bool            // the run ended: spans under it end at once
}

// maxHeld is the most spans a run holds before it hands them on; w1Held
// is what a run holds without growing its array (W1's ten steps hold 22).
const (
	maxHeld = 256
	w1Held  = 24
)

// heldEnd is a span that ended, not yet handed on, and the option that
// stamps its end time (an array: a variadic call of an interface's
// method moves a slice literal to the heap).
type heldEnd struct {
	sp  trace.Span
	end [1]trace.SpanEndOption
}

// runKey finds the runCtx of a span's run.
type runKey struct{}

// Value returns c for runKey, else what its parent holds.
func (c *runCtx) Value(key any) any {
	if key == (runKey{}) {
		return c
	}
	return c.Context.Value(key)
}

// hold keeps sp, ended at, to be handed on later; false when the run has
// ended already (sp is the caller's to end).
func (c *runCtx) hold(sp trace.Span, at time.Time) bool {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return false
	}
	if c.held == nil && !c.usedFirst {
		// first once: a flush may still be reading it after that.
		c.held, c.usedFirst = c.first[:0], true
	}
	c.held = append(c.held, heldEnd{sp: sp, end: [1]trace.SpanEndOption{trace.WithTimestamp(at)}})
	var full []heldEnd
	switch {
	case len(c.held) >= maxHeld:
		full, c.held = c.held, nil
	case len(c.held) == 1 && c.delay > 0:
		// The first held: hand it on within delay, if the run is
		// still going by then (a step that waits on a slow tool).
		if c.timer == nil {
			c.timer = time.AfterFunc(c.delay, c.flush)
		} else {
			c.timer.Reset(c.delay)
		}
	}
	c.mu.Unlock()
	endAll(full)
	return true
}

// flush hands on the spans held so far (the timer's).
func (c *runCtx) flush() {
	c.mu.Lock()
	held := c.held
	c.held = nil
	c.mu.Unlock()
	endAll(held)
}

// close hands on the spans held and ends the holding: the run's span
// ends.
func (c *runCtx) close() {
	c.mu.Lock()
	held := c.held
	c.held, c.closed = nil, true
	if c.timer != nil {
		c.timer.Stop()
	}
	c.mu.Unlock()
	endAll(held)
}

// endAll ends the spans of held, each at its own end time.
func endAll(held []heldEnd) {
	for i := range held {
		held[i].sp.End(held[i].end[:]...)
	}
}

// endSpan ends sp, the span of the operation e ended under ctx: a span
// under a run is held by the run (runCtx); a run's span hands on what it
// holds, and is itself held by the run it runs under, if any (a
// subgraph's).
func endSpan(ctx context.Context, sp trace.Span, e observe.Event) {
	if e.Kind == observe.KindRun {
		if rc, ok := ctx.(*runCtx); ok {
			rc.close()
			ctx = rc.Context
		}
	}
	if rc, ok := ctx.Value(runKey{}).(*runCtx); ok && rc.hold(sp, time.Now()) {
		return
	}
	sp.End()
}

// End ends the span ctx carries with e's outcome, and records e's
// metrics; a saver call (unless Options.SaverSpans) is an event of the
// span it happened under.
func (h *Hook) End(ctx context.Context, e observe.Event) {
	if e.Kind == observe.KindSaver && !h.saverSp {
		if sc, ok := ctx.(*saverCtx); ok {
			h.saverEvent(sc, e)
		}
		return
	}
	if h.metered {
		var dur float64
		if tc, ok := ctx.Value(opKey{}).(*timedCtx); ok {
			dur = h.now().Sub(tc.start).Seconds()
		}
		h.measure(ctx, e, dur)
	}
	if !h.traced {
		return
	}
	sp := trace.SpanFromContext(ctx)
	if !sp.IsRecording() {
		endSpan(ctx, sp, e)
		return
	}
	b := h.getBufs()
	defer h.putBufs(b)
	attrs := b.attrs[:0]
	switch e.Kind {
	case observe.KindStep:
		attrs = append(attrs, keyThread.String(e.Thread), keyStep.Int(e.Step), keyTasks.Int(e.Tasks))
	case observe.KindTask:
		attrs = append(attrs, keyNode.String(e.Node), keyTaskID.String(e.TaskID), keyStep.Int(e.Step))
	}
	if e.NS != "" && (e.Kind == observe.KindStep || e.Kind == observe.KindTask) {
		attrs = append(attrs, keyNS.String(e.NS))
	}
	if e.Outcome != "" {
		attrs = append(attrs, keyOutcome.String(e.Outcome))
	}
	switch e.Kind {
	case observe.KindRun:
		attrs = append(attrs, keyStep.Int(e.Step))
		if len(e.Interrupts) > 0 {
			attrs = append(attrs, keyInterrupts.StringSlice(e.Interrupts))
		}
	case observe.KindTask, observe.KindTool:
		if e.Attempt > 0 {
			attrs = append(attrs, keyAttempts.Int(e.Attempt))
		}
	case observe.KindSaver:
		if e.Op == observe.OpGet {
			attrs = append(attrs, keyBytes.Int(e.Bytes))
		}
		if e.Reason != "" {
			attrs = append(attrs, keyReason.String(e.Reason))
		}
	case observe.KindModel:
		if e.Model != "" {
			sp.SetName("chat " + e.Model)
			attrs = append(attrs, semconv.GenAIRequestModel(e.Model))
		}
		if e.Provider != "" {
			attrs = append(attrs, semconv.GenAIProviderNameKey.String(e.Provider))
		}
		if e.Usage {
			attrs = append(attrs, semconv.GenAIUsageInputTokens(e.InputTokens), semconv.GenAIUsageOutputTokens(e.OutputTokens))
		}
	case observe.KindApprovalDecide, observe.KindApprovalResume:
		if e.Waited > 0 {
			attrs = append(attrs, keyWaited.Int64(e.Waited.Milliseconds()))
		}
	}
	fail := failed(e)
	switch {
	case fail && e.ErrorType != "":
		attrs = append(attrs, semconv.ErrorTypeKey.String(e.ErrorType))
	case fail:
		attrs = append(attrs, semconv.ErrorTypeOther)
	case e.Error != "":
		// Cancelled: why, but not an error of the operation.
		attrs = append(attrs, keyError.String(e.Error))
	}
	// Once: each call makes the SDK grow the span's attributes. The
	// SDK's span copies them; another implementation may keep them.
	if sdkSpan(sp) {
		sp.SetAttributes(attrs...)
	} else {
		sp.SetAttributes(slices.Clone(attrs)...)
	}
	if fail {
		sp.AddEvent("exception", trace.WithAttributes(semconv.ExceptionMessage(e.Error), semconv.ExceptionType(e.ErrorType)))
		sp.SetStatus(codes.Error, e.Error)
	}
	endSpan(ctx, sp, e)
}

// saverEvent adds the saver call of sc that ended with e to the span it
// happened under: its operation, bytes (written, or read by a get),
// duration and outcome, and a failure's error type and text.
func (h *Hook) saverEvent(sc *saverCtx, e observe.Event) {
	sp := trace.SpanFromContext(sc.Context)
	if !sp.IsRecording() {
		return
	}
	dur := h.now().Sub(sc.start)
	b := h.getBufs()
	defer h.putBufs(b)
	attrs := b.attrs[:0]
	attrs = append(attrs, keyOp.String(e.Op), keyOutcome.String(e.Outcome), keySaverDur.Float64(float64(dur)/float64(time.Millisecond)))
	switch e.Op {
	case observe.OpGet:
		attrs = append(attrs, keyBytes.Int(e.Bytes))
	case observe.OpClaim, observe.OpRelease:
	default:
		attrs = append(attrs, keyBytes.Int(sc.bytes))
	}
	if e.Reason != "" {
		attrs = append(attrs, keyReason.String(e.Reason))
	}
	if failed(e) {
		attrs = append(attrs, semconv.ErrorTypeKey.String(orOther(e.ErrorType)), keyError.String(e.Error))
	}
	b.event[0] = b.withAttrs(attrs)
	sp.AddEvent(EventSaver, b.event[:]...)
}

// failed reports whether e ends an operation that failed: a waiting run,
// a cancelled one, a blocked or rejected tool call are what they are, not
// errors.
func failed(e observe.Event) bool {
	switch e.Outcome {
	case observe.OutcomeFailed:
		return true
	case "":
		return e.Error != ""
	}
	return false
}

// Note adds e as an event of the span ctx carries, and records its
// metrics.
func (h *Hook) Note(ctx context.Context, e observe.Event) {
	if h.metered {
		h.count(ctx, e)
	}
	var name string
	attrs := make([]attribute.KeyValue, 0, 8)
	switch e.Kind {
	case observe.KindDecision:
		name = EventDecision
		attrs = append(attrs, keyDecision.String(e.Op), semconv.GenAIToolName(e.Tool), semconv.GenAIToolCallID(e.CallID))
	case observe.KindRetry:
		name = EventRetry
		attrs = append(attrs, keyNode.String(e.Node))
	case observe.KindApprovalRaised:
		name = EventApprovalRaised
		attrs = append(attrs, keyApproval.String(e.Approval), keyTool.String(e.Tool), semconv.GenAIToolCallID(e.CallID), keyRisk.String(e.Risk))
	case observe.KindLeaseConflict:
		name = EventLeaseConflict
		attrs = append(attrs, keyOp.String(e.Op), keyThread.String(e.Thread))
		if e.Holder != "" {
			attrs = append(attrs, keyHolder.String(e.Holder))
		}
	default:
		return
	}
	if !h.traced {
		return
	}
	sp := trace.SpanFromContext(ctx)
	if !sp.IsRecording() {
		return
	}
	for _, kv := range []struct {
		k attribute.Key
		v string
	}{{keyReason, e.Reason}, {keyRule, e.Rule}, {keyClass, e.Class}, {keyFallbackFor, e.FallbackFor}, {keyError, e.Error}} {
		if kv.v != "" {
			attrs = append(attrs, kv.k.String(kv.v))
		}
	}
	if e.Kind == observe.KindDecision && e.Risk != "" {
		attrs = append(attrs, keyRisk.String(e.Risk))
	}
	if e.Attempt > 0 {
		attrs = append(attrs, keyAttempt.Int(e.Attempt))
	}
	if e.Delay > 0 {
		attrs = append(attrs, keyDelay.Int64(e.Delay.Milliseconds()))
	}
	sp.AddEvent(name, trace.WithAttributes(attrs...))
}

// count records the metrics of a note.
func (h *Hook) count(ctx context.Context, e observe.Event) {
	switch e.Kind {
	case observe.KindDecision:
		h.decisions.Add(ctx, 1, metric.WithAttributes(keyTool.String(e.Tool), keyDecision.String(e.Op)))
		if e.Op == "retry" {
			h.retries.Add(ctx, 1, metric.WithAttributes(keyClass.String(e.Class), keyTool.String(e.Tool)))
		}
	case observe.KindRetry:
		h.retries.Add(ctx, 1, metric.WithAttributes(keyClass.String(e.Class), keyNode.String(e.Node)))
	case observe.KindLeaseConflict:
		h.conflicts.Add(ctx, 1, metric.WithAttributes(keyOp.String(e.Op)))
	}
}

// measure records the metrics of an operation that ended, dur seconds
// after it began.
func (h *Hook) measure(ctx context.Context, e observe.Event, dur float64) {
	switch e.Kind {
	case observe.KindStep:
		h.stepDur.Record(ctx, dur, recordOption(&h.stepRec, e.Outcome, keyOutcome.String(e.Outcome)))
	case observe.KindTask:
		h.taskDur.Record(ctx, dur, recordOption(&h.taskRec, [2]string{e.Node, e.Outcome}, keyNode.String(e.Node), keyOutcome.String(e.Outcome)))
	case observe.KindTool:
		h.toolCalls.Add(ctx, 1, metric.WithAttributes(keyTool.String(e.Tool), keyOutcome.String(e.Outcome)))
	case observe.KindModel:
		attrs := []attribute.KeyValue{semconv.GenAIOperationNameChat, semconv.GenAIRequestModel(e.Model), semconv.GenAIProviderNameKey.String(e.Provider)}
		if failed(e) {
			attrs = append(attrs, semconv.ErrorTypeKey.String(orOther(e.ErrorType)))
		}
		h.modelDur.Record(ctx, dur, metric.WithAttributes(attrs...))
		if e.Usage {
			base := attrs[:3:3]
			h.tokens.Record(ctx, float64(e.InputTokens), metric.WithAttributes(append(base, semconv.GenAITokenTypeInput)...))
			h.tokens.Record(ctx, float64(e.OutputTokens), metric.WithAttributes(append(base, semconv.GenAITokenTypeOutput)...))
		}
	case observe.KindApprovalDecide:
		if e.Outcome != observe.OutcomeFailed {
			h.decisionTime.Record(ctx, e.Waited.Seconds(), metric.WithAttributes(keyTool.String(e.Tool), keyRisk.String(e.Risk), keyOutcome.String(e.Outcome)))
		}
	}
}

// recordOption returns the record option of attrs, made once for key
// and kept in m.
func recordOption(m *sync.Map, key any, attrs ...attribute.KeyValue) metric.RecordOption {
	if o, ok := m.Load(key); ok {
		return o.(metric.RecordOption)
	}
	o, _ := m.LoadOrStore(key, metric.WithAttributeSet(attribute.NewSet(attrs...)))
	return o.(metric.RecordOption)
}

func orOther(s string) string {
	if s == "" {
		return "_OTHER"
	}
	return s
}

// TraceParent returns the W3C traceparent of the span ctx carries, or ""
// when it carries no valid one.
func (h *Hook) TraceParent(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return ""
	}
	return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-" + sc.TraceFlags().String()
}

// spanLinks parses traceparents into links to remote spans, skipping
// what does not parse (the runtime validated them already).
func spanLinks(tps []string) []trace.Link {
	var links []trace.Link
	for _, tp := range tps {
		if sc, ok := ParseTraceParent(tp); ok {
			links = append(links, trace.Link{SpanContext: sc})
		}
	}
	return links
}

// ParseTraceParent parses a W3C version-00 traceparent into a remote span
// context; ok is false when tp is not one (observe.ValidTraceParent).
func ParseTraceParent(tp string) (sc trace.SpanContext, ok bool) {
	if !observe.ValidTraceParent(tp) {
		return trace.SpanContext{}, false
	}
	parts := strings.Split(tp, "-")
	tid, err1 := trace.TraceIDFromHex(parts[1])
	sid, err2 := trace.SpanIDFromHex(parts[2])
	if err1 != nil || err2 != nil {
		return trace.SpanContext{}, false
	}
	f, err := strconv.ParseUint(parts[3], 16, 8)
	if err != nil {
		return trace.SpanContext{}, false
	}
	sc = trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.TraceFlags(f) & trace.FlagsSampled, Remote: true})
	return sc, sc.IsValid()
}
