package otelobserve_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/nodes"
	"github.com/lockstepgo/lockstep/observe"
	"github.com/lockstepgo/lockstep/observe/otelobserve"
	"github.com/lockstepgo/lockstep/retry"
)

type chat struct {
	Messages []nodes.Message `lockstep:"append"`
	Count    int
}

func chatAccess() nodes.StateAccess[chat] {
	return nodes.StateAccess[chat]{
		Messages: func(s chat) []nodes.Message { return s.Messages },
		Update: func(msgs []nodes.Message, _ map[string]nodes.MemoEntry) graph.Update[chat] {
			return graph.Set(chat{Messages: msgs}, "Messages")
		},
	}
}

// TestModelRetryAndFailure: a model call carries the GenAI attributes
// its client reported; a node's retry is an event of its task and a
// retry of class node; a run that fails is an error span, and so are its
// step and task.
func TestModelRetryAndFailure(t *testing.T) {
	p := newProcess(t, nil)
	model, err := nodes.NewModelNode(nodes.ModelFunc(func(ctx context.Context, _ []nodes.Message, _ []nodes.Definition) (nodes.Message, error) {
		nodes.ReportUsage(ctx, nodes.Usage{Provider: "openai", Model: "gpt-test", Tokens: true, InputTokens: 12, OutputTokens: 7})
		return nodes.Message{Role: nodes.RoleAssistant, Content: "hi"}, nil
	}), nil, chatAccess(), nodes.WithModelObserver(p.hook))
	if err != nil {
		t.Fatal(err)
	}
	var fails atomic.Int32
	fails.Store(1)
	g := graph.New[chat]().
		AddNode("model", model).
		AddNode("flaky", func(ctx context.Context, s chat) (graph.Update[chat], error) {
			if fails.Add(-1) >= 0 {
				return graph.Update[chat]{}, errors.New("flaky")
			}
			return graph.Set(chat{Count: 1}, "Count"), nil
		}, graph.WithRetry(retry.Policy{MaxAttempts: 2})).
		AddNode("broken", func(ctx context.Context, s chat) (graph.Update[chat], error) {
			return graph.Update[chat]{}, errors.New("broken for good")
		}).
		AddEdge(graph.START, "model").AddEdge("model", "flaky").AddEdge("flaky", "broken").AddEdge("broken", graph.END)
	r, err := g.Compile(graph.WithSaver(checkpoint.NewMemorySaver(nil)), graph.WithObserver(p.hook))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Invoke(context.Background(), "t1", graph.Set(chat{Messages: []nodes.Message{{Role: nodes.RoleUser, Content: "hello"}}}, "Messages")); err == nil {
		t.Fatal("Invoke: want broken's error")
	}
	byName := map[string]tracetest.SpanStub{}
	for _, sp := range p.exp.GetSpans() {
		byName[sp.Name] = sp
	}
	m, ok := byName["chat gpt-test"]
	if !ok {
		t.Fatalf("no chat span; spans %v", names(p.exp.GetSpans()))
	}
	for k, want := range map[string]string{
		"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": "gpt-test",
		"gen_ai.usage.input_tokens": "12", "gen_ai.usage.output_tokens": "7", "lockstep.outcome": "done",
	} {
		if got := attr(m, attributeKey(k)); got != want {
			t.Errorf("chat span %s = %q, want %q", k, got, want)
		}
	}
	if task := byName["lockstep.task model"]; m.Parent.SpanID() != task.SpanContext.SpanID() {
		t.Errorf("the chat span is not a child of its task")
	}
	flaky := byName["lockstep.task flaky"]
	if attr(flaky, "lockstep.attempts") != "2" || len(flaky.Events) != 1 || flaky.Events[0].Name != otelobserve.EventRetry || flaky.Status.Code != codes.Unset {
		t.Errorf("flaky task: attempts %q, events %+v, status %v", attr(flaky, "lockstep.attempts"), flaky.Events, flaky.Status)
	}
	for _, name := range []string{"lockstep.task broken", otelobserve.SpanRun} {
		sp := byName[name]
		if sp.Status.Code != codes.Error || attr(sp, "lockstep.outcome") != "failed" || attr(sp, "error.type") == "" {
			t.Errorf("%s: status %v, outcome %q, error.type %q; want a failure", name, sp.Status, attr(sp, "lockstep.outcome"), attr(sp, "error.type"))
		}
	}

	rm := collect(t, p.reader)
	if got := sum(rm, "lockstep.retries", map[string]string{"lockstep.retry.class": "node", "lockstep.node": "flaky"}); got != 1 {
		t.Errorf("node retries of flaky: %d, want 1", got)
	}
	if n := histCount(rm, "gen_ai.client.token.usage"); n != 2 {
		t.Errorf("%d token usage records, want 2 (input and output)", n)
	}
	if n := histCount(rm, "gen_ai.client.operation.duration"); n != 1 {
		t.Errorf("%d model call durations, want 1", n)
	}
}

