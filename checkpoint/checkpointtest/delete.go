package checkpointtest

import (
	"errors"
	"testing"

	"github.com/lockstepgo/lockstep/checkpoint"
)

func deleteCases() []testCase {
	return []testCase{
		{name: "RemovesEverything", run: testDeleteEverything},
		{name: "MissingThreadIsNoOp", run: testDeleteMissing},
	}
}

// testDeleteEverything: DeleteThread removes every namespace, checkpoint,
// pending write and lease of the thread and nothing of other threads; a
// runner that still holds the old head is refused, and a new history on
// the same thread ID starts clean, even reusing an old checkpoint ID
// (LangGraph test_delete_thread; #7207 late writes after delete).
func testDeleteEverything(t *testing.T, f *fixture) {
	root := f.line("thread-1", "")
	root.lease = owned("runner-a")
	c1 := root.step(t, fresh("log", `["a"]`))
	c2 := root.step(t, add("log", `["b"]`))
	f.putWrites(t, root.ref(c2), root.lease, task("task-1", wr("x", `1`), wr(checkpoint.ChannelInterrupt, `[{"id":"i","value":1}]`)))
	child := f.line("thread-1", "child:abc")
	child.lease = root.lease
	k1 := child.step(t, set("x", `1`))
	f.putWrites(t, child.ref(k1), child.lease, task("task-2", wr("y", `2`)))
	other := f.line("thread-2", "")
	other.step(t, fresh("log", `["other"]`))
	other.step(t, add("log", `["other 2"]`))
	f.putWrites(t, other.ref(other.head), other.lease, task("task-3", wr("z", `3`)))
	otherBefore := f.dump(t, "thread-2")

	if err := f.s.DeleteThread(t.Context(), "thread-1"); err != nil {
		t.Fatalf("DeleteThread: %v", err)
	}
	for _, ref := range []checkpoint.Ref{root.ref(""), root.ref(c1), root.ref(c2), child.ref(""), child.ref(k1)} {
		if _, err := f.s.Get(t.Context(), ref, checkpoint.GetOptions{}); !errors.Is(err, checkpoint.ErrNotFound) {
			t.Errorf("Get(%s) after DeleteThread: error = %v, want ErrNotFound", ref, err)
		}
	}
	if got := f.list(t, "thread-1", checkpoint.ListOptions{AllNamespaces: true}); len(got) != 0 {
		t.Errorf("List after DeleteThread = %d tuples, want none", len(got))
	}
	f.unchanged(t, "DeleteThread(thread-1)", "thread-2", otherBefore)

	// The runner that held the head is refused everywhere.
	err := f.s.Put(t.Context(), root.request(t, c2, add("log", `["late"]`)))
	wantConflict(t, "Put after delete with the old parent", err, checkpoint.ConflictError{Thread: "thread-1", Expected: c2, Head: ""})
	err = f.s.PutWrites(t.Context(), checkpoint.WritesRequest{Ref: root.ref(c2), Lease: root.lease, Tasks: []checkpoint.TaskWrites{task("task-1", wr("x", `"late"`))}})
	wantConflict(t, "PutWrites after delete", err, checkpoint.ConflictError{Thread: "thread-1", Expected: c2, Head: ""})
	err = f.s.Claim(t.Context(), root.ref(c2), root.lease)
	wantConflict(t, "Claim after delete", err, checkpoint.ConflictError{Thread: "thread-1", Expected: c2, Head: ""})
	if got := f.list(t, "thread-1", checkpoint.ListOptions{AllNamespaces: true}); len(got) != 0 {
		t.Errorf("refused late writes created %d checkpoints", len(got))
	}

	// The lease went with the thread: another owner starts it afresh, and
	// nothing of the old history (values, writes) comes back, even under a
	// reused checkpoint ID.
	restart := f.line("thread-1", "")
	restart.lease = owned("runner-b")
	restart.put(t, restart.requestID(t, c2, "", set("x", `"new"`)))
	restart.checkGet(t, "")
	f.wantPending(t, restart.ref(c2), nil)
	if _, err := f.s.Get(t.Context(), restart.ref(c1), checkpoint.GetOptions{}); !errors.Is(err, checkpoint.ErrNotFound) {
		t.Errorf("Get(old %s) after a restart: error = %v, want ErrNotFound", c1, err)
	}
	// The old blobs are gone too: a checkpoint naming a deleted version
	// of "log" cannot read the old list back.
	req := restart.request(t, c2, set("x", `"newer"`))
	req.Checkpoint.Versions["log"] = c1
	refusedOrCorrupt(t, f, "checkpoint naming a deleted version", req)
}

// testDeleteMissing: deleting a thread that does not exist, twice, is not
// an error.
func testDeleteMissing(t *testing.T, f *fixture) {
	l := f.line("thread-1", "")
	l.step(t, set("x", `1`))
	before := f.dump(t, "thread-1")
	for i := 0; i < 2; i++ {
		if err := f.s.DeleteThread(t.Context(), "nobody"); err != nil {
			t.Errorf("DeleteThread(nobody): %v", err)
		}
	}
	f.unchanged(t, "DeleteThread(nobody)", "thread-1", before)
}
