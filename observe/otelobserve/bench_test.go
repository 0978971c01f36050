package otelobserve_test

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/lockstepgo/lockstep/observe"
	"github.com/lockstepgo/lockstep/observe/otelobserve"
)

// discardSpans is a span exporter that drops what it is given.
type discardSpans struct{}

func (discardSpans) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardSpans) Shutdown(context.Context) error                             { return nil }

// BenchmarkHookSpans: what the hook and the SDK cost a step of W1 (a
// step span, a task span and a saver call), under a run span, spans
// batched to an exporter that drops them; allocs/op is the figure to
// watch.
func BenchmarkHookSpans(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithBatcher(discardSpans{}))
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	h, err := otelobserve.New(otelobserve.Options{TracerProvider: tp})
	if err != nil {
		b.Fatal(err)
	}
	run := h.Start(context.Background(), observe.Event{Kind: observe.KindRun, Thread: "t", Run: "r", Mode: observe.ModeInput})
	b.ReportAllocs()
	for b.Loop() {
		step := h.Start(run, observe.Event{Kind: observe.KindStep, Thread: "t", Run: "r", Step: 3, Tasks: 1})
		task := h.Start(step, observe.Event{Kind: observe.KindTask, Thread: "t", Run: "r", Step: 3, Node: "n3", TaskID: "0195d3c2-1111-7000-8000-000000000003"})
		h.End(task, observe.Event{Kind: observe.KindTask, Thread: "t", Run: "r", Step: 3, Node: "n3", TaskID: "0195d3c2-1111-7000-8000-000000000003", Attempt: 1, Outcome: observe.OutcomeDone})
		sv := h.Start(step, observe.Event{Kind: observe.KindSaver, Thread: "t", Run: "r", Step: 3, Op: observe.OpPut, Bytes: 120})
		h.End(sv, observe.Event{Kind: observe.KindSaver, Thread: "t", Run: "r", Step: 3, Op: observe.OpPut, Outcome: observe.OutcomeDone})
		h.End(step, observe.Event{Kind: observe.KindStep, Thread: "t", Run: "r", Step: 3, Tasks: 1, Outcome: observe.OutcomeDone})
	}
	h.End(run, observe.Event{Kind: observe.KindRun, Outcome: observe.OutcomeDone})
}