// TestLeaseConflictCounted: a run refused because another runner holds
// the thread counts a lease conflict and notes it on the span of its
// claim: the run's, where the claim is an event, or the claim's own with
// Options.SaverSpans.
func TestLeaseConflictCounted(t *testing.T) {
	for _, tc := range []struct {
		saverSpans bool
		span       string // the span that carries the conflict
	}{{false, otelobserve.SpanRun}, {true, "lockstep.saver claim"}} {
		t.Run(fmt.Sprintf("SaverSpans=%v", tc.saverSpans), func(t *testing.T) { testLeaseConflictCounted(t, tc.saverSpans, tc.span) })
	}
}

func testLeaseConflictCounted(t *testing.T, saverSpans bool, span string) {
	p := newProcessWith(t, otelobserve.Options{SaverSpans: saverSpans})
	saver := checkpoint.NewMemorySaver(nil)
	entered, release := make(chan struct{}), make(chan struct{})
	g := graph.New[chat]()
	g.AddNode("slow", func(ctx context.Context, s chat) (graph.Update[chat], error) {
		close(entered)
		<-release
		return graph.Set(chat{Count: 1}, "Count"), nil
	}).AddEdge(graph.START, "slow").AddEdge("slow", graph.END)
	holder, err := g.Compile(graph.WithSaver(saver), graph.WithRunner("holder"))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := holder.Invoke(context.Background(), "t", graph.Set(chat{}, "Count"))
		done <- err
	}()
	<-entered
	other, err := g.Compile(graph.WithSaver(saver), graph.WithRunner("other"), graph.WithObserver(p.hook))
	if err != nil {
		t.Fatal(err)
	}
	_, err = other.Continue(context.Background(), "t")
	close(release)
	if herr := <-done; herr != nil {
		t.Fatal(herr)
	}
	if !errors.Is(err, checkpoint.ErrThreadBusy) {
		t.Fatalf("Continue: %v, want ErrThreadBusy", err)
	}
	if got := sum(collect(t, p.reader), "lockstep.lease.conflicts", map[string]string{"lockstep.saver.operation": "claim"}); got != 1 {
		t.Errorf("lease conflicts: %d, want 1", got)
	}
	var noted bool
	for _, sp := range p.exp.GetSpans() {
		for _, ev := range sp.Events {
			noted = noted || (sp.Name == span && ev.Name == otelobserve.EventLeaseConflict)
		}
	}
	if !noted {
		t.Errorf("no lease conflict event on %s: %v", span, names(p.exp.GetSpans()))
	}
}

