package checkpointtest

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/checkpoint"
)

// workSaver is a saver with both work capabilities.
type workSaver interface {
	checkpoint.Saver
	checkpoint.DueWork
	checkpoint.InputQueue
}

func hasWork(s checkpoint.Saver) bool { _, ok := s.(workSaver); return ok }

func workCases() []testCase {
	return []testCase{
		{name: "QueueOrderAndKeys", run: testQueueOrder},
		{name: "EnqueueMarksDue", run: testEnqueueMarksDue},
		{name: "ClaimedOnce", run: testClaimedOnce},
		{name: "UnsettledClaimIsDueAgain", run: testUnsettledClaim},
		{name: "SettleKeepHandsBack", run: testSettleKeep},
		{name: "SettleNoneDropsAndRunsTheQueue", run: testSettleNone},
		{name: "SettleLaterWaits", run: testSettleLater},
		{name: "ParkedUntilTheHeadMoves", run: testParked},
		{name: "ExpiredLeaseIsDue", run: testExpiredLeaseDue},
		{name: "LiveOrReleasedLeaseIsNotDue", run: testLiveLeaseNotDue},
		{name: "StaleSettleIsRefused", run: testStaleSettle},
		{name: "ReleaseKeepsDueWork", run: testReleaseKeepsDue},
		{name: "Hold", run: testHold},
		{name: "OldestFirstWithinTheLimit", run: testDueOrder},
		{name: "ConcurrentClaimsShareNothing", run: testConcurrentClaims},
		{name: "NextDue", run: testNextDue},
		{name: "DeleteThreadDropsTheQueue", run: testDeleteDropsQueue},
		{name: "Invalid", run: testWorkInvalid},
		{name: "SurvivesReopen", reopen: true, run: testWorkReopen},
	}
}

const workTTL = 30 * time.Second

func (f *fixture) work(t *testing.T) workSaver {
	t.Helper()
	ws, ok := f.s.(workSaver)
	if !ok {
		t.Fatalf("%T does not implement checkpoint.DueWork and checkpoint.InputQueue", f.s)
	}
	return ws
}

func input(thread, key string, n int) checkpoint.QueuedInput {
	return checkpoint.QueuedInput{Thread: thread, Key: key, Input: json.RawMessage(fmt.Sprintf(`{"n":%d}`, n))}
}

func (f *fixture) enqueue(t *testing.T, in checkpoint.QueuedInput) checkpoint.QueuedInput {
	t.Helper()
	got, added, err := f.work(t).Enqueue(t.Context(), in)
	if err != nil || !added {
		t.Fatalf("Enqueue(%q, %q) = added %v, %v; want added", in.Thread, in.Key, added, err)
	}
	return got
}

func (f *fixture) queued(t *testing.T, thread string) []checkpoint.QueuedInput {
	t.Helper()
	q, err := f.work(t).Queued(t.Context(), thread, 0)
	if err != nil {
		t.Fatalf("Queued(%q): %v", thread, err)
	}
	return q
}

// claimDue claims with n owners named after prefix.
func (f *fixture) claimDue(t *testing.T, prefix string, n int) checkpoint.DueBatch {
	t.Helper()
	q := checkpoint.DueQuery{Runner: "pool-" + prefix, TTL: workTTL}
	for i := range n {
		q.Owners = append(q.Owners, fmt.Sprintf("%s-%d", prefix, i))
	}
	b, err := f.work(t).ClaimDue(t.Context(), q)
	if err != nil {
		t.Fatalf("ClaimDue(%s, %d owners): %v", prefix, n, err)
	}
	return b
}

func dueThreads(b checkpoint.DueBatch) []string {
	var out []string
	for _, d := range b.Threads {
		out = append(out, d.Thread)
	}
	return out
}

func (f *fixture) settle(t *testing.T, s checkpoint.Settlement) {
	t.Helper()
	if err := f.work(t).Settle(t.Context(), s); err != nil {
		t.Fatalf("Settle(%+v): %v", s, err)
	}
}

// wantDue fails unless a claim of every due thread returns exactly threads
// (in that order); the claims are then settled with DueKeep, leaving the
// threads as they were.
func (f *fixture) wantDue(t *testing.T, what string, threads ...string) {
	t.Helper()
	b := f.claimDue(t, "probe", 16)
	if diff := cmp.Diff(threads, dueThreads(b)); diff != "" {
		t.Errorf("%s: due threads (-want +got):\n%s", what, diff)
	}
	for _, d := range b.Threads {
		f.settle(t, checkpoint.Settlement{Thread: d.Thread, Owner: d.Owner, Next: checkpoint.DueKeep})
	}
}

