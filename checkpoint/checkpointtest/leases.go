package checkpointtest

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/checkpoint"
)

func leaseCases() []testCase {
	return append(takeBackCases(), []testCase{
		{name: "OtherOwnerBusy", run: testOtherOwnerBusy},
		{name: "SameOwnerRenews", run: testSameOwnerRenews},
		{name: "ReleaseFrees", run: testReleaseFrees},
		{name: "ReleaseWithWrite", run: testReleaseWithWrite},
		{name: "ExpiredLeaseTakenOver", run: testExpiredTakeover},
		{name: "ClaimNewThread", run: testClaimNewThread},
		{name: "SupersededCannotForkTheChain", run: testSupersededCannotFork},
		{name: "SupersededCannotDisplaceWrites", run: testSupersededWrites},
		{name: "OwnershipIsPerThread", run: testOwnershipPerThread},
		{name: "OwnerRetryIsNotARejection", run: testOwnerRetry},
		{name: "HeldRenewsOnlyAnUntakenLease", run: testHeldRenews},
		{name: "HeldWritesAreFenced", run: testHeldWritesFenced},
	}...)
}

// testHeldRenews: a Claim with Lease.Held renews the owner's lease, live
// or expired untaken, and fails with a *BusyError, writing nothing, once
// another owner took the lease, whether that owner still holds it
// (naming it) or has released it since (Owner ""): a runner that lost the
// thread learns it even when the head did not move.
func testHeldRenews(t *testing.T, f *fixture) {
	held := func(owner string) checkpoint.Lease { l := owned(owner); l.Held = true; return l }
	l := f.line("thread-1", "")
	l.lease = owned("runner-a")
	l.step(t, set("x", `1`))
	f.claim(t, l.ref(l.head), held("runner-a")) // live
	f.clock.Advance(ttl + time.Second)
	f.claim(t, l.ref(l.head), held("runner-a")) // expired, untaken
	renewedAt := f.clock.Now()
	wantBusy(t, "Held Claim by an owner that never held it", f.s.Claim(t.Context(), l.ref(l.head), held("runner-b")),
		checkpoint.BusyError{Thread: "thread-1", Owner: "runner-a", Until: renewedAt.Add(ttl)})
	f.clock.Advance(ttl + time.Second)
	takenAt := f.clock.Now()
	f.claim(t, l.ref(l.head), owned("runner-b")) // b takes the expired lease over
	wantBusy(t, "Held Claim after the lease passed on", f.s.Claim(t.Context(), l.ref(l.head), held("runner-a")),
		checkpoint.BusyError{Thread: "thread-1", Owner: "runner-b", Until: takenAt.Add(ttl)})
	if err := f.s.Release(t.Context(), "thread-1", "", "runner-b"); err != nil {
		t.Fatal(err)
	}
	before := f.dump(t, l.thread)
	err := f.s.Claim(t.Context(), l.ref(l.head), held("runner-a"))
	var be *checkpoint.BusyError
	if !errors.As(err, &be) || be.Owner != "" || !errors.Is(err, checkpoint.ErrThreadBusy) {
		t.Errorf("Held Claim after the lease passed on and was released: %v, want a *BusyError with no owner", err)
	}
	f.unchanged(t, "refused Held Claims", l.thread, before)
	f.claim(t, l.ref(l.head), owned("runner-a")) // a plain Claim takes the free lease
}

const ttl = 10 * time.Second

func owned(owner string) checkpoint.Lease { return checkpoint.Lease{Owner: owner, TTL: ttl} }