// TestSaverEvents: by default a saver call is an event of the span it
// happens under, with its operation, outcome, duration and bytes (what
// it writes, or what a get read; none for a claim); a failed call
// carries its error's type and text and leaves the span's status to the
// span's own end.
func TestSaverEvents(t *testing.T) {
	p := newProcessWith(t, otelobserve.Options{Now: fakeClock(time.Unix(1000, 0), 1500*time.Microsecond)})
	ctx := p.hook.Start(context.Background(), observe.Event{Kind: observe.KindStep, Thread: "t", Step: 3, Tasks: 1})
	for _, c := range []struct{ start, end observe.Event }{
		{observe.Event{Kind: observe.KindSaver, Op: observe.OpPut, Bytes: 120}, observe.Event{Kind: observe.KindSaver, Op: observe.OpPut, Outcome: observe.OutcomeDone}},
		{observe.Event{Kind: observe.KindSaver, Op: observe.OpGet}, observe.Event{Kind: observe.KindSaver, Op: observe.OpGet, Bytes: 64, Outcome: observe.OutcomeDone, Reason: "not found"}},
		{observe.Event{Kind: observe.KindSaver, Op: observe.OpClaim}, observe.Event{Kind: observe.KindSaver, Op: observe.OpClaim, Outcome: observe.OutcomeFailed, Error: "thread t is busy", ErrorType: "*checkpoint.BusyError"}},
		{observe.Event{Kind: observe.KindSaver, Op: observe.OpPutWrites, Bytes: 7}, observe.Event{Kind: observe.KindSaver, Op: observe.OpPutWrites, Outcome: observe.OutcomeFailed, Error: "disk full"}},
	} {
		sctx := p.hook.Start(ctx, c.start)
		if p.hook.TraceParent(sctx) != p.hook.TraceParent(ctx) {
			t.Errorf("%s: the saver call made a span", c.start.Op)
		}
		p.hook.End(sctx, c.end)
	}
	p.hook.End(ctx, observe.Event{Kind: observe.KindStep, Outcome: observe.OutcomeDone})
	spans := p.exp.GetSpans()
	if len(spans) != 1 {
		t.Fatalf("spans %v, want the step's alone", names(spans))
	}
	var got []map[string]string
	for _, ev := range spans[0].Events {
		m := map[string]string{"name": ev.Name}
		for _, kv := range ev.Attributes {
			m[string(kv.Key)] = kv.Value.Emit()
		}
		got = append(got, m)
	}
	want := []map[string]string{
		{"name": "lockstep.saver", "lockstep.saver.operation": "put", "lockstep.outcome": "done", "lockstep.saver.duration_ms": "1.5", "lockstep.saver.bytes": "120"},
		{"name": "lockstep.saver", "lockstep.saver.operation": "get", "lockstep.outcome": "done", "lockstep.saver.duration_ms": "1.5", "lockstep.saver.bytes": "64", "lockstep.reason": "not found"},
		{"name": "lockstep.saver", "lockstep.saver.operation": "claim", "lockstep.outcome": "failed", "lockstep.saver.duration_ms": "1.5",
			"error.type": "*checkpoint.BusyError", "lockstep.error": "thread t is busy"},
		{"name": "lockstep.saver", "lockstep.saver.operation": "put_writes", "lockstep.outcome": "failed", "lockstep.saver.duration_ms": "1.5", "lockstep.saver.bytes": "7",
			"error.type": "_OTHER", "lockstep.error": "disk full"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("saver events (-want +got):\n%s", diff)
	}
	if spans[0].Status.Code != codes.Unset {
		t.Errorf("step status %v: a saver call's failure is the step's to report", spans[0].Status)
	}
}

// fakeClock returns a clock that starts at t and advances by step at
// every reading.
func fakeClock(t time.Time, step time.Duration) func() time.Time {
	var mu sync.Mutex
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		now := t
		t = t.Add(step)
		return now
	}
}

