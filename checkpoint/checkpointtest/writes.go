package checkpointtest

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/checkpoint"
)

func writesCases() []testCase {
	return []testCase{
		{name: "OrderedByTaskThenIndex", run: testWritesOrder},
		{name: "ValuesRoundTrip", run: testWritesValues},
		{name: "SameCallTwiceStoresOnce", run: testWritesTwice},
		{name: "RegularInsertIfAbsent", run: testWritesRegular},
		{name: "SpecialReplace", run: testWritesSpecial},
		{name: "FailedThenSucceeded", run: testWritesFailedThenSucceeded},
		{name: "NewCheckpointStartsEmpty", run: testWritesNewCheckpoint},
		{name: "ParentWritesAndWrites", run: testParentWrites},
		{name: "ListIncludesPending", run: testListPending},
		{name: "IdempotentAcrossReopen", reopen: true, run: testWritesReopen},
	}
}

func task(id string, writes ...checkpoint.Write) checkpoint.TaskWrites {
	return checkpoint.TaskWrites{TaskID: id, Writes: writes}
}

func (f *fixture) wantPending(t *testing.T, ref checkpoint.Ref, want []writeView) {
	t.Helper()
	if diff := cmp.Diff(want, f.pending(t, ref), cmpOpts...); diff != "" {
		t.Errorf("pending writes of %s (-want +got):\n%s", ref, diff)
	}
}

// testWritesOrder: Tuple.Pending is ordered by task ID, then WriteIndex
// (special channels first, by their fixed negative index; then position),
// whatever order the tasks were saved in; Node and Path are kept.
func testWritesOrder(t *testing.T, f *fixture) {
	l := f.line("thread-1", "")
	c1 := l.step(t, set("x", `0`))
	f.putWrites(t, l.ref(c1), l.lease,
		checkpoint.TaskWrites{TaskID: "task-b", Node: "beta", Path: "push:0", Writes: []checkpoint.Write{
			wr("x", `1`), wr(checkpoint.ChannelError, `{"message":"boom"}`), wr("y", `2`),
			wr(checkpoint.ChannelStepPrefix+"2", `{"name":"s2","result":2}`),
			wr(checkpoint.ChannelStepPrefix+"0", `{"name":"s0","result":0}`),
		}},
	)
	f.putWrites(t, l.ref(c1), l.lease,
		checkpoint.TaskWrites{TaskID: "task-a", Node: "alpha", Path: "pull", Writes: []checkpoint.Write{
			wr("z", `3`), wr(checkpoint.ChannelInterrupt, `[{"id":"i1","value":"q"}]`), wr(checkpoint.ChannelResume, `{"i1":"a"}`),
		}},
		checkpoint.TaskWrites{TaskID: checkpoint.NullTaskID, Writes: []checkpoint.Write{
			wr(checkpoint.ChannelBreakpoint, `{"when":"before","nodes":["alpha"]}`),
		}},
	)
	want := []writeView{
		{TaskID: checkpoint.NullTaskID, Channel: checkpoint.ChannelBreakpoint, Value: map[string]any{"when": "before", "nodes": []any{"alpha"}}},
		{TaskID: "task-a", Node: "alpha", Path: "pull", Channel: checkpoint.ChannelResume, Value: map[string]any{"i1": "a"}},
		{TaskID: "task-a", Node: "alpha", Path: "pull", Channel: checkpoint.ChannelInterrupt, Value: []any{map[string]any{"id": "i1", "value": "q"}}},
		{TaskID: "task-a", Node: "alpha", Path: "pull", Channel: "z", Value: 3.0},
		{TaskID: "task-b", Node: "beta", Path: "push:0", Channel: checkpoint.ChannelStepPrefix + "2", Value: map[string]any{"name": "s2", "result": 2.0}},
		{TaskID: "task-b", Node: "beta", Path: "push:0", Channel: checkpoint.ChannelStepPrefix + "0", Value: map[string]any{"name": "s0", "result": 0.0}},
		{TaskID: "task-b", Node: "beta", Path: "push:0", Channel: checkpoint.ChannelError, Value: map[string]any{"message": "boom"}},
		{TaskID: "task-b", Node: "beta", Path: "push:0", Channel: "x", Value: 1.0},
		{TaskID: "task-b", Node: "beta", Path: "push:0", Channel: "y", Value: 2.0},
	}
	f.wantPending(t, l.ref(c1), want)
}

