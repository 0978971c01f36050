package checkpointtest

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/checkpoint"
)

func listCases() []testCase {
	return []testCase{
		{name: "NewestFirst", run: testListNewestFirst},
		{name: "Filter", run: testListFilter},
		{name: "MetadataNumbers", run: testListMetadataNumbers},
		{name: "RunKey", run: testListRunKey},
		{name: "TopologyFingerprint", run: testListTopology},
		{name: "DurabilityMode", run: testListDurability},
		{name: "MetadataOnly", run: testListMetadataOnly},
		{name: "BeforeAndLimit", run: testListBeforeLimit},
		{name: "Namespaces", run: testListNamespaces},
		{name: "EmptyThread", run: testListEmpty},
		{name: "InvalidFilterKeys", run: testListInvalidKeys},
		{name: "CartesianProduct", run: testListCartesian},
	}
}

// listFixture is a thread with six root checkpoints and three in
// "child:abc" (IDs interleaved), with varied metadata, plus another thread.
type listFixture struct {
	root, child            *line
	c1, c2, c3, c4, c5, c6 string
	k1, k2, k3             string
}

func newListFixture(t *testing.T, f *fixture) *listFixture {
	t.Helper()
	lf := &listFixture{root: f.line("thread-1", ""), child: f.line("thread-1", "child:abc")}
	step := func(l *line, src checkpoint.Source, step int, run string, extra map[string]any) string {
		req := l.request(t, l.head, set("step", fmt.Sprint(step)))
		req.Checkpoint.Metadata = checkpoint.Metadata{Source: src, Step: step, RunID: run, Extra: extra}
		return l.put(t, req)
	}
	lf.c1 = step(lf.root, checkpoint.SourceInput, -1, "r1", map[string]any{"user": "ada", "n": 1, "flag": true})
	lf.k1 = step(lf.child, checkpoint.SourceInput, -1, "r1", nil)
	lf.c2 = step(lf.root, checkpoint.SourceLoop, 0, "r1", map[string]any{"user": "ada"})
	lf.c3 = step(lf.root, checkpoint.SourceLoop, 1, "r1", map[string]any{"n": 2})
	lf.k2 = step(lf.child, checkpoint.SourceLoop, 0, "r1", nil)
	lf.c4 = step(lf.root, checkpoint.SourceUpdate, 2, "r2", map[string]any{"user": "bob", "flag": false})
	lf.k3 = step(lf.child, checkpoint.SourceLoop, 1, "r1", map[string]any{"user": "ada"})
	lf.c5 = step(lf.root, checkpoint.SourceLoop, 3, "r2", nil)
	lf.c6 = step(lf.root, checkpoint.SourceFork, 4, "r2", map[string]any{"user": "ada", "n": 1.5})
	other := f.line("thread-2", "")
	step(other, checkpoint.SourceInput, -1, "r1", map[string]any{"user": "ada"})
	step(other, checkpoint.SourceLoop, 0, "r1", map[string]any{"user": "ada"})
	return lf
}

func (lf *listFixture) line(ns string) *line {
	if ns == "" {
		return lf.root
	}
	return lf.child
}

// testListNewestFirst: List returns the namespace's checkpoints by
// descending ID, each complete (LangGraph test_list).
func testListNewestFirst(t *testing.T, f *fixture) {
	lf := newListFixture(t, f)
	tps := f.list(t, "thread-1", checkpoint.ListOptions{})
	if got, want := tupleIDs(tps), []string{lf.c6, lf.c5, lf.c4, lf.c3, lf.c2, lf.c1}; !cmp.Equal(got, want) {
		t.Fatalf("List = %v, want %v", got, want)
	}
	for _, tp := range tps {
		lf.root.check(t, "List", tp, nil)
	}
}

