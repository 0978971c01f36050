package workers_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/retry"
	"github.com/lockstepgo/lockstep/workers"
)

// wantRefused fails unless err is a *RefusedError for thread with reason
// why, matching ErrRefused.
func wantRefused(t *testing.T, what string, err error, thread string, why workers.Reason) *workers.RefusedError {
	t.Helper()
	var re *workers.RefusedError
	if !errors.As(err, &re) || !errors.Is(err, workers.ErrRefused) {
		t.Fatalf("%s: %v, want a *workers.RefusedError", what, err)
	}
	if re.Thread != thread || re.Reason != why {
		t.Errorf("%s: refused %q for %q, want %q for %q", what, re.Thread, re.Reason, thread, why)
	}
	return re
}

// TestSubmitRefuses: under the default policy, input to a thread that a
// run holds, that waits on an interrupt, that has input queued, or that
// has unfinished work is refused with a typed error, and nothing is
// applied or queued; input to an idle thread runs at once.
func TestSubmitRefuses(t *testing.T) {
	for _, k := range saverKinds {
		t.Run(k.name, func(t *testing.T) {
			ctx := t.Context()
			f := newFixture(t, k)
			g := newGate()
			f.hold = g.hold
			defer g.releaseAll()
			p, r := f.pool(workers.Options{})
			other, _ := f.pool(workers.Options{})
			store := f.saver()

			rc, err := p.Submit(ctx, "idle", in("i1"))
			if err != nil || rc.Queued || rc.Result.Status != graph.StatusDone {
				t.Fatalf("Submit to a new thread: %+v, %v; want run at once, done", rc, err)
			}

			// Busy: a run of another worker holds the thread.
			g.arm("busy")
			busyDone := make(chan error, 1)
			go func() {
				_, err := other.Submit(ctx, "busy", in("i1"))
				busyDone <- err
			}()
			defer func() {
				g.releaseAll()
				if err := <-busyDone; err != nil {
					t.Errorf("the busy thread's run: %v", err)
				}
			}()
			g.waitEntered(t, "busy/i1")
			_, err = p.Submit(ctx, "busy", in("i2"))
			re := wantRefused(t, "a thread a run holds", err, "busy", workers.Busy)
			var be *checkpoint.BusyError
			if !errors.As(re, &be) {
				t.Errorf("the refusal does not carry the *checkpoint.BusyError: %v", err)
			}
			if q, _ := store.Queued(ctx, "busy", 0); len(q) != 0 {
				t.Errorf("a refused input was queued: %v", q)
			}

			// Waiting on an interrupt: the approval is not discarded.
			if rc, err := p.Submit(ctx, "waiting", gated("i1")); err != nil || rc.Result.Status != graph.StatusWaiting {
				t.Fatalf("gated input: %+v, %v; want waiting", rc, err)
			}
			before := state(t, r, "waiting")
			_, err = p.Submit(ctx, "waiting", in("i2"))
			wantRefused(t, "a waiting thread", err, "waiting", workers.Waiting)
			after := state(t, r, "waiting")
			if after.Status != graph.StatusWaiting || !cmp.Equal(before.Values, after.Values) || after.Config != before.Config {
				t.Errorf("a refused input changed the waiting thread: %+v, was %+v", after, before)
			}
			if rep, err := p.RunOnce(ctx); err != nil || rep.Claimed != 0 {
				t.Errorf("after refusing a waiting thread: %+v, %v; want nothing due", rep, err)
			}

			// Queued input ahead.
			if _, err := p.Enqueue(ctx, "queued", in("i1")); err != nil {
				t.Fatal(err)
			}
			_, err = p.Submit(ctx, "queued", in("i2"))
			wantRefused(t, "a thread with input queued", err, "queued", workers.Queued)
			if q, _ := store.Queued(ctx, "queued", 0); len(q) != 1 {
				t.Errorf("queue after a refusal: %d inputs, want 1", len(q))
			}

			// Unfinished work: a thread a stopped run left pending.
			g.arm("pending")
			sctx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() {
				_, err := other.Submit(sctx, "pending", in("i1"))
				done <- err
			}()
			g.waitEntered(t, "pending/i1")
			stop()
			<-done
			if s := state(t, r, "pending"); s.Status != graph.StatusPending {
				t.Fatalf("a cancelled Submit left %s, want pending", s.Status)
			}
			_, err = p.Submit(ctx, "pending", in("i2"))
			wantRefused(t, "a thread with unfinished work", err, "pending", workers.Pending)
			rep, err := p.RunOnce(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Continued != 1 || rep.Applied != 1 {
				t.Errorf("the workers' pass: %+v, want the pending run continued and the queued input applied", rep)
			}
			want := doc{Inputs: []string{"i1"}, Log: []string{"take:i1", "work:i1"}}
			if s := state(t, r, "pending"); s.Status != graph.StatusDone || !cmp.Equal(want, s.Values) {
				t.Errorf("the cancelled Submit's thread: %s %+v, want done %+v", s.Status, s.Values, want)
			}
		})
	}
}

// TestQueueBehindApproval: input queued behind a thread that waits on an
// approval is parked until the approval is decided and the pool resumes
// the thread (approval.Worker, on the pool's slots); then it is applied.
// Nothing discards the approval.
func TestQueueBehindApproval(t *testing.T) {
	for _, k := range saverKinds {
		t.Run(k.name, func(t *testing.T) {
			ctx := t.Context()
			f := newFixture(t, k)
			store := approval.NewMemoryStore(f.clock.Now)
			p, r := f.pool(workers.Options{Approvals: store})
			rc, err := p.Submit(ctx, "t1", gated("i1"))
			if err != nil || rc.Result.Status != graph.StatusWaiting || len(rc.Result.Interrupts) != 1 {
				t.Fatalf("gated input: %+v, %v; want waiting on one approval", rc, err)
			}
			id := rc.Result.Interrupts[0].ID
			rc, err = p.Submit(ctx, "t1", in("i2"), workers.QueueIfBusy())
			if err != nil || !rc.Queued {
				t.Fatalf("QueueIfBusy on a waiting thread: %+v, %v; want queued", rc, err)
			}
			rep, err := p.RunOnce(ctx)
			if err != nil || rep.Parked != 1 || rep.Applied != 0 {
				t.Fatalf("before the decision: %+v, %v; want the input parked", rep, err)
			}
			if rep, err := p.RunOnce(ctx); err != nil || rep.Claimed != 0 {
				t.Errorf("parked: %+v, %v; want nothing due until the thread moves", rep, err)
			}
			inbox := approval.NewInbox(f.saver().(checkpoint.InterruptLister), store)
			if _, err := inbox.Approve(ctx, id, "alice", "ok"); err != nil {
				t.Fatal(err)
			}
			rep, err = p.RunOnce(ctx)
			if err != nil || rep.Resumed != 1 {
				t.Fatalf("after the decision: %+v, %v; want the thread resumed", rep, err)
			}
			rep, err = p.RunOnce(ctx)
			if err != nil || rep.Applied != 1 {
				t.Fatalf("after the resume: %+v, %v; want the parked input applied", rep, err)
			}
			want := doc{Inputs: []string{"i1", "i2"}, Log: []string{"take:i1", "work:i1", "take:i2", "work:i2"}, Decision: string(approval.Approved)}
			if s := state(t, r, "t1"); s.Status != graph.StatusDone || !cmp.Equal(want, s.Values) {
				t.Errorf("at the end: %s %+v\nwant done %+v", s.Status, s.Values, want)
			}
			if err := p.Wait(ctx, rc.Ticket); err != nil {
				t.Errorf("Wait: %v", err)
			}
		})
	}
}

// TestConcurrencyBound: however work arrives (claimed from the queue by
// Run, Submitted by callers at once), no more runs than Concurrency are
// ever in flight, and the pool does run them in parallel.
func TestConcurrencyBound(t *testing.T) {
	for _, k := range saverKinds {
		t.Run(k.name, func(t *testing.T) {
			ctx := t.Context()
			f := newFixture(t, k)
			f.hold = func(ctx context.Context, thread, input string) error {
				select {
				case <-time.After(5 * time.Millisecond):
				case <-ctx.Done():
				}
				return nil
			}
			const limit = 3
			p, r := f.pool(workers.Options{Concurrency: limit, Poll: 5 * time.Millisecond})
			var tickets []workers.Ticket
			for i := range 12 {
				tk, err := p.Enqueue(ctx, fmt.Sprintf("q%02d", i), in("i"))
				if err != nil {
					t.Fatal(err)
				}
				tickets = append(tickets, tk)
			}
			runCtx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- p.Run(runCtx) }()
			var wg sync.WaitGroup
			for c := range 4 {
				wg.Go(func() {
					for i := range 3 {
						if _, err := p.Submit(ctx, fmt.Sprintf("s%d-%d", c, i), in("i")); err != nil {
							t.Errorf("Submit: %v", err)
						}
					}
				})
			}
			for _, tk := range tickets {
				wctx, cancel := context.WithTimeout(ctx, time.Minute)
				if err := p.Wait(wctx, tk); err != nil {
					t.Errorf("Wait(%s): %v", tk.Thread, err)
				}
				cancel()
			}
			wg.Wait()
			stop()
			<-done
			if peak := f.peak.Load(); peak > limit || peak < 2 {
				t.Errorf("peak runs in flight %d, want 2..%d", peak, limit)
			}
			for i := range 12 {
				if s := state(t, r, fmt.Sprintf("q%02d", i)); s.Status != graph.StatusDone {
					t.Errorf("q%02d: %s", i, s.Status)
				}
			}
		})
	}
}