// busyAttempts tries Put, PutWrites and Claim on the head as owner and
// expects each to fail with a BusyError equal to want and write nothing.
// testHeldWritesFenced (D17, langchain-ai/langgraph#8796): a Put,
// PutWrites and Claim with Lease.Held commit while their owner holds the
// lease it took, live or lapsed untaken; once another owner took it over
// and released it again, with the head where it was (it paused on an
// interrupt), each is refused with a *BusyError with no owner and writes
// nothing, where the same requests without Held would have taken the free
// lease and committed: the stale writer cannot land a step after its
// successor. A Held Put on a thread that does not exist (deleted under
// the run) is a conflict.
func testHeldWritesFenced(t *testing.T, f *fixture) {
	held := func(owner string) checkpoint.Lease { l := owned(owner); l.Held = true; return l }
	l := f.line("thread-1", "")
	l.lease = owned("runner-a")
	l.step(t, set("x", `1`))
	l.lease = held("runner-a")
	l.step(t, set("x", `2`)) // the holder's fenced writes commit
	f.putWrites(t, l.ref(l.head), held("runner-a"), task("task-1", wr("y", `1`)))
	f.clock.Advance(ttl + time.Second)
	l.step(t, set("x", `3`)) // lapsed, untaken: still the holder's
	f.clock.Advance(ttl + time.Second)
	f.claim(t, l.ref(l.head), owned("runner-b")) // b takes over...
	if err := f.s.PutWrites(t.Context(), checkpoint.WritesRequest{Ref: l.ref(l.head), Lease: owned("runner-b"), Release: true,
		Tasks: []checkpoint.TaskWrites{task("task-b", wr(checkpoint.ChannelInterrupt, `[{"id":"q","value":"ask"}]`))}}); err != nil {
		t.Fatal(err) // ...pauses on an interrupt and releases
	}
	before := f.dump(t, l.thread)
	req := l.request(t, l.head, set("x", `"stale"`))
	req.Lease = held("runner-a")
	req.ParentWrites = []checkpoint.TaskWrites{task("task-b", wr("x", `"stale"`))}
	var be *checkpoint.BusyError
	for what, err := range map[string]error{
		"Put":       f.s.Put(t.Context(), req),
		"PutWrites": f.s.PutWrites(t.Context(), checkpoint.WritesRequest{Ref: l.ref(l.head), Lease: held("runner-a"), Tasks: []checkpoint.TaskWrites{task("task-b", wr("x", `"stale"`))}}),
		"Claim":     f.s.Claim(t.Context(), l.ref(l.head), held("runner-a")),
	} {
		if !errors.As(err, &be) || be.Owner != "" || !errors.Is(err, checkpoint.ErrThreadBusy) {
			t.Errorf("fenced %s of the stale owner: %v, want a *BusyError with no owner", what, err)
		}
	}
	f.unchanged(t, "the stale owner's fenced writes", l.thread, before)
	n := f.line("thread-new", "")
	n.lease = held("runner-a")
	nreq := n.request(t, "", set("x", `1`))
	if err := f.s.Put(t.Context(), nreq); !errors.Is(err, checkpoint.ErrConflict) {
		t.Errorf("a Held Put on a thread that does not exist (deleted under its run): %v, want ErrConflict", err)
	}
	// Without Held the same owner takes the free lease: the fence is what
	// refuses it.
	f.putWrites(t, l.ref(l.head), owned("runner-a"), task("task-a", wr("y", `2`)))
}

func busyAttempts(t *testing.T, f *fixture, l *line, owner string, want checkpoint.BusyError) {
	t.Helper()
	before := f.dump(t, l.thread)
	ls := owned(owner)
	req := l.request(t, l.head, set("x", `"intruder"`))
	req.Lease = ls
	req.ParentWrites = []checkpoint.TaskWrites{task("task-intruder", wr("x", `"intruder"`))}
	wantBusy(t, owner+": Put", f.s.Put(t.Context(), req), want)
	err := f.s.PutWrites(t.Context(), checkpoint.WritesRequest{Ref: l.ref(l.head), Lease: ls, Tasks: []checkpoint.TaskWrites{
		task("task-intruder", wr("x", `"intruder"`), wr(checkpoint.ChannelResume, `{"i":"intruder"}`)),
	}})
	wantBusy(t, owner+": PutWrites", err, want)
	wantBusy(t, owner+": Claim", f.s.Claim(t.Context(), l.ref(l.head), ls), want)
	f.unchanged(t, owner+"'s refused requests", l.thread, before)
}

