package otelobserve_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/checkpoint/sqlite"
	"github.com/lockstepgo/lockstep/examples/hotelbooking/booking"
	"github.com/lockstepgo/lockstep/observe/otelobserve"
)

// process is one traced process: its exporter, reader and hook.
type process struct {
	exp    *tracetest.InMemoryExporter
	tp     *sdktrace.TracerProvider
	reader *sdkmetric.ManualReader
	mp     *sdkmetric.MeterProvider
	hook   *otelobserve.Hook
}

func newProcess(t *testing.T, pending otelobserve.PendingCounter) *process {
	t.Helper()
	return newProcessWith(t, otelobserve.Options{Pending: pending})
}

// newProcessWith is newProcess with opts, its providers set.
func newProcessWith(t *testing.T, opts otelobserve.Options) *process {
	t.Helper()
	p := &process{exp: tracetest.NewInMemoryExporter(), reader: sdkmetric.NewManualReader()}
	p.tp = sdktrace.NewTracerProvider(sdktrace.WithSyncer(p.exp))
	p.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(p.reader))
	opts.TracerProvider, opts.MeterProvider = p.tp, p.mp
	h, err := otelobserve.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	p.hook = h
	t.Cleanup(func() {
		_ = h.Close()
		_ = p.tp.Shutdown(context.Background())
		_ = p.mp.Shutdown(context.Background())
	})
	return p
}

// attr returns the value of key on sp, as a string.
func attr(sp tracetest.SpanStub, key attribute.Key) string {
	for _, kv := range sp.Attributes {
		if kv.Key == key {
			return kv.Value.Emit()
		}
	}
	return ""
}

// tree draws the spans under root as an outline: "name outcome
// [event decision]..." (a saver event: "[event operation outcome]"),
// children in start order.
func tree(spans tracetest.SpanStubs, root tracetest.SpanStub) string {
	kids := map[trace.SpanID][]tracetest.SpanStub{}
	for _, sp := range spans {
		kids[sp.Parent.SpanID()] = append(kids[sp.Parent.SpanID()], sp)
	}
	var b strings.Builder
	var walk func(sp tracetest.SpanStub, depth int)
	walk = func(sp tracetest.SpanStub, depth int) {
		fmt.Fprintf(&b, "%s%s %s", strings.Repeat("  ", depth), sp.Name, attr(sp, "lockstep.outcome"))
		if sp.Status.Code == codes.Error {
			b.WriteString(" ERROR")
		}
		for _, ev := range sp.Events {
			d := ""
			for _, kv := range ev.Attributes {
				switch {
				case kv.Key == "lockstep.decision":
					d = " " + kv.Value.AsString()
				case ev.Name == otelobserve.EventSaver && kv.Key == "lockstep.saver.operation":
					d = " " + kv.Value.AsString() + d
				case ev.Name == otelobserve.EventSaver && kv.Key == "lockstep.outcome":
					d += " " + kv.Value.AsString()
				}
			}
			fmt.Fprintf(&b, " [%s%s]", ev.Name, d)
		}
		b.WriteString("\n")
		ks := kids[sp.SpanContext.SpanID()]
		slices.SortStableFunc(ks, func(x, y tracetest.SpanStub) int { return x.StartTime.Compare(y.StartTime) })
		for _, k := range ks {
			walk(k, depth+1)
		}
	}
	walk(root, 0)
	return b.String()
}

// runSpans returns the run spans of thread, in start order.
func runSpans(spans tracetest.SpanStubs, thread string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, sp := range spans {
		if sp.Name == otelobserve.SpanRun && attr(sp, "lockstep.thread") == thread {
			out = append(out, sp)
		}
	}
	slices.SortStableFunc(out, func(x, y tracetest.SpanStub) int { return x.StartTime.Compare(y.StartTime) })
	return out
}