func TestTraceParentRoundTrip(t *testing.T) {
	p := newProcess(t, nil)
	ctx := p.hook.Start(context.Background(), observe.Event{Kind: observe.KindRun, Thread: "t"})
	tp := p.hook.TraceParent(ctx)
	if !observe.ValidTraceParent(tp) {
		t.Fatalf("TraceParent %q is not valid", tp)
	}
	sc, ok := otelobserve.ParseTraceParent(tp)
	if !ok || sc.TraceID().String() != tp[3:35] || sc.SpanID().String() != tp[36:52] || !sc.IsSampled() || !sc.IsRemote() {
		t.Errorf("ParseTraceParent(%q) = %v, %v", tp, sc, ok)
	}
	p.hook.End(ctx, observe.Event{Kind: observe.KindRun, Outcome: observe.OutcomeDone})
	if got := p.hook.TraceParent(context.Background()); got != "" {
		t.Errorf("TraceParent without a span = %q", got)
	}
	for _, bad := range []string{"", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7", "00-00000000000000000000000000000000-00f067aa0ba902b7-01"} {
		if _, ok := otelobserve.ParseTraceParent(bad); ok {
			t.Errorf("ParseTraceParent(%q) ok", bad)
		}
	}
	if _, err := otelobserve.New(otelobserve.Options{PendingLimit: -1}); !errors.Is(err, otelobserve.ErrInvalidOptions) {
		t.Errorf("New with a negative PendingLimit: %v", err)
	}
	// Without providers the hook records nothing and costs no span.
	h, err := otelobserve.New(otelobserve.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx = h.Start(context.Background(), observe.Event{Kind: observe.KindRun})
	if h.TraceParent(ctx) != "" {
		t.Errorf("a hook without a TracerProvider made a span")
	}
	h.End(ctx, observe.Event{Kind: observe.KindRun})
}

func names(spans tracetest.SpanStubs) []string {
	var out []string
	for _, sp := range spans {
		out = append(out, sp.Name)
	}
	return out
}

// TestInlineOption: Options.Inline is what the Hook tells the runtime
// (observe.Inliner); off by default, since a provider may block.
func TestInlineOption(t *testing.T) {
	for _, inline := range []bool{false, true} {
		h, err := otelobserve.New(otelobserve.Options{Inline: inline})
		if err != nil {
			t.Fatal(err)
		}
		var in observe.Inliner = h
		if in.Inline() != inline {
			t.Errorf("Options{Inline: %v}: Inline() = %v", inline, in.Inline())
		}
	}
}

// TestSpansEndWithRun: the spans under a run are handed to the span
// processors when the run's span ends, each stamped with its own end
// time; a span that ends after its run (nothing the runtime does) is
// handed on at once, and a subgraph's run is held by the run it runs
// under.
func TestSpansEndWithRun(t *testing.T) {
	p := newProcessWith(t, otelobserve.Options{SpanDelay: time.Hour})
	run := p.hook.Start(context.Background(), observe.Event{Kind: observe.KindRun, Thread: "t", Run: "r"})
	step := p.hook.Start(run, observe.Event{Kind: observe.KindStep, Thread: "t", Step: 1, Tasks: 2})
	a := p.hook.Start(step, observe.Event{Kind: observe.KindTask, Node: "a", TaskID: "ta", Step: 1})
	late := p.hook.Start(step, observe.Event{Kind: observe.KindTask, Node: "late", TaskID: "tl", Step: 1})
	sub := p.hook.Start(a, observe.Event{Kind: observe.KindRun, NS: "a:ta", Thread: "t", Run: "r"})
	p.hook.End(sub, observe.Event{Kind: observe.KindRun, NS: "a:ta", Outcome: observe.OutcomeDone})
	p.hook.End(a, observe.Event{Kind: observe.KindTask, Node: "a", TaskID: "ta", Step: 1, Attempt: 1, Outcome: observe.OutcomeDone})
	aEnded := time.Now()
	time.Sleep(2 * time.Millisecond) // the step ends measurably later than a
	p.hook.End(step, observe.Event{Kind: observe.KindStep, Step: 1, Tasks: 2, Outcome: observe.OutcomeDone})
	if got := names(p.exp.GetSpans()); len(got) != 0 {
		t.Fatalf("spans %v handed on before their run ended", got)
	}
	p.hook.End(run, observe.Event{Kind: observe.KindRun, Outcome: observe.OutcomeDone})
	spans := p.exp.GetSpans()
	if diff := cmp.Diff([]string{otelobserve.SpanRun, "lockstep.task a", otelobserve.SpanStep, otelobserve.SpanRun}, names(spans)); diff != "" {
		t.Fatalf("spans handed on when the run ended (-want +got):\n%s", diff)
	}
	if task, st := spans[1], spans[2]; task.EndTime.After(aEnded) || !task.EndTime.Before(st.EndTime) || task.Parent.SpanID() != st.SpanContext.SpanID() {
		t.Errorf("task a ended %v (its End returned by %v), step %v: want a's own end time, under the step", task.EndTime, aEnded, st.EndTime)
	}
	if inner := spans[0]; inner.Parent.SpanID() != spans[1].SpanContext.SpanID() || !inner.EndTime.Before(spans[1].EndTime) {
		t.Errorf("the subgraph's run: parent %v, ended %v; want under task a, before it ended", inner.Parent.SpanID(), inner.EndTime)
	}
	p.hook.End(late, observe.Event{Kind: observe.KindTask, Node: "late", TaskID: "tl", Step: 1, Attempt: 1, Outcome: observe.OutcomeDone})
	if got := names(p.exp.GetSpans()); len(got) != 5 || got[4] != "lockstep.task late" {
		t.Errorf("spans %v: want the late task handed on when it ended", got)
	}
}

// TestSpanDelay: a run that goes on hands on what it holds once
// Options.SpanDelay has passed since the first of it ended, or once 256
// spans are held; with a negative SpanDelay every span is handed on as it
// ends.
func TestSpanDelay(t *testing.T) {
	for _, c := range []struct {
		name  string
		delay time.Duration
		steps int
		want  int // spans handed on while the run goes on, at least
	}{
		{"delay", time.Millisecond, 1, 1},
		{"full", time.Hour, 256, 256},
		{"none", -1, 3, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := newProcessWith(t, otelobserve.Options{SpanDelay: c.delay})
			run := p.hook.Start(context.Background(), observe.Event{Kind: observe.KindRun, Thread: "t", Run: "r"})
			for i := range c.steps {
				step := p.hook.Start(run, observe.Event{Kind: observe.KindStep, Thread: "t", Step: i, Tasks: 0})
				p.hook.End(step, observe.Event{Kind: observe.KindStep, Step: i, Outcome: observe.OutcomeDone})
			}
			// The delay's hand-off runs on a timer: wait for it (no
			// bound but the test's own).
			for len(p.exp.GetSpans()) < c.want {
				time.Sleep(time.Millisecond)
			}
			if got := len(p.exp.GetSpans()); got != c.want {
				t.Errorf("%d spans handed on while the run goes on, want %d", got, c.want)
			}
			p.hook.End(run, observe.Event{Kind: observe.KindRun, Outcome: observe.OutcomeDone})
			if got := len(p.exp.GetSpans()); got != c.steps+1 {
				t.Errorf("%d spans handed on after the run ended, want %d", got, c.steps+1)
			}
		})
	}
}