// testListFilter: metadata filters match source, step, run_id and caller
// keys by equality; numbers by value whatever their Go type, strings
// exactly; several keys all must match.
func testListFilter(t *testing.T, f *fixture) {
	lf := newListFixture(t, f)
	tests := []struct {
		name   string
		filter map[string]any
		want   []string
	}{
		{"nil", nil, []string{lf.c6, lf.c5, lf.c4, lf.c3, lf.c2, lf.c1}},
		{"empty", map[string]any{}, []string{lf.c6, lf.c5, lf.c4, lf.c3, lf.c2, lf.c1}},
		{"source input", map[string]any{"source": "input"}, []string{lf.c1}},
		{"source loop", map[string]any{"source": "loop"}, []string{lf.c5, lf.c3, lf.c2}},
		{"source as typed constant", map[string]any{"source": checkpoint.SourceUpdate}, []string{lf.c4}},
		{"step int", map[string]any{"step": 1}, []string{lf.c3}},
		{"step float64", map[string]any{"step": 1.0}, []string{lf.c3}},
		{"step int64", map[string]any{"step": int64(1)}, []string{lf.c3}},
		{"step negative", map[string]any{"step": -1}, []string{lf.c1}},
		{"step as a string does not match a number", map[string]any{"step": "1"}, nil},
		{"run_id", map[string]any{"run_id": "r2"}, []string{lf.c6, lf.c5, lf.c4}},
		{"extra string", map[string]any{"user": "ada"}, []string{lf.c6, lf.c2, lf.c1}},
		{"extra string is exact", map[string]any{"user": "Ada"}, nil},
		{"extra int matches float", map[string]any{"n": 1.0}, []string{lf.c1}},
		{"extra float", map[string]any{"n": 1.5}, []string{lf.c6}},
		{"extra bool true", map[string]any{"flag": true}, []string{lf.c1}},
		{"extra bool false", map[string]any{"flag": false}, []string{lf.c4}},
		{"two keys", map[string]any{"user": "ada", "run_id": "r1"}, []string{lf.c2, lf.c1}},
		{"three keys", map[string]any{"source": "loop", "step": 3, "run_id": "r2"}, []string{lf.c5}},
		{"no match", map[string]any{"user": "nobody"}, nil},
		{"missing key", map[string]any{"missing_key": "x"}, nil},
		{"keys that contradict", map[string]any{"source": "input", "step": 0}, nil},
	}
	for _, tc := range tests {
		got := tupleIDs(f.list(t, "thread-1", checkpoint.ListOptions{Filter: tc.filter}))
		if diff := cmp.Diff(tc.want, got, cmpOpts...); diff != "" {
			t.Errorf("List(filter %s %v) mismatch (-want +got):\n%s", tc.name, tc.filter, diff)
		}
	}
}

// testListBeforeLimit: Before keeps strictly smaller IDs, Limit caps the
// result after filtering (LangGraph test_list: before, limit, both).
func testListBeforeLimit(t *testing.T, f *fixture) {
	lf := newListFixture(t, f)
	all := []string{lf.c6, lf.c5, lf.c4, lf.c3, lf.c2, lf.c1}
	tests := []struct {
		name string
		opts checkpoint.ListOptions
		want []string
	}{
		{"before c4", checkpoint.ListOptions{Before: lf.c4}, []string{lf.c3, lf.c2, lf.c1}},
		{"before the first", checkpoint.ListOptions{Before: lf.c1}, nil},
		{"before an ID after all", checkpoint.ListOptions{Before: f.id()}, all},
		{"before an ID of another namespace", checkpoint.ListOptions{Before: lf.k2}, []string{lf.c3, lf.c2, lf.c1}},
		{"limit 1", checkpoint.ListOptions{Limit: 1}, []string{lf.c6}},
		{"limit 2", checkpoint.ListOptions{Limit: 2}, []string{lf.c6, lf.c5}},
		{"limit above count", checkpoint.ListOptions{Limit: 100}, all},
		{"before and limit", checkpoint.ListOptions{Before: lf.c5, Limit: 2}, []string{lf.c4, lf.c3}},
		{"filter and limit", checkpoint.ListOptions{Filter: map[string]any{"source": "loop"}, Limit: 2}, []string{lf.c5, lf.c3}},
		{"filter, before and limit", checkpoint.ListOptions{Filter: map[string]any{"user": "ada"}, Before: lf.c6, Limit: 1}, []string{lf.c2}},
	}
	for _, tc := range tests {
		got := tupleIDs(f.list(t, "thread-1", tc.opts))
		if diff := cmp.Diff(tc.want, got, cmpOpts...); diff != "" {
			t.Errorf("List(%s) mismatch (-want +got):\n%s", tc.name, diff)
		}
	}
}