// testQueueOrder: inputs come back oldest first with growing IDs, the
// saver's time and the bytes given; a key already queued returns the
// queued input and adds nothing; queues are per thread; limit caps.
func testQueueOrder(t *testing.T, f *fixture) {
	a1 := f.enqueue(t, input("thread-a", "k1", 1))
	f.clock.Advance(time.Second)
	b1 := f.enqueue(t, input("thread-b", "k1", 10))
	a2 := f.enqueue(t, input("thread-a", "k2", 2))
	a3 := f.enqueue(t, input("thread-a", "k3", 3))
	if !(a1.ID < b1.ID && b1.ID < a2.ID && a2.ID < a3.ID) {
		t.Errorf("IDs %d, %d, %d, %d do not grow in enqueue order", a1.ID, b1.ID, a2.ID, a3.ID)
	}
	if !a1.CreatedAt.Equal(epoch) || !a2.CreatedAt.Equal(epoch.Add(time.Second)) {
		t.Errorf("CreatedAt %v, %v; want the saver's clock %v, %v", a1.CreatedAt, a2.CreatedAt, epoch, epoch.Add(time.Second))
	}
	want := []checkpoint.QueuedInput{a1, a2, a3}
	if diff := cmp.Diff(want, f.queued(t, "thread-a"), cmpOpts...); diff != "" {
		t.Errorf("Queued(thread-a) (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]checkpoint.QueuedInput{b1}, f.queued(t, "thread-b"), cmpOpts...); diff != "" {
		t.Errorf("Queued(thread-b) (-want +got):\n%s", diff)
	}
	got, added, err := f.work(t).Enqueue(t.Context(), input("thread-a", "k2", 99))
	if err != nil || added {
		t.Errorf("Enqueue of a queued key: added %v, %v; want the queued input, not added", added, err)
	}
	if diff := cmp.Diff(a2, got, cmpOpts...); diff != "" {
		t.Errorf("Enqueue of a queued key returned (-want +got):\n%s", diff)
	}
	first, err := f.work(t).Queued(t.Context(), "thread-a", 2)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want[:2], first, cmpOpts...); diff != "" {
		t.Errorf("Queued(thread-a, 2) (-want +got):\n%s", diff)
	}
	if q := f.queued(t, "thread-none"); len(q) != 0 {
		t.Errorf("Queued of a thread with no queue: %v", q)
	}
}

// testEnqueueMarksDue: input queued for a thread without checkpoints makes
// it due; its claim says so and how much is queued, and the claim's lease
// holds the thread (Claim by another owner is busy).
func testEnqueueMarksDue(t *testing.T, f *fixture) {
	f.wantDue(t, "before any input")
	f.enqueue(t, input("thread-1", "k1", 1))
	f.enqueue(t, input("thread-1", "k2", 2))
	b := f.claimDue(t, "w", 4)
	if len(b.Threads) != 1 {
		t.Fatalf("claimed %v, want thread-1", dueThreads(b))
	}
	d := b.Threads[0]
	if d.Thread != "thread-1" || d.Owner != "w-0" || d.Head != "" || d.Reason != checkpoint.DueMarked || d.Queued != 2 || d.Epoch == 0 {
		t.Errorf("claimed %+v; want thread-1 under w-0, no head, marked, 2 queued, an epoch", d)
	}
	wantBusy(t, "Claim while the due claim holds the thread", f.s.Claim(t.Context(), checkpoint.Ref{Thread: "thread-1"}, lease("other")),
		checkpoint.BusyError{Thread: "thread-1", Owner: "w-0", Runner: "pool-w", Until: epoch.Add(workTTL)})
}

// testClaimedOnce: a claimed thread is not claimed again while the claim's
// lease lives.
func testClaimedOnce(t *testing.T, f *fixture) {
	f.enqueue(t, input("thread-1", "k1", 1))
	if got := dueThreads(f.claimDue(t, "w", 1)); len(got) != 1 {
		t.Fatalf("first claim: %v", got)
	}
	f.clock.Advance(workTTL - time.Nanosecond)
	if got := dueThreads(f.claimDue(t, "x", 4)); len(got) != 0 {
		t.Errorf("claimed again while the first claim's lease lives: %v", got)
	}
}

