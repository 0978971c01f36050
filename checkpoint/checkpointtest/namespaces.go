package checkpointtest

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/checkpoint"
)

// namespaceCases pin what a thread's namespaces share: a subgraph's
// checkpoints live in the namespace of the task that runs it
// (checkpoint.TaskNS), with a head, history and pending writes of their
// own, under the one lease of the thread, and go with the thread when it
// is deleted or pruned. Cases that need an optional interface skip
// themselves when the saver does not implement it.
func namespaceCases() []testCase {
	return []testCase{
		{name: "OneLeaseForEveryNamespace", run: testNamespaceLease},
		{name: "TakingTheThreadInANamespaceTakesItAll", run: testNamespaceTakeover},
		{name: "ReleaseFromAnyNamespace", run: testNamespaceRelease},
		{name: "EpochIsTheThreads", run: testNamespaceEpoch},
		{name: "FirstPutOfANamespace", run: testNamespaceFirstPut},
		{name: "PruneDropsTheSubgraphsOfPrunedCheckpoints", run: testPruneNested},
		{name: "ThreadsListsAThreadOnce", run: testNamespaceThreads},
		{name: "PendingInterruptsOfTheRootOnly", run: testNamespaceInterrupts},
		{name: "DeleteThreadRemovesNestedNamespaces", run: testNamespaceDelete},
	}
}

const (
	nsA  = "agent:task-1"              // a subgraph of the root graph
	nsAB = "agent:task-1|tools:task-2" // a subgraph of that subgraph
)

// nested returns a line in namespace ns of thread whose checkpoints name
// parents, as the graph runtime writes them (checkpoint.Metadata.Parents).
func (f *fixture) nested(thread, ns string, parents map[string]string) *nestedLine {
	return &nestedLine{line: f.line(thread, ns), parents: parents}
}

type nestedLine struct {
	*line
	parents map[string]string
}

func (l *nestedLine) step(t *testing.T, changes ...change) string {
	t.Helper()
	req := l.request(t, l.head, changes...)
	req.Checkpoint.Metadata.Parents = l.parents
	return l.put(t, req)
}

// testNamespaceLease: the lease the root's writes took covers every
// namespace of the thread. Its holder writes subgraph checkpoints and
// pending writes without another claim; while it is live another owner's
// Put, PutWrites and Claim in a subgraph's namespace fail with a
// *BusyError naming the holder and that namespace, and write nothing.
func testNamespaceLease(t *testing.T, f *fixture) {
	root := f.line("thread-1", "")
	root.lease = owned("runner-a")
	start := f.clock.Now()
	r1 := root.step(t, set("x", `1`))
	child := f.nested("thread-1", nsA, map[string]string{"": r1})
	child.lease = owned("runner-a")
	k1 := child.step(t, set("y", `1`))
	f.putWrites(t, child.ref(k1), child.lease, task("task-9", wr("y", `2`)))
	deep := f.nested("thread-1", nsAB, map[string]string{"": r1, nsA: k1})
	deep.lease = owned("runner-a")
	deep.step(t, set("z", `1`))

	for _, l := range []*line{child.line, deep.line} {
		want := checkpoint.BusyError{Thread: "thread-1", NS: l.ns, Owner: "runner-a", Until: start.Add(ttl)}
		busyAttempts(t, f, l, "runner-b", want)
		// The first Put of a namespace of a leased thread is refused too.
		before := f.dump(t, "thread-1")
		fresh := f.line("thread-1", l.ns+"|other:task-3")
		req := fresh.request(t, "", set("x", `"intruder"`))
		req.Lease = owned("runner-b")
		want.NS = fresh.ns
		wantBusy(t, "runner-b: first Put of a new namespace", f.s.Put(t.Context(), req), want)
		f.unchanged(t, "runner-b's first Put of a new namespace", "thread-1", before)
	}
	// The root's next step still goes through.
	root.step(t, set("x", `2`))
}