// testListNamespaces: NS selects one namespace; AllNamespaces lists them
// all by descending ID, each tuple naming its namespace.
func testListNamespaces(t *testing.T, f *fixture) {
	lf := newListFixture(t, f)
	type item struct{ NS, ID string }
	items := func(tps []*checkpoint.Tuple) []item {
		var out []item
		for _, tp := range tps {
			out = append(out, item{tp.NS, tp.Checkpoint.ID})
			if tp.Thread != "thread-1" {
				t.Errorf("List(thread-1) returned a tuple of thread %q", tp.Thread)
			}
		}
		return out
	}
	all := []item{{"", lf.c6}, {"", lf.c5}, {"child:abc", lf.k3}, {"", lf.c4}, {"child:abc", lf.k2}, {"", lf.c3}, {"", lf.c2}, {"child:abc", lf.k1}, {"", lf.c1}}
	tests := []struct {
		name string
		opts checkpoint.ListOptions
		want []item
	}{
		{"child namespace", checkpoint.ListOptions{NS: "child:abc"}, []item{{"child:abc", lf.k3}, {"child:abc", lf.k2}, {"child:abc", lf.k1}}},
		{"all namespaces", checkpoint.ListOptions{AllNamespaces: true}, all},
		{"all namespaces with filter", checkpoint.ListOptions{AllNamespaces: true, Filter: map[string]any{"user": "ada"}}, []item{{"", lf.c6}, {"child:abc", lf.k3}, {"", lf.c2}, {"", lf.c1}}},
		{"all namespaces with before and limit", checkpoint.ListOptions{AllNamespaces: true, Before: lf.c4, Limit: 3}, []item{{"child:abc", lf.k2}, {"", lf.c3}, {"", lf.c2}}},
		{"missing namespace", checkpoint.ListOptions{NS: "child:zzz"}, nil},
	}
	for _, tc := range tests {
		tps := f.list(t, "thread-1", tc.opts)
		if diff := cmp.Diff(tc.want, items(tps), cmpOpts...); diff != "" {
			t.Errorf("List(%s) mismatch (-want +got):\n%s", tc.name, diff)
		}
		for _, tp := range tps {
			lf.line(tp.NS).check(t, "List("+tc.name+")", tp, nil)
		}
	}
}

// testListEmpty: a thread with no checkpoints lists as empty, not as an
// error.
func testListEmpty(t *testing.T, f *fixture) {
	for _, opts := range []checkpoint.ListOptions{{}, {AllNamespaces: true}, {Filter: map[string]any{"source": "loop"}, Limit: 3}} {
		if got := f.list(t, "nobody", opts); len(got) != 0 {
			t.Errorf("List(nobody, %+v) = %d tuples, want none", opts, len(got))
		}
	}
}

// testListInvalidKeys: filter keys outside [A-Za-z0-9_]{1,64} are refused
// with ErrInvalid (they must never reach a query; CVE-2025-8709).
func testListInvalidKeys(t *testing.T, f *fixture) {
	newListFixture(t, f)
	for _, k := range []string{"", "a-b", "a.b", "$.source", "a b", "x'--", "source\"", strings.Repeat("k", 65), "ü", "key\x00"} {
		_, err := f.s.List(t.Context(), "thread-1", checkpoint.ListOptions{Filter: map[string]any{k: "x"}})
		wantIs(t, fmt.Sprintf("List with filter key %q", k), err, checkpoint.ErrInvalid)
	}
	// The longest valid key is accepted.
	if got := f.list(t, "thread-1", checkpoint.ListOptions{Filter: map[string]any{strings.Repeat("k", 64): "x"}}); len(got) != 0 {
		t.Errorf("List with an unknown 64-character key = %d tuples, want none", len(got))
	}
}

