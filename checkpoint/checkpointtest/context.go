package checkpointtest

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/lockstepgo/lockstep/checkpoint"
)

func contextCases() []testCase {
	return []testCase{{name: "CancelledWriteWritesNothing", run: testCancelled}}
}

// testCancelled: a Put, PutWrites or Claim whose context is already
// cancelled fails with an error matching context.Canceled and writes
// nothing.
func testCancelled(t *testing.T, f *fixture) {
	l := f.line("thread-1", "")
	c1 := l.step(t, set("x", `1`))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	before := f.dump(t, "thread-1")
	req := l.request(t, c1, set("x", `2`))
	req.ParentWrites = []checkpoint.TaskWrites{task("task-1", wr("x", `2`))}
	wantIs(t, "Put with a cancelled context", f.s.Put(ctx, req), context.Canceled)
	err := f.s.PutWrites(ctx, checkpoint.WritesRequest{Ref: l.ref(c1), Lease: l.lease, Tasks: []checkpoint.TaskWrites{task("task-1", wr("x", `2`))}})
	wantIs(t, "PutWrites with a cancelled context", err, context.Canceled)
	f.unchanged(t, "cancelled writes", "thread-1", before)
	// A cancelled Claim on a new thread leases nothing.
	wantIs(t, "Claim with a cancelled context", f.s.Claim(ctx, checkpoint.Ref{Thread: "thread-2"}, owned("runner-a")), context.Canceled)
	n := f.line("thread-2", "")
	n.lease = owned("runner-b")
	n.step(t, set("x", `1`))
	// The other methods that write or list fail the same way.
	wantIs(t, "Release with a cancelled context", f.s.Release(ctx, "thread-1", "", l.lease.Owner), context.Canceled)
	wantIs(t, "DeleteThread with a cancelled context", f.s.DeleteThread(ctx, "thread-1"), context.Canceled)
	f.unchanged(t, "cancelled Release and DeleteThread", "thread-1", before)
	if p, ok := f.s.(checkpoint.Pruner); ok {
		_, err := p.Prune(ctx, "thread-1", "", 1)
		wantIs(t, "Prune with a cancelled context", err, context.Canceled)
	}
	if tl, ok := f.s.(checkpoint.ThreadLister); ok {
		_, err := tl.Threads(ctx, 0, 10)
		wantIs(t, "Threads with a cancelled context", err, context.Canceled)
	}
	if il, ok := f.s.(checkpoint.InterruptLister); ok {
		_, _, err := il.PendingInterrupts(ctx, checkpoint.InterruptQuery{Limit: 10})
		wantIs(t, "PendingInterrupts with a cancelled context", err, context.Canceled)
	}
}

func aliasingCases() []testCase {
	return []testCase{
		{name: "PutCopiesTheRequest", run: testPutCopies},
		{name: "TuplesBelongToTheCaller", run: testTuplesOwned},
	}
}

// testPutCopies: after Put and PutWrites return, the caller may reuse the
// request's maps and byte slices; what is stored does not change.
func testPutCopies(t *testing.T, f *fixture) {
	l := f.line("thread-1", "")
	req := l.request(t, "", set("x", `{"k":"original"}`), fresh("log", `["original"]`))
	req.Checkpoint.Metadata.Extra = map[string]any{"user": "ada"}
	req.Checkpoint.Metadata.Parents = map[string]string{"": "p"}
	c1 := l.put(t, req)
	for _, b := range req.Checkpoint.Channels {
		copy(b[0].Data, []byte(`["CHANGED`))
	}
	req.Checkpoint.Versions["x"] = "changed"
	req.Checkpoint.Versions["extra"] = "changed"
	req.Checkpoint.Metadata.Extra["user"] = "changed"
	req.Checkpoint.Metadata.Parents[""] = "changed"
	req.Checkpoint.Channels["x"][0].Version = "changed"
	l.checkGet(t, c1)

	value := json.RawMessage(`"original"`)
	tw := task("task-1", checkpoint.Write{Channel: "w", Value: value})
	f.putWrites(t, l.ref(c1), l.lease, tw)
	copy(value, `"CHANGED!"`)
	tw.Writes[0].Channel = "changed"
	f.wantPending(t, l.ref(c1), []writeView{{TaskID: "task-1", Channel: "w", Value: "original"}})
}

// testTuplesOwned: a returned tuple's maps and slices belong to the caller
// (byte slices excepted): changing them does not change what the saver
// returns next.
func testTuplesOwned(t *testing.T, f *fixture) {
	l := f.line("thread-1", "")
	req := l.request(t, "", set("x", `1`), fresh("log", `["a"]`))
	req.Checkpoint.Metadata.Extra = map[string]any{"user": "ada"}
	req.Checkpoint.Metadata.Parents = map[string]string{"": "p"}
	c1 := l.put(t, req)
	f.putWrites(t, l.ref(c1), l.lease, task("task-1", wr("w", `1`)))
	for _, opts := range []checkpoint.GetOptions{{}, {Have: map[string]string{"x": c1}}} {
		tp := f.get(t, l.ref(c1), opts)
		tp.Checkpoint.Versions["x"] = "changed"
		delete(tp.Checkpoint.Versions, "log")
		if tp.Checkpoint.Channels != nil {
			tp.Checkpoint.Channels["log"] = nil
			tp.Checkpoint.Channels["new"] = []checkpoint.Blob{{Version: "changed"}}
		}
		tp.Checkpoint.Metadata.Extra["user"] = "changed"
		tp.Checkpoint.Metadata.Parents[""] = "changed"
		if len(tp.Pending) > 0 {
			tp.Pending[0].Channel = "changed"
			tp.Pending[0].TaskID = "changed"
		}
	}
	for _, tp := range f.list(t, "thread-1", checkpoint.ListOptions{}) {
		tp.Checkpoint.Versions["x"] = "changed"
		tp.Checkpoint.Metadata.Extra["user"] = "changed"
		tp.Pending[0].Channel = "changed"
	}
	l.checkGet(t, c1)
	f.wantPending(t, l.ref(c1), []writeView{{TaskID: "task-1", Channel: "w", Value: 1.0}})
}