// flaky is a saver whose Puts fail while fail > 0.
type flaky struct {
	checkpoint.Saver
	mu   sync.Mutex
	fail int
}

var errFlaky = errors.New("flaky: the database went away")

func (f *flaky) Put(ctx context.Context, req checkpoint.PutRequest) error {
	f.mu.Lock()
	bad := f.fail > 0
	if bad {
		f.fail--
	}
	f.mu.Unlock()
	if bad {
		return errFlaky
	}
	return f.Saver.Put(ctx, req)
}

// TestRetryLater: queued input whose run fails without being applied (the
// saver failed) is retried after the backoff, on the saver's clock, with
// the attempts counted; after MaxAttempts the pool gives up and the input
// stays queued.
func TestRetryLater(t *testing.T) {
	for _, k := range saverKinds {
		t.Run(k.name, func(t *testing.T) {
			ctx := t.Context()
			f := newFixture(t, k)
			base := f.saver()
			fl := &flaky{Saver: base, fail: 2}
			f.first = fl
			r, _ := f.worker()
			p, err := workers.New(r, workers.Options{Store: base, Retry: &retry.Policy{MaxAttempts: 5, Initial: time.Second, Multiplier: 2, Max: time.Minute}})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := p.Enqueue(ctx, "t1", in("i1")); err != nil {
				t.Fatal(err)
			}
			for i, wait := range []time.Duration{0, time.Second, 2 * time.Second} { // 1s, then doubled
				f.clock.Advance(wait - time.Nanosecond)
				if wait > 0 {
					if rep, err := p.RunOnce(ctx); err != nil || rep.Claimed != 0 {
						t.Fatalf("attempt %d, 1ns early: %+v, %v; want nothing due", i+1, rep, err)
					}
				}
				f.clock.Advance(time.Nanosecond)
				rep, err := p.RunOnce(ctx)
				if err != nil {
					t.Fatal(err)
				}
				want := workers.Report{Claimed: 1, Deferred: 1}
				if i == 2 {
					want = workers.Report{Claimed: 1, Applied: 1}
				}
				if diff := cmp.Diff(want, rep); diff != "" {
					t.Errorf("attempt %d (-want +got):\n%s", i+1, diff)
				}
			}
			if s := state(t, r, "t1"); s.Status != graph.StatusDone || !cmp.Equal(doc{Inputs: []string{"i1"}, Log: []string{"take:i1", "work:i1"}}, s.Values) {
				t.Errorf("after the retries: %s %+v", s.Status, s.Values)
			}

			fl.mu.Lock()
			fl.fail = 1000
			fl.mu.Unlock()
			if _, err := p.Enqueue(ctx, "t2", in("i1")); err != nil {
				t.Fatal(err)
			}
			claims := 0
			for range 10 {
				f.clock.Advance(time.Minute)
				rep, err := p.RunOnce(ctx)
				if err != nil {
					t.Fatal(err)
				}
				claims += rep.Claimed
			}
			if claims != 5 {
				t.Errorf("a thread that always fails was claimed %d times, want the policy's 5 attempts", claims)
			}
			if q, err := base.Queued(ctx, "t2", 0); err != nil || len(q) != 1 {
				t.Errorf("its input after the pool gave up: %v, %v; want still queued", q, err)
			}
		})
	}
}