// testListCartesian is LangGraph JS's list spec: thread × namespace ×
// limit × before × filter, each result computed from a model.
func testListCartesian(t *testing.T, f *fixture) {
	type entry struct {
		thread, ns, id string
		source         checkpoint.Source
	}
	var model []entry
	lines := map[[2]string]*line{}
	for _, thread := range []string{"1", "2"} {
		for _, ns := range []string{"", "child"} {
			lines[[2]string{thread, ns}] = f.line(thread, ns)
		}
	}
	// Parents of every (thread, ns), then children: IDs interleave.
	for _, src := range []checkpoint.Source{checkpoint.SourceInput, checkpoint.SourceLoop} {
		for _, thread := range []string{"1", "2"} {
			for _, ns := range []string{"", "child"} {
				l := lines[[2]string{thread, ns}]
				req := l.request(t, l.head, set("v", fmt.Sprintf(`"%s/%s/%s"`, thread, ns, src)))
				req.Checkpoint.Metadata.Source = src
				model = append(model, entry{thread, ns, l.put(t, req), src})
			}
		}
	}
	root1 := lines[[2]string{"1", ""}]
	child2 := lines[[2]string{"2", "child"}]
	befores := []string{"", root1.ids()[1], root1.ids()[0], child2.ids()[0]}
	nsOpts := []struct {
		name string
		opts checkpoint.ListOptions
	}{{"ns=\"\"", checkpoint.ListOptions{}}, {"ns=child", checkpoint.ListOptions{NS: "child"}}, {"all namespaces", checkpoint.ListOptions{AllNamespaces: true}}}
	filters := []map[string]any{nil, {}, {"source": "input"}, {"source": "loop"}}
	combos := 0
	for _, thread := range []string{"1", "2", "missing"} {
		for _, nso := range nsOpts {
			for _, limit := range []int{0, 1, 2} {
				for _, before := range befores {
					for _, filter := range filters {
						opts := nso.opts
						opts.Limit, opts.Before, opts.Filter = limit, before, filter
						var want []string
						for _, e := range model {
							if e.thread != thread || !opts.AllNamespaces && e.ns != opts.NS ||
								before != "" && e.id >= before ||
								filter["source"] != nil && filter["source"] != string(e.source) {
								continue
							}
							want = append(want, e.id)
						}
						sortDesc(want)
						if limit > 0 && len(want) > limit {
							want = want[:limit]
						}
						got := tupleIDs(f.list(t, thread, opts))
						if !slices.Equal(got, want) {
							t.Errorf("List(thread %q, %s, limit %d, before %q, filter %v) = %v, want %v", thread, nso.name, limit, before, filter, got, want)
						}
						combos++
					}
				}
			}
		}
	}
	if combos != 3*3*3*4*4 {
		t.Fatalf("ran %d combinations", combos)
	}
}

// testListMetadataNumbers: caller metadata numbers come back from Get and
// List as the same json.Number values whatever the saver, every digit
// kept (integers above 2^53 included), and filters compare them by exact
// value whatever the Go type on either side.
func testListMetadataNumbers(t *testing.T, f *fixture) {
	l := f.line("thread-1", "")
	put := func(v any) string {
		req := l.request(t, l.head, set("x", `0`))
		req.Checkpoint.Metadata.Extra = map[string]any{"n": v, "tag": "t"}
		return l.put(t, req)
	}
	c1 := put(int64(9007199254740993)) // 2^53 + 1: no float64 holds it
	c2 := put(9007199254740992.0)
	c3 := put(uint64(18446744073709551615))
	c4 := put(json.Number("5.0"))
	c5 := put(1.5)
	c6 := put(1e21)
	c7 := put(json.Number("-0"))
	stored := map[string]json.Number{
		c1: "9007199254740993", c2: "9007199254740992", c3: "18446744073709551615",
		c4: "5", c5: "1.5", c6: "1e+21", c7: "0",
	}
	for id, n := range stored {
		want := map[string]any{"n": n, "tag": "t"}
		got := f.get(t, l.ref(id), checkpoint.GetOptions{}).Checkpoint.Metadata.Extra
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("Get(%s).Metadata.Extra mismatch (-want +got):\n%s", id, diff)
		}
	}
	for _, tp := range f.list(t, "thread-1", checkpoint.ListOptions{Filter: map[string]any{"tag": "t"}}) {
		want := map[string]any{"n": stored[tp.Checkpoint.ID], "tag": "t"}
		if diff := cmp.Diff(want, tp.Checkpoint.Metadata.Extra); diff != "" {
			t.Errorf("List: checkpoint %s Metadata.Extra mismatch (-want +got):\n%s", tp.Checkpoint.ID, diff)
		}
	}
	tests := []struct {
		name  string
		value any
		want  []string
	}{
		{"int64 above 2^53", int64(9007199254740993), []string{c1}},
		{"json.Number above 2^53", json.Number("9007199254740993"), []string{c1}},
		{"json.Number above 2^53 with a fraction", json.Number("9007199254740993.0"), []string{c1}},
		{"float64 2^53 does not match 2^53 + 1", 9007199254740992.0, []string{c2}},
		{"int 2^53", 9007199254740992, []string{c2}},
		{"uint64 max", uint64(18446744073709551615), []string{c3}},
		{"json.Number one below uint64 max", json.Number("18446744073709551614"), nil},
		{"int matches a json.Number written 5.0", 5, []string{c4}},
		{"json.Number 5e0", json.Number("5e0"), []string{c4}},
		{"float", 1.5, []string{c5}},
		{"json.Number 1.50", json.Number("1.50"), []string{c5}},
		{"json.Number 15e-1", json.Number("15e-1"), []string{c5}},
		{"float 1e21", 1e21, []string{c6}},
		{"json.Number 10^21 written out", json.Number("1000000000000000000000"), []string{c6}},
		{"json.Number 10^21 plus one", json.Number("1000000000000000000001"), nil},
		{"zero", 0, []string{c7}},
		{"negative zero float", json.Number("-0.0"), []string{c7}},
		{"no such number", 7, nil},
	}
	for _, tc := range tests {
		for _, limit := range []int{0, 1} {
			opts := checkpoint.ListOptions{Filter: map[string]any{"n": tc.value}, Limit: limit}
			want := tc.want
			if limit > 0 && len(want) > limit {
				want = want[:limit]
			}
			got := tupleIDs(f.list(t, "thread-1", opts))
			if diff := cmp.Diff(want, got, cmpOpts...); diff != "" {
				t.Errorf("List(filter %s %v, limit %d) mismatch (-want +got):\n%s", tc.name, tc.value, limit, diff)
			}
		}
	}
}

