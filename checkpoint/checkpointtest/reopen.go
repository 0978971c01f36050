package checkpointtest

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/checkpoint"
)

func reopenCases() []testCase {
	return []testCase{
		{name: "HistorySurvives", run: testReopenHistory},
		{name: "HeadCompareAndSwapSurvives", run: testReopenCAS},
	}
}

// testReopenHistory: after a reopen every checkpoint (append chains,
// forks, namespaces) and every pending write reads back exactly, and
// chains keep growing from where they were.
func testReopenHistory(t *testing.T, f *fixture) {
	l := f.line("thread-1", "")
	ids := longHistory(t, l, 40)
	req := l.request(t, ids[10], add("msgs", `["forked"]`))
	req.Fork = true
	l.put(t, req)
	f.putWrites(t, l.ref(l.head), l.lease, task("task-1", wr("a", `1`), wr(checkpoint.ChannelInterrupt, `[{"id":"i","value":"?"}]`)))
	child := f.line("thread-1", "child:abc")
	child.step(t, fresh("msgs", `["child"]`))
	before := f.dump(t, "thread-1")
	f.reopen(t)
	if diff := cmp.Diff(before, f.dump(t, "thread-1"), cmpOpts...); diff != "" {
		t.Fatalf("thread changed across a reopen (-before +after):\n%s", diff)
	}
	for _, id := range l.ids() {
		l.checkGet(t, id)
	}
	l.step(t, add("msgs", `["after reopen"]`), add("log", `["after reopen"]`))
	child.step(t, add("msgs", `["after reopen"]`))
	f.reopen(t)
	l.checkGet(t, "")
	child.checkGet(t, "")
}

// testReopenCAS: the head survives a reopen, so a stale parent is still a
// conflict.
func testReopenCAS(t *testing.T, f *fixture) {
	l := f.line("thread-1", "")
	c1 := l.step(t, set("x", `1`))
	c2 := l.step(t, set("x", `2`))
	f.reopen(t)
	err := f.s.Put(t.Context(), l.request(t, c1, set("x", `"stale"`)))
	wantConflict(t, "Put with a stale parent after a reopen", err, checkpoint.ConflictError{Thread: "thread-1", Expected: c1, Head: c2})
	l.step(t, set("x", `3`))
	l.checkGet(t, "")
}
