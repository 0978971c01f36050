package checkpointtest

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/checkpoint"
)

func prunerCases() []testCase {
	return []testCase{
		{name: "KeepsNewestAndDeletesTheRest", run: testPruneExact},
		{name: "AppendChainsStayWhole", run: testPruneChains},
		{name: "UncommittedWritesKept", run: testPruneUncommitted},
		{name: "OtherNamespacesAndThreadsUntouched", run: testPruneScope},
		{name: "KeepAtLeastOne", run: testPruneInvalid},
		{name: "NothingToPrune", run: testPruneNothing},
	}
}

func prune(t *testing.T, f *fixture, thread, ns string, keep int) int {
	t.Helper()
	n, err := f.s.(checkpoint.Pruner).Prune(t.Context(), thread, ns, keep)
	if err != nil {
		t.Fatalf("Prune(%q, %q, %d): %v", thread, ns, keep, err)
	}
	return n
}

// checkPruned checks a namespace after Prune deleted n of the checkpoints
// listed in before: n is what disappeared from List, the required ones
// are all listed, every listed one reads back exactly, and every other
// one is gone.
func checkPruned(t *testing.T, f *fixture, l *line, before []string, n int, required ...string) []string {
	t.Helper()
	after := tupleIDs(f.list(t, l.thread, checkpoint.ListOptions{NS: l.ns}))
	if got, want := n, len(before)-len(after); got != want {
		t.Errorf("Prune returned %d, but %d checkpoints disappeared (%d before, %d after)", got, want, len(before), len(after))
	}
	for _, id := range required {
		if !slices.Contains(after, id) {
			t.Errorf("Prune deleted %s, which it must keep; left %v", id, after)
		}
	}
	for _, id := range after {
		if !slices.Contains(before, id) {
			t.Errorf("after Prune, List shows %s, which was not there before", id)
		}
		l.checkGet(t, id)
	}
	for _, id := range before {
		if slices.Contains(after, id) {
			continue
		}
		if _, err := f.s.Get(t.Context(), l.ref(id), checkpoint.GetOptions{}); !errors.Is(err, checkpoint.ErrNotFound) {
			t.Errorf("Get(%s) of a pruned checkpoint: error = %v, want ErrNotFound", id, err)
		}
	}
	return after
}

// testPruneExact: when no kept checkpoint needs older data, Prune keeps
// exactly the newest keep checkpoints (with the head and its pending
// writes) and returns how many it deleted (LangGraph test_prune
// keep_latest).
func testPruneExact(t *testing.T, f *fixture) {
	l := f.line("thread-1", "")
	for i := 0; i < 10; i++ {
		l.step(t, set("x", fmt.Sprint(i)), set("y", fmt.Sprintf(`["full %d"]`, i)))
		if i == 4 {
			f.putWrites(t, l.ref(l.head), l.lease, task("task-1", wr("x", `5`)))
		}
	}
	f.putWrites(t, l.ref(l.head), l.lease, task("task-2", wr("x", `10`)))
	before := l.ids()
	n := prune(t, f, "thread-1", "", 3)
	if n != 7 {
		t.Errorf("Prune(keep 3) of 10 = %d, want 7", n)
	}
	if after := checkPruned(t, f, l, before, n, before[:3]...); !cmp.Equal(after, before[:3]) {
		t.Errorf("after Prune(keep 3): %v, want %v", after, before[:3])
	}
	f.wantPending(t, l.ref(l.head), []writeView{{TaskID: "task-2", Channel: "x", Value: 10.0}})
	if n := prune(t, f, "thread-1", "", 3); n != 0 {
		t.Errorf("second Prune(keep 3) = %d, want 0", n)
	}
	l.step(t, set("x", `11`))
	l.checkGet(t, "")
}

// testPruneChains: Prune never breaks the append chain, or any older
// blob, that a kept checkpoint's values need; the kept ones read back
// exactly and the chains keep growing after it. Whether the checkpoints
// holding those blobs stay listed is the saver's choice.
func testPruneChains(t *testing.T, f *fixture) {
	l := f.line("thread-1", "")
	l.step(t, set("const", `"set once"`), set("x", `0`), fresh("log", `[0]`))
	for i := 1; i < 12; i++ {
		l.step(t, set("x", fmt.Sprint(i)), add("log", fmt.Sprintf(`[%d]`, i)))
	}
	before := l.ids()
	n := prune(t, f, "thread-1", "", 2)
	after := checkPruned(t, f, l, before, n, before[:2]...)
	l.step(t, add("log", `["after prune"]`))
	l.checkGet(t, "")
	n = prune(t, f, "thread-1", "", 1)
	checkPruned(t, f, l, append([]string{l.head}, after...), n, l.head)
	l.step(t, add("log", `["after second prune"]`))
	l.checkGet(t, "")
}

