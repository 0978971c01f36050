package checkpointtest

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/checkpoint"
)

func singleWriterCases() []testCase {
	return []testCase{
		{name: "StaleParent", run: testStaleParent},
		{name: "NewThreadWithParent", run: testNewThreadWithParent},
		{name: "EmptyParentOnExistingThread", run: testEmptyParentOnExisting},
		{name: "Fork", run: testFork},
		{name: "ForkUnknownParent", run: testForkUnknownParent},
		{name: "ForkBelowTheHead", run: testForkBelowHead},
		{name: "DuplicateID", run: testDuplicateID},
		{name: "WritesOnNonHead", run: testWritesOnNonHead},
		{name: "ClaimOnNonHead", run: testClaimOnNonHead},
		{name: "RefusedRequestsTakeNoLease", run: testRefusedTakeNoLease},
	}
}

// testStaleParent: a Put whose parent is not the head is a
// *ConflictError naming the expected parent and the actual head, writes
// nothing, and stays refused on a second attempt (D5, R11).
func testStaleParent(t *testing.T, f *fixture) {
	l := f.line("thread-1", "")
	c1 := l.step(t, set("x", `1`))
	c2 := l.step(t, set("x", `2`))
	before := f.dump(t, "thread-1")
	for attempt := 1; attempt <= 2; attempt++ {
		req := l.request(t, c1, set("x", `"stale"`))
		req.ParentWrites = []checkpoint.TaskWrites{task("task-1", wr("x", `"stale"`))}
		err := f.s.Put(t.Context(), req)
		wantConflict(t, "Put with a stale parent", err, checkpoint.ConflictError{Thread: "thread-1", Expected: c1, Head: c2})
	}
	f.unchanged(t, "Put with a stale parent", "thread-1", before)
}

// testNewThreadWithParent: the first checkpoint of a thread has no parent;
// a Put naming one on a new thread is a conflict with an empty head.
func testNewThreadWithParent(t *testing.T, f *fixture) {
	l := f.line("thread-1", "")
	other := f.line("thread-2", "")
	o1 := other.step(t, set("x", `1`))
	req := l.request(t, "", set("x", `1`))
	req.Checkpoint.ParentID = o1
	err := f.s.Put(t.Context(), req)
	wantConflict(t, "Put on a new thread with a parent", err, checkpoint.ConflictError{Thread: "thread-1", Expected: o1, Head: ""})
	f.unchanged(t, "Put on a new thread with a parent", "thread-1", threadDump{Heads: map[string]string{"": "", "child:abc": ""}})
}

// testEmptyParentOnExisting: a Put with no parent on a thread that has a
// head is a conflict (it would start a second root).
func testEmptyParentOnExisting(t *testing.T, f *fixture) {
	l := f.line("thread-1", "")
	c1 := l.step(t, set("x", `1`))
	before := f.dump(t, "thread-1")
	err := f.s.Put(t.Context(), l.request(t, "", set("x", `2`)))
	wantConflict(t, "Put with no parent on an existing thread", err, checkpoint.ConflictError{Thread: "thread-1", Expected: "", Head: c1})
	f.unchanged(t, "Put with no parent on an existing thread", "thread-1", before)
}

// testFork: with Fork a Put accepts an older checkpoint as parent (or the
// head itself), becomes the head, and keeps the old branch; writers then
// continue from the fork, and the old branch's tip is stale.
func testFork(t *testing.T, f *fixture) {
	l := f.line("thread-1", "")
	c1 := l.step(t, fresh("log", `["a"]`), set("x", `1`))
	c2 := l.step(t, add("log", `["b"]`))
	c3 := l.step(t, add("log", `["c"]`), set("x", `3`))
	req := l.request(t, c1, add("log", `["forked"]`))
	req.Fork = true
	req.Checkpoint.Metadata.Source = checkpoint.SourceFork
	f4 := l.put(t, req)
	if got := f.headID(t, "thread-1", ""); got != f4 {
		t.Errorf("after a fork, head = %s, want the fork %s", got, f4)
	}
	for _, id := range []string{c1, c2, c3, f4} {
		l.checkGet(t, id)
	}
	if got, want := tupleIDs(f.list(t, "thread-1", checkpoint.ListOptions{})), l.ids(); !cmp.Equal(got, want) {
		t.Errorf("List after a fork = %v, want %v", got, want)
	}
	err := f.s.Put(t.Context(), l.request(t, c3, set("x", `"old branch"`)))
	wantConflict(t, "Put on the old branch's tip", err, checkpoint.ConflictError{Thread: "thread-1", Expected: c3, Head: f4})
	c5 := l.step(t, add("log", `["after fork"]`))
	// A fork of the head is a plain child.
	req = l.request(t, c5, set("x", `6`))
	req.Fork = true
	c6 := l.put(t, req)
	l.checkGet(t, c5)
	l.checkGet(t, c6)
	l.checkGet(t, "")
}

