package otelobserve_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockstepgo/lockstep/observe"
	"github.com/lockstepgo/lockstep/observe/otelobserve"
)

// dropSpans is a span processor that drops what it is given: the SDK's
// span work without a batcher's hand-off.
type dropSpans struct{}

func (dropSpans) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (dropSpans) OnEnd(sdktrace.ReadOnlySpan)                     {}
func (dropSpans) Shutdown(context.Context) error                  { return nil }
func (dropSpans) ForceFlush(context.Context) error                { return nil }

// tracerProvider is a provider sampling every span, its spans batched to
// an exporter that drops them (batch) or dropped as they end.
func tracerProvider(tb testing.TB, batch bool) *sdktrace.TracerProvider {
	opt := sdktrace.WithSpanProcessor(dropSpans{})
	if batch {
		opt = sdktrace.WithBatcher(discardSpans{})
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), opt)
	tb.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp
}

// hookStep is one step of W1 through h under run: a step span, a task
// span and a saver call, with the events graph sends.
func hookStep(h *otelobserve.Hook, run context.Context) {
	const taskID = "0195d3c2-1111-7000-8000-000000000003"
	step := h.Start(run, observe.Event{Kind: observe.KindStep, Thread: "t", Run: "r", Step: 3, Tasks: 1})
	task := h.Start(step, observe.Event{Kind: observe.KindTask, Thread: "t", Run: "r", Step: 3, Node: "n3", TaskID: taskID})
	h.End(task, observe.Event{Kind: observe.KindTask, Thread: "t", Run: "r", Step: 3, Node: "n3", TaskID: taskID, Attempt: 1, Outcome: observe.OutcomeDone})
	sv := h.Start(step, observe.Event{Kind: observe.KindSaver, Thread: "t", Run: "r", Step: 3, Op: observe.OpPut, Bytes: 120})
	h.End(sv, observe.Event{Kind: observe.KindSaver, Thread: "t", Run: "r", Step: 3, Op: observe.OpPut, Outcome: observe.OutcomeDone})
	h.End(step, observe.Event{Kind: observe.KindStep, Thread: "t", Run: "r", Step: 3, Tasks: 1, Outcome: observe.OutcomeDone})
}

// sdkStep is hookStep's floor: the same spans, attributes and event made
// by calling the SDK directly, as instrumentation usually does.
func sdkStep(tr trace.Tracer, run context.Context) {
	step, ssp := tr.Start(run, otelobserve.SpanStep, trace.WithAttributes(attribute.String("lockstep.thread", "t"), attribute.Int("lockstep.step", 3), attribute.Int("lockstep.step.tasks", 1)))
	_, tsp := tr.Start(step, "lockstep.task n3", trace.WithAttributes(attribute.String("lockstep.node", "n3"), attribute.String("lockstep.task.id", "0195d3c2-1111-7000-8000-000000000003"), attribute.Int("lockstep.step", 3)))
	tsp.SetAttributes(attribute.String("lockstep.outcome", "done"), attribute.Int("lockstep.attempts", 1))
	tsp.End()
	ssp.AddEvent(otelobserve.EventSaver, trace.WithAttributes(attribute.String("lockstep.saver.operation", "put"), attribute.String("lockstep.outcome", "done"),
		attribute.Float64("lockstep.saver.duration_ms", 1.5), attribute.Int("lockstep.saver.bytes", 120)))
	ssp.SetAttributes(attribute.String("lockstep.outcome", "done"))
	ssp.End()
}

// TestHookAllocsPerStep: a step of W1 through the hook (its spans held by
// the run and handed on when 256 are held) allocates no more than making
// the same spans by calling the SDK directly. Allocations are exact; the
// figures are logged.
func TestHookAllocsPerStep(t *testing.T) {
	tp := tracerProvider(t, false)
	h, err := otelobserve.New(otelobserve.Options{TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	run := h.Start(context.Background(), observe.Event{Kind: observe.KindRun, Thread: "t", Run: "r", Mode: observe.ModeInput})
	defer h.End(run, observe.Event{Kind: observe.KindRun, Outcome: observe.OutcomeDone})
	hook := testing.AllocsPerRun(512, func() { hookStep(h, run) })
	tr := tp.Tracer("floor")
	frun, fsp := tr.Start(context.Background(), otelobserve.SpanRun)
	defer fsp.End()
	floor := testing.AllocsPerRun(512, func() { sdkStep(tr, frun) })
	t.Logf("allocations a step: hook %.2f, the SDK called directly %.2f", hook, floor)
	if hook > floor {
		t.Errorf("a step through the hook allocates %.2f times, more than the SDK called directly (%.2f)", hook, floor)
	}
}

// BenchmarkHookSpans: what the hook and the SDK cost a step of W1 (a
// step span, a task span and a saver call), under a run span, spans
// batched to an exporter that drops them; allocs/op is the figure to
// watch. sdk is its floor: the same spans made by calling the SDK
// directly.
func BenchmarkHookSpans(b *testing.B) {
	tp := tracerProvider(b, true)
	for _, c := range []struct {
		name string
		mp   metric.MeterProvider
	}{{"hook", nil}, {"hook+metrics", sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))}} {
		b.Run(c.name, func(b *testing.B) { hookSpans(b, tp, c.mp) })
	}
	b.Run("sdk", func(b *testing.B) {
		tr := tp.Tracer("floor")
		run, sp := tr.Start(context.Background(), otelobserve.SpanRun)
		b.ReportAllocs()
		for b.Loop() {
			sdkStep(tr, run)
		}
		sp.End()
	})
}

// hookSpans is BenchmarkHookSpans through the hook, with metrics when mp
// is not nil.
func hookSpans(b *testing.B, tp trace.TracerProvider, mp metric.MeterProvider) {
	h, err := otelobserve.New(otelobserve.Options{TracerProvider: tp, MeterProvider: mp})
	if err != nil {
		b.Fatal(err)
	}
	run := h.Start(context.Background(), observe.Event{Kind: observe.KindRun, Thread: "t", Run: "r", Mode: observe.ModeInput})
	b.ReportAllocs()
	for b.Loop() {
		hookStep(h, run)
	}
	h.End(run, observe.Event{Kind: observe.KindRun, Outcome: observe.OutcomeDone})
}