// TestHotelBookingTraced traces the hotel-booking demo in two processes
// (each its own SDK providers): the first runs both stories, and the
// booking above the limit waits for the travel desk; a reviewer approves
// it; the second process's approval worker resumes it. The span trees
// are asserted by name, parentage and outcome, and the resume links to
// the span that raised the request in the first process. Saver calls
// are events of the span they happen under, or spans of their own with
// Options.SaverSpans.
func TestHotelBookingTraced(t *testing.T) {
	for _, tc := range []struct {
		name       string
		saverSpans bool
		want       string // the span tree of the waiting run
	}{
		{"saver=events", false, `lockstep.run waiting [lockstep.saver get done]
  lockstep.step done [lockstep.saver put done]
    lockstep.task __start__ done
  lockstep.step done [lockstep.saver put done]
    lockstep.task compliance done
  lockstep.step done [lockstep.saver put done]
    lockstep.task model done
      chat done
  lockstep.step done [lockstep.saver put done]
    lockstep.task tools done [lockstep.saver put_writes done]
      execute_tool quote_hotel executed [lockstep.decision allowed] [lockstep.decision executed]
  lockstep.step done [lockstep.saver put done]
    lockstep.task model done
      chat done
  lockstep.step waiting [lockstep.saver put_writes done]
    lockstep.task tools waiting [lockstep.saver put_writes done] [lockstep.approval.raised]
      execute_tool book_hotel blocked [lockstep.decision blocked]
`},
		{"saver=spans", true, `lockstep.run waiting
  lockstep.saver get done
  lockstep.step done
    lockstep.task __start__ done
    lockstep.saver put done
  lockstep.step done
    lockstep.task compliance done
    lockstep.saver put done
  lockstep.step done
    lockstep.task model done
      chat done
    lockstep.saver put done
  lockstep.step done
    lockstep.task tools done
      execute_tool quote_hotel executed [lockstep.decision allowed] [lockstep.decision executed]
      lockstep.saver put_writes done
    lockstep.saver put done
  lockstep.step done
    lockstep.task model done
      chat done
    lockstep.saver put done
  lockstep.step waiting
    lockstep.task tools waiting [lockstep.approval.raised]
      execute_tool book_hotel blocked [lockstep.decision blocked]
      lockstep.saver put_writes done
    lockstep.saver put_writes done
`},
	} {
		t.Run(tc.name, func(t *testing.T) { testHotelBookingTraced(t, tc.saverSpans, tc.want) })
	}
}

func testHotelBookingTraced(t *testing.T, saverSpans bool, want string) {
	ctx := context.Background()
	db := filepath.Join(t.TempDir(), "lockstep.db")

	// Process 1: both stories. The inbox counts pending requests for the
	// gauge.
	saver, err := sqlite.Open(db, sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer saver.Close()
	store, err := approval.OpenSQLStore(ctx, saver.DB(), nil)
	if err != nil {
		t.Fatal(err)
	}
	inbox := approval.NewInbox(saver, store)
	p1 := newProcessWith(t, otelobserve.Options{Pending: inbox, SaverSpans: saverSpans})
	if _, err := booking.Run(ctx, booking.Config{DB: db, Observer: p1.hook}); err != nil {
		t.Fatal(err)
	}
	spans := p1.exp.GetSpans()
	runs := runSpans(spans, booking.ThreadApproval)
	if len(runs) != 1 {
		t.Fatalf("%d runs of %s, want 1", len(runs), booking.ThreadApproval)
	}
	run := runs[0]
	if run.Status.Code != codes.Unset || attr(run, "lockstep.outcome") != "waiting" || attr(run, "lockstep.run.mode") != "input" {
		t.Errorf("the waiting run: status %v, outcome %q, mode %q; want a waiting run that is not an error",
			run.Status, attr(run, "lockstep.outcome"), attr(run, "lockstep.run.mode"))
	}
	// The booking above the limit: the gate allows the quote, which runs
	// (its outcome saved at once, inside the task); the booking is
	// blocked by the gate and the tool node raises the request; the
	// task, its step and the run wait.
	if diff := cmp.Diff(want, tree(spans, run)); diff != "" {
		t.Errorf("span tree of %s (-want +got):\n%s", booking.ThreadApproval, diff)
	}
	var raiser tracetest.SpanStub
	for _, sp := range spans {
		if sp.Name == "lockstep.task tools" && attr(sp, "lockstep.outcome") == "waiting" && sp.SpanContext.TraceID() == run.SpanContext.TraceID() {
			raiser = sp
		}
	}
	// The compliance story: held (a NodeInterrupt: waiting, not an
	// error), then continued after the reviewer's UpdateState.
	comp := runSpans(spans, booking.ThreadCompliance)
	if len(comp) != 2 || attr(comp[0], "lockstep.outcome") != "waiting" || comp[0].Status.Code != codes.Unset ||
		attr(comp[1], "lockstep.run.mode") != "continue" || attr(comp[1], "lockstep.outcome") != "done" {
		for _, r := range comp {
			t.Logf("%s", tree(spans, r))
		}
		t.Errorf("compliance runs: want a waiting input run, then a continue that is done")
	}

	// The metrics of process 1: the pending gauge sees the request; the
	// tool calls and decisions are counted.
	m := collect(t, p1.reader)
	if got := gauge(m, "lockstep.approval.pending", "lockstep.tool", "book_hotel"); got != 1 {
		t.Errorf("approvals pending for book_hotel: %d, want 1", got)
	}
	if got := sum(m, "lockstep.tool.decisions", map[string]string{"lockstep.tool": "book_hotel", "lockstep.decision": "blocked"}); got != 1 {
		t.Errorf("book_hotel blocked decisions: %d, want 1", got)
	}
	if got := sum(m, "lockstep.tool.calls", map[string]string{"lockstep.tool": "quote_hotel", "lockstep.outcome": "executed"}); got != 2 {
		t.Errorf("quote_hotel calls executed: %d, want 2 (one per story)", got)
	}
	if n := histCount(m, "lockstep.step.duration"); n == 0 {
		t.Errorf("no step durations recorded")
	}
	if n := histCount(m, "lockstep.task.duration"); n == 0 {
		t.Errorf("no task durations recorded")
	}

	// The reviewer approves, in process 1: the decision is a span linked
	// to the request, and the time to decision is recorded.
	page, err := inbox.List(ctx, approval.Filter{})
	if err != nil || len(page.Items) != 1 {
		t.Fatalf("inbox: %+v, %v", page, err)
	}
	if _, err := inbox.WithObserver(p1.hook).Approve(ctx, page.Items[0].ID, "travel-desk", ""); err != nil {
		t.Fatal(err)
	}
	m = collect(t, p1.reader)
	if n := histCount(m, "lockstep.approval.decision_time"); n != 1 {
		t.Errorf("%d decision times recorded, want 1", n)
	}
	if got := gauge(m, "lockstep.approval.pending", "lockstep.tool", "book_hotel"); got != 0 {
		t.Errorf("approvals pending for book_hotel after the decision: %d, want 0", got)
	}

	// Process 2: the approval worker resumes the thread. Its resume span
	// and the run it starts link to the task that raised the request.
	p2 := newProcessWith(t, otelobserve.Options{SaverSpans: saverSpans})
	c, err := booking.Run(ctx, booking.Config{DB: db, Resume: true, Observer: p2.hook})
	if err != nil || c.Resumed != 1 {
		t.Fatalf("resume: %+v, %v", c, err)
	}
	spans2 := p2.exp.GetSpans()
	var resume tracetest.SpanStub
	for _, sp := range spans2 {
		if sp.Name == otelobserve.SpanApprovalResume {
			resume = sp
		}
	}
	if attr(resume, "lockstep.outcome") != "resumed" {
		t.Fatalf("approval resume span: %+v", resume)
	}
	runs2 := runSpans(spans2, booking.ThreadApproval)
	if len(runs2) != 1 || runs2[0].Parent.SpanID() != resume.SpanContext.SpanID() || attr(runs2[0], "lockstep.run.mode") != "resume" || attr(runs2[0], "lockstep.outcome") != "done" {
		t.Fatalf("resumed runs %+v, want one done resume under the worker's span", runs2)
	}
	for _, sp := range []tracetest.SpanStub{resume, runs2[0]} {
		if len(sp.Links) != 1 || !sp.Links[0].SpanContext.Equal(raiser.SpanContext.WithRemote(true)) {
			t.Errorf("%s links %+v, want one to the raising task %v", sp.Name, sp.Links, raiser.SpanContext)
		}
	}
	if !strings.Contains(tree(spans2, runs2[0]), "execute_tool book_hotel executed [lockstep.decision approved] [lockstep.decision executed]") {
		t.Errorf("the resumed run does not book once, approved:\n%s", tree(spans2, runs2[0]))
	}
}

func collect(t *testing.T, r *sdkmetric.ManualReader) metricdata.ResourceMetrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	return rm
}