// testWritesValues: values of every JSON type round-trip, several channels
// in one call and several tasks (LangGraph test_put_writes).
func testWritesValues(t *testing.T, f *fixture) {
	l := f.line("thread-1", "")
	c1 := l.step(t)
	values := []string{`"dog"`, `{"data":123,"nested":[1,{"a":null}]}`, `null`, `-2.5`, `[]`, `true`, `""`, `"\u00e9\u2713"`}
	var ws []checkpoint.Write
	var want []writeView
	for i, v := range values {
		ch := string(rune('a' + i))
		ws = append(ws, wr(ch, v))
		want = append(want, writeView{TaskID: "task-1", Node: "node", Path: "a:b:c", Channel: ch, Value: mustDecode(t, v)})
	}
	ws = append(ws, wr(checkpoint.ChannelNoWrites, `null`))
	want = append(want, writeView{TaskID: "task-1", Node: "node", Path: "a:b:c", Channel: checkpoint.ChannelNoWrites})
	f.putWrites(t, l.ref(c1), l.lease, checkpoint.TaskWrites{TaskID: "task-1", Node: "node", Path: "a:b:c", Writes: ws})
	f.putWrites(t, l.ref(c1), l.lease, task("task-2", wr("animals", `"dog"`)))
	want = append(want, writeView{TaskID: "task-2", Channel: "animals", Value: "dog"})
	f.wantPending(t, l.ref(c1), want)
}

// testWritesTwice: the same call twice stores once, on PutWrites and on a
// Put's ParentWrites (LangGraph test_put_writes_idempotent).
func testWritesTwice(t *testing.T, f *fixture) {
	l := f.line("thread-1", "")
	c1 := l.step(t)
	tw := task("task-1", wr("ch", `"val"`), wr("other", `1`), wr(checkpoint.ChannelError, `{"message":"x"}`))
	f.putWrites(t, l.ref(c1), l.lease, tw)
	f.putWrites(t, l.ref(c1), l.lease, tw)
	want := []writeView{
		{TaskID: "task-1", Channel: checkpoint.ChannelError, Value: map[string]any{"message": "x"}},
		{TaskID: "task-1", Channel: "ch", Value: "val"},
		{TaskID: "task-1", Channel: "other", Value: 1.0},
	}
	f.wantPending(t, l.ref(c1), want)
	req := l.request(t, c1)
	req.ParentWrites = []checkpoint.TaskWrites{tw}
	l.put(t, req)
	f.wantPending(t, l.ref(c1), want)
}

// testWritesRegular: a regular write whose (task, WriteIndex) exists is
// ignored, so a task's first saved writes win, position by position.
func testWritesRegular(t *testing.T, f *fixture) {
	l := f.line("thread-1", "")
	c1 := l.step(t)
	f.putWrites(t, l.ref(c1), l.lease, task("task-1", wr("a", `1`), wr("b", `2`)))
	f.putWrites(t, l.ref(c1), l.lease, task("task-1", wr("a", `9`)))
	f.putWrites(t, l.ref(c1), l.lease, task("task-1", wr("x", `3`), wr("y", `4`), wr("z", `5`)))
	f.putWrites(t, l.ref(c1), l.lease, task("task-2", wr("a", `7`)))
	f.wantPending(t, l.ref(c1), []writeView{
		{TaskID: "task-1", Channel: "a", Value: 1.0},
		{TaskID: "task-1", Channel: "b", Value: 2.0},
		{TaskID: "task-1", Channel: "z", Value: 5.0},
		{TaskID: "task-2", Channel: "a", Value: 7.0},
	})
}