// testNamespaceTakeover: once the lease has expired, a claim in a
// subgraph's namespace takes the whole thread: the old holder's root
// writes are then refused with a *BusyError naming the new holder.
func testNamespaceTakeover(t *testing.T, f *fixture) {
	root := f.line("thread-1", "")
	root.lease = owned("runner-a")
	r1 := root.step(t, set("x", `1`))
	child := f.nested("thread-1", nsA, map[string]string{"": r1})
	child.lease = owned("runner-a")
	k1 := child.step(t, set("y", `1`))
	takenAt := f.clock.Advance(ttl + time.Second)
	f.claim(t, child.ref(k1), owned("runner-b"))
	want := checkpoint.BusyError{Thread: "thread-1", Owner: "runner-b", Until: takenAt.Add(ttl)}
	busyAttempts(t, f, root, "runner-a", want)
	// The new holder writes the root without a claim of its own there.
	root.lease = owned("runner-b")
	root.step(t, set("x", `2`))
}

// testNamespaceRelease: Release names the thread's one lease whatever
// namespace it is given: the holder releasing "from" a subgraph's
// namespace frees the thread for another owner at once.
func testNamespaceRelease(t *testing.T, f *fixture) {
	for _, ns := range []string{nsA, "never-written:task-0"} {
		thread := "thread-" + ns
		root := f.line(thread, "")
		root.lease = owned("runner-a")
		r1 := root.step(t, set("x", `1`))
		child := f.nested(thread, nsA, map[string]string{"": r1})
		child.lease = owned("runner-a")
		child.step(t, set("y", `1`))
		if err := f.s.Release(t.Context(), thread, ns, "runner-a"); err != nil {
			t.Fatalf("Release(%q, %q): %v", thread, ns, err)
		}
		f.claim(t, root.ref(root.head), owned("runner-b"))
		f.claim(t, child.ref(child.head), owned("runner-b"))
	}
}

// testNamespaceEpoch: a thread has one epoch. The holder's writes in a
// subgraph's namespace keep it, a takeover through a subgraph's namespace
// grows it once, and LeaseInspector reports the same lease for every
// namespace, with NS as asked.
func testNamespaceEpoch(t *testing.T, f *fixture) {
	li, ok := f.s.(checkpoint.LeaseInspector)
	if !ok {
		t.Skipf("%T does not implement checkpoint.LeaseInspector", f.s)
	}
	check := func(what string, owner string, epoch uint64, until time.Time) {
		t.Helper()
		for _, ns := range []string{"", nsA, nsAB} {
			got, err := li.Lease(t.Context(), "thread-1", ns)
			if err != nil {
				t.Fatalf("%s: Lease(%q): %v", what, ns, err)
			}
			want := checkpoint.LeaseInfo{Thread: "thread-1", NS: ns, Owner: owner, Runner: "runner-r", Epoch: epoch, Until: until}
			if diff := cmp.Diff(want, got, cmpOpts...); diff != "" {
				t.Errorf("%s: Lease(%q) mismatch (-want +got):\n%s", what, ns, diff)
			}
		}
	}
	root := f.line("thread-1", "")
	root.lease = of("run-a", "runner-r")
	start := f.clock.Now()
	r1 := root.step(t, set("x", `1`))
	child := f.nested("thread-1", nsA, map[string]string{"": r1})
	child.lease = root.lease
	k1 := child.step(t, set("y", `1`))
	f.putWrites(t, child.ref(k1), child.lease, task("task-1", wr("y", `2`)))
	deep := f.nested("thread-1", nsAB, map[string]string{"": r1, nsA: k1})
	deep.lease = root.lease
	deep.step(t, set("z", `1`))
	check("the holder's writes in three namespaces", "run-a", 1, start.Add(ttl))
	at := f.clock.Advance(ttl + time.Second)
	f.claim(t, deep.ref(deep.head), of("run-b", "runner-r"))
	check("taken over through a subgraph's namespace", "run-b", 2, at.Add(ttl))
	child.lease = of("run-b", "runner-r")
	child.step(t, set("y", `3`))
	check("the new holder's write in another namespace", "run-b", 2, at.Add(ttl))
}

