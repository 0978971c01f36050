package checkpointtest

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/checkpoint"
)

// takeBackCases are lease cases every saver passes: a runner takes back a
// lease one of its own runs holds.
func takeBackCases() []testCase {
	return []testCase{
		{name: "RunnerTakesBackItsOwnLease", run: testTakeBack},
		{name: "TakeBackOnEveryPath", run: testTakeBackPaths},
	}
}

// of is a lease of owner for runner.
func of(owner, runner string) checkpoint.Lease {
	return checkpoint.Lease{Owner: owner, Runner: runner, TTL: ttl}
}

// back is a lease of owner for runner that takes back the lease of run
// from, which it states has ended.
func back(owner, runner, from string) checkpoint.Lease {
	l := of(owner, runner)
	l.TakeBack = from
	return l
}

// refusedEverywhere checks that Put, PutWrites and Claim with lease ls
// each fail with want and write nothing.
func refusedEverywhere(t *testing.T, f *fixture, l *line, what string, ls checkpoint.Lease, want checkpoint.BusyError) {
	t.Helper()
	before := f.dump(t, l.thread)
	req := l.request(t, l.head, set("x", `"intruder"`))
	req.Lease = ls
	wantBusy(t, what+": Put", f.s.Put(t.Context(), req), want)
	err := f.s.PutWrites(t.Context(), checkpoint.WritesRequest{Ref: l.ref(l.head), Lease: ls, Tasks: []checkpoint.TaskWrites{
		task("task-intruder", wr(checkpoint.ChannelResume, `{"i":"intruder"}`)),
	}})
	wantBusy(t, what+": PutWrites", err, want)
	wantBusy(t, what+": Claim", f.s.Claim(t.Context(), l.ref(l.head), ls), want)
	f.unchanged(t, what, l.thread, before)
}

// testTakeBack: while run a of runner R holds a live lease, a request by
// another run of R that names run a in TakeBack takes it over at once.
// Every other request is refused with a *BusyError, through Put,
// PutWrites and Claim alike, and writes nothing: another run of R without
// TakeBack (the error says the holder is the requester's own runner's:
// SameRunner), one that names another run of R than the holder (a run
// that ended, say, while the holder is a live run that claimed the thread
// since: two live runs of one runner are kept apart as two runners are),
// a TakeBack by another runner, by a lease with no runner, or with Held.
// The run that lost the lease is refused in turn, naming the new holder,
// and so is a later request that names run a again: its lease has passed
// to run b.
func testTakeBack(t *testing.T, f *fixture) {
	l := f.line("thread-1", "")
	l.lease = of("run-a", "runner-r")
	start := f.clock.Now()
	l.step(t, set("x", `1`))
	holder := checkpoint.BusyError{Thread: "thread-1", Owner: "run-a", Runner: "runner-r", Until: start.Add(ttl)}
	mine := holder
	mine.SameRunner = true
	refusedEverywhere(t, f, l, "another run of the runner without TakeBack", of("run-b", "runner-r"), mine)
	refusedEverywhere(t, f, l, "TakeBack naming another run of the runner than the holder", back("run-b", "runner-r", "run-z"), mine)
	refusedEverywhere(t, f, l, "TakeBack by another runner", back("run-q", "runner-q", "run-a"), holder)
	refusedEverywhere(t, f, l, "TakeBack with no runner", back("run-n", "", "run-a"), holder)
	held := back("run-b", "runner-r", "run-a")
	held.Held = true
	wantBusy(t, "Held TakeBack", f.s.Claim(t.Context(), l.ref(l.head), held), mine)

	at := f.clock.Advance(time.Second)
	f.claim(t, l.ref(l.head), back("run-b", "runner-r", "run-a"))
	now := checkpoint.BusyError{Thread: "thread-1", Owner: "run-b", Runner: "runner-r", Until: at.Add(ttl)}
	busyAttempts(t, f, l, "run-a", now) // the run that lost it (no runner named: not SameRunner)
	mineNow := now
	mineNow.SameRunner = true
	refusedEverywhere(t, f, l, "TakeBack naming the run that lost the lease", back("run-c", "runner-r", "run-a"), mineNow)
	l.lease = of("run-b", "runner-r")
	l.step(t, set("x", `2`))
	l.checkGet(t, "")
}

