package workers_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/workers"
)

// TestDeadWorkerRecovered: a worker that stops in the middle of a run
// (frozen in a node: as good as dead, and its lease is never renewed on
// the saver's clock) leaves its thread to another worker exactly one
// lease period after its last renewal, not a nanosecond before; the other
// worker continues it from the saved step (take does not run again), and
// the frozen worker, let go, writes nothing: its run is refused.
func TestDeadWorkerRecovered(t *testing.T) {
	for _, k := range saverKinds {
		t.Run(k.name, func(t *testing.T) {
			ctx := t.Context()
			f := newFixture(t, k)
			g := newGate()
			f.hold = g.hold
			dead, _ := f.pool(workers.Options{})
			g.arm("t1")
			deadErr := make(chan error, 1)
			go func() {
				_, err := dead.Submit(ctx, "t1", in("i1"))
				deadErr <- err
			}()
			g.waitEntered(t, "t1/i1")
			defer g.releaseAll()
			live, r := f.pool(workers.Options{})

			f.clock.Advance(leaseTTL - time.Nanosecond)
			rep, err := live.RunOnce(ctx)
			if err != nil || rep.Claimed != 0 {
				t.Fatalf("1ns before the lease ends: %+v, %v; want nothing claimed", rep, err)
			}
			f.clock.Advance(time.Nanosecond)
			rep, err = live.RunOnce(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(workers.Report{Claimed: 1, Continued: 1}, rep); diff != "" {
				t.Errorf("when the lease ended (-want +got):\n%s", diff)
			}
			s := state(t, r, "t1")
			want := doc{Inputs: []string{"i1"}, Log: []string{"take:i1", "work:i1"}}
			if s.Status != graph.StatusDone || !cmp.Equal(want, s.Values) {
				t.Errorf("after recovery: %s %+v, want done %+v", s.Status, s.Values, want)
			}
			if n := f.runCount("t1", "take", "i1"); n != 1 {
				t.Errorf("take ran %d times, want 1 (its step was saved before the worker froze)", n)
			}
			// The frozen worker wakes: its save is refused.
			g.releaseAll()
			err = <-deadErr
			if !errors.Is(err, checkpoint.ErrThreadBusy) && !errors.Is(err, checkpoint.ErrConflict) {
				t.Errorf("the frozen worker's run: %v, want a lease or head conflict", err)
			}
			if s2 := state(t, r, "t1"); !cmp.Equal(s.Values, s2.Values) || s2.Config != s.Config {
				t.Errorf("the frozen worker changed the thread: %+v, was %+v", s2, s)
			}
			if rep, err := live.RunOnce(ctx); err != nil || rep.Claimed != 0 {
				t.Errorf("afterwards: %+v, %v; want nothing due", rep, err)
			}
		})
	}
}

// TestShutdownHandsBack: a pool whose Run is stopped cancels its run in
// flight, which stops in its node and releases the thread; another worker
// claims it at once (no lease to wait out) and finishes it, with the saved
// step not run again.
func TestShutdownHandsBack(t *testing.T) {
	for _, k := range saverKinds {
		t.Run(k.name, func(t *testing.T) {
			ctx := t.Context()
			f := newFixture(t, k)
			g := newGate()
			f.hold = g.hold
			stopping, _ := f.pool(workers.Options{Poll: 10 * time.Millisecond})
			g.arm("t1")
			if _, err := stopping.Enqueue(ctx, "t1", in("i1")); err != nil {
				t.Fatal(err)
			}
			runCtx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- stopping.Run(runCtx) }()
			g.waitEntered(t, "t1/i1")
			stop()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Errorf("Run after its context ended: %v, want context.Canceled", err)
			}
			other, r := f.pool(workers.Options{})
			if s := state(t, r, "t1"); s.Status != graph.StatusPending {
				t.Fatalf("handed back: %s, want pending", s.Status)
			}
			rep, err := other.RunOnce(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Claimed != 1 || rep.Continued != 1 {
				t.Errorf("the other worker, with no time passed: %+v, want the thread claimed and continued", rep)
			}
			want := doc{Inputs: []string{"i1"}, Log: []string{"take:i1", "work:i1"}}
			if s := state(t, r, "t1"); s.Status != graph.StatusDone || !cmp.Equal(want, s.Values) {
				t.Errorf("after the hand-back: %s %+v, want done %+v", s.Status, s.Values, want)
			}
			if n := f.runCount("t1", "take", "i1"); n != 1 {
				t.Errorf("take ran %d times, want 1", n)
			}
		})
	}
}

