package checkpointtest

import (
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/checkpoint"
)

func searcherCases() []testCase {
	return []testCase{
		{name: "AcrossThreads", run: testSearchAcross},
		{name: "Filter", run: testSearchFilter},
		{name: "BeforeAndLimit", run: testSearchBeforeLimit},
		{name: "Complete", run: testSearchComplete},
		{name: "Empty", run: testSearchEmpty},
		{name: "InvalidFilterKeys", run: testSearchInvalidKeys},
	}
}

// searchFixture is three threads whose checkpoints interleave in time,
// one with a child namespace, and a deleted thread.
type searchFixture struct {
	lines map[string]*line // by thread; "b/child" for the child namespace
	// ids are every root checkpoint, newest first, with their metadata.
	ids   []string
	child string // the child namespace's one checkpoint
	meta  map[string]checkpoint.Metadata
}

func newSearchFixture(t *testing.T, f *fixture) *searchFixture {
	t.Helper()
	sf := &searchFixture{lines: map[string]*line{}, meta: map[string]checkpoint.Metadata{}}
	for _, th := range []string{"search-a", "search-b", "search-c", "search-gone"} {
		sf.lines[th] = f.line(th, "")
	}
	sf.lines["search-b/child"] = f.line("search-b", "child:abc")
	step := func(key string, src checkpoint.Source, step int, extra map[string]any) string {
		l := sf.lines[key]
		req := l.request(t, l.head, set("step", fmt.Sprint(step)))
		req.Checkpoint.Metadata = checkpoint.Metadata{Source: src, Step: step, RunID: "run-" + key, Extra: extra}
		id := l.put(t, req)
		sf.meta[id] = req.Checkpoint.Metadata
		if l.ns == "" && l.thread != "search-gone" {
			sf.ids = append([]string{id}, sf.ids...)
		}
		return id
	}
	step("search-a", checkpoint.SourceInput, -1, map[string]any{"user": "ada"})
	step("search-b", checkpoint.SourceInput, -1, map[string]any{"user": "bob"})
	step("search-gone", checkpoint.SourceInput, -1, map[string]any{"user": "ada"})
	step("search-a", checkpoint.SourceLoop, 0, map[string]any{"user": "ada", "n": 1})
	sf.child = step("search-b/child", checkpoint.SourceInput, -1, map[string]any{"user": "ada"})
	step("search-c", checkpoint.SourceInput, -1, nil)
	step("search-b", checkpoint.SourceLoop, 0, map[string]any{"user": "ada"})
	step("search-a", checkpoint.SourceUpdate, 1, map[string]any{"user": "bob", "n": 2})
	step("search-c", checkpoint.SourceLoop, 0, map[string]any{"user": "ada", "n": 2})
	if err := f.s.DeleteThread(t.Context(), "search-gone"); err != nil {
		t.Fatal(err)
	}
	return sf
}

func search(t *testing.T, f *fixture, opts checkpoint.ListOptions) []*checkpoint.Tuple {
	t.Helper()
	tps, err := f.s.(checkpoint.Searcher).Search(t.Context(), opts)
	if err != nil {
		t.Fatalf("Search(%+v): %v", opts, err)
	}
	return tps
}

// where keeps the IDs of sf.ids whose metadata keep accepts.
func (sf *searchFixture) where(keep func(checkpoint.Metadata) bool) []string {
	var out []string
	for _, id := range sf.ids {
		if keep(sf.meta[id]) {
			out = append(out, id)
		}
	}
	return out
}

// testSearchAcross: Search with no filter returns the root checkpoints of
// every thread, newest first across threads; AllNamespaces adds the
// child namespace; a deleted thread is gone.
func testSearchAcross(t *testing.T, f *fixture) {
	sf := newSearchFixture(t, f)
	if diff := cmp.Diff(sf.ids, tupleIDs(search(t, f, checkpoint.ListOptions{}))); diff != "" {
		t.Errorf("Search() (-want +got):\n%s", diff)
	}
	var all []string
	for _, id := range sf.ids {
		if id < sf.child && (len(all) == 0 || all[len(all)-1] > sf.child) {
			all = append(all, sf.child)
		}
		all = append(all, id)
	}
	if diff := cmp.Diff(all, tupleIDs(search(t, f, checkpoint.ListOptions{AllNamespaces: true}))); diff != "" {
		t.Errorf("Search(AllNamespaces) (-want +got):\n%s", diff)
	}
	got := search(t, f, checkpoint.ListOptions{NS: "child:abc"})
	if len(got) != 1 || got[0].Checkpoint.ID != sf.child || got[0].Thread != "search-b" || got[0].NS != "child:abc" {
		t.Errorf("Search(NS child:abc) = %v, want the one child checkpoint of search-b", tupleIDs(got))
	}
}