// testForkUnknownParent: a fork needs an existing parent; one on a
// checkpoint the thread does not have, or on a new thread, is refused
// (ErrConflict or ErrNotFound) and writes nothing.
func testForkUnknownParent(t *testing.T, f *fixture) {
	l := f.line("thread-1", "")
	l.step(t, set("x", `1`))
	other := f.line("thread-2", "")
	o1 := other.step(t, set("x", `2`))
	before := f.dump(t, "thread-1")
	req := l.request(t, l.head, set("x", `"fork"`))
	req.Checkpoint.ParentID = o1 // exists, but in another thread
	req.Fork = true
	err := f.s.Put(t.Context(), req)
	wantIs(t, "fork of another thread's checkpoint", err, checkpoint.ErrConflict, checkpoint.ErrNotFound)
	f.unchanged(t, "fork of an unknown parent", "thread-1", before)

	n := f.line("thread-3", "")
	req = n.request(t, "", set("x", `1`))
	req.Checkpoint.ParentID = o1
	req.Fork = true
	err = f.s.Put(t.Context(), req)
	wantIs(t, "fork on a new thread", err, checkpoint.ErrConflict, checkpoint.ErrNotFound)
	if got := f.list(t, "thread-3", checkpoint.ListOptions{AllNamespaces: true}); len(got) != 0 {
		t.Errorf("a refused fork on a new thread wrote %d checkpoints", len(got))
	}
}

// testDuplicateID: a Put never overwrites an existing checkpoint, even as
// a fork whose parent is valid (ErrConflict or ErrInvalid).
func testDuplicateID(t *testing.T, f *fixture) {
	l := f.line("thread-1", "")
	c1 := l.step(t, set("x", `1`))
	c2 := l.step(t, set("x", `2`))
	before := f.dump(t, "thread-1")
	req := l.requestID(t, c2, c1, set("x", `"overwritten"`))
	req.Fork = true
	err := f.s.Put(t.Context(), req)
	wantIs(t, "Put reusing an existing checkpoint ID", err, checkpoint.ErrConflict, checkpoint.ErrInvalid)
	f.unchanged(t, "Put reusing an existing checkpoint ID", "thread-1", before)
}

// testWritesOnNonHead: pending writes go to the head only; naming another
// checkpoint, an unknown one, or a missing thread is a *ConflictError and
// writes nothing (a superseded runner cannot add to history).
func testWritesOnNonHead(t *testing.T, f *fixture) {
	l := f.line("thread-1", "")
	c1 := l.step(t, set("x", `1`))
	c2 := l.step(t, set("x", `2`))
	unknown := f.id()
	before := f.dump(t, "thread-1")
	tests := []struct {
		name string
		ref  checkpoint.Ref
		want checkpoint.ConflictError
	}{
		{"older checkpoint", l.ref(c1), checkpoint.ConflictError{Thread: "thread-1", Expected: c1, Head: c2}},
		{"unknown checkpoint", l.ref(unknown), checkpoint.ConflictError{Thread: "thread-1", Expected: unknown, Head: c2}},
		{"missing thread", checkpoint.Ref{Thread: "nobody", ID: c2}, checkpoint.ConflictError{Thread: "nobody", Expected: c2, Head: ""}},
	}
	for _, tc := range tests {
		err := f.s.PutWrites(t.Context(), checkpoint.WritesRequest{Ref: tc.ref, Lease: l.lease, Tasks: []checkpoint.TaskWrites{
			task("task-1", wr("x", `"late"`), wr(checkpoint.ChannelResume, `{"i":"late"}`)),
		}})
		wantConflict(t, "PutWrites on "+tc.name, err, tc.want)
	}
	f.unchanged(t, "PutWrites on a non-head checkpoint", "thread-1", before)
	if got := f.list(t, "nobody", checkpoint.ListOptions{AllNamespaces: true}); len(got) != 0 {
		t.Errorf("PutWrites on a missing thread created %d checkpoints", len(got))
	}
}