// testTakeBackPaths: Put and PutWrites take a lease back as Claim does.
func testTakeBackPaths(t *testing.T, f *fixture) {
	l := f.line("thread-1", "")
	l.lease = of("run-a", "runner-r")
	l.step(t, set("x", `1`))
	l.lease = back("run-b", "runner-r", "run-a")
	l.step(t, set("x", `2`)) // Put takes it back
	f.putWrites(t, l.ref(l.head), back("run-c", "runner-r", "run-b"), task("task-1", wr("y", `1`)))
	at := f.clock.Now()
	busyAttempts(t, f, l, "run-b", checkpoint.BusyError{Thread: "thread-1", Owner: "run-c", Runner: "runner-r", Until: at.Add(ttl)})
	f.wantPending(t, l.ref(l.head), []writeView{{TaskID: "task-1", Channel: "y", Value: 1.0}})
}

func leaseInspectorCases() []testCase {
	return []testCase{
		{name: "EpochCountsClaims", run: testEpochs},
		{name: "BusyErrorNamesTheEpoch", run: testBusyEpoch},
		{name: "UnknownThread", run: testLeaseUnknown},
		{name: "SurvivesReopen", reopen: true, run: testLeaseReopen},
	}
}

// wantLease fails the test unless the saver reports want for the thread.
func (f *fixture) wantLease(t *testing.T, what string, want checkpoint.LeaseInfo) {
	t.Helper()
	got, err := f.s.(checkpoint.LeaseInspector).Lease(t.Context(), want.Thread, want.NS)
	if err != nil {
		t.Fatalf("%s: Lease(%q, %q): %v", what, want.Thread, want.NS, err)
	}
	if diff := cmp.Diff(want, got, cmpOpts...); diff != "" {
		t.Errorf("%s: LeaseInfo mismatch (-want +got):\n%s", what, diff)
	}
}

// testEpochs: the epoch is 1 after a new thread's first Put and grows by
// one each time the lease passes to an owner that did not hold it (after
// it expired, after a release, by a take-back, through Claim, Put or
// PutWrites); a renewal, a save by the holder, and the holder taking its
// own expired lease again untaken keep it. Lease reports the owner, its
// runner, the epoch and the end; a released lease has no owner, runner or
// end, and keeps its epoch.
func testEpochs(t *testing.T, f *fixture) {
	info := func(owner, runner string, epoch uint64, until time.Time) checkpoint.LeaseInfo {
		return checkpoint.LeaseInfo{Thread: "thread-1", Owner: owner, Runner: runner, Epoch: epoch, Until: until}
	}
	l := f.line("thread-1", "")
	l.lease = of("run-a", "runner-r")
	start := f.clock.Now()
	l.step(t, set("x", `1`))
	f.wantLease(t, "the first Put", info("run-a", "runner-r", 1, start.Add(ttl)))
	at := f.clock.Advance(time.Second)
	f.claim(t, l.ref(l.head), l.lease)
	l.step(t, set("x", `2`))
	f.putWrites(t, l.ref(l.head), l.lease, task("task-1", wr("y", `1`)))
	f.wantLease(t, "renewed and saved by the holder", info("run-a", "runner-r", 1, at.Add(ttl)))
	at = f.clock.Advance(ttl + time.Second)
	f.claim(t, l.ref(l.head), l.lease)
	f.wantLease(t, "the holder's expired lease taken again untaken", info("run-a", "runner-r", 1, at.Add(ttl)))

	at = f.clock.Advance(ttl + time.Second)
	f.claim(t, l.ref(l.head), of("run-b", "runner-q"))
	f.wantLease(t, "taken over after it expired", info("run-b", "runner-q", 2, at.Add(ttl)))
	if err := f.s.Release(t.Context(), "thread-1", "", "run-b"); err != nil {
		t.Fatal(err)
	}
	f.wantLease(t, "released", info("", "", 2, time.Time{}))
	at = f.clock.Now()
	l.lease = of("run-b", "runner-q")
	l.step(t, set("x", `3`))
	f.wantLease(t, "the same owner after its release (Put)", info("run-b", "runner-q", 3, at.Add(ttl)))
	at = f.clock.Advance(time.Second)
	l.lease = back("run-c", "runner-q", "run-b")
	l.step(t, set("x", `4`))
	f.wantLease(t, "taken back (Put)", info("run-c", "runner-q", 4, at.Add(ttl)))
	at = f.clock.Advance(ttl + time.Second)
	f.putWrites(t, l.ref(l.head), of("run-d", ""), task("task-2", wr("y", `2`)))
	f.wantLease(t, "taken over (PutWrites)", info("run-d", "", 5, at.Add(ttl)))
	req := l.request(t, l.head, set("x", `5`))
	req.Lease, req.Release = of("run-e", "runner-r"), true
	f.clock.Advance(ttl + time.Second)
	l.put(t, req)
	f.wantLease(t, "taken over and released in one Put", info("", "", 6, time.Time{}))
}