// testPruneUncommitted: a checkpoint with pending writes that no child
// committed (here the tip of a branch left by a fork, holding an
// interrupt) is kept with its writes, whatever keep says; one whose
// writes a child committed is not.
func testPruneUncommitted(t *testing.T, f *fixture) {
	l := f.line("thread-1", "")
	var c []string
	for i := 1; i <= 6; i++ {
		c = append(c, l.step(t, set("x", fmt.Sprint(i))))
		if i == 4 {
			f.putWrites(t, l.ref(l.head), l.lease, task("task-4", wr("x", `5`)))
		}
	}
	f.putWrites(t, l.ref(l.head), l.lease, task("task-6", interruptWrite("i-6", `"waiting"`)))
	req := l.request(t, c[2], set("x", `"fork"`))
	req.Fork = true
	l.put(t, req)
	head := l.step(t, set("x", `"fork 2"`))
	before := l.ids()
	n := prune(t, f, "thread-1", "", 1)
	if n != 6 {
		t.Errorf("Prune(keep 1) = %d, want 6 (all but the head and the branch tip with pending writes)", n)
	}
	if after := checkPruned(t, f, l, before, n, head, c[5]); !cmp.Equal(after, []string{head, c[5]}) {
		t.Errorf("after Prune(keep 1): %v, want %v", after, []string{head, c[5]})
	}
	f.wantPending(t, l.ref(c[5]), []writeView{{TaskID: "task-6", Channel: checkpoint.ChannelInterrupt, Value: []any{map[string]any{"id": "i-6", "value": "waiting"}}}})
}

// testPruneScope: Prune works on one namespace of one thread (LangGraph:
// latest per namespace; other threads untouched).
func testPruneScope(t *testing.T, f *fixture) {
	root := f.line("thread-1", "")
	child := f.line("thread-1", "child:abc")
	other := f.line("thread-2", "")
	for i := 0; i < 5; i++ {
		for _, l := range []*line{root, child, other} {
			l.step(t, set("x", fmt.Sprint(i)))
		}
	}
	childBefore := f.list(t, "thread-1", checkpoint.ListOptions{NS: "child:abc"})
	otherBefore := f.dump(t, "thread-2")
	before := root.ids()
	n := prune(t, f, "thread-1", "", 2)
	checkPruned(t, f, root, before, n, before[:2]...)
	if n != 3 {
		t.Errorf("Prune(keep 2) of 5 = %d, want 3", n)
	}
	childAfter := f.list(t, "thread-1", checkpoint.ListOptions{NS: "child:abc"})
	if got, want := tupleIDs(childAfter), tupleIDs(childBefore); !cmp.Equal(got, want) {
		t.Errorf("Prune of the root namespace changed the child namespace: %v, want %v", got, want)
	}
	for _, tp := range childAfter {
		child.check(t, "child namespace after Prune", tp, nil)
	}
	f.unchanged(t, "Prune(thread-1)", "thread-2", otherBefore)
}

// testPruneInvalid: keep < 1 is ErrInvalid and deletes nothing.
func testPruneInvalid(t *testing.T, f *fixture) {
	l := f.line("thread-1", "")
	l.step(t, set("x", `1`))
	l.step(t, set("x", `2`))
	before := f.dump(t, "thread-1")
	for _, keep := range []int{0, -1} {
		n, err := f.s.(checkpoint.Pruner).Prune(t.Context(), "thread-1", "", keep)
		wantIs(t, fmt.Sprintf("Prune(keep %d)", keep), err, checkpoint.ErrInvalid)
		if n != 0 {
			t.Errorf("Prune(keep %d) = %d, want 0", keep, n)
		}
	}
	f.unchanged(t, "Prune with keep < 1", "thread-1", before)
}

// testPruneNothing: a missing thread, or one with no more than keep
// checkpoints, prunes nothing and is not an error (LangGraph:
// nonexistent thread is a no-op).
func testPruneNothing(t *testing.T, f *fixture) {
	if n := prune(t, f, "nobody", "", 1); n != 0 {
		t.Errorf("Prune of a missing thread = %d, want 0", n)
	}
	l := f.line("thread-1", "")
	l.step(t, set("x", `1`))
	l.step(t, set("x", `2`))
	before := f.dump(t, "thread-1")
	for _, keep := range []int{2, 3} {
		if n := prune(t, f, "thread-1", "", keep); n != 0 {
			t.Errorf("Prune(keep %d) of 2 = %d, want 0", keep, n)
		}
	}
	f.unchanged(t, "Prune with nothing to prune", "thread-1", before)
}

func vacuumerCases() []testCase {
	return []testCase{{name: "AfterDeleteAndPrune", run: testVacuum}}
}

// testVacuum: Vacuum, bounded or not, after deletes and prunes changes
// nothing a reader sees, and writing continues after it.
func testVacuum(t *testing.T, f *fixture) {
	l := f.line("thread-1", "")
	longHistory(t, l, 30)
	f.putWrites(t, l.ref(l.head), l.lease, task("task-1", wr("x", `1`)))
	gone := f.line("thread-2", "")
	longHistory(t, gone, 30)
	if err := f.s.DeleteThread(t.Context(), "thread-2"); err != nil {
		t.Fatal(err)
	}
	if p, ok := f.s.(checkpoint.Pruner); ok {
		if _, err := p.Prune(t.Context(), "thread-1", "", 5); err != nil {
			t.Fatal(err)
		}
	}
	before := f.dump(t, "thread-1")
	for _, pages := range []int{1, 0, 0} {
		if err := f.s.(checkpoint.Vacuumer).Vacuum(t.Context(), pages); err != nil {
			t.Errorf("Vacuum(%d): %v", pages, err)
		}
	}
	f.unchanged(t, "Vacuum", "thread-1", before)
	for _, tp := range f.list(t, "thread-1", checkpoint.ListOptions{}) {
		l.check(t, "after Vacuum", tp, nil)
	}
	l.step(t, add("msgs", `["after vacuum"]`))
	l.checkGet(t, "")
}