// TestQueueInOrder: input submitted with QueueIfBusy while a run holds the
// thread is queued, then applied in submission order, each exactly once,
// and each Wait returns once its input ran.
func TestQueueInOrder(t *testing.T) {
	for _, k := range saverKinds {
		t.Run(k.name, func(t *testing.T) {
			ctx := t.Context()
			f := newFixture(t, k)
			g := newGate()
			f.hold = g.hold
			p, r := f.pool(workers.Options{Poll: 10 * time.Millisecond})
			g.arm("t1")
			first := make(chan error, 1)
			go func() {
				_, err := p.Submit(ctx, "t1", in("i0"))
				first <- err
			}()
			g.waitEntered(t, "t1/i0")
			var tickets []workers.Ticket
			for i := 1; i <= 5; i++ {
				rc, err := p.Submit(ctx, "t1", in(fmt.Sprintf("i%d", i)), workers.QueueIfBusy())
				if err != nil || !rc.Queued {
					t.Fatalf("Submit i%d with QueueIfBusy: %+v, %v; want queued", i, rc, err)
				}
				tickets = append(tickets, rc.Ticket)
			}
			// The same key again is the same ticket.
			again, err := p.Submit(ctx, "t1", in("i5"), workers.QueueIfBusy(), workers.RunKey(tickets[4].Key))
			if err != nil || again.Ticket != tickets[4] {
				t.Errorf("queueing a key again: %+v, %v; want ticket %+v", again, err, tickets[4])
			}
			g.release("t1")
			if err := <-first; err != nil {
				t.Fatal(err)
			}
			runCtx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- p.Run(runCtx) }()
			for _, tk := range tickets {
				wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				if err := p.Wait(wctx, tk); err != nil {
					t.Errorf("Wait(%s): %v", tk.Key, err)
				}
				cancel()
			}
			stop()
			<-done
			var want doc
			for i := range 6 {
				want.Inputs = append(want.Inputs, fmt.Sprintf("i%d", i))
				want.Log = append(want.Log, fmt.Sprintf("take:i%d", i), fmt.Sprintf("work:i%d", i))
			}
			if s := state(t, r, "t1"); s.Status != graph.StatusDone || !cmp.Equal(want, s.Values) {
				t.Errorf("after the queue: %s %+v\nwant done %+v", s.Status, s.Values, want)
			}
			for i := range 6 {
				if n := f.runCount("t1", "work", fmt.Sprintf("i%d", i)); n != 1 {
					t.Errorf("input i%d worked %d times, want 1", i, n)
				}
			}
		})
	}
}

// TestQueuedOnceAcrossDeath: the worker applying queued input dies in its
// run (after the input was saved); the next worker continues that run,
// finds the input's key on the thread and drops it instead of applying it
// again, then applies the rest of the queue. The dead worker, let go,
// writes nothing.
func TestQueuedOnceAcrossDeath(t *testing.T) {
	for _, k := range saverKinds {
		t.Run(k.name, func(t *testing.T) {
			ctx := t.Context()
			f := newFixture(t, k)
			g := newGate()
			f.hold = g.hold
			dead, _ := f.pool(workers.Options{})
			for _, name := range []string{"i1", "i2"} {
				if _, err := dead.Enqueue(ctx, "t1", in(name)); err != nil {
					t.Fatal(err)
				}
			}
			g.arm("t1")
			deadDone := make(chan struct{})
			go func() {
				defer close(deadDone)
				dead.RunOnce(ctx) //nolint:errcheck // the dead worker's outcome is not the test's
			}()
			g.waitEntered(t, "t1/i1")
			f.clock.Advance(leaseTTL)
			live, r := f.pool(workers.Options{})
			rep, err := live.RunOnce(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Continued != 1 || rep.Applied != 1 {
				t.Errorf("recovery: %+v, want the run continued and i2 applied", rep)
			}
			g.releaseAll()
			<-deadDone
			want := doc{Inputs: []string{"i1", "i2"}, Log: []string{"take:i1", "work:i1", "take:i2", "work:i2"}}
			if s := state(t, r, "t1"); s.Status != graph.StatusDone || !cmp.Equal(want, s.Values) {
				t.Errorf("after recovery: %s %+v\nwant done %+v", s.Status, s.Values, want)
			}
			for _, name := range []string{"i1", "i2"} {
				if n := f.runCount("t1", "take", name); n != 1 {
					t.Errorf("input %s was taken %d times, want 1", name, n)
				}
			}
			if q, err := f.saver().Queued(ctx, "t1", 0); err != nil || len(q) != 0 {
				t.Errorf("queue afterwards: %v, %v; want empty", q, err)
			}
		})
	}
}