// testBusyEpoch: a *BusyError names the holder's epoch and runner.
func testBusyEpoch(t *testing.T, f *fixture) {
	l := f.line("thread-1", "")
	l.lease = of("run-a", "runner-r")
	l.step(t, set("x", `1`))
	at := f.clock.Advance(ttl + time.Second)
	f.claim(t, l.ref(l.head), of("run-b", "runner-q"))
	wantBusy(t, "the first holder after the takeover", f.s.Claim(t.Context(), l.ref(l.head), of("run-a", "runner-r")),
		checkpoint.BusyError{Thread: "thread-1", Owner: "run-b", Runner: "runner-q", Epoch: 2, Until: at.Add(ttl)})
}

// testLeaseUnknown: Lease of a thread the saver holds nothing of is
// ErrNotFound; of an empty thread, ErrInvalid. A thread whose Claim-only
// lease was released is gone again.
func testLeaseUnknown(t *testing.T, f *fixture) {
	li := f.s.(checkpoint.LeaseInspector)
	if _, err := li.Lease(t.Context(), "nobody", ""); !errors.Is(err, checkpoint.ErrNotFound) {
		t.Errorf("Lease of an unknown thread: %v, want ErrNotFound", err)
	}
	if _, err := li.Lease(t.Context(), "", ""); !errors.Is(err, checkpoint.ErrInvalid) {
		t.Errorf("Lease of an empty thread: %v, want ErrInvalid", err)
	}
	start := f.clock.Now()
	f.claim(t, checkpoint.Ref{Thread: "thread-1"}, of("run-a", "runner-r"))
	f.wantLease(t, "a Claim of a new thread", checkpoint.LeaseInfo{Thread: "thread-1", Owner: "run-a", Runner: "runner-r", Epoch: 1, Until: start.Add(ttl)})
	if err := f.s.Release(t.Context(), "thread-1", "", "run-a"); err != nil {
		t.Fatal(err)
	}
	if _, err := li.Lease(t.Context(), "thread-1", ""); !errors.Is(err, checkpoint.ErrNotFound) {
		t.Errorf("Lease after a Claim-only lease was released: %v, want ErrNotFound", err)
	}
}

// testLeaseReopen: the lease, its runner and its epoch survive a reopen,
// and the epoch goes on growing from where it was.
func testLeaseReopen(t *testing.T, f *fixture) {
	l := f.line("thread-1", "")
	l.lease = of("run-a", "runner-r")
	l.step(t, set("x", `1`))
	at := f.clock.Advance(ttl + time.Second)
	f.claim(t, l.ref(l.head), of("run-b", "runner-q"))
	f.reopen(t)
	f.wantLease(t, "after a reopen", checkpoint.LeaseInfo{Thread: "thread-1", Owner: "run-b", Runner: "runner-q", Epoch: 2, Until: at.Add(ttl)})
	at = f.clock.Advance(ttl + time.Second)
	f.claim(t, l.ref(l.head), of("run-c", "runner-q"))
	f.wantLease(t, "claimed after a reopen", checkpoint.LeaseInfo{Thread: "thread-1", Owner: "run-c", Runner: "runner-q", Epoch: 3, Until: at.Add(ttl)})
}