func find(rm metricdata.ResourceMetrics, name string) (metricdata.Metrics, bool) {
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == name {
				return m, true
			}
		}
	}
	return metricdata.Metrics{}, false
}

func matches(set attribute.Set, want map[string]string) bool {
	for k, v := range want {
		got, ok := set.Value(attribute.Key(k))
		if !ok || got.Emit() != v {
			return false
		}
	}
	return true
}

// sum is the counter name's value for the attributes want.
func sum(rm metricdata.ResourceMetrics, name string, want map[string]string) int64 {
	m, _ := find(rm, name)
	s, _ := m.Data.(metricdata.Sum[int64])
	var n int64
	for _, dp := range s.DataPoints {
		if matches(dp.Attributes, want) {
			n += dp.Value
		}
	}
	return n
}

// gauge is the gauge name's value where key is value.
func gauge(rm metricdata.ResourceMetrics, name, key, value string) int64 {
	m, _ := find(rm, name)
	g, _ := m.Data.(metricdata.Gauge[int64])
	var n int64
	for _, dp := range g.DataPoints {
		if matches(dp.Attributes, map[string]string{key: value}) {
			n += dp.Value
		}
	}
	return n
}

// histCount is how many values the histogram name recorded.
func histCount(rm metricdata.ResourceMetrics, name string) uint64 {
	m, _ := find(rm, name)
	h, _ := m.Data.(metricdata.Histogram[float64])
	var n uint64
	for _, dp := range h.DataPoints {
		n += dp.Count
	}
	return n
}

func attributeKey(k string) attribute.Key { return attribute.Key(k) }