// TestWaitDropped: Wait on input whose thread is deleted before it ran
// fails with ErrDropped; Wait with a context that ends returns its error.
func TestWaitDropped(t *testing.T) {
	ctx := t.Context()
	f := newFixture(t, saverKinds[0])
	p, _ := f.pool(workers.Options{Poll: time.Millisecond})
	tk, err := p.Enqueue(ctx, "t1", in("i1"))
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := p.Wait(short, tk); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Wait with nothing running: %v, want the context's error", err)
	}
	if err := f.saver().DeleteThread(ctx, "t1"); err != nil {
		t.Fatal(err)
	}
	if err := p.Wait(ctx, tk); !errors.Is(err, workers.ErrDropped) {
		t.Errorf("Wait after DeleteThread: %v, want ErrDropped", err)
	}
}

// TestNewRefuses: a nil Runnable and negative options are *ConfigErrors;
// a saver that keeps no due work is ErrUnsupported.
func TestNewRefuses(t *testing.T) {
	f := newFixture(t, saverKinds[0])
	r, _ := f.worker()
	if _, err := workers.New[doc](nil, workers.Options{}); !errors.Is(err, workers.ErrInvalidConfig) {
		t.Errorf("nil Runnable: %v", err)
	}
	for _, o := range []workers.Options{{Concurrency: -1}, {Poll: -1}, {Drain: -1}, {Retry: &retry.Policy{Initial: -time.Second}}} {
		var ce *workers.ConfigError
		if _, err := workers.New(r, o); !errors.As(err, &ce) || !errors.Is(err, workers.ErrInvalidConfig) {
			t.Errorf("New(%+v): %v, want a *ConfigError", o, err)
		}
	}
	var pe *retry.PolicyError
	if _, err := workers.New(r, workers.Options{Retry: &retry.Policy{Jitter: 2}}); !errors.As(err, &pe) {
		t.Errorf("a bad retry policy: %v, want it to wrap the *retry.PolicyError", err)
	}
	f.first = &flaky{Saver: checkpoint.NewMemorySaver(nil)}
	plain, _ := f.worker()
	if _, err := workers.New(plain, workers.Options{}); !errors.Is(err, workers.ErrUnsupported) {
		t.Errorf("a saver without due work: %v, want ErrUnsupported", err)
	}
}