// testListRunKey: Metadata.RunKey (graph.RunKey's idempotency key on an
// input checkpoint) comes back from Get and List as it was saved, a List
// filter on checkpoint.RunKeyFilter finds it (with and without a limit),
// a caller key "run_key" stays a caller key (it was one before RunKey
// existed), and a run key over MaxRunKeyBytes or not UTF-8 is refused with
// ErrInvalid.
func testListRunKey(t *testing.T, f *fixture) {
	l := f.line("thread-1", "")
	put := func(key string) string {
		req := l.request(t, l.head, set("x", `0`))
		req.Checkpoint.Metadata.Source = checkpoint.SourceInput
		req.Checkpoint.Metadata.RunKey = key
		return l.put(t, req)
	}
	c1 := put("order-7")
	c2 := put("")
	c3 := put("order-8 ünïcode")
	for id, want := range map[string]string{c1: "order-7", c2: "", c3: "order-8 ünïcode"} {
		if got := f.get(t, l.ref(id), checkpoint.GetOptions{}).Checkpoint.Metadata.RunKey; got != want {
			t.Errorf("Get(%s).Metadata.RunKey = %q, want %q", id, got, want)
		}
	}
	callers := l.request(t, l.head, set("x", `0`))
	callers.Checkpoint.Metadata.Extra = map[string]any{"run_key": "order-7"}
	c4 := l.put(t, callers)
	got := f.get(t, l.ref(c4), checkpoint.GetOptions{}).Checkpoint.Metadata
	if got.RunKey != "" || got.Extra["run_key"] != "order-7" {
		t.Errorf("a caller key run_key read back as RunKey %q, Extra %v", got.RunKey, got.Extra)
	}
	for _, limit := range []int{0, 1} {
		got := tupleIDs(f.list(t, "thread-1", checkpoint.ListOptions{Filter: map[string]any{checkpoint.RunKeyFilter: "order-8 ünïcode"}, Limit: limit}))
		if want := []string{c3}; !cmp.Equal(got, want) {
			t.Errorf("List(run_key = order-8..., limit %d) = %v, want %v", limit, got, want)
		}
	}
	for name, mutate := range map[string]func(*checkpoint.PutRequest){
		"caller key run-key": func(r *checkpoint.PutRequest) {
			r.Checkpoint.Metadata.Extra = map[string]any{checkpoint.RunKeyFilter: "x"}
		},
		"run key too long": func(r *checkpoint.PutRequest) {
			r.Checkpoint.Metadata.RunKey = strings.Repeat("k", checkpoint.MaxRunKeyBytes+1)
		},
		"run key not UTF-8": func(r *checkpoint.PutRequest) { r.Checkpoint.Metadata.RunKey = "bad\xff" },
	} {
		req := l.request(t, l.head, set("x", `0`))
		mutate(&req)
		wantIs(t, "Put with "+name, f.s.Put(context.Background(), req), checkpoint.ErrInvalid)
	}
}