// testUnsettledClaim: a claim whose worker dies (never settles) leaves the
// thread due once its lease lapses: reason expired, epoch grown.
func testUnsettledClaim(t *testing.T, f *fixture) {
	f.enqueue(t, input("thread-1", "k1", 1))
	first := f.claimDue(t, "w", 1).Threads[0]
	f.clock.Advance(workTTL)
	b := f.claimDue(t, "x", 1)
	if len(b.Threads) != 1 {
		t.Fatalf("after the lease lapsed: claimed %v, want thread-1", dueThreads(b))
	}
	if d := b.Threads[0]; d.Reason != checkpoint.DueExpired || d.Epoch <= first.Epoch || d.Queued != 1 {
		t.Errorf("claim after a dead claim: %+v; want reason expired, epoch above %d, 1 queued", d, first.Epoch)
	}
}

// testSettleKeep: a claim handed back (DueKeep) releases its lease, and the
// thread is claimed again at once.
func testSettleKeep(t *testing.T, f *fixture) {
	l := f.line("thread-1", "")
	l.lease = lease("run-1")
	l.step(t, set("x", `1`))
	f.enqueue(t, input("thread-1", "k1", 1))
	if got := dueThreads(f.claimDue(t, "w", 1)); len(got) != 0 {
		t.Errorf("claimed %v under a run's live lease", got)
	}
	if err := f.s.Release(t.Context(), "thread-1", "", "run-1"); err != nil {
		t.Fatal(err)
	}
	d := f.claimDue(t, "w", 1).Threads[0]
	if d.Head != l.head {
		t.Errorf("claim's head %q, want %q", d.Head, l.head)
	}
	f.settle(t, checkpoint.Settlement{Thread: "thread-1", Owner: d.Owner, Next: checkpoint.DueKeep})
	b := f.claimDue(t, "x", 1)
	if len(b.Threads) != 1 || b.Threads[0].Reason != checkpoint.DueMarked {
		t.Fatalf("after a hand-back: claimed %+v, want thread-1 (marked)", b.Threads)
	}
	// The run of a claim takes the lease over (same runner, TakeBack).
	if err := f.s.Claim(t.Context(), l.ref(l.head), checkpoint.Lease{Owner: "run-2", Runner: "pool-x", TTL: ttl, TakeBack: b.Threads[0].Owner}); err != nil {
		t.Errorf("the claim's runner taking its lease over: %v", err)
	}
}

// testSettleNone: DueNone drops the applied input; with input left the
// thread is due at once, and once the queue is empty nothing is due and a
// thread without checkpoints leaves no record.
func testSettleNone(t *testing.T, f *fixture) {
	in1 := f.enqueue(t, input("thread-1", "k1", 1))
	in2 := f.enqueue(t, input("thread-1", "k2", 2))
	d := f.claimDue(t, "w", 1).Threads[0]
	f.settle(t, checkpoint.Settlement{Thread: "thread-1", Owner: d.Owner, Drop: in1.ID, Next: checkpoint.DueNone})
	if diff := cmp.Diff([]checkpoint.QueuedInput{in2}, f.queued(t, "thread-1"), cmpOpts...); diff != "" {
		t.Errorf("queue after dropping k1 (-want +got):\n%s", diff)
	}
	b := f.claimDue(t, "x", 1)
	if len(b.Threads) != 1 || b.Threads[0].Queued != 1 {
		t.Fatalf("with input left: claimed %+v, want thread-1 with 1 queued", b.Threads)
	}
	f.settle(t, checkpoint.Settlement{Thread: "thread-1", Owner: b.Threads[0].Owner, Drop: in2.ID, Next: checkpoint.DueNone})
	f.wantDue(t, "after the queue ran")
	if q := f.queued(t, "thread-1"); len(q) != 0 {
		t.Errorf("queue after dropping everything: %v", q)
	}
	if li, ok := f.s.(checkpoint.LeaseInspector); ok {
		if _, err := li.Lease(t.Context(), "thread-1", ""); !errors.Is(err, checkpoint.ErrNotFound) {
			t.Errorf("a settled thread without checkpoints: Lease = %v, want ErrNotFound (no record left)", err)
		}
	}
}

