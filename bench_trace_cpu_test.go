//go:build unix

package lockstep_test

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/observe"
	"github.com/lockstepgo/lockstep/observe/otelobserve"
)

// BenchmarkW1TraceCPU measures what tracing costs W1 on
// saver=sqlite-normal in CPU time, which a loaded machine disturbs less
// than wall time. Each iteration is a round of w1CPURuns runs on each of
// three Runnables, interleaved in one process, the order rotating from
// round to round: off (no observer), on (trace=on's tracer: spans
// batched to an exporter that drops them) and sdk (the same hook and
// SDK, with a span processor that drops every span as it ends: what
// making the spans costs, without the batch processor's hand-off). Each
// side is timed by getrusage (the process's user and system time, the
// batch processor's goroutine and the collector included). It reports
// the medians over the rounds of a run's CPU time on each side and
// their ratios to off (cpu-on/off, cpu-sdk/off), and of its wall time
// (wall-on/off).
//
//	go test -run '^$' -bench W1TraceCPU -benchtime 15x .
func BenchmarkW1TraceCPU(b *testing.B) {
	const w1CPURuns = 40
	sv := sqliteSavers()[0]
	sides := []struct {
		name string
		h    observe.Hook
	}{{"off", nil}, {"on", benchTracer(b)}, {"sdk", droppingTracer(b)}}
	rs := make([]*graph.Runnable[w1State], len(sides))
	for i, sd := range sides {
		opts := []graph.Option{graph.WithSaver(sv.open(b))}
		if sd.h != nil {
			opts = append(opts, graph.WithObserver(sd.h))
		}
		r, err := w1Graph().Compile(opts...)
		if err != nil {
			b.Fatal(err)
		}
		rs[i] = r
	}
	ctx := context.Background()
	input := graph.Set(w1State{Count: 0}, "Count")
	cpu, wall := make([][]float64, len(sides)), make([][]float64, len(sides))
	n, round := 0, 0
	for b.Loop() {
		for k := range sides {
			i := (k + round) % len(sides)
			c0, t0 := cpuTime(b), time.Now()
			for range w1CPURuns {
				res, err := rs[i].Invoke(ctx, fmt.Sprintf("w1cpu-%d", n), input)
				if err != nil || res.Values.Count != w1Nodes {
					b.Fatalf("run %d: %v (count %d)", n, err, res.Values.Count)
				}
				n++
			}
			c1, t1 := cpuTime(b), time.Now()
			cpu[i] = append(cpu[i], float64((c1-c0).Microseconds())/w1CPURuns)
			wall[i] = append(wall[i], float64(t1.Sub(t0).Microseconds())/w1CPURuns)
		}
		round++
	}
	off := median(cpu[0])
	for i, sd := range sides {
		b.ReportMetric(median(cpu[i]), "cpu-us/run-"+sd.name)
		if i > 0 {
			b.ReportMetric(median(cpu[i])/off, "cpu-"+sd.name+"/off")
		}
	}
	b.ReportMetric(median(wall[1])/median(wall[0]), "wall-on/off")
}

// droppingTracer is benchTracer with a span processor that drops every
// span as it ends, in place of the batch processor.
func droppingTracer(b *testing.B) observe.Hook {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithSpanProcessor(dropSpans{}))
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	h, err := otelobserve.New(otelobserve.Options{TracerProvider: tp})
	if err != nil {
		b.Fatal(err)
	}
	return h
}

// dropSpans is a span processor that does nothing.
type dropSpans struct{}

func (dropSpans) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (dropSpans) OnEnd(sdktrace.ReadOnlySpan)                     {}
func (dropSpans) Shutdown(context.Context) error                  { return nil }
func (dropSpans) ForceFlush(context.Context) error                { return nil }

// cpuTime is the process's user and system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