// testListTopology: Metadata.Topology (the fingerprint of the graph that
// wrote a checkpoint) comes back from Get and List as it was saved, alone
// and beside caller keys, a List filter on checkpoint.TopologyFilter finds
// it, a caller key "topology" stays a caller key, and a value that is not
// a fingerprint, or a caller key topology-fp, is refused with ErrInvalid.
func testListTopology(t *testing.T, f *fixture) {
	const fpA, fpB = "0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210"
	l := f.line("thread-1", "")
	put := func(fp string, extra map[string]any) string {
		req := l.request(t, l.head, set("x", `0`))
		req.Checkpoint.Metadata.Topology = fp
		req.Checkpoint.Metadata.Extra = extra
		return l.put(t, req)
	}
	c1 := put(fpA, nil)
	c2 := put("", nil)
	c3 := put(fpB, map[string]any{"user": "ada"})
	c4 := put(fpA, map[string]any{"topology": "mine"})
	for id, want := range map[string]string{c1: fpA, c2: "", c3: fpB, c4: fpA} {
		if got := f.get(t, l.ref(id), checkpoint.GetOptions{}).Checkpoint.Metadata.Topology; got != want {
			t.Errorf("Get(%s).Metadata.Topology = %q, want %q", id, got, want)
		}
	}
	if got := f.get(t, l.ref(c4), checkpoint.GetOptions{}).Checkpoint.Metadata.Extra["topology"]; got != "mine" {
		t.Errorf("a caller key topology read back as %v", got)
	}
	for _, limit := range []int{0, 1} {
		got := tupleIDs(f.list(t, "thread-1", checkpoint.ListOptions{Filter: map[string]any{checkpoint.TopologyFilter: fpA}, Limit: limit}))
		want := []string{c4, c1}
		if limit == 1 {
			want = want[:1]
		}
		if !cmp.Equal(got, want) {
			t.Errorf("List(topology = %s, limit %d) = %v, want %v", fpA, limit, got, want)
		}
	}
	for name, mutate := range map[string]func(*checkpoint.PutRequest){
		"caller key topology-fp": func(r *checkpoint.PutRequest) {
			r.Checkpoint.Metadata.Extra = map[string]any{checkpoint.TopologyFilter: fpA}
		},
		"short fingerprint":     func(r *checkpoint.PutRequest) { r.Checkpoint.Metadata.Topology = "abc" },
		"uppercase fingerprint": func(r *checkpoint.PutRequest) { r.Checkpoint.Metadata.Topology = strings.ToUpper(fpA) },
	} {
		req := l.request(t, l.head, set("x", `0`))
		mutate(&req)
		wantIs(t, "Put with "+name, f.s.Put(context.Background(), req), checkpoint.ErrInvalid)
	}
}