// testOtherOwnerBusy: while one owner's lease is live, another owner's Put,
// PutWrites and Claim fail with a *BusyError naming the holder and the
// lease's end, and write nothing; the lease does not pass on.
func testOtherOwnerBusy(t *testing.T, f *fixture) {
	l := f.line("thread-1", "")
	l.lease = owned("runner-a")
	start := f.clock.Now()
	l.step(t, set("x", `1`))
	want := checkpoint.BusyError{Thread: "thread-1", Owner: "runner-a", Until: start.Add(ttl)}
	busyAttempts(t, f, l, "runner-b", want)
	f.clock.Advance(ttl / 2)
	busyAttempts(t, f, l, "runner-c", want)
	// The holder still writes.
	l.step(t, set("x", `2`))
}

// testSameOwnerRenews: Claim by the holder renews the lease to now + TTL;
// Put and PutWrites by the holder keep a live lease as it is (a save need
// not write the lease) and take it anew once it has expired untaken.
func testSameOwnerRenews(t *testing.T, f *fixture) {
	ops := []struct {
		name   string
		renews bool
		op     func(t *testing.T, l *line)
	}{
		{"Put", false, func(t *testing.T, l *line) { l.step(t, set("x", `2`)) }},
		{"PutWrites", false, func(t *testing.T, l *line) {
			f.putWrites(t, l.ref(l.head), l.lease, task("task-1", wr("x", `2`)))
		}},
		{"Claim", true, func(t *testing.T, l *line) { f.claim(t, l.ref(l.head), l.lease) }},
	}
	for i, tc := range ops {
		l := f.line("thread-"+tc.name, "")
		l.lease = owned("runner-a")
		takenAt := f.clock.Now()
		l.step(t, set("x", `1`))
		at := f.clock.Advance(8 * time.Second)
		tc.op(t, l)
		until := takenAt.Add(ttl)
		if tc.renews {
			until = at.Add(ttl)
		}
		busyAttempts(t, f, l, "runner-b", checkpoint.BusyError{Thread: l.thread, Owner: "runner-a", Until: until})
		// Once the lease has expired untaken, the holder's next save takes
		// it anew.
		f.clock.Advance(until.Sub(f.clock.Now()) + time.Second)
		retakenAt := f.clock.Now()
		tc.op(t, l)
		busyAttempts(t, f, l, "runner-b", checkpoint.BusyError{Thread: l.thread, Owner: "runner-a", Until: retakenAt.Add(ttl)})
		f.clock.Advance(ttl + time.Second)
		if err := f.s.Claim(t.Context(), l.ref(l.head), owned("runner-b")); err != nil {
			t.Errorf("%s (case %d): Claim after the lease expired: %v", tc.name, i, err)
		}
	}
}

// testReleaseFrees: Release by the holder frees the lease at once; Release
// by anyone else, of a missing thread, or of a lease that has passed on is
// not an error and changes nothing.
func testReleaseFrees(t *testing.T, f *fixture) {
	l := f.line("thread-1", "")
	l.lease = owned("runner-a")
	start := f.clock.Now()
	l.step(t, set("x", `1`))
	if err := f.s.Release(t.Context(), "thread-1", "", "runner-b"); err != nil {
		t.Errorf("Release by a non-holder: %v", err)
	}
	wantBusy(t, "Claim after a non-holder's Release", f.s.Claim(t.Context(), l.ref(l.head), owned("runner-c")),
		checkpoint.BusyError{Thread: "thread-1", Owner: "runner-a", Until: start.Add(ttl)})
	if err := f.s.Release(t.Context(), "thread-1", "", "runner-a"); err != nil {
		t.Fatalf("Release by the holder: %v", err)
	}
	l.lease = owned("runner-b")
	l.step(t, set("x", `2`))
	if err := f.s.Release(t.Context(), "thread-1", "", "runner-a"); err != nil {
		t.Errorf("Release of a lease that passed on: %v", err)
	}
	busyAttempts(t, f, l, "runner-c", checkpoint.BusyError{Thread: "thread-1", Owner: "runner-b", Until: start.Add(ttl)})
	if err := f.s.Release(t.Context(), "nobody", "", "runner-a"); err != nil {
		t.Errorf("Release on a missing thread: %v", err)
	}
	if got := f.list(t, "nobody", checkpoint.ListOptions{AllNamespaces: true}); len(got) != 0 {
		t.Errorf("Release on a missing thread created %d checkpoints", len(got))
	}
}