// TestStepAndTaskAttributes: every step span of a run carries its
// thread, step number, task count and outcome, and every task span its
// node, task ID, its step's number, attempts and outcome, set from the
// events graph sends.
func TestStepAndTaskAttributes(t *testing.T) {
	p := newProcess(t, nil)
	node := func(ctx context.Context, s chat) (graph.Update[chat], error) {
		return graph.Set(chat{Count: s.Count + 1}, "Count"), nil
	}
	g := graph.New[chat]().AddNode("a", node).AddNode("b", node).
		AddEdge(graph.START, "a").AddEdge("a", "b").AddEdge("b", graph.END)
	r, err := g.Compile(graph.WithSaver(checkpoint.NewMemorySaver(nil)), graph.WithObserver(p.hook))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Invoke(context.Background(), "t1", graph.Set(chat{}, "Count")); err != nil {
		t.Fatal(err)
	}
	spans := p.exp.GetSpans()
	steps := map[trace.SpanID]tracetest.SpanStub{}
	var got []string
	for _, sp := range spans {
		if sp.Name == otelobserve.SpanStep {
			steps[sp.SpanContext.SpanID()] = sp
			got = append(got, fmt.Sprintf("step %s thread=%s tasks=%s %s", attr(sp, "lockstep.step"), attr(sp, "lockstep.thread"), attr(sp, "lockstep.step.tasks"), attr(sp, "lockstep.outcome")))
		}
	}
	for _, sp := range spans {
		if strings.HasPrefix(sp.Name, otelobserve.SpanTask+" ") {
			st := steps[sp.Parent.SpanID()]
			if attr(sp, "lockstep.task.id") == "" || attr(sp, "lockstep.step") != attr(st, "lockstep.step") {
				t.Errorf("%s: task id %q, step %q under step %q", sp.Name, attr(sp, "lockstep.task.id"), attr(sp, "lockstep.step"), attr(st, "lockstep.step"))
			}
			got = append(got, fmt.Sprintf("%s node=%s step=%s attempts=%s %s", sp.Name, attr(sp, "lockstep.node"), attr(sp, "lockstep.step"), attr(sp, "lockstep.attempts"), attr(sp, "lockstep.outcome")))
		}
	}
	slices.Sort(got)
	want := []string{
		"lockstep.task __start__ node=__start__ step=0 attempts=1 done",
		"lockstep.task a node=a step=1 attempts=1 done",
		"lockstep.task b node=b step=2 attempts=1 done",
		"step 0 thread=t1 tasks=1 done",
		"step 1 thread=t1 tasks=1 done",
		"step 2 thread=t1 tasks=1 done",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("step and task spans (-want +got):\n%s", diff)
	}
}