// testSearchFilter: metadata filters across threads, as List's.
func testSearchFilter(t *testing.T, f *fixture) {
	sf := newSearchFixture(t, f)
	for _, tc := range []struct {
		name   string
		filter map[string]any
		want   []string
	}{
		{"user", map[string]any{"user": "ada"}, sf.where(func(m checkpoint.Metadata) bool { return m.Extra["user"] == "ada" })},
		{"source", map[string]any{"source": "input"}, sf.where(func(m checkpoint.Metadata) bool { return m.Source == checkpoint.SourceInput })},
		{"step and number", map[string]any{"step": 0, "n": 2.0}, sf.where(func(m checkpoint.Metadata) bool { return m.Step == 0 && m.Extra["n"] == 2 })},
		{"run_id", map[string]any{"run_id": "run-search-a"}, sf.where(func(m checkpoint.Metadata) bool { return m.RunID == "run-search-a" })},
		{"no match", map[string]any{"user": "nobody"}, nil},
	} {
		if len(tc.want) == 0 && tc.name != "no match" {
			t.Fatalf("%s: the fixture selects nothing", tc.name)
		}
		if diff := cmp.Diff(tc.want, tupleIDs(search(t, f, checkpoint.ListOptions{Filter: tc.filter})), cmpOpts...); diff != "" {
			t.Errorf("Search(filter %s) (-want +got):\n%s", tc.name, diff)
		}
	}
}

// testSearchBeforeLimit: Before keeps strictly older IDs, Limit cuts after
// filtering, across threads.
func testSearchBeforeLimit(t *testing.T, f *fixture) {
	sf := newSearchFixture(t, f)
	ada := sf.where(func(m checkpoint.Metadata) bool { return m.Extra["user"] == "ada" })
	for _, tc := range []struct {
		name string
		opts checkpoint.ListOptions
		want []string
	}{
		{"limit", checkpoint.ListOptions{Limit: 2}, sf.ids[:2]},
		{"before", checkpoint.ListOptions{Before: sf.ids[2]}, sf.ids[3:]},
		{"before and limit", checkpoint.ListOptions{Before: sf.ids[1], Limit: 3}, sf.ids[2:5]},
		{"filter and limit", checkpoint.ListOptions{Filter: map[string]any{"user": "ada"}, Limit: 2}, ada[:2]},
		{"filter and before", checkpoint.ListOptions{Filter: map[string]any{"user": "ada"}, Before: ada[0]}, ada[1:]},
		{"limit past the end", checkpoint.ListOptions{Limit: 100}, sf.ids},
	} {
		if diff := cmp.Diff(tc.want, tupleIDs(search(t, f, tc.opts)), cmpOpts...); diff != "" {
			t.Errorf("Search(%s) (-want +got):\n%s", tc.name, diff)
		}
	}
}

// testSearchComplete: each result names its thread and namespace and is
// the tuple List returns for it; MetadataOnly leaves channels out.
func testSearchComplete(t *testing.T, f *fixture) {
	sf := newSearchFixture(t, f)
	for _, tp := range search(t, f, checkpoint.ListOptions{}) {
		l := sf.lines[tp.Thread]
		if l == nil || tp.NS != "" {
			t.Fatalf("Search returned %s of thread %q ns %q", tp.Checkpoint.ID, tp.Thread, tp.NS)
		}
		l.check(t, "Search", tp, nil)
	}
	listed := map[string]*checkpoint.Tuple{}
	for th := range sf.lines {
		if l := sf.lines[th]; l.ns == "" {
			for _, tp := range f.list(t, l.thread, checkpoint.ListOptions{MetadataOnly: true}) {
				listed[tp.Checkpoint.ID] = tp
			}
		}
	}
	for _, tp := range search(t, f, checkpoint.ListOptions{MetadataOnly: true}) {
		if diff := cmp.Diff(listed[tp.Checkpoint.ID], tp, cmpOpts...); diff != "" {
			t.Errorf("Search(MetadataOnly) %s is not what List returns (-List +Search):\n%s", tp.Checkpoint.ID, diff)
		}
	}
}

// testSearchEmpty: a saver with no checkpoints finds nothing, without error.
func testSearchEmpty(t *testing.T, f *fixture) {
	if got := search(t, f, checkpoint.ListOptions{Filter: map[string]any{"user": "ada"}}); len(got) != 0 {
		t.Errorf("Search on an empty saver = %v", tupleIDs(got))
	}
}

// testSearchInvalidKeys: a filter key List refuses is refused with
// ErrInvalid.
func testSearchInvalidKeys(t *testing.T, f *fixture) {
	newSearchFixture(t, f)
	for _, k := range []string{"", "a.b", "x'--", "$"} {
		_, err := f.s.(checkpoint.Searcher).Search(t.Context(), checkpoint.ListOptions{Filter: map[string]any{k: "v"}})
		if !errors.Is(err, checkpoint.ErrInvalid) {
			t.Errorf("Search(filter key %q) = %v, want ErrInvalid", k, err)
		}
	}
}