// testWritesSpecial: a special write (checkpoint.IsSpecial) replaces the
// task's earlier write to the same channel, write by write, even when the
// call also holds regular writes (which are then ignored).
func testWritesSpecial(t *testing.T, f *fixture) {
	tests := []struct {
		channel       string
		first, second string
	}{
		{channel: checkpoint.ChannelError, first: `{"message":"one"}`, second: `{"message":"two"}`},
		{channel: checkpoint.ChannelInterrupt, first: `[{"id":"i1","value":1}]`, second: `[{"id":"i2","value":2}]`},
		{channel: checkpoint.ChannelResume, first: `{"i1":"no"}`, second: `{"i1":"yes"}`},
		{channel: checkpoint.ChannelBreakpoint, first: `{"when":"before","nodes":["a"]}`, second: `{"when":"after","nodes":["b"]}`},
		{channel: checkpoint.ChannelStepPrefix + "3", first: `{"name":"s","result":1}`, second: `{"name":"s","result":2}`},
	}
	l := f.line("thread-1", "")
	c1 := l.step(t)
	var want []writeView
	for _, tc := range tests {
		id := "task-" + tc.channel
		f.putWrites(t, l.ref(c1), l.lease, checkpoint.TaskWrites{TaskID: id, Node: "first", Writes: []checkpoint.Write{wr(tc.channel, tc.first)}})
		f.putWrites(t, l.ref(c1), l.lease, checkpoint.TaskWrites{TaskID: id, Node: "second", Writes: []checkpoint.Write{wr(tc.channel, tc.second)}})
		want = append(want, writeView{TaskID: id, Node: "second", Channel: tc.channel, Value: mustDecode(t, tc.second)})
	}
	// Mixed call: the special write replaces, the regular one is ignored.
	f.putWrites(t, l.ref(c1), l.lease, task("task-mixed", wr("a", `1`), wr(checkpoint.ChannelError, `{"message":"e1"}`)))
	f.putWrites(t, l.ref(c1), l.lease, task("task-mixed", wr("a", `2`), wr(checkpoint.ChannelError, `{"message":"e2"}`)))
	want = append(want,
		writeView{TaskID: "task-mixed", Channel: checkpoint.ChannelError, Value: map[string]any{"message": "e2"}},
		writeView{TaskID: "task-mixed", Channel: "a", Value: 1.0},
	)
	// Tasks in ID order; within a task, want already lists WriteIndex order.
	slices.SortStableFunc(want, func(a, b writeView) int { return strings.Compare(a.TaskID, b.TaskID) })
	f.wantPending(t, l.ref(c1), want)
}

// testWritesFailedThenSucceeded: a task that failed and then succeeded
// keeps its __error__ and gains its values (SEMANTICS §3.3,
// test_pending_writes_resume).
func testWritesFailedThenSucceeded(t *testing.T, f *fixture) {
	l := f.line("thread-1", "")
	c1 := l.step(t)
	f.putWrites(t, l.ref(c1), l.lease, task("task-ok", wr("value", `2`)))
	f.putWrites(t, l.ref(c1), l.lease, task("task-flaky", wr(checkpoint.ChannelError, `{"message":"boom"}`)))
	f.putWrites(t, l.ref(c1), l.lease, task("task-flaky", wr("value", `3`)))
	f.wantPending(t, l.ref(c1), []writeView{
		{TaskID: "task-flaky", Channel: checkpoint.ChannelError, Value: map[string]any{"message": "boom"}},
		{TaskID: "task-flaky", Channel: "value", Value: 3.0},
		{TaskID: "task-ok", Channel: "value", Value: 2.0},
	})
}

// testWritesNewCheckpoint: a new checkpoint starts with no pending writes
// and the parent keeps its own (LangGraph
// test_put_writes_cleared_on_next_checkpoint).
func testWritesNewCheckpoint(t *testing.T, f *fixture) {
	l := f.line("thread-1", "")
	c1 := l.step(t)
	f.putWrites(t, l.ref(c1), l.lease, task("task-1", wr("ch", `"old_write"`)))
	c2 := l.step(t, set("ch", `"old_write"`))
	f.wantPending(t, l.ref(c2), nil)
	f.wantPending(t, l.ref(c1), []writeView{{TaskID: "task-1", Channel: "ch", Value: "old_write"}})
}