// testSettleLater: DueLater makes the thread due after the wait, not
// before, and records the attempts; Next says how long.
func testSettleLater(t *testing.T, f *fixture) {
	l := f.line("thread-1", "")
	l.step(t, set("x", `1`))
	if err := f.s.Release(t.Context(), "thread-1", "", l.lease.Owner); err != nil {
		t.Fatal(err)
	}
	d, err := f.work(t).Hold(t.Context(), "thread-1", checkpoint.Lease{Owner: "w-0", Runner: "pool-w", TTL: workTTL})
	if err != nil {
		t.Fatal(err)
	}
	f.settle(t, checkpoint.Settlement{Thread: "thread-1", Owner: d.Owner, Next: checkpoint.DueLater, After: 5 * time.Second, Attempts: 3})
	b := f.claimDue(t, "x", 1)
	if len(b.Threads) != 0 || b.Next != 5*time.Second {
		t.Errorf("before the wait: claimed %v, Next %v; want nothing, Next 5s", dueThreads(b), b.Next)
	}
	f.clock.Advance(5*time.Second - time.Nanosecond)
	f.wantDue(t, "1ns before the wait ends")
	f.clock.Advance(time.Nanosecond)
	b = f.claimDue(t, "y", 1)
	if len(b.Threads) != 1 || b.Threads[0].Attempts != 3 || b.Threads[0].Reason != checkpoint.DueMarked {
		t.Errorf("after the wait: claimed %+v, want thread-1 with 3 attempts, marked", b.Threads)
	}
}

// testParked: input parked behind the head (the thread waits on an
// interrupt) is not due until the head moves; then it is (reason parked).
func testParked(t *testing.T, f *fixture) {
	l := f.line("thread-1", "")
	l.step(t, set("x", `1`))
	if err := f.s.Release(t.Context(), "thread-1", "", l.lease.Owner); err != nil {
		t.Fatal(err)
	}
	f.enqueue(t, input("thread-1", "k1", 1))
	d := f.claimDue(t, "w", 1).Threads[0]
	f.settle(t, checkpoint.Settlement{Thread: "thread-1", Owner: d.Owner, Next: checkpoint.DuePark, Park: l.head})
	f.wantDue(t, "parked on the head")
	f.enqueue(t, input("thread-1", "k2", 2))
	f.wantDue(t, "input queued behind a parked queue")
	l.step(t, set("x", `2`)) // a resume moved the head
	if err := f.s.Release(t.Context(), "thread-1", "", l.lease.Owner); err != nil {
		t.Fatal(err)
	}
	b := f.claimDue(t, "x", 1)
	if len(b.Threads) != 1 || b.Threads[0].Reason != checkpoint.DueParked || b.Threads[0].Queued != 2 {
		t.Fatalf("after the head moved: claimed %+v, want thread-1, parked, 2 queued", b.Threads)
	}
	// Park with nothing queued is as DueNone.
	f.settle(t, checkpoint.Settlement{Thread: "thread-1", Owner: b.Threads[0].Owner, Next: checkpoint.DueNone})
	d = f.claimDue(t, "y", 1).Threads[0]
	for _, in := range f.queued(t, "thread-1") {
		f.settle(t, checkpoint.Settlement{Thread: "thread-1", Owner: d.Owner, Drop: in.ID, Next: checkpoint.DueKeep})
		d = f.claimDue(t, "y", 1).Threads[0]
	}
	f.settle(t, checkpoint.Settlement{Thread: "thread-1", Owner: d.Owner, Next: checkpoint.DuePark, Park: "elsewhere"})
	f.wantDue(t, "parked with nothing queued")

	// A thread with no checkpoint parks on "" until it has one.
	f.enqueue(t, input("thread-new", "k1", 1))
	d = f.claimDue(t, "z", 1).Threads[0]
	f.settle(t, checkpoint.Settlement{Thread: "thread-new", Owner: d.Owner, Next: checkpoint.DuePark, Park: ""})
	f.wantDue(t, "parked on no checkpoint")
	n := f.line("thread-new", "")
	n.step(t, set("x", `1`))
	if err := f.s.Release(t.Context(), "thread-new", "", n.lease.Owner); err != nil {
		t.Fatal(err)
	}
	f.wantDue(t, "parked on no checkpoint, once it has one", "thread-new")
}

