package checkpointtest

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/checkpoint"
)

func threadListerCases() []testCase {
	return []testCase{
		{name: "MostRecentFirst", run: testThreadsOrder},
		{name: "OffsetAndLimit", run: testThreadsPaging},
	}
}

func threads(t *testing.T, f *fixture, offset, limit int) []checkpoint.ThreadInfo {
	t.Helper()
	out, err := f.s.(checkpoint.ThreadLister).Threads(t.Context(), offset, limit)
	if err != nil {
		t.Fatalf("Threads(%d, %d): %v", offset, limit, err)
	}
	return out
}

// threadsFixture writes several threads at distinct times and returns the
// expected listing, most recently updated first.
func threadsFixture(t *testing.T, f *fixture) []checkpoint.ThreadInfo {
	t.Helper()
	info := map[string]checkpoint.ThreadInfo{}
	put := func(l *line, source checkpoint.Source) {
		at := f.clock.Advance(time.Second)
		req := l.request(t, l.head, set("x", fmt.Sprintf(`"%s"`, at)))
		req.Checkpoint.Metadata.Source = source
		id := l.put(t, req)
		if l.ns == "" {
			info[l.thread] = checkpoint.ThreadInfo{Thread: l.thread, Head: id, Step: req.Checkpoint.Metadata.Step, Source: source, UpdatedAt: at}
		}
	}
	a, b, c, d := f.line("thread-a", ""), f.line("thread-b", ""), f.line("thread-c", ""), f.line("thread-d", "")
	put(a, checkpoint.SourceInput)
	put(b, checkpoint.SourceInput)
	put(f.line("thread-c", "child:abc"), checkpoint.SourceInput) // a child namespace is not listed
	put(c, checkpoint.SourceInput)
	put(b, checkpoint.SourceLoop)
	put(d, checkpoint.SourceInput)
	put(a, checkpoint.SourceLoop)
	put(a, checkpoint.SourceUpdate)
	put(f.line("thread-child-only", "child:abc"), checkpoint.SourceInput)
	gone := f.line("thread-deleted", "")
	put(gone, checkpoint.SourceInput)
	if err := f.s.DeleteThread(t.Context(), "thread-deleted"); err != nil {
		t.Fatal(err)
	}
	delete(info, "thread-deleted")
	f.claim(t, checkpoint.Ref{Thread: "thread-claimed"}, owned("runner-a")) // no checkpoint: not listed
	return []checkpoint.ThreadInfo{info["thread-a"], info["thread-d"], info["thread-b"], info["thread-c"]}
}

// testThreadsOrder: Threads lists every thread's root-namespace head
// (thread, head, step, source, update time), most recently updated first;
// threads with only child namespaces, deleted threads and claimed threads
// without checkpoints are left out.
func testThreadsOrder(t *testing.T, f *fixture) {
	want := threadsFixture(t, f)
	if diff := cmp.Diff(want, threads(t, f, 0, 0), cmpOpts...); diff != "" {
		t.Errorf("Threads(0, 0) mismatch (-want +got):\n%s", diff)
	}
}

// testThreadsPaging: offset skips, limit caps (0 = all), and pages
// concatenate to the full list.
func testThreadsPaging(t *testing.T, f *fixture) {
	want := threadsFixture(t, f)
	for offset := 0; offset <= len(want)+1; offset++ {
		for _, limit := range []int{0, 1, 2, 3, 10} {
			w := want[min(offset, len(want)):]
			if limit > 0 && len(w) > limit {
				w = w[:limit]
			}
			if diff := cmp.Diff(w, threads(t, f, offset, limit), cmpOpts...); diff != "" {
				t.Errorf("Threads(%d, %d) mismatch (-want +got):\n%s", offset, limit, diff)
			}
		}
	}
}