// testParentWrites: a Put's ParentWrites land on the parent (merged with
// what PutWrites saved there, by the same rules) and its Writes on the new
// checkpoint, in the same transaction: a refused Put lands neither.
func testParentWrites(t *testing.T, f *fixture) {
	l := f.line("thread-1", "")
	c1 := l.step(t)
	f.putWrites(t, l.ref(c1), l.lease, checkpoint.TaskWrites{TaskID: "task-a", Node: "a", Writes: []checkpoint.Write{wr("x", `1`)}})
	req := l.request(t, c1, set("x", `1`), set("y", `2`))
	req.ParentWrites = []checkpoint.TaskWrites{
		{TaskID: "task-a", Node: "a", Writes: []checkpoint.Write{wr("x", `1`)}},
		{TaskID: "task-b", Node: "b", Path: "push:0", Writes: []checkpoint.Write{wr("y", `2`)}},
	}
	req.Writes = []checkpoint.TaskWrites{{TaskID: checkpoint.NullTaskID, Writes: []checkpoint.Write{wr(checkpoint.ChannelBreakpoint, `{"when":"after","nodes":["a","b"]}`)}}}
	c2 := l.put(t, req)
	f.wantPending(t, l.ref(c1), []writeView{
		{TaskID: "task-a", Node: "a", Channel: "x", Value: 1.0},
		{TaskID: "task-b", Node: "b", Path: "push:0", Channel: "y", Value: 2.0},
	})
	f.wantPending(t, l.ref(c2), []writeView{
		{TaskID: checkpoint.NullTaskID, Channel: checkpoint.ChannelBreakpoint, Value: map[string]any{"when": "after", "nodes": []any{"a", "b"}}},
	})

	// A refused Put (stale parent) lands neither its ParentWrites nor its
	// Writes.
	before := f.dump(t, "thread-1")
	stale := l.request(t, c1, set("x", `"stale"`))
	stale.ParentWrites = []checkpoint.TaskWrites{task("task-c", wr("z", `"stale"`))}
	stale.Writes = []checkpoint.TaskWrites{task("task-d", wr("z", `"stale"`))}
	err := f.s.Put(t.Context(), stale)
	wantConflict(t, "Put with a stale parent", err, checkpoint.ConflictError{Thread: "thread-1", Expected: c1, Head: c2})
	f.unchanged(t, "a refused Put", "thread-1", before)
}

// testListPending: List returns each checkpoint with its pending writes
// (LangGraph test_list: pending writes included).
func testListPending(t *testing.T, f *fixture) {
	l := f.line("thread-1", "")
	c1 := l.step(t)
	f.putWrites(t, l.ref(c1), l.lease, task("task-1", wr("a", `1`)))
	c2 := l.step(t, set("a", `1`))
	f.putWrites(t, l.ref(c2), l.lease, task("task-2", wr("b", `2`), wr(checkpoint.ChannelInterrupt, `[{"id":"i","value":0}]`)))
	tps := f.list(t, "thread-1", checkpoint.ListOptions{})
	if len(tps) != 2 {
		t.Fatalf("List returned %d checkpoints, want 2", len(tps))
	}
	for _, tp := range tps {
		if diff := cmp.Diff(f.pending(t, tp.Ref()), mustPending(t, tp), cmpOpts...); diff != "" {
			t.Errorf("List's pending writes of %s differ from Get's (-get +list):\n%s", tp.Ref(), diff)
		}
		if len(tp.Pending) == 0 {
			t.Errorf("List's tuple %s has no pending writes", tp.Ref())
		}
	}
}

// testWritesReopen: idempotency and replacement hold across a reopen
// (LangGraph test_put_writes_idempotent_across_restart).
func testWritesReopen(t *testing.T, f *fixture) {
	l := f.line("thread-1", "")
	c1 := l.step(t)
	tw := task("task-1", wr("ch", `"val"`), wr(checkpoint.ChannelInterrupt, `[{"id":"i1","value":1}]`))
	f.putWrites(t, l.ref(c1), l.lease, tw)
	f.reopen(t)
	f.putWrites(t, l.ref(c1), l.lease, tw)
	f.wantPending(t, l.ref(c1), []writeView{
		{TaskID: "task-1", Channel: checkpoint.ChannelInterrupt, Value: []any{map[string]any{"id": "i1", "value": 1.0}}},
		{TaskID: "task-1", Channel: "ch", Value: "val"},
	})
	f.reopen(t)
	f.putWrites(t, l.ref(c1), l.lease, task("task-1", wr("ch", `"changed"`), wr(checkpoint.ChannelInterrupt, `[{"id":"i2","value":2}]`)))
	req := l.request(t, c1, set("ch", `"val"`))
	req.ParentWrites = []checkpoint.TaskWrites{tw, task("task-2", wr("other", `true`))}
	l.put(t, req)
	f.reopen(t)
	f.wantPending(t, l.ref(c1), []writeView{
		{TaskID: "task-1", Channel: checkpoint.ChannelInterrupt, Value: []any{map[string]any{"id": "i1", "value": 1.0}}},
		{TaskID: "task-1", Channel: "ch", Value: "val"},
		{TaskID: "task-2", Channel: "other", Value: true},
	})
}