// panicky is a state value whose JSON encoding panics.
type panicky struct{}

func (panicky) MarshalJSON() ([]byte, error) { panic("boom") }

type odd struct {
	Items []string `lockstep:"append"`
	Bad   panicky
}

// TestEnqueueRefusesBadInput: input that routes, or whose field's JSON
// encoding panics, is refused with ErrInvalidInput and queues nothing;
// overwrites survive the queue.
func TestEnqueueRefusesBadInput(t *testing.T) {
	ctx := t.Context()
	s := checkpoint.NewMemorySaver(nil)
	r, err := graph.New[odd]().AddNode("n", func(ctx context.Context, o odd) (graph.Update[odd], error) { return graph.Update[odd]{}, nil }).
		AddEdge(graph.START, "n").AddEdge("n", graph.END).Compile(graph.WithSaver(s))
	if err != nil {
		t.Fatal(err)
	}
	p, err := workers.New(r, workers.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for name, u := range map[string]graph.Update[odd]{
		"goto":     graph.Goto[odd]("n"),
		"panics":   graph.Set(odd{}, "Bad"),
		"no field": graph.Set(odd{}, "Nope"),
	} {
		if _, err := p.Enqueue(ctx, "t1", u); !errors.Is(err, workers.ErrInvalidInput) {
			t.Errorf("%s: %v, want ErrInvalidInput", name, err)
		}
	}
	if q, _ := s.Queued(ctx, "t1", 0); len(q) != 0 {
		t.Errorf("refused input was queued: %v", q)
	}
	if _, err := p.Enqueue(ctx, "t1", graph.Set(odd{Items: []string{"x"}}, "Items").Overwrite("Items")); err != nil {
		t.Fatal(err)
	}
	q, _ := s.Queued(ctx, "t1", 0)
	var stored map[string]json.RawMessage
	if len(q) != 1 || json.Unmarshal(q[0].Input, &stored) != nil || string(stored["overwrite"]) != `["Items"]` {
		t.Errorf("stored input %v: want the overwrite kept", q)
	}
	if rep, err := p.RunOnce(ctx); err != nil || rep.Applied != 1 {
		t.Errorf("applying it: %+v, %v", rep, err)
	}
}

// TestEnqueueAll: a batch of inputs for several threads is queued in one
// call, on every backend: in order within a thread, a key queued before
// or earlier in the batch gets the first Ticket and queues nothing more,
// and the pool then applies each input once. A batch holding one bad
// input queues none of it.
func TestEnqueueAll(t *testing.T) {
	for _, k := range saverKinds {
		t.Run(k.name, func(t *testing.T) {
			ctx := t.Context()
			f := newFixture(t, k)
			p, r := f.pool(workers.Options{})
			st := f.saver()
			before, err := p.Enqueue(ctx, "t2", in("b0"), workers.RunKey("k-b0"))
			if err != nil {
				t.Fatal(err)
			}
			bad := []workers.Input[doc]{{Thread: "t9", Update: in("x")}, {Thread: "t9", Update: graph.Goto[doc]("work")}}
			if _, err := p.EnqueueAll(ctx, bad); !errors.Is(err, workers.ErrInvalidInput) {
				t.Errorf("a batch with a Goto: %v, want ErrInvalidInput", err)
			}
			if q, err := st.Queued(ctx, "t9", 0); err != nil || len(q) != 0 {
				t.Errorf("the refused batch queued %v (%v), want nothing", q, err)
			}
			batch := []workers.Input[doc]{
				{Thread: "t1", Update: in("a1"), Key: "k-a1"},
				{Thread: "t2", Update: in("b0"), Key: "k-b0"}, // queued before
				{Thread: "t1", Update: in("a2")},
				{Thread: "t3", Update: in("c1"), Key: "k-c1"},
				{Thread: "t1", Update: in("a1"), Key: "k-a1"}, // earlier in the batch
			}
			ts, err := p.EnqueueAll(ctx, batch)
			if err != nil {
				t.Fatal(err)
			}
			if len(ts) != len(batch) {
				t.Fatalf("%d tickets for %d inputs", len(ts), len(batch))
			}
			if ts[1] != before || ts[4] != ts[0] {
				t.Errorf("tickets %+v: want the second to be %+v and the fifth the first", ts, before)
			}
			if ts[0].ID >= ts[2].ID {
				t.Errorf("t1's inputs numbered %d, %d: want in batch order", ts[0].ID, ts[2].ID)
			}
			if _, err := p.RunOnce(ctx); err != nil {
				t.Fatal(err)
			}
			want := map[string][]string{"t1": {"a1", "a2"}, "t2": {"b0"}, "t3": {"c1"}}
			got := map[string][]string{}
			for th := range want {
				got[th] = state(t, r, th).Values.Inputs
				if q, err := st.Queued(ctx, th, 0); err != nil || len(q) != 0 {
					t.Errorf("%s: %d inputs left queued (%v)", th, len(q), err)
				}
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("inputs applied (-want +got):\n%s", diff)
			}
		})
	}
}