// testNamespaceFirstPut: a namespace's first checkpoint has no parent
// (ParentID "") and is accepted from the thread's holder while the
// thread's other namespaces have heads; a second first Put in the same
// namespace conflicts with its head.
func testNamespaceFirstPut(t *testing.T, f *fixture) {
	root := f.line("thread-1", "")
	r1 := root.step(t, set("x", `1`))
	child := f.nested("thread-1", nsA, map[string]string{"": r1})
	k1 := child.step(t, set("y", `1`))
	if got := f.headID(t, "thread-1", ""); got != r1 {
		t.Errorf("root head after the first Put of %s = %q, want %q", nsA, got, r1)
	}
	again := f.line("thread-1", nsA)
	err := f.s.Put(t.Context(), again.request(t, "", set("y", `2`)))
	wantConflict(t, "a second first Put of a namespace", err, checkpoint.ConflictError{Thread: "thread-1", NS: nsA, Expected: "", Head: k1})
	child.checkGet(t, "")
	root.checkGet(t, "")
}

// testPruneNested: pruning a namespace deletes, whole, the namespaces
// nested below it whose checkpoints name a pruned checkpoint as their
// parent there (the subgraphs that tasks of that checkpoint ran), counts
// their checkpoints, and keeps those of kept checkpoints and those that
// name no parent.
func testPruneNested(t *testing.T, f *fixture) {
	if _, ok := f.s.(checkpoint.Pruner); !ok {
		t.Skipf("%T does not implement checkpoint.Pruner", f.s)
	}
	root := f.line("thread-1", "")
	var r []string
	for i := 0; i < 5; i++ {
		r = append(r, root.step(t, set("x", fmt.Sprint(i))))
	}
	// Subgraphs of tasks of r[0] (pruned below) and of r[4] (kept), one
	// nested twice, and a namespace that names no parent.
	old := f.nested("thread-1", "agent:task-old", map[string]string{"": r[0]})
	o1 := old.step(t, set("y", `1`))
	old.step(t, set("y", `2`))
	f.putWrites(t, old.ref(old.head), old.lease, task("task-o", wr("y", `3`)))
	oldDeep := f.nested("thread-1", "agent:task-old|tools:task-x", map[string]string{"": r[0], "agent:task-old": o1})
	oldDeep.step(t, set("z", `1`))
	kept := f.nested("thread-1", "agent:task-new", map[string]string{"": r[4]})
	n1 := kept.step(t, set("y", `1`))
	n2 := kept.step(t, set("y", `2`))
	n3 := kept.step(t, set("y", `3`))
	keptDeep := f.nested("thread-1", "agent:task-new|tools:task-y", map[string]string{"": r[4], "agent:task-new": n1})
	keptDeep.step(t, set("z", `1`))
	keptDeep2 := f.nested("thread-1", "agent:task-new|tools:task-z", map[string]string{"": r[4], "agent:task-new": n3})
	keptDeep2.step(t, set("z", `2`))
	orphan := f.line("thread-1", "legacy:task-0")
	orphan.step(t, set("y", `1`))
	other := f.line("thread-2", "")
	other.step(t, set("x", `1`))
	otherBefore := f.dump(t, "thread-2")

	n := prune(t, f, "thread-1", "", 2)
	if want := 3 + 2 + 1; n != want {
		t.Errorf("Prune(root, keep 2) = %d, want %d (3 root checkpoints and the 3 of the subgraphs of %s)", n, want, r[0])
	}
	nss := namespaces(t, f, "thread-1")
	want := []string{"", "agent:task-new", "agent:task-new|tools:task-y", "agent:task-new|tools:task-z", "legacy:task-0"}
	if diff := cmp.Diff(want, nss); diff != "" {
		t.Errorf("namespaces after Prune(root) (-want +got):\n%s", diff)
	}
	for _, l := range []*line{old.line, oldDeep.line} {
		if _, err := f.s.Get(t.Context(), l.ref(""), checkpoint.GetOptions{}); !errors.Is(err, checkpoint.ErrNotFound) {
			t.Errorf("Get(head of %s) after its parent was pruned: %v, want ErrNotFound", l.ns, err)
		}
	}
	for _, l := range []*line{kept.line, keptDeep.line, keptDeep2.line, orphan} {
		for _, id := range l.ids() {
			l.checkGet(t, id)
		}
	}
	// Pruning a subgraph's namespace drops what is nested below it the
	// same way, and nothing else.
	n = prune(t, f, "thread-1", "agent:task-new", 1)
	if n != 2+1 {
		t.Errorf("Prune(agent:task-new, keep 1) = %d, want 3 (%s, %s and the subgraph of %s)", n, n1, n2, n1)
	}
	nss = namespaces(t, f, "thread-1")
	want = []string{"", "agent:task-new", "agent:task-new|tools:task-z", "legacy:task-0"}
	if diff := cmp.Diff(want, nss); diff != "" {
		t.Errorf("namespaces after Prune(agent:task-new) (-want +got):\n%s", diff)
	}
	keptDeep2.checkGet(t, "")
	f.unchanged(t, "Prune of thread-1", "thread-2", otherBefore)
}