// testListDurability: Metadata.Durability (the durability mode of the
// run that wrote a checkpoint) comes back from Get and List as it was
// saved, alone, beside a run key and beside caller keys, and empty when
// none was saved (a checkpoint written before lockstep recorded it); a
// List filter on checkpoint.DurabilityFilter finds it; a caller key
// "durability" stays a caller key; and a mode that is not one of
// checkpoint.DurabilityModes, or a caller key durability-mode, is
// refused with ErrInvalid.
func testListDurability(t *testing.T, f *fixture) {
	l := f.line("thread-1", "")
	put := func(mode, runKey string, extra map[string]any) string {
		req := l.request(t, l.head, set("x", `0`))
		req.Checkpoint.Metadata.Durability = mode
		req.Checkpoint.Metadata.Extra = extra
		if runKey != "" {
			req.Checkpoint.Metadata.Source = checkpoint.SourceInput
			req.Checkpoint.Metadata.RunKey = runKey
		}
		return l.put(t, req)
	}
	c1 := put("sync", "", nil)
	c2 := put("", "", nil)
	c3 := put("async", "order-7", nil)
	c4 := put("exit", "", map[string]any{"durability": "mine"})
	c5 := put("async", "", nil)
	want := map[string]string{c1: "sync", c2: "", c3: "async", c4: "exit", c5: "async"}
	for id, mode := range want {
		if got := f.get(t, l.ref(id), checkpoint.GetOptions{}).Checkpoint.Metadata.Durability; got != mode {
			t.Errorf("Get(%s).Metadata.Durability = %q, want %q", id, got, mode)
		}
	}
	for _, tp := range f.list(t, "thread-1", checkpoint.ListOptions{}) {
		if got := tp.Checkpoint.Metadata.Durability; got != want[tp.Checkpoint.ID] {
			t.Errorf("List: checkpoint %s has Durability %q, want %q", tp.Checkpoint.ID, got, want[tp.Checkpoint.ID])
		}
	}
	if got := f.get(t, l.ref(c4), checkpoint.GetOptions{}).Checkpoint.Metadata.Extra["durability"]; got != "mine" {
		t.Errorf("a caller key durability read back as %v", got)
	}
	for _, limit := range []int{0, 1} {
		got := tupleIDs(f.list(t, "thread-1", checkpoint.ListOptions{Filter: map[string]any{checkpoint.DurabilityFilter: "async"}, Limit: limit}))
		want := []string{c5, c3}
		if limit == 1 {
			want = want[:1]
		}
		if !cmp.Equal(got, want) {
			t.Errorf("List(durability-mode = async, limit %d) = %v, want %v", limit, got, want)
		}
	}
	for name, mutate := range map[string]func(*checkpoint.PutRequest){
		"caller key durability-mode": func(r *checkpoint.PutRequest) {
			r.Checkpoint.Metadata.Extra = map[string]any{checkpoint.DurabilityFilter: "sync"}
		},
		"unknown mode":   func(r *checkpoint.PutRequest) { r.Checkpoint.Metadata.Durability = "fast" },
		"uppercase mode": func(r *checkpoint.PutRequest) { r.Checkpoint.Metadata.Durability = "SYNC" },
	} {
		req := l.request(t, l.head, set("x", `0`))
		mutate(&req)
		wantIs(t, "Put with "+name, f.s.Put(context.Background(), req), checkpoint.ErrInvalid)
	}
}

// testListMetadataOnly: with MetadataOnly, List returns the same
// checkpoints, in the same order, with the same IDs, parents, creation
// times, metadata and versions as without it, filters and limits
// included. A saver may ignore the option; one that honours it returns no
// channels and no pending writes.
func testListMetadataOnly(t *testing.T, f *fixture) {
	lf := newListFixture(t, f)
	for _, opts := range []checkpoint.ListOptions{
		{},
		{Filter: map[string]any{"user": "ada"}},
		{Limit: 2},
		{Before: lf.c4, Limit: 1},
		{AllNamespaces: true},
	} {
		full := f.list(t, "thread-1", opts)
		opts.MetadataOnly = true
		light := f.list(t, "thread-1", opts)
		if len(light) != len(full) {
			t.Fatalf("List(%+v) = %d tuples, %d without MetadataOnly", opts, len(light), len(full))
		}
		for i := range full {
			want, got := full[i].Checkpoint, light[i].Checkpoint
			if full[i].NS != light[i].NS || want.ID != got.ID || want.ParentID != got.ParentID || !want.CreatedAt.Equal(got.CreatedAt) {
				t.Errorf("List(%+v)[%d] = %s/%s parent %s at %v, want %s/%s parent %s at %v", opts, i,
					light[i].NS, got.ID, got.ParentID, got.CreatedAt, full[i].NS, want.ID, want.ParentID, want.CreatedAt)
			}
			if diff := cmp.Diff(want.Metadata, got.Metadata); diff != "" {
				t.Errorf("List(%+v)[%d] metadata (-full +metadata only):\n%s", opts, i, diff)
			}
			if diff := cmp.Diff(want.Versions, got.Versions); diff != "" {
				t.Errorf("List(%+v)[%d] versions (-full +metadata only):\n%s", opts, i, diff)
			}
			if got.Channels != nil && !cmp.Equal(want.Channels, got.Channels) {
				t.Errorf("List(%+v)[%d] returned channels that differ from the full list's", opts, i)
			}
		}
	}
}
