package checkpointtest

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/checkpoint"
)

func putGetCases() []testCase {
	return []testCase{
		{name: "RoundTripEveryField", run: testRoundTrip},
		{name: "SeveralCheckpoints", run: testSeveralCheckpoints},
		{name: "NamespacesIsolated", run: testNamespacesIsolated},
		{name: "ThreadsIsolated", run: testThreadsIsolated},
		{name: "NotFound", run: testNotFound},
	}
}

// testRoundTrip: every Checkpoint field comes back as it was put
// (LangGraph test_put: exact round trip, value types, versions, metadata
// with custom keys, run ID and parents; test_get_tuple: all fields, parent).
func testRoundTrip(t *testing.T, f *fixture) {
	l := f.line("thread-1", "")
	big := `"` + strings.Repeat("0123456789abcdef", 4096) + `"`
	req := l.request(t, "",
		set("str", `"hello"`),
		set("num", `42`),
		set("float", `-1.5e-3`),
		set("bool", `false`),
		set("list", `[1,"two",null,{"three":3}]`),
		set("obj", `{"a":{"b":[true,false]},"z":"last"}`),
		set("null", `null`),
		set("empty_string", `""`),
		set("empty_list", `[]`),
		set("empty_obj", `{}`),
		set("unicode", `"h\u00e9llo \u2713 \u65e5\u672c \"quoted\" \\ back"`),
		set("big", big),
		set(checkpoint.BranchPrefix+"worker", `null`),
		set(checkpoint.ChannelStart, `{"Question":"why?"}`),
		fresh("log", `["first"]`),
	)
	// A non-UTC zone and milliseconds: the instant must survive.
	req.Checkpoint.CreatedAt = time.Date(2025, 6, 1, 14, 30, 15, 123_000_000, time.FixedZone("UTC+2", 2*3600))
	req.Checkpoint.Metadata = checkpoint.Metadata{
		Source:   checkpoint.SourceInput,
		Step:     -1,
		Parents:  map[string]string{"": "00000000-0000-7000-8000-0000000000aa", "outer:1": "00000000-0000-7000-8000-0000000000bb"},
		RunID:    "run-1",
		Topology: "00112233445566778899aabbccddeeff",
		Extra:    map[string]any{"user": "ada", "flag": true, "n": 3, "ratio": 0.5, "big_int": int64(1) << 40},
	}
	req.Checkpoint.Mark = "00000000-0000-7000-8000-0000000000cc"
	first := l.put(t, req)
	tp := l.checkGet(t, first)
	if len(tp.Pending) != 0 {
		t.Errorf("new checkpoint has pending writes: %+v", tp.Pending)
	}
	if got, want := tp.Ref(), l.ref(first); got != want {
		t.Errorf("Tuple.Ref() = %v, want %v", got, want)
	}
	// A child: parent tracked, Mark set to a version, fields of the first
	// unchanged.
	f.clock.Advance(time.Second)
	req = l.request(t, first, set("num", `43`), add("log", `["second"]`))
	req.Checkpoint.Mark = first
	second := l.put(t, req)
	l.checkGet(t, second)
	l.checkGet(t, "")
	l.checkGet(t, first)
}

// testSeveralCheckpoints: every checkpoint of a thread is retrievable by
// ID, and the head is the latest Put (LangGraph test_put, test_get_tuple).
func testSeveralCheckpoints(t *testing.T, f *fixture) {
	l := f.line("thread-1", "")
	var ids []string
	ids = append(ids, l.step(t, set("count", `0`)))
	for i := 1; i < 6; i++ {
		f.clock.Advance(time.Second)
		if i == 3 {
			ids = append(ids, l.step(t)) // changes nothing
			continue
		}
		ids = append(ids, l.step(t, set("count", fmt.Sprint(i))))
		if tp := f.get(t, l.ref(""), checkpoint.GetOptions{}); tp.Checkpoint.ID != ids[i] {
			t.Fatalf("after Put %d, head is %s, want %s", i, tp.Checkpoint.ID, ids[i])
		}
	}
	for _, id := range ids {
		l.checkGet(t, id)
	}
	l.checkGet(t, "")
}