// namespaces lists the namespaces of thread that have checkpoints, sorted.
func namespaces(t *testing.T, f *fixture, thread string) []string {
	t.Helper()
	var out []string
	for _, tp := range f.list(t, thread, checkpoint.ListOptions{AllNamespaces: true}) {
		if !slices.Contains(out, tp.NS) {
			out = append(out, tp.NS)
		}
	}
	slices.Sort(out)
	return out
}

// testNamespaceThreads: Threads lists a thread once, with its root head,
// however many namespaces it has; a write in a subgraph's namespace is an
// update of the thread.
func testNamespaceThreads(t *testing.T, f *fixture) {
	tl, ok := f.s.(checkpoint.ThreadLister)
	if !ok {
		t.Skipf("%T does not implement checkpoint.ThreadLister", f.s)
	}
	a, b := f.line("thread-a", ""), f.line("thread-b", "")
	f.clock.Advance(time.Second)
	a1 := a.step(t, set("x", `1`))
	f.clock.Advance(time.Second)
	b1 := b.step(t, set("x", `1`))
	child := f.nested("thread-a", nsA, map[string]string{"": a1})
	at := f.clock.Advance(time.Second)
	child.step(t, set("y", `1`))
	f.nested("thread-a", nsAB, map[string]string{"": a1, nsA: child.head}).step(t, set("z", `1`))
	want := []checkpoint.ThreadInfo{
		{Thread: "thread-a", Head: a1, Step: -1, Source: checkpoint.SourceInput, UpdatedAt: at},
		{Thread: "thread-b", Head: b1, Step: -1, Source: checkpoint.SourceInput, UpdatedAt: at.Add(-time.Second)},
	}
	got, err := tl.Threads(t.Context(), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got, cmpOpts...); diff != "" {
		t.Errorf("Threads after subgraph checkpoints (-want +got):\n%s", diff)
	}
	// A pending write in a subgraph's namespace is an update too.
	f.clock.Advance(time.Second)
	f.putWrites(t, child.ref(child.head), child.lease, task("task-1", wr("y", `2`)))
	f.clock.Advance(time.Second)
	b.step(t, set("x", `2`))
	f.clock.Advance(time.Second)
	at = f.clock.Advance(time.Second)
	f.putWrites(t, child.ref(child.head), child.lease, task("task-2", wr("y", `3`)))
	got, err = tl.Threads(t.Context(), 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Thread != "thread-a" || !got[0].UpdatedAt.Equal(at) {
		t.Errorf("Threads(0, 1) after a subgraph's pending write at %v = %+v, want thread-a updated then", at, got)
	}
}

// testNamespaceInterrupts: the cross-thread inbox lists the interrupts of
// root namespaces only. An interrupt raised inside a subgraph reaches the
// root as the interrupt of the task that runs it (package graph saves it
// there too, under the same ID), so listing both would list it twice.
func testNamespaceInterrupts(t *testing.T, f *fixture) {
	il, ok := f.s.(checkpoint.InterruptLister)
	if !ok {
		t.Skipf("%T does not implement checkpoint.InterruptLister", f.s)
	}
	root := f.line("thread-1", "")
	r1 := root.step(t, set("x", `1`))
	child := f.nested("thread-1", nsA, map[string]string{"": r1})
	child.step(t, set("y", `1`))
	deep := f.nested("thread-1", nsAB, map[string]string{"": r1, nsA: child.head})
	deep.step(t, set("z", `1`))
	f.putWrites(t, deep.ref(deep.head), deep.lease, checkpoint.TaskWrites{TaskID: "task-3", Node: "approve", Writes: []checkpoint.Write{interruptWrite("i-1", `"ok?"`)}})
	f.putWrites(t, child.ref(child.head), child.lease, checkpoint.TaskWrites{TaskID: "task-2", Node: "tools", Writes: []checkpoint.Write{interruptWrite("i-1", `"ok?"`)}})
	f.putWrites(t, root.ref(r1), root.lease, checkpoint.TaskWrites{TaskID: "task-1", Node: "agent", Writes: []checkpoint.Write{interruptWrite("i-1", `"ok?"`)}})
	got, next, err := il.PendingInterrupts(t.Context(), checkpoint.InterruptQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || next != "" {
		t.Fatalf("PendingInterrupts = %+v, %q; want one interrupt and no next page", got, next)
	}
	if g := got[0]; g.Thread != "thread-1" || g.NS != "" || g.CheckpointID != r1 || g.TaskID != "task-1" || g.Node != "agent" || g.InterruptID != "i-1" {
		t.Errorf("PendingInterrupts[0] = %+v, want interrupt i-1 of task-1 (agent) at the root head %s", g, r1)
	}
}

// testNamespaceDelete: DeleteThread removes every namespace of the thread,
// nested ones included, with their pending writes and the lease; the
// thread can then start again from nothing.
func testNamespaceDelete(t *testing.T, f *fixture) {
	root := f.line("thread-1", "")
	r1 := root.step(t, set("x", `1`))
	child := f.nested("thread-1", nsA, map[string]string{"": r1})
	child.step(t, set("y", `1`))
	deep := f.nested("thread-1", nsAB, map[string]string{"": r1, nsA: child.head})
	deep.step(t, set("z", `1`))
	f.putWrites(t, deep.ref(deep.head), deep.lease, task("task-1", wr("z", `2`)))
	if err := f.s.DeleteThread(t.Context(), "thread-1"); err != nil {
		t.Fatal(err)
	}
	if got := f.list(t, "thread-1", checkpoint.ListOptions{AllNamespaces: true}); len(got) != 0 {
		t.Errorf("List(all namespaces) after DeleteThread: %d checkpoints, want none", len(got))
	}
	for _, ns := range []string{"", nsA, nsAB} {
		if got := f.headID(t, "thread-1", ns); got != "" {
			t.Errorf("head of %q after DeleteThread = %q, want none", ns, got)
		}
	}
	// Another owner starts the thread again at once: no lease is left.
	again := f.line("thread-1", nsA)
	again.lease = owned("runner-b")
	again.step(t, set("y", `"again"`))
}