// testClaimOnNonHead: Claim names the head ("" for a thread without
// checkpoints); anything else is a *ConflictError. A successful Claim
// writes nothing.
func testClaimOnNonHead(t *testing.T, f *fixture) {
	l := f.line("thread-1", "")
	c1 := l.step(t, set("x", `1`))
	c2 := l.step(t, set("x", `2`))
	before := f.dump(t, "thread-1")
	err := f.s.Claim(t.Context(), l.ref(c1), l.lease)
	wantConflict(t, "Claim of an older checkpoint", err, checkpoint.ConflictError{Thread: "thread-1", Expected: c1, Head: c2})
	err = f.s.Claim(t.Context(), l.ref(""), l.lease)
	wantConflict(t, "Claim with an empty ID on a thread with a head", err, checkpoint.ConflictError{Thread: "thread-1", Expected: "", Head: c2})
	err = f.s.Claim(t.Context(), checkpoint.Ref{Thread: "nobody", ID: c2}, l.lease)
	wantConflict(t, "Claim of a checkpoint on a missing thread", err, checkpoint.ConflictError{Thread: "nobody", Expected: c2, Head: ""})
	f.claim(t, l.ref(c2), l.lease)
	f.unchanged(t, "Claim", "thread-1", before)
}

// testRefusedTakeNoLease: a request refused as a conflict, or as malformed,
// leaves the lease as it was: here free, so a third owner writes next.
func testRefusedTakeNoLease(t *testing.T, f *fixture) {
	l := f.line("thread-1", "")
	l.lease = owned("runner-a")
	c1 := l.step(t, set("x", `1`))
	req := l.request(t, c1, set("x", `2`))
	req.Release = true
	c2 := l.put(t, req)
	b := owned("runner-b")
	stale := l.request(t, c1, set("x", `"stale"`))
	stale.Lease = b
	wantConflict(t, "stale Put", f.s.Put(t.Context(), stale), checkpoint.ConflictError{Thread: "thread-1", Expected: c1, Head: c2})
	err := f.s.PutWrites(t.Context(), checkpoint.WritesRequest{Ref: l.ref(c1), Lease: b, Tasks: []checkpoint.TaskWrites{task("task-1", wr("x", `1`))}})
	wantConflict(t, "PutWrites on a non-head", err, checkpoint.ConflictError{Thread: "thread-1", Expected: c1, Head: c2})
	wantConflict(t, "Claim of a non-head", f.s.Claim(t.Context(), l.ref(c1), b), checkpoint.ConflictError{Thread: "thread-1", Expected: c1, Head: c2})
	bad := l.request(t, c2, set("x", `3`))
	bad.Lease = b
	bad.Checkpoint.Channels["x"][0].Data = nil
	wantIs(t, "malformed Put", f.s.Put(t.Context(), bad), checkpoint.ErrInvalid)
	l.lease = owned("runner-c")
	l.step(t, set("x", `4`))
	l.checkGet(t, "")
}

// testForkBelowHead: the head is the checkpoint with the largest ID, so a
// fork whose ID sorts below the head could never become the head; it is
// refused with a *ConflictError and writes nothing.
func testForkBelowHead(t *testing.T, f *fixture) {
	l := f.line("thread-1", "")
	c1 := l.step(t, set("x", `1`))
	c2 := l.step(t, set("x", `2`))
	c3 := l.step(t, set("x", `3`))
	before := f.dump(t, "thread-1")
	req := l.request(t, c1, set("x", `"fork"`))
	req.Fork = true
	req.Checkpoint.ID = c2 + "-" // after its parent and c2, before the head c3
	req.Checkpoint.Versions = map[string]string{"x": req.Checkpoint.ID}
	req.Checkpoint.Channels = map[string][]checkpoint.Blob{"x": {{Version: req.Checkpoint.ID, Data: []byte(`"fork"`)}}}
	err := f.s.Put(t.Context(), req)
	wantConflict(t, "fork below the head", err, checkpoint.ConflictError{Thread: "thread-1", Expected: c1, Head: c3})
	f.unchanged(t, "fork below the head", "thread-1", before)
}