// testReleaseWithWrite: Put and PutWrites with Release commit and then
// drop the lease.
func testReleaseWithWrite(t *testing.T, f *fixture) {
	l := f.line("thread-1", "")
	l.lease = owned("runner-a")
	req := l.request(t, "", set("x", `1`))
	req.Release = true
	l.put(t, req)
	l.lease = owned("runner-b")
	l.step(t, set("x", `2`)) // takes the free lease
	err := f.s.PutWrites(t.Context(), checkpoint.WritesRequest{Ref: l.ref(l.head), Lease: l.lease, Release: true, Tasks: []checkpoint.TaskWrites{task("task-1", wr("y", `1`))}})
	if err != nil {
		t.Fatalf("PutWrites with Release: %v", err)
	}
	f.wantPending(t, l.ref(l.head), []writeView{{TaskID: "task-1", Channel: "y", Value: 1.0}})
	l.lease = owned("runner-c")
	l.step(t, set("x", `3`))
	l.checkGet(t, "")
}

// testExpiredTakeover: after the TTL another owner takes the lease over;
// the superseded owner is then refused with a BusyError naming the new
// holder and writes nothing, on every path and every attempt (R11).
func testExpiredTakeover(t *testing.T, f *fixture) {
	l := f.line("thread-1", "")
	l.lease = owned("runner-a")
	c1 := l.step(t, set("x", `1`))
	takeover := f.clock.Advance(ttl + time.Second)
	l.lease = owned("runner-b")
	l.step(t, set("x", `2`))
	for attempt := 0; attempt < 2; attempt++ {
		busyAttempts(t, f, l, "runner-a", checkpoint.BusyError{Thread: "thread-1", Owner: "runner-b", Until: takeover.Add(ttl)})
	}
	l.checkGet(t, c1)
	l.checkGet(t, "")
}

// testClaimNewThread: Claim with an empty ID leases a thread that has no
// checkpoint yet, without creating one; another owner cannot write its
// first checkpoint until the lease ends.
func testClaimNewThread(t *testing.T, f *fixture) {
	start := f.clock.Now()
	f.claim(t, checkpoint.Ref{Thread: "thread-1"}, owned("runner-a"))
	f.unchanged(t, "Claim of a new thread", "thread-1", threadDump{Heads: map[string]string{"": "", "child:abc": ""}})
	l := f.line("thread-1", "")
	l.lease = owned("runner-b")
	req := l.request(t, "", set("x", `1`))
	wantBusy(t, "Put of the first checkpoint under another owner's lease", f.s.Put(t.Context(), req),
		checkpoint.BusyError{Thread: "thread-1", Owner: "runner-a", Until: start.Add(ttl)})
	f.unchanged(t, "a refused first Put", "thread-1", threadDump{Heads: map[string]string{"": "", "child:abc": ""}})
	l.lease = owned("runner-a")
	l.step(t, set("x", `1`))
	l.checkGet(t, "")
}

