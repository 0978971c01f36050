//go:build unix

package lockstep_test

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/observe"
)

// BenchmarkW1TraceCPU measures what tracing costs W1 on
// saver=sqlite-normal in CPU time, which a loaded machine disturbs less
// than wall time: each iteration is a round of w1CPURuns runs without
// tracing and w1CPURuns with it (trace=on's tracer), interleaved in one
// process and their order alternating, each side timed by getrusage
// (the process's user and system time: the batch span processor's
// goroutine and the collector included). It reports the medians over
// the rounds of the CPU time and wall time of a run, each side, and
// their ratios (cpu-on/off, wall-on/off).
//
//	go test -run '^$' -bench W1TraceCPU -benchtime 15x .
func BenchmarkW1TraceCPU(b *testing.B) {
	const w1CPURuns = 60
	sv := sqliteSavers()[0]
	compile := func(h observe.Hook) *graph.Runnable[w1State] {
		opts := []graph.Option{graph.WithSaver(sv.open(b))}
		if h != nil {
			opts = append(opts, graph.WithObserver(h))
		}
		r, err := w1Graph().Compile(opts...)
		if err != nil {
			b.Fatal(err)
		}
		return r
	}
	off, on := compile(nil), compile(benchTracer(b))
	ctx := context.Background()
	input := graph.Set(w1State{Count: 0}, "Count")
	n := 0
	// side runs w1CPURuns runs on r and returns their CPU and wall time
	// per run, in microseconds.
	side := func(r *graph.Runnable[w1State]) (cpu, wall float64) {
		c0, t0 := cpuTime(b), time.Now()
		for range w1CPURuns {
			res, err := r.Invoke(ctx, fmt.Sprintf("w1cpu-%d", n), input)
			if err != nil || res.Values.Count != w1Nodes {
				b.Fatalf("run %d: %v (count %d)", n, err, res.Values.Count)
			}
			n++
		}
		c1, t1 := cpuTime(b), time.Now()
		return float64((c1 - c0).Microseconds()) / w1CPURuns, float64(t1.Sub(t0).Microseconds()) / w1CPURuns
	}
	var cpuOff, cpuOn, wallOff, wallOn []float64
	round := 0
	for b.Loop() {
		var co, wo, cn, wn float64
		if round%2 == 0 {
			co, wo = side(off)
			cn, wn = side(on)
		} else {
			cn, wn = side(on)
			co, wo = side(off)
		}
		cpuOff, wallOff = append(cpuOff, co), append(wallOff, wo)
		cpuOn, wallOn = append(cpuOn, cn), append(wallOn, wn)
		round++
	}
	mo, mn := median(cpuOff), median(cpuOn)
	b.ReportMetric(mo, "cpu-us/run-off")
	b.ReportMetric(mn, "cpu-us/run-on")
	b.ReportMetric(mn/mo, "cpu-on/off")
	b.ReportMetric(median(wallOff), "wall-us/run-off")
	b.ReportMetric(median(wallOn), "wall-us/run-on")
	b.ReportMetric(median(wallOn)/median(wallOff), "wall-on/off")
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
