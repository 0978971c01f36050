package lockstep_test

// The fixed benchmarks. Their names are stable so figures can be compared
// over time and with the LangGraph JS peer; docs/benchmarks.md has the
// latest figures, the commands that reproduce them and what the peer is.
//
//	go test -run '^$' -bench . -benchtime 2000x .

import (
	"context"
	"fmt"
	"slices"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/checkpoint/sqlite"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/observe"
	"github.com/lockstepgo/lockstep/observe/otelobserve"
)

// w1State is W1's state: a counter and a log of 16-byte entries.
type w1State struct {
	Count int
	Log   []string `lockstep:"append"`
}

const w1Nodes = 10

func w1Graph() *graph.Graph[w1State] {
	g := graph.New[w1State]()
	prev := graph.START
	for i := 1; i <= w1Nodes; i++ {
		name := fmt.Sprintf("n%d", i)
		g.AddNode(name, func(ctx context.Context, s w1State) (graph.Update[w1State], error) {
			return graph.Set(w1State{Count: s.Count + 1, Log: []string{"0123456789abcdef"}}, "Count", "Log"), nil
		})
		g.AddEdge(prev, name)
		prev = name
	}
	return g.AddEdge(prev, graph.END)
}

// benchSavers are the savers a benchmark runs on; the SQLite ones are added
// by sqliteSavers (bench_sqlite_test.go).
type benchSaver struct {
	name string
	open func(b *testing.B) checkpoint.Saver // nil means no saver
	sync sqlite.Synchronous                  // a SQLite saver's setting, "" for the others
}

func baseSavers() []benchSaver {
	return []benchSaver{
		{"none", nil, ""},
		{"memory", func(b *testing.B) checkpoint.Saver { return checkpoint.NewMemorySaver(nil) }, ""},
	}
}

// BenchmarkW1Linear: a 10-node chain, one fresh thread per run; us/step is
// per node step (the run's input and __start__ steps included in the time,
// as the peer's figure does), cpu-us/step the process's CPU time (user and
// system, every goroutine) per node step, which a busy machine disturbs
// less, and on the SQLite savers txn/step the write transactions a run
// commits per node step (counted on separate runs: see w1TxnPerStep). On saver=sqlite-normal it runs without and
// with tracing (trace=off, trace=on: observe/otelobserve over the SDK's
// tracer provider, every span sampled and batched to an exporter that
// discards them): the hook's overhead, which should stay within 10%.
func BenchmarkW1Linear(b *testing.B) {
	for _, sv := range append(append(baseSavers(), sqliteSavers()...), postgresSavers()...) {
		b.Run("saver="+sv.name, func(b *testing.B) {
			if sv.name != "sqlite-normal" {
				w1Linear(b, sv, nil)
				return
			}
			b.Run("trace=off", func(b *testing.B) { w1Linear(b, sv, nil) })
			b.Run("trace=on", func(b *testing.B) { w1Linear(b, sv, benchTracer(b)) })
			// The other durability modes (trace off): async commits a
			// step's checkpoint while the next step runs, exit only the
			// run's last checkpoint (with its input).
			for _, d := range []graph.DurabilityMode{graph.DurabilityAsync, graph.DurabilityExit} {
				b.Run("durability="+string(d), func(b *testing.B) { w1Linear(b, sv, nil, graph.WithDurability(d)) })
			}
		})
	}
}

// w1Linear runs W1 on sv, observed by h when it is not nil, compiled with
// extra.
func w1Linear(b *testing.B, sv benchSaver, h observe.Hook, extra ...graph.Option) {
	opts := slices.Clone(extra)
	if sv.open != nil {
		opts = append(opts, graph.WithSaver(sv.open(b)))
	}
	if h != nil {
		opts = append(opts, graph.WithObserver(h))
	}
	r, err := w1Graph().Compile(opts...)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	input := graph.Set(w1State{Count: 0}, "Count")
	n := 0
	b.ReportAllocs()
	cpu0, cpuOK := processCPU()
	for b.Loop() {
		res, err := r.Invoke(ctx, fmt.Sprintf("w1-%d", n), input)
		if err != nil || res.Values.Count != w1Nodes {
			b.Fatalf("run %d: %v (count %d)", n, err, res.Values.Count)
		}
		n++
	}
	cpu1, _ := processCPU()
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(n*w1Nodes), "us/step")
	if cpuOK {
		b.ReportMetric(float64((cpu1-cpu0).Nanoseconds())/1e3/float64(n*w1Nodes), "cpu-us/step")
	}
	if sv.sync != "" {
		b.ReportMetric(w1TxnPerStep(b, sv.sync, extra...), "txn/step")
	}
}

// discardSpans is a span exporter that drops what it is given.
type discardSpans struct{}

func (discardSpans) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardSpans) Shutdown(context.Context) error                             { return nil }

// benchTracer is the tracing of trace=on: the SDK's tracer provider,
// sampling every span, batching them to an exporter that discards them
// (shut down when the benchmark ends).
func benchTracer(b *testing.B) observe.Hook {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithBatcher(discardSpans{}))
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	h, err := otelobserve.New(otelobserve.Options{TracerProvider: tp})
	if err != nil {
		b.Fatal(err)
	}
	return h
}

// w4State is W4's state: items appended by the parallel nodes.
type w4State struct {
	Items []string `lockstep:"append"`
}

// BenchmarkW4Fanout: src fans out to 8 parallel nodes joined by a waiting
// edge; us/run per fresh thread.
func BenchmarkW4Fanout(b *testing.B) {
	const width = 8
	build := func() *graph.Graph[w4State] {
		g := graph.New[w4State]()
		item := func(name string) graph.NodeFunc[w4State] {
			return func(ctx context.Context, s w4State) (graph.Update[w4State], error) {
				return graph.Set(w4State{Items: []string{name}}, "Items"), nil
			}
		}
		g.AddNode("src", item("src")).AddEdge(graph.START, "src")
		var sources []string
		for i := 1; i <= width; i++ {
			name := fmt.Sprintf("p%d", i)
			g.AddNode(name, item(name)).AddEdge("src", name)
			sources = append(sources, name)
		}
		return g.AddNode("join", item("join")).AddJoin(sources, "join").AddEdge("join", graph.END)
	}
	for _, sv := range append(baseSavers()[1:], sqliteSavers()...) {
		b.Run("saver="+sv.name, func(b *testing.B) {
			r, err := build().Compile(graph.WithSaver(sv.open(b)))
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			n := 0
			b.ReportAllocs()
			for b.Loop() {
				res, err := r.Invoke(ctx, fmt.Sprintf("w4-%d", n), graph.Update[w4State]{})
				if err != nil || len(res.Values.Items) != width+2 {
					b.Fatalf("run %d: %v (%d items)", n, err, len(res.Values.Items))
				}
				n++
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(n), "us/run")
		})
	}
}