// testExpiredLeaseDue: a thread whose runner died mid-run (its lease
// expired, never released) is due, with no mark of its own; its claim
// grows the epoch and names the head.
func testExpiredLeaseDue(t *testing.T, f *fixture) {
	l := f.line("thread-1", "")
	l.lease = checkpoint.Lease{Owner: "run-dead", TTL: ttl}
	l.step(t, set("x", `1`))
	l.step(t, set("x", `2`))
	f.clock.Advance(ttl - time.Nanosecond)
	f.wantDue(t, "1ns before the dead run's lease ends")
	f.clock.Advance(time.Nanosecond)
	var before uint64
	if li, ok := f.s.(checkpoint.LeaseInspector); ok {
		info, err := li.Lease(t.Context(), "thread-1", "")
		if err != nil {
			t.Fatal(err)
		}
		before = info.Epoch
	}
	b := f.claimDue(t, "w", 2)
	if len(b.Threads) != 1 {
		t.Fatalf("claimed %v, want thread-1", dueThreads(b))
	}
	d := b.Threads[0]
	if d.Reason != checkpoint.DueExpired || d.Head != l.head || d.Queued != 0 || (before != 0 && d.Epoch != before+1) {
		t.Errorf("claimed %+v; want reason expired, head %s, nothing queued, epoch %d", d, l.head, before+1)
	}
	// The dead run's writes are refused now.
	req := l.request(t, l.head, set("x", `3`))
	wantBusy(t, "the dead run's Put after the claim", f.s.Put(t.Context(), req),
		checkpoint.BusyError{Thread: "thread-1", Owner: "w-0", Runner: "pool-w", Until: f.clock.Now().Add(workTTL)})
	// Settled with nothing to do, the thread is not due any more.
	f.settle(t, checkpoint.Settlement{Thread: "thread-1", Owner: d.Owner, Next: checkpoint.DueNone})
	f.wantDue(t, "after the claim settled")
}

// testLiveLeaseNotDue: neither a live lease nor a released one makes a
// thread due. A write in a subgraph's namespace takes the thread's one
// lease, so when that lapses unreleased the thread is due.
func testLiveLeaseNotDue(t *testing.T, f *fixture) {
	live := f.line("thread-live", "")
	live.lease = checkpoint.Lease{Owner: "run-live", TTL: time.Hour}
	live.step(t, set("x", `1`))
	done := f.line("thread-done", "")
	done.step(t, set("x", `1`))
	if err := f.s.Release(t.Context(), "thread-done", "", done.lease.Owner); err != nil {
		t.Fatal(err)
	}
	child := f.line("thread-child", "child:abc")
	child.lease = checkpoint.Lease{Owner: "run-child", TTL: ttl}
	child.step(t, set("x", `1`))
	f.clock.Advance(ttl)
	f.wantDue(t, "live, released and subgraph leases", "thread-child")
}

// testStaleSettle: a Settle by a claim that another claim replaced writes
// nothing and matches ErrClaimLost; the current claimer's Settle counts.
func testStaleSettle(t *testing.T, f *fixture) {
	in := f.enqueue(t, input("thread-1", "k1", 1))
	old := f.claimDue(t, "w", 1).Threads[0]
	f.clock.Advance(workTTL)
	cur := f.claimDue(t, "x", 1).Threads[0]
	err := f.work(t).Settle(t.Context(), checkpoint.Settlement{Thread: "thread-1", Owner: old.Owner, Drop: in.ID, Next: checkpoint.DueNone})
	if !errors.Is(err, checkpoint.ErrClaimLost) {
		t.Errorf("stale Settle: %v, want ErrClaimLost", err)
	}
	if q := f.queued(t, "thread-1"); len(q) != 1 {
		t.Errorf("stale Settle dropped the input: queue %v", q)
	}
	wantBusy(t, "Claim after a stale Settle", f.s.Claim(t.Context(), checkpoint.Ref{Thread: "thread-1"}, lease("other")),
		checkpoint.BusyError{Thread: "thread-1", Owner: cur.Owner, Runner: "pool-x", Until: f.clock.Now().Add(workTTL)})
	f.settle(t, checkpoint.Settlement{Thread: "thread-1", Owner: cur.Owner, Drop: in.ID, Next: checkpoint.DueNone})
	f.wantDue(t, "after the current claim settled")
	if err := f.work(t).Settle(t.Context(), checkpoint.Settlement{Thread: "thread-1", Owner: cur.Owner, Next: checkpoint.DueLater, After: time.Second}); err != nil && !errors.Is(err, checkpoint.ErrClaimLost) {
		t.Errorf("second Settle of one claim: %v, want nil (thread gone) or ErrClaimLost", err)
	}
	f.clock.Advance(time.Hour)
	f.wantDue(t, "a second Settle of a settled claim")
}

