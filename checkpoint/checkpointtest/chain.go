package checkpointtest

import (
	"testing"

	"github.com/lockstepgo/lockstep/checkpoint"
)

func chainCases() []testCase {
	return []testCase{
		{name: "NewThread", run: testChainNewThread},
		{name: "OntoTheHeadAndRelease", run: testChainOntoHead},
		{name: "RefusedAsAWhole", run: testChainRefused},
		{name: "NotAChain", run: testChainInvalid},
	}
}

// planChain builds n requests on l, each the child of the one before (the
// first the child of l.head), and records them in the model as they are
// built: the caller puts them as one chain. Each request after the first
// carries the writes of the task that produced it.
func planChain(t *testing.T, l *line, n int) []checkpoint.PutRequest {
	t.Helper()
	reqs := make([]checkpoint.PutRequest, n)
	parent := l.head
	for i := range reqs {
		req := l.request(t, parent, set("step", string(rune('0'+i))), add("log", `["x"]`))
		if parent == "" {
			req = l.request(t, parent, set("step", `0`), fresh("log", `["x"]`))
		}
		if i > 0 {
			req.ParentWrites = []checkpoint.TaskWrites{{TaskID: "task-" + string(rune('a'+i)), Node: "n", Path: "pull", Writes: []checkpoint.Write{wr("step", string(rune('0'+i)))}}}
		}
		l.commit(t, req)
		reqs[i] = req
		parent = req.Checkpoint.ID
	}
	return reqs
}

func (f *fixture) chainPutter(t *testing.T) checkpoint.ChainPutter {
	t.Helper()
	cp, ok := f.s.(checkpoint.ChainPutter)
	if !ok {
		t.Fatalf("%T does not implement checkpoint.ChainPutter", f.s)
	}
	return cp
}

// testChainNewThread: a chain that starts a thread saves every checkpoint
// as Puts one by one would: each reads back as put, the last is the head,
// history lists them all, and each one's task writes are pending writes of
// its parent.
func testChainNewThread(t *testing.T, f *fixture) {
	l := f.line("thread-1", "")
	reqs := planChain(t, l, 3)
	if err := f.chainPutter(t).PutChain(t.Context(), reqs); err != nil {
		t.Fatalf("PutChain: %v", err)
	}
	for _, req := range reqs {
		l.checkGet(t, req.Checkpoint.ID)
	}
	l.checkGet(t, "")
	if got := len(f.list(t, l.thread, checkpoint.ListOptions{})); got != len(reqs) {
		t.Errorf("List: %d checkpoints, want %d", got, len(reqs))
	}
	f.wantPending(t, l.ref(reqs[0].Checkpoint.ID), []writeView{{TaskID: "task-b", Node: "n", Path: "pull", Channel: "step", Value: 1.0}})
	f.wantPending(t, l.ref(reqs[1].Checkpoint.ID), []writeView{{TaskID: "task-c", Node: "n", Path: "pull", Channel: "step", Value: 2.0}})
	f.wantPending(t, l.ref(reqs[2].Checkpoint.ID), nil)
}

// testChainOntoHead: a chain whose first parent is the head of an existing
// thread extends it; the last request's Release frees the lease, so
// another owner can then claim the thread.
func testChainOntoHead(t *testing.T, f *fixture) {
	l := f.line("thread-1", "")
	l.lease = owned("runner-a")
	l.step(t, set("step", `0`))
	reqs := planChain(t, l, 2)
	reqs[1].Release = true
	if err := f.chainPutter(t).PutChain(t.Context(), reqs); err != nil {
		t.Fatalf("PutChain: %v", err)
	}
	l.checkGet(t, "")
	f.claim(t, l.ref(l.head), owned("runner-b"))
}

// testChainRefused: a chain whose first request the thread refuses (its
// parent is not the head; another owner's live lease) writes nothing at
// all, and says why as Put would.
func testChainRefused(t *testing.T, f *fixture) {
	l := f.line("thread-1", "")
	l.lease = owned("runner-a")
	c1 := l.step(t, set("step", `0`))
	l.step(t, set("step", `1`))
	head := l.head
	before := f.dump(t, l.thread)

	stale := f.line("thread-1", "")
	stale.lease = l.lease
	stale.states, stale.head = l.states, c1
	reqs := planChain(t, stale, 2)
	err := f.chainPutter(t).PutChain(t.Context(), reqs)
	wantConflict(t, "PutChain on a stale parent", err, checkpoint.ConflictError{Thread: "thread-1", Expected: c1, Head: head})
	f.unchanged(t, "PutChain on a stale parent", l.thread, before)

	other := f.line("thread-1", "")
	other.lease = owned("runner-b")
	other.states, other.head = l.states, head
	reqs = planChain(t, other, 2)
	err = f.chainPutter(t).PutChain(t.Context(), reqs)
	wantBusy(t, "PutChain under another owner's lease", err, checkpoint.BusyError{Thread: "thread-1", Owner: "runner-a", Until: f.clock.Now().Add(ttl)})
	f.unchanged(t, "PutChain under another owner's lease", l.thread, before)
}

// testChainInvalid: requests that are not one chain fail with ErrInvalid
// and write nothing.
func testChainInvalid(t *testing.T, f *fixture) {
	l := f.line("thread-1", "")
	l.step(t, set("step", `0`))
	before := f.dump(t, l.thread)
	tests := []struct {
		name   string
		mangle func(reqs []checkpoint.PutRequest) []checkpoint.PutRequest
	}{
		{"no request", func([]checkpoint.PutRequest) []checkpoint.PutRequest { return nil }},
		{"another thread", func(r []checkpoint.PutRequest) []checkpoint.PutRequest { r[1].Thread = "thread-2"; return r }},
		{"another namespace", func(r []checkpoint.PutRequest) []checkpoint.PutRequest { r[1].NS = "child:abc"; return r }},
		{"another owner", func(r []checkpoint.PutRequest) []checkpoint.PutRequest { r[1].Lease.Owner = "runner-z"; return r }},
		{"a gap", func(r []checkpoint.PutRequest) []checkpoint.PutRequest { return []checkpoint.PutRequest{r[0], r[2]} }},
		{"a fork", func(r []checkpoint.PutRequest) []checkpoint.PutRequest { r[1].Fork = true; return r }},
		{"released midway", func(r []checkpoint.PutRequest) []checkpoint.PutRequest { r[0].Release = true; return r }},
		{"an invalid request", func(r []checkpoint.PutRequest) []checkpoint.PutRequest { r[2].Lease.Owner = ""; return r }},
	}
	for _, tc := range tests {
		model := f.line("thread-1", "")
		model.lease, model.states, model.head = l.lease, l.states, l.head
		reqs := tc.mangle(planChain(t, model, 3))
		err := f.chainPutter(t).PutChain(t.Context(), reqs)
		wantIs(t, "PutChain with "+tc.name, err, checkpoint.ErrInvalid)
		f.unchanged(t, "PutChain with "+tc.name, l.thread, before)
	}
}