// testSupersededCannotFork is LangGraph's write-ownership reproduction in
// three writes: A writes c1, B takes over and writes c2, A (still holding
// c1 as its tip) writes its own child of c1. It must be refused, the head
// stays c2 and the thread holds exactly c1 and c2 (R11).
func testSupersededCannotFork(t *testing.T, f *fixture) {
	l := f.line("thread-1", "")
	l.lease = owned("runner-a")
	c1 := l.step(t, set("x", `"a"`))
	f.clock.Advance(ttl + time.Second)
	f.claim(t, l.ref(c1), owned("runner-b"))
	l.lease = owned("runner-b")
	c2 := l.step(t, set("x", `"b"`))
	for attempt := 0; attempt < 2; attempt++ {
		req := l.request(t, c1, set("x", `"stale a"`))
		req.Lease = owned("runner-a")
		err := f.s.Put(t.Context(), req)
		wantIs(t, "superseded owner's Put", err, checkpoint.ErrThreadBusy, checkpoint.ErrConflict)
		req.Fork = true // not even as an explicit fork
		err = f.s.Put(t.Context(), req)
		wantIs(t, "superseded owner's fork", err, checkpoint.ErrThreadBusy)
	}
	if got := f.headID(t, "thread-1", ""); got != c2 {
		t.Errorf("head = %s, want the current owner's %s", got, c2)
	}
	if got, want := tupleIDs(f.list(t, "thread-1", checkpoint.ListOptions{AllNamespaces: true})), []string{c2, c1}; !cmp.Equal(got, want) {
		t.Errorf("checkpoints = %v, want exactly %v", got, want)
	}
}

// testSupersededWrites: after a takeover, the old owner's pending writes,
// on a fresh task or colliding with the new owner's (a regular channel or
// __resume__), are refused and not stored; the new owner's stay.
func testSupersededWrites(t *testing.T, f *fixture) {
	l := f.line("thread-1", "")
	l.lease = owned("runner-a")
	c1 := l.step(t, set("x", `1`))
	f.clock.Advance(ttl + time.Second)
	f.putWrites(t, l.ref(c1), owned("runner-b"), task("task-1", wr("ch", `"current"`), wr(checkpoint.ChannelResume, `{"i1":"current"}`)))
	for _, tw := range []checkpoint.TaskWrites{
		task("task-1", wr("ch", `"stale"`)),
		task("task-1", wr(checkpoint.ChannelResume, `{"i1":"stale"}`)),
		task("task-fresh", wr("ch", `"stale"`)),
	} {
		err := f.s.PutWrites(t.Context(), checkpoint.WritesRequest{Ref: l.ref(c1), Lease: owned("runner-a"), Tasks: []checkpoint.TaskWrites{tw}})
		wantIs(t, "superseded owner's PutWrites of "+tw.TaskID+" "+tw.Writes[0].Channel, err, checkpoint.ErrThreadBusy)
	}
	f.wantPending(t, l.ref(c1), []writeView{
		{TaskID: "task-1", Channel: checkpoint.ChannelResume, Value: map[string]any{"i1": "current"}},
		{TaskID: "task-1", Channel: "ch", Value: "current"},
	})
	// The new owner recovers: its checkpoint and writes are durable.
	l.lease = owned("runner-b")
	c2 := l.step(t, set("ch", `"current"`))
	f.putWrites(t, l.ref(c2), l.lease, task("task-2", wr("ch", `"recovered"`)))
	f.wantPending(t, l.ref(c2), []writeView{{TaskID: "task-2", Channel: "ch", Value: "recovered"}})
	if got := f.headID(t, "thread-1", ""); got != c2 {
		t.Errorf("head = %s, want %s", got, c2)
	}
}

// testOwnershipPerThread: a lease covers one thread; other owners write
// other threads freely.
func testOwnershipPerThread(t *testing.T, f *fixture) {
	a := f.line("thread-1", "")
	a.lease = owned("runner-a")
	b := f.line("thread-2", "")
	b.lease = owned("runner-b")
	a.step(t, set("x", `1`))
	b.step(t, set("x", `1`))
	a.step(t, set("x", `2`))
	b.step(t, set("x", `2`))
	a.checkGet(t, "")
	b.checkGet(t, "")
}

// testOwnerRetry: the holder repeating a write is absorbed, not refused:
// idempotency and ownership are separate.
func testOwnerRetry(t *testing.T, f *fixture) {
	l := f.line("thread-1", "")
	l.lease = owned("runner-a")
	c1 := l.step(t, set("x", `1`))
	for i := 0; i < 2; i++ {
		f.putWrites(t, l.ref(c1), l.lease, task("task-1", wr("ch", `"v"`)))
	}
	f.wantPending(t, l.ref(c1), []writeView{{TaskID: "task-1", Channel: "ch", Value: "v"}})
}