// testReleaseKeepsDue: releasing a claim's lease (instead of settling it)
// on a thread without checkpoints drops neither the thread's record, nor
// its due mark, nor its queue: it is due again at once, for any worker.
func testReleaseKeepsDue(t *testing.T, f *fixture) {
	in := f.enqueue(t, input("thread-q", "k1", 1))
	d := f.claimDue(t, "w", 1).Threads[0]
	if err := f.s.Release(t.Context(), "thread-q", "", d.Owner); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]checkpoint.QueuedInput{in}, f.queued(t, "thread-q"), cmpOpts...); diff != "" {
		t.Errorf("queue after the claim's lease was released (-want +got):\n%s", diff)
	}
	f.wantDue(t, "queued input whose claim was released", "thread-q")
	f.clock.Advance(time.Second)
	h, err := f.work(t).Hold(t.Context(), "thread-h", checkpoint.Lease{Owner: "h", Runner: "pool", TTL: workTTL})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.s.Release(t.Context(), "thread-h", "", h.Owner); err != nil {
		t.Fatal(err)
	}
	f.wantDue(t, "a hold released unsettled", "thread-q", "thread-h")
}

// testHold: Hold claims a thread whatever is due, says what was, creates
// the record of a new thread, and is busy (claiming nothing) on another
// owner's live lease unless taking its own runner's lease back.
func testHold(t *testing.T, f *fixture) {
	ws := f.work(t)
	hold := checkpoint.Lease{Owner: "h-1", Runner: "pool-h", TTL: workTTL}
	d, err := ws.Hold(t.Context(), "thread-new", hold)
	if err != nil {
		t.Fatal(err)
	}
	if d.Thread != "thread-new" || d.Owner != "h-1" || d.Reason != "" || d.Head != "" || d.Queued != 0 {
		t.Errorf("Hold of a new thread: %+v", d)
	}
	wantBusy(t, "Claim of a held new thread", f.s.Claim(t.Context(), checkpoint.Ref{Thread: "thread-new"}, lease("other")),
		checkpoint.BusyError{Thread: "thread-new", Owner: "h-1", Runner: "pool-h", Until: epoch.Add(workTTL)})
	_, err = ws.Hold(t.Context(), "thread-new", checkpoint.Lease{Owner: "h-2", Runner: "pool-other", TTL: workTTL})
	wantBusy(t, "Hold of a held thread", err, checkpoint.BusyError{Thread: "thread-new", Owner: "h-1", Runner: "pool-h", Until: epoch.Add(workTTL)})
	d2, err := ws.Hold(t.Context(), "thread-new", checkpoint.Lease{Owner: "h-3", Runner: "pool-h", TTL: workTTL, TakeBack: "h-1"})
	if err != nil {
		t.Fatalf("Hold taking back its runner's lease: %v", err)
	}
	if d2.Epoch <= d.Epoch {
		t.Errorf("Hold taking back: epoch %d, want above %d", d2.Epoch, d.Epoch)
	}
	if err := ws.Settle(t.Context(), checkpoint.Settlement{Thread: "thread-new", Owner: "h-1", Next: checkpoint.DueNone}); !errors.Is(err, checkpoint.ErrClaimLost) {
		t.Errorf("Settle of the replaced hold: %v, want ErrClaimLost", err)
	}
	f.settle(t, checkpoint.Settlement{Thread: "thread-new", Owner: "h-3", Next: checkpoint.DueNone})
	f.wantDue(t, "after the hold settled")

	f.enqueue(t, input("thread-q", "k1", 1))
	d, err = ws.Hold(t.Context(), "thread-q", hold)
	if err != nil {
		t.Fatal(err)
	}
	if d.Reason != checkpoint.DueMarked || d.Queued != 1 {
		t.Errorf("Hold of a thread with queued input: %+v, want marked, 1 queued", d)
	}
	f.settle(t, checkpoint.Settlement{Thread: "thread-q", Owner: d.Owner, Next: checkpoint.DueKeep})
	f.wantDue(t, "a refused hold handed back", "thread-q")
}

// testDueOrder: claims take the threads due the longest first, at most one
// per owner, and leave the rest due.
func testDueOrder(t *testing.T, f *fixture) {
	for i, th := range []string{"thread-c", "thread-a", "thread-d", "thread-b"} {
		f.enqueue(t, input(th, "k", i))
		f.clock.Advance(time.Second)
	}
	if got, want := dueThreads(f.claimDue(t, "w", 2)), []string{"thread-c", "thread-a"}; !cmp.Equal(got, want) {
		t.Errorf("first claim: %v, want %v", got, want)
	}
	if got, want := dueThreads(f.claimDue(t, "x", 5)), []string{"thread-d", "thread-b"}; !cmp.Equal(got, want) {
		t.Errorf("second claim: %v, want %v", got, want)
	}
	if got := dueThreads(f.claimDue(t, "y", 0)); len(got) != 0 {
		t.Errorf("a claim with no owners: %v", got)
	}
}