// testNamespacesIsolated: namespaces "" and "child:abc" of one thread are
// separate histories, even with the same checkpoint ID and channel names.
func testNamespacesIsolated(t *testing.T, f *fixture) {
	root := f.line("thread-1", "")
	child := f.line("thread-1", "child:abc")
	r1 := root.step(t, set("x", `"root-1"`), fresh("log", `["r"]`))
	// The child namespace reuses r1 as its checkpoint ID.
	child.put(t, child.requestID(t, r1, "", set("x", `"child-1"`), fresh("log", `["c"]`)))
	r2 := root.step(t, add("log", `["r2"]`))
	c2 := child.step(t, set("x", `"child-2"`))

	root.checkGet(t, r1)
	root.checkGet(t, r2)
	root.checkGet(t, "")
	child.checkGet(t, r1)
	child.checkGet(t, c2)
	child.checkGet(t, "")
	if _, err := f.s.Get(t.Context(), root.ref(c2), checkpoint.GetOptions{}); !errors.Is(err, checkpoint.ErrNotFound) {
		t.Errorf("Get of a child-namespace checkpoint in the root namespace: error = %v, want ErrNotFound", err)
	}
	if got, want := tupleIDs(f.list(t, "thread-1", checkpoint.ListOptions{})), []string{r2, r1}; !cmp.Equal(got, want) {
		t.Errorf("List(root) = %v, want %v", got, want)
	}
	if got, want := tupleIDs(f.list(t, "thread-1", checkpoint.ListOptions{NS: "child:abc"})), []string{c2, r1}; !cmp.Equal(got, want) {
		t.Errorf("List(child:abc) = %v, want %v", got, want)
	}

	// Pending writes are isolated too (LangGraph test_put_writes_across_namespaces).
	f.putWrites(t, root.ref(r2), root.lease, checkpoint.TaskWrites{TaskID: "task-1", Writes: []checkpoint.Write{wr("ch", `"root_val"`)}})
	f.putWrites(t, child.ref(c2), child.lease, checkpoint.TaskWrites{TaskID: "task-1", Writes: []checkpoint.Write{wr("ch", `"child_val"`)}})
	for _, tc := range []struct {
		ref  checkpoint.Ref
		want string
	}{{root.ref(r2), "root_val"}, {child.ref(c2), "child_val"}} {
		want := []writeView{{TaskID: "task-1", Channel: "ch", Value: tc.want}}
		if diff := cmp.Diff(want, f.pending(t, tc.ref), cmpOpts...); diff != "" {
			t.Errorf("pending writes of %s (-want +got):\n%s", tc.ref, diff)
		}
	}
	// A thread that only has a child namespace has no root head.
	other := f.line("thread-2", "child:abc")
	other.step(t, set("x", `1`))
	if _, err := f.s.Get(t.Context(), checkpoint.Ref{Thread: "thread-2"}, checkpoint.GetOptions{}); !errors.Is(err, checkpoint.ErrNotFound) {
		t.Errorf("Get(root of a child-only thread): error = %v, want ErrNotFound", err)
	}
}

// testThreadsIsolated: threads never see each other's checkpoints, even
// when checkpoint IDs and channel names repeat.
func testThreadsIsolated(t *testing.T, f *fixture) {
	a := f.line("thread-a", "")
	b := f.line("thread-b", "")
	a1 := a.step(t, set("x", `"a1"`), fresh("log", `["a"]`))
	b.put(t, b.requestID(t, a1, "", set("x", `"b1"`), fresh("log", `["b"]`)))
	a2 := a.step(t, add("log", `["a2"]`))
	b2 := b.step(t, add("log", `["b2"]`))
	for _, l := range []*line{a, b} {
		for _, id := range l.ids() {
			l.checkGet(t, id)
		}
	}
	if got, want := tupleIDs(f.list(t, "thread-a", checkpoint.ListOptions{AllNamespaces: true})), []string{a2, a1}; !cmp.Equal(got, want) {
		t.Errorf("List(thread-a) = %v, want %v", got, want)
	}
	if _, err := f.s.Get(t.Context(), a.ref(b2), checkpoint.GetOptions{}); !errors.Is(err, checkpoint.ErrNotFound) {
		t.Errorf("Get of thread-b's checkpoint in thread-a: error = %v, want ErrNotFound", err)
	}
}

// testNotFound: a missing thread, a missing ID, and IDs of other threads
// or namespaces give ErrNotFound (LangGraph: None / undefined).
func testNotFound(t *testing.T, f *fixture) {
	l := f.line("thread-1", "")
	c1 := l.step(t, set("x", `1`))
	other := f.line("thread-2", "")
	o1 := other.step(t, set("x", `2`))
	child := f.line("thread-1", "child:abc")
	k1 := child.step(t, set("x", `3`))
	tests := []struct {
		name string
		ref  checkpoint.Ref
	}{
		{"missing thread head", checkpoint.Ref{Thread: "nobody"}},
		{"missing thread by ID", checkpoint.Ref{Thread: "nobody", ID: c1}},
		{"missing ID", checkpoint.Ref{Thread: "thread-1", ID: f.id()}},
		{"ID of another thread", checkpoint.Ref{Thread: "thread-1", ID: o1}},
		{"ID of another namespace", checkpoint.Ref{Thread: "thread-1", ID: k1}},
		{"namespace without checkpoints", checkpoint.Ref{Thread: "thread-1", NS: "child:zzz"}},
	}
	for _, tc := range tests {
		tp, err := f.s.Get(t.Context(), tc.ref, checkpoint.GetOptions{})
		if !errors.Is(err, checkpoint.ErrNotFound) {
			t.Errorf("%s: Get(%s) = %v, %v; want an error matching ErrNotFound", tc.name, tc.ref, tp, err)
		}
	}
}