// testConcurrentClaims: workers claiming at once never get one thread
// twice, and between them get every due thread.
func testConcurrentClaims(t *testing.T, f *fixture) {
	const threads, workers = 40, 8
	for i := range threads {
		f.enqueue(t, input(fmt.Sprintf("thread-%02d", i), "k", i))
	}
	var (
		mu   sync.Mutex
		seen = map[string]string{}
		wg   sync.WaitGroup
	)
	for w := range workers {
		wg.Go(func() {
			for round := 0; ; round++ {
				q := checkpoint.DueQuery{Runner: "pool", TTL: workTTL}
				for i := range 3 {
					q.Owners = append(q.Owners, fmt.Sprintf("w%d-%d-%d", w, round, i))
				}
				b, err := f.work(t).ClaimDue(t.Context(), q)
				if err != nil {
					t.Errorf("worker %d: ClaimDue: %v", w, err)
					return
				}
				if len(b.Threads) == 0 {
					return
				}
				mu.Lock()
				for _, d := range b.Threads {
					if prev, dup := seen[d.Thread]; dup {
						t.Errorf("thread %s claimed by %s and by %s", d.Thread, prev, d.Owner)
					}
					seen[d.Thread] = d.Owner
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(seen) != threads {
		t.Errorf("claimed %d threads, want %d", len(seen), threads)
	}
}

// testNextDue: Next is the wait until the earliest live lease ends or
// scheduled retry falls due.
func testNextDue(t *testing.T, f *fixture) {
	if b := f.claimDue(t, "w", 1); b.Next != 0 {
		t.Errorf("an empty saver: Next %v, want 0", b.Next)
	}
	l := f.line("thread-1", "")
	l.lease = checkpoint.Lease{Owner: "run-1", TTL: 20 * time.Second}
	l.step(t, set("x", `1`))
	f.clock.Advance(5 * time.Second)
	if b := f.claimDue(t, "w", 1); len(b.Threads) != 0 || b.Next != 15*time.Second {
		t.Errorf("a live lease ending in 15s: claimed %v, Next %v", dueThreads(b), b.Next)
	}
	d, err := f.work(t).Hold(t.Context(), "thread-2", checkpoint.Lease{Owner: "h", Runner: "pool", TTL: workTTL})
	if err != nil {
		t.Fatal(err)
	}
	f.settle(t, checkpoint.Settlement{Thread: "thread-2", Owner: d.Owner, Next: checkpoint.DueLater, After: 3 * time.Second})
	if b := f.claimDue(t, "w", 1); len(b.Threads) != 0 || b.Next != 3*time.Second {
		t.Errorf("a retry due in 3s: claimed %v, Next %v", dueThreads(b), b.Next)
	}
}

// testDeleteDropsQueue: DeleteThread removes the thread's queue and its
// due mark.
func testDeleteDropsQueue(t *testing.T, f *fixture) {
	l := f.line("thread-1", "")
	l.step(t, set("x", `1`))
	f.enqueue(t, input("thread-1", "k1", 1))
	f.enqueue(t, input("thread-2", "k1", 1))
	if err := f.s.DeleteThread(t.Context(), "thread-1"); err != nil {
		t.Fatal(err)
	}
	if q := f.queued(t, "thread-1"); len(q) != 0 {
		t.Errorf("queue after DeleteThread: %v", q)
	}
	f.wantDue(t, "after DeleteThread", "thread-2")
	if err := f.work(t).Settle(t.Context(), checkpoint.Settlement{Thread: "thread-1", Owner: "anyone", Next: checkpoint.DueNone}); err != nil {
		t.Errorf("Settle of a deleted thread: %v, want nil", err)
	}
}

// testWorkInvalid: malformed requests are refused with ErrInvalid and
// change nothing.
func testWorkInvalid(t *testing.T, f *fixture) {
	ws := f.work(t)
	ctx := t.Context()
	for _, in := range []checkpoint.QueuedInput{
		{Thread: "", Key: "k", Input: json.RawMessage(`{}`)},
		{Thread: "t", Key: "", Input: json.RawMessage(`{}`)},
		{Thread: "t", Key: "bad\x00key", Input: json.RawMessage(`{}`)},
		{Thread: "t", Key: string(make([]byte, checkpoint.MaxRunKeyBytes+1)), Input: json.RawMessage(`{}`)},
		{Thread: "t", Key: "k", Input: json.RawMessage(`[1]`)},
		{Thread: "t", Key: "k", Input: json.RawMessage(`{"a":`)},
		{Thread: "t", Key: "k", Input: nil},
		{Thread: "t", Key: "k", Input: json.RawMessage(`null`)},
	} {
		_, _, err := ws.Enqueue(ctx, in)
		wantIs(t, fmt.Sprintf("Enqueue(%q, %q, %q)", in.Thread, in.Key, in.Input), err, checkpoint.ErrInvalid)
	}
	_, err := ws.ClaimDue(ctx, checkpoint.DueQuery{Owners: []string{"a"}, TTL: 0})
	wantIs(t, "ClaimDue with TTL 0", err, checkpoint.ErrInvalid)
	_, err = ws.ClaimDue(ctx, checkpoint.DueQuery{Owners: []string{"a", ""}, TTL: time.Second})
	wantIs(t, "ClaimDue with an empty owner", err, checkpoint.ErrInvalid)
	_, err = ws.Hold(ctx, "", checkpoint.Lease{Owner: "a", TTL: time.Second})
	wantIs(t, "Hold of an empty thread", err, checkpoint.ErrInvalid)
	_, err = ws.Hold(ctx, "t", checkpoint.Lease{Owner: "", TTL: time.Second})
	wantIs(t, "Hold with an empty owner", err, checkpoint.ErrInvalid)
	_, err = ws.Hold(ctx, "t", checkpoint.Lease{Owner: "a"})
	wantIs(t, "Hold with TTL 0", err, checkpoint.ErrInvalid)
	for _, s := range []checkpoint.Settlement{
		{Thread: "", Owner: "a"},
		{Thread: "t", Owner: ""},
		{Thread: "t", Owner: "a", Next: checkpoint.DueLater, After: -time.Second},
		{Thread: "t", Owner: "a", Next: checkpoint.DuePark + 1},
		{Thread: "t", Owner: "a", Attempts: -1},
	} {
		wantIs(t, fmt.Sprintf("Settle(%+v)", s), ws.Settle(ctx, s), checkpoint.ErrInvalid)
	}
	_, err = ws.Queued(ctx, "", 0)
	wantIs(t, "Queued of an empty thread", err, checkpoint.ErrInvalid)
	_, err = ws.Queued(ctx, "t", -1)
	wantIs(t, "Queued with a negative limit", err, checkpoint.ErrInvalid)
	if q := f.queued(t, "t"); len(q) != 0 {
		t.Errorf("refused requests queued %v", q)
	}
	f.wantDue(t, "after refused requests")
}

// testWorkReopen: queued input, due marks, parked queues and the claim of
// a thread survive a reopen.
func testWorkReopen(t *testing.T, f *fixture) {
	in1 := f.enqueue(t, input("thread-q", "k1", 1))
	in2 := f.enqueue(t, input("thread-q", "k2", 2))
	d, err := f.work(t).Hold(t.Context(), "thread-later", checkpoint.Lease{Owner: "h", Runner: "pool", TTL: workTTL})
	if err != nil {
		t.Fatal(err)
	}
	f.settle(t, checkpoint.Settlement{Thread: "thread-later", Owner: d.Owner, Next: checkpoint.DueLater, After: time.Minute, Attempts: 2})
	f.reopen(t)
	if diff := cmp.Diff([]checkpoint.QueuedInput{in1, in2}, f.queued(t, "thread-q"), cmpOpts...); diff != "" {
		t.Errorf("queue after reopen (-want +got):\n%s", diff)
	}
	in3 := f.enqueue(t, input("thread-q", "k3", 3))
	if in3.ID <= in2.ID {
		t.Errorf("an input queued after reopen has ID %d, not above %d", in3.ID, in2.ID)
	}
	f.wantDue(t, "after reopen", "thread-q")
	f.clock.Advance(time.Minute)
	b := f.claimDue(t, "w", 4)
	if got := dueThreads(b); !cmp.Equal(got, []string{"thread-q", "thread-later"}) {
		t.Errorf("after the retry's wait: %v", got)
	}
	for _, d := range b.Threads {
		if d.Thread == "thread-later" && d.Attempts != 2 {
			t.Errorf("attempts after reopen: %d, want 2", d.Attempts)
		}
	}
}
