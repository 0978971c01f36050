package graph_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/retry"
)

// fullShape is a graph with every part of a topology: plain edges, a
// conditional edge with declared destinations and one without, a Send
// edge, a join, a router after START, and breakpoints.
func fullShape(opts ...graph.Option) (*graph.Runnable[shapeState], error) {
	g := graph.New[shapeState]()
	for _, n := range []string{"plan", "work", "review", "merge", "publish"} {
		g.AddNode(n, noopNode)
	}
	g.AddConditionalEdges(graph.START, routeTo("plan"), "plan", "review").
		AddSendEdges("plan", sendNone, "work").
		AddJoin([]string{"work", "review"}, "merge").
		AddEdge("plan", "review").
		AddConditionalEdges("merge", routeTo("publish"), "publish", graph.END).
		AddConditionalEdges("publish", routeTo(graph.END))
	return g.Compile(append([]graph.Option{graph.WithName("pipeline"), graph.WithSaver(checkpoint.NewMemorySaver(nil)),
		graph.WithInterruptBefore("publish"), graph.WithInterruptAfter("review")}, opts...)...)
}

// goldenFingerprints pin the fingerprints of fixed topologies: a change
// of the encoding (field names, order, format version, the hash) fails
// here first. Such a change makes every stored fingerprint differ from
// the one the same graph has after an upgrade, so that every waiting
// thread reads as saved under another graph: it needs a new format
// version and a note in the changelog.
var goldenFingerprints = map[string]string{
	// printf %s '{"format":1,"name":"empty","nodes":[],"edges":[],"joins":[],"branches":[],"interrupt_before":[],"interrupt_after":[]}' | sha256sum
	"empty": "d00f102e773b57d17f2f541cc97ad5d5",
	// head -c -1 testdata/topology/pipeline.json | sha256sum
	"pipeline": "665d0a48fe201d948863886f8140fd00",
}

// TestTopologyGolden: the encoding of the full shape is its golden file,
// and the fingerprints of fixed topologies are the golden ones.
func TestTopologyGolden(t *testing.T) {
	r, err := fullShape()
	if err != nil {
		t.Fatal(err)
	}
	b, err := r.Topology().Encode()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", "topology", "pipeline.json")
	if *updateGolden {
		if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(strings.TrimSuffix(string(want), "\n"), string(b)); d != "" {
		t.Errorf("encoding of the pipeline graph (-golden +got):\n%s", d)
	}
	for name, top := range map[string]graph.Topology{"empty": {Name: "empty"}, "pipeline": r.Topology()} {
		got, err := top.Fingerprint()
		if err != nil {
			t.Fatal(err)
		}
		if got != goldenFingerprints[name] {
			t.Errorf("fingerprint of %s = %s, want the golden %s", name, got, goldenFingerprints[name])
		}
	}
}

// TestTopologyOfCompiledGraph: Runnable.Topology holds every node, edge,
// join, branch (with its declared destinations, none for an open router)
// and compile-time breakpoint, sorted.
func TestTopologyOfCompiledGraph(t *testing.T) {
	r, err := fullShape()
	if err != nil {
		t.Fatal(err)
	}
	want := graph.Topology{
		Name:  "pipeline",
		Nodes: []string{"merge", "plan", "publish", "review", "work"},
		Edges: []graph.Edge{{From: "plan", To: "review"}},
		Joins: []graph.Join{{Sources: []string{"review", "work"}, To: "merge"}},
		Branches: []graph.Branch{
			{From: graph.START, Destinations: []string{"plan", "review"}},
			{From: "merge", Destinations: []string{graph.END, "publish"}},
			{From: "plan", Send: true, Destinations: []string{"work"}},
			{From: "publish"},
		},
		InterruptBefore: []string{"publish"},
		InterruptAfter:  []string{"review"},
	}
	if d := cmp.Diff(want, r.Topology()); d != "" {
		t.Errorf("Topology (-want +got):\n%s", d)
	}
	if r.Name() != "pipeline" {
		t.Errorf("Name() = %q", r.Name())
	}
	// A copy: changing it changes nothing of the Runnable.
	top := r.Topology()
	top.Nodes[0], top.Branches[0].Destinations[0] = "changed", "changed"
	if d := cmp.Diff(want, r.Topology()); d != "" {
		t.Errorf("Topology after changing a returned copy (-want +got):\n%s", d)
	}
}

// TestFingerprintStability: the fingerprint is the same for the same
// graph whatever the order it was declared in, across compilations (map
// order differs each time), and whatever the code that is not the
// topology (node functions, retries, run limits, logging); it differs for
// every change of the topology.
func TestFingerprintStability(t *testing.T) {
	fp := func(t *testing.T, r *graph.Runnable[shapeState], err error) string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		s, err := r.Topology().Fingerprint()
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	base := func(t *testing.T) string { r, err := fullShape(); return fp(t, r, err) }(t)
	if base != goldenFingerprints["pipeline"] {
		t.Errorf("base fingerprint %s, want the golden %s", base, goldenFingerprints["pipeline"])
	}
	for range 20 {
		r, err := fullShape()
		if got := fp(t, r, err); got != base {
			t.Fatalf("a second compilation of the same graph: fingerprint %s, want %s", got, base)
		}
	}
	other := func(context.Context, shapeState) (graph.Update[shapeState], error) {
		return graph.Set(shapeState{N: 1}, "N"), nil
	}
	same := map[string]func() (*graph.Runnable[shapeState], error){
		"declared in another order": func() (*graph.Runnable[shapeState], error) {
			g := graph.New[shapeState]()
			for _, n := range []string{"publish", "merge", "review", "work", "plan"} {
				g.AddNode(n, noopNode)
			}
			g.AddConditionalEdges("publish", routeTo(graph.END)).
				AddConditionalEdges("merge", routeTo("publish"), graph.END, "publish", "publish").
				AddEdge("plan", "review").AddEdge("plan", "review").
				AddJoin([]string{"review", "work"}, "merge").
				AddSendEdges("plan", sendNone, "work").
				AddConditionalEdges(graph.START, routeTo("plan"), "review", "plan")
			return g.Compile(graph.WithName("pipeline"), graph.WithSaver(checkpoint.NewMemorySaver(nil)),
				graph.WithInterruptAfter("review", "review"), graph.WithInterruptBefore("publish"))
		},
		"other node code and options": func() (*graph.Runnable[shapeState], error) {
			g := graph.New[shapeState]()
			for _, n := range []string{"plan", "work", "review", "merge", "publish"} {
				g.AddNode(n, other, graph.WithRetry(retry.Policy{MaxAttempts: 3}))
			}
			g.AddConditionalEdges(graph.START, func(context.Context, shapeState) ([]string, error) { return []string{"review"}, nil }, "plan", "review").
				AddSendEdges("plan", sendNone, "work").
				AddJoin([]string{"work", "review"}, "merge").
				AddEdge("plan", "review").
				AddConditionalEdges("merge", routeTo(graph.END), "publish", graph.END).
				AddConditionalEdges("publish", routeTo("merge"))
			return g.Compile(graph.WithName("pipeline"), graph.WithSaver(checkpoint.NewMemorySaver(nil)),
				graph.WithInterruptBefore("publish"), graph.WithInterruptAfter("review"),
				graph.WithRecursionLimit(7), graph.WithConcurrency(1), graph.WithStateCache(0), graph.WithLeaseTTL(time.Minute))
		},
	}
	for name, build := range same {
		r, err := build()
		if got := fp(t, r, err); got != base {
			t.Errorf("%s: fingerprint %s, want %s (the topology is the same)", name, got, base)
		}
	}
	differ := map[string][]graph.Option{
		"another name":            {graph.WithName("pipeline-2")},
		"another breakpoint":      {graph.WithInterruptBefore("merge")},
		"every node a breakpoint": {graph.WithInterruptAfter("*")},
	}
	seen := map[string]string{base: "the base graph"}
	check := func(name, got string) {
		t.Helper()
		if prev, dup := seen[got]; dup {
			t.Errorf("%s: fingerprint %s, the same as %s's", name, got, prev)
		}
		seen[got] = name
	}
	for name, opts := range differ {
		r, err := fullShape(opts...)
		check(name, fp(t, r, err))
	}
	top, err := fullShape()
	if err != nil {
		t.Fatal(err)
	}
	changes := map[string]func(*graph.Topology){
		"a node added":              func(t *graph.Topology) { t.Nodes = append(t.Nodes, "audit") },
		"an edge removed":           func(t *graph.Topology) { t.Edges = nil },
		"an edge added":             func(t *graph.Topology) { t.Edges = append(t.Edges, graph.Edge{From: "work", To: graph.END}) },
		"an edge reversed":          func(t *graph.Topology) { t.Edges[0] = graph.Edge{From: "review", To: "plan"} },
		"a destination added":       func(t *graph.Topology) { t.Branches[1].Destinations = append(t.Branches[1].Destinations, "plan") },
		"destinations dropped":      func(t *graph.Topology) { t.Branches[1].Destinations = nil },
		"a conditional edge a Send": func(t *graph.Topology) { t.Branches[0].Send = true },
		"a join source removed":     func(t *graph.Topology) { t.Joins[0].Sources = t.Joins[0].Sources[:1] },
		"a join made two edges": func(t *graph.Topology) {
			t.Joins = nil
			t.Edges = append(t.Edges, graph.Edge{From: "review", To: "merge"}, graph.Edge{From: "work", To: "merge"})
		},
		"a second identical router": func(t *graph.Topology) { t.Branches = append(t.Branches, t.Branches[3]) },
		"no breakpoint before":      func(t *graph.Topology) { t.InterruptBefore = nil },
		"the breakpoint moved":      func(t *graph.Topology) { t.InterruptBefore, t.InterruptAfter = t.InterruptAfter, t.InterruptBefore },
	}
	for name, change := range changes {
		c := top.Topology()
		change(&c)
		got, err := c.Fingerprint()
		if err != nil {
			t.Fatal(err)
		}
		check(name, got)
	}
}

// TestDecodeTopology: what Encode writes decodes back to the topology,
// and DecodeTopology refuses what Compile could not have made, what is
// not canonical, another format version (saying a newer lockstep wrote
// it), and data that does not hash to its fingerprint (a
// *checkpoint.CorruptError).
func TestDecodeTopology(t *testing.T) {
	r, err := fullShape()
	if err != nil {
		t.Fatal(err)
	}
	stored := func(name, data string) checkpoint.Topology {
		return checkpoint.Topology{Fingerprint: checkpoint.TopologyFingerprint([]byte(data)), Name: name, Data: []byte(data)}
	}
	b, err := r.Topology().Encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := graph.DecodeTopology(stored("pipeline", string(b)))
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(r.Topology(), got); d != "" {
		t.Errorf("DecodeTopology(Encode()) (-want +got):\n%s", d)
	}
	enc := func(top graph.Topology) string {
		b, err := top.Encode()
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	node := func(names ...string) graph.Topology { return graph.Topology{Name: "g", Nodes: names} }
	for name, tc := range map[string]struct {
		st      checkpoint.Topology
		newer   bool
		corrupt bool
	}{
		"another name":           {st: stored("other", enc(node("a")))},
		"format 2":               {st: stored("g", strings.Replace(enc(node("a")), `"format":1`, `"format":2`, 1)), newer: true},
		"no format":              {st: stored("g", strings.Replace(enc(node("a")), `"format":1,`, ``, 1))},
		"an unknown field":       {st: stored("g", strings.Replace(enc(node("a")), `"name"`, `"extra":1,"name"`, 1))},
		"a duplicate field":      {st: stored("g", strings.Replace(enc(node("a")), `"name":"g"`, `"name":"g","name":"g"`, 1))},
		"null lists":             {st: stored("g", strings.Replace(enc(node("a")), `"edges":[]`, `"edges":null`, 1))},
		"nodes out of order":     {st: stored("g", strings.Replace(enc(node("a", "b")), `["a","b"]`, `["b","a"]`, 1))},
		"white space":            {st: stored("g", strings.Replace(enc(node("a")), `,`, `, `, 1))},
		"a reserved node name":   {st: stored("g", enc(node("__x")))},
		"a node name with a ':'": {st: stored("g", enc(node("a:b")))},
		"an edge to a stranger":  {st: stored("g", enc(graph.Topology{Name: "g", Nodes: []string{"a"}, Edges: []graph.Edge{{From: "a", To: "b"}}}))},
		"an edge from END":       {st: stored("g", enc(graph.Topology{Name: "g", Nodes: []string{"a"}, Edges: []graph.Edge{{From: graph.END, To: "a"}}}))},
		"a Send to END": {st: stored("g", enc(graph.Topology{Name: "g", Nodes: []string{"a"},
			Branches: []graph.Branch{{From: "a", Send: true, Destinations: []string{graph.END}}}}))},
		"a join with no sources":    {st: stored("g", enc(graph.Topology{Name: "g", Nodes: []string{"a"}, Joins: []graph.Join{{To: "a"}}}))},
		"a breakpoint on a strange": {st: stored("g", enc(graph.Topology{Name: "g", Nodes: []string{"a"}, InterruptBefore: []string{"b"}}))},
		"an empty name":             {st: stored("", enc(graph.Topology{Nodes: []string{"a"}}))},
		"not JSON":                  {st: stored("g", `{"format":1,`)},
		"tampered data":             {st: checkpoint.Topology{Fingerprint: stored("g", enc(node("a"))).Fingerprint, Name: "g", Data: []byte(enc(node("b")))}, corrupt: true},
	} {
		_, err := graph.DecodeTopology(tc.st)
		switch {
		case tc.corrupt:
			var ce *checkpoint.CorruptError
			if !errors.As(err, &ce) {
				t.Errorf("%s: DecodeTopology = %v, want a *checkpoint.CorruptError", name, err)
			}
		case !errors.Is(err, graph.ErrBadTopology):
			t.Errorf("%s: DecodeTopology = %v, want ErrBadTopology", name, err)
		case tc.newer && !strings.Contains(err.Error(), "newer lockstep"):
			t.Errorf("%s: DecodeTopology = %v, want it to say a newer lockstep wrote it", name, err)
		}
	}
	// Topologies built by hand encode canonically: order and duplicates do
	// not matter.
	a := graph.Topology{Name: "g", Nodes: []string{"b", "a", "a"}, Edges: []graph.Edge{{From: "a", To: "b"}, {From: graph.START, To: "a"}, {From: "a", To: "b"}}}
	c := graph.Topology{Name: "g", Nodes: []string{"a", "b"}, Edges: []graph.Edge{{From: graph.START, To: "a"}, {From: "a", To: "b"}}}
	if enc(a) != enc(c) {
		t.Errorf("Encode depends on order:\n%s\n%s", enc(a), enc(c))
	}
	if _, err := (graph.Topology{Name: "g\xff"}).Encode(); !errors.Is(err, graph.ErrInvalidGraph) {
		t.Errorf("Encode of a name that is not UTF-8: %v, want ErrInvalidGraph", err)
	}
}

// TestTopologyMermaidWaiting: Topology.Mermaid marks the waiting nodes
// with the class waiting (and defines it), ignores names that are not
// nodes, and draws exactly Runnable.Mermaid without any.
func TestTopologyMermaidWaiting(t *testing.T) {
	r, err := fullShape()
	if err != nil {
		t.Fatal(err)
	}
	top := r.Topology()
	if top.Mermaid() != r.Mermaid() || top.Mermaid("nope", graph.START) != r.Mermaid() {
		t.Error("Topology.Mermaid without waiting nodes differs from Runnable.Mermaid")
	}
	got := top.Mermaid("review", "work")
	for _, want := range []string{"\treview(review):::waiting\n", "\twork(work):::waiting\n", "\tplan(plan)\n", "\tclassDef waiting "} {
		if !strings.Contains(got, want) {
			t.Errorf("Mermaid(review, work) lacks %q:\n%s", want, got)
		}
	}
}

// WithName: a name that is not 1 to 256 bytes of UTF-8 without control
// characters fails Compile; the default is the state type.
func TestWithName(t *testing.T) {
	build := func(opts ...graph.Option) (*graph.Runnable[shapeState], error) {
		return graph.New[shapeState]().AddNode("a", noopNode).AddEdge(graph.START, "a").Compile(opts...)
	}
	r, err := build()
	if err != nil {
		t.Fatal(err)
	}
	if r.Name() != "graph_test.shapeState" || r.Topology().Name != r.Name() {
		t.Errorf("default name %q (topology %q), want graph_test.shapeState", r.Name(), r.Topology().Name)
	}
	for _, bad := range []string{"", "a\nb", strings.Repeat("n", checkpoint.MaxTopologyNameBytes+1), "bad\xff"} {
		if _, err := build(graph.WithName(bad)); !errors.Is(err, graph.ErrInvalidGraph) {
			t.Errorf("WithName(%q): %v, want ErrInvalidGraph", bad, err)
		}
	}
}

// countingStore is a MemorySaver that counts PutTopology calls and can
// fail them.
type countingStore struct {
	*checkpoint.MemorySaver
	mu   sync.Mutex
	puts int
	fail error
}

func (c *countingStore) PutTopology(ctx context.Context, t checkpoint.Topology) error {
	c.mu.Lock()
	c.puts++
	fail := c.fail
	c.mu.Unlock()
	if fail != nil {
		return fail
	}
	return c.MemorySaver.PutTopology(ctx, t)
}

func (c *countingStore) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.puts
}

// TestTopologyStoredOnce: a Runnable stores its topology on its saver
// once, before its first save (not for a run refused before it saves
// anything), whatever it runs after (Invoke on many
// threads at once, Resume, UpdateState, Replay); every checkpoint it
// writes names the fingerprint; a second Runnable of another version
// stores its own, which becomes the newest of the name, and storing the
// first again (a rollback) makes it the newest again.
func TestTopologyStoredOnce(t *testing.T) {
	ctx := t.Context()
	s := &countingStore{MemorySaver: checkpoint.NewMemorySaver(nil)}
	build := func(extra bool) *graph.Runnable[shapeState] {
		g := graph.New[shapeState]().AddNode("a", noopNode).AddNode("b", noopNode).AddEdge(graph.START, "a").AddEdge("a", "b")
		if extra {
			g.AddNode("c", noopNode).AddEdge("b", "c")
		}
		r, err := g.Compile(graph.WithSaver(s), graph.WithName("orders"), graph.WithInterruptBefore("b"))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	v1 := build(false)
	fp1, _ := v1.Topology().Fingerprint()
	if s.count() != 0 {
		t.Fatalf("Compile stored the topology (%d PutTopology)", s.count())
	}
	// A run refused before it writes stores nothing.
	if _, err := v1.Continue(ctx, "no-such-thread"); !errors.Is(err, graph.ErrThreadNotFound) {
		t.Fatalf("Continue of a missing thread: %v", err)
	}
	if s.count() != 0 {
		t.Fatalf("a run that wrote nothing stored the topology (%d PutTopology)", s.count())
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := v1.Invoke(ctx, fmt.Sprintf("t%d", i), graph.Update[shapeState]{}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if _, err := v1.Continue(ctx, "t0"); err != nil {
		t.Fatal(err)
	}
	if _, err := v1.UpdateState(ctx, "t1", graph.Set(shapeState{N: 5}, "N"), graph.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	hist, err := v1.History(ctx, "t2", graph.HistoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v1.Replay(ctx, "t2", hist[len(hist)-1].Config.CheckpointID); err != nil {
		t.Fatal(err)
	}
	if n := s.count(); n != 1 {
		t.Errorf("%d PutTopology calls from one Runnable, want 1", n)
	}
	for i := range 8 {
		tps, err := s.List(ctx, fmt.Sprintf("t%d", i), checkpoint.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, tp := range tps {
			if tp.Checkpoint.Metadata.Topology != fp1 {
				t.Errorf("thread t%d checkpoint %s (%s): Metadata.Topology %q, want %s", i, tp.Checkpoint.ID, tp.Checkpoint.Metadata.Source, tp.Checkpoint.Metadata.Topology, fp1)
			}
		}
	}
	newest := func() string {
		t.Helper()
		st, err := s.LatestTopology(ctx, "orders")
		if err != nil {
			t.Fatal(err)
		}
		return st.Fingerprint
	}
	if got := newest(); got != fp1 {
		t.Errorf("newest after v1 = %s, want %s", got, fp1)
	}
	v2 := build(true)
	fp2, _ := v2.Topology().Fingerprint()
	if err := v2.SaveTopology(ctx); err != nil {
		t.Fatal(err)
	}
	if got := newest(); got != fp2 || fp2 == fp1 {
		t.Errorf("newest after v2 started = %s, want %s (v1 %s)", got, fp2, fp1)
	}
	if err := build(false).SaveTopology(ctx); err != nil {
		t.Fatal(err)
	}
	if got := newest(); got != fp1 {
		t.Errorf("newest after a rollback to v1 = %s, want %s", got, fp1)
	}
	stored, ok, err := graph.LoadTopology(ctx, s, fp2)
	if err != nil || !ok {
		t.Fatalf("LoadTopology(v2) = %v, %v", ok, err)
	}
	if d := cmp.Diff(v2.Topology(), stored); d != "" {
		t.Errorf("LoadTopology (-compiled +stored):\n%s", d)
	}
	if _, ok, err := graph.LoadTopology(ctx, s, strings.Repeat("0", 32)); ok || err != nil {
		t.Errorf("LoadTopology of an unknown fingerprint = %v, %v; want not ok, no error", ok, err)
	}
	if _, ok, err := graph.LoadTopology(ctx, plainSaver{s.MemorySaver}, fp1); ok || err != nil {
		t.Errorf("LoadTopology on a saver without topologies = %v, %v; want not ok, no error", ok, err)
	}
	if _, _, err := graph.LoadTopology(ctx, s, "zz"); !errors.Is(err, graph.ErrInvalidInput) {
		t.Errorf("LoadTopology of a bad fingerprint: %v, want ErrInvalidInput", err)
	}
}

// plainSaver hides every optional interface of the saver it wraps.
type plainSaver struct{ checkpoint.Saver }

// TestTopologyStoreFails: a run whose topology cannot be stored fails
// with the saver's error before it writes anything; the next run stores
// it. A saver that keeps no topologies is not asked, and its checkpoints
// still name the fingerprint.
func TestTopologyStoreFails(t *testing.T) {
	ctx := t.Context()
	boom := errors.New("disk on fire")
	s := &countingStore{MemorySaver: checkpoint.NewMemorySaver(nil), fail: boom}
	r, err := graph.New[shapeState]().AddNode("a", noopNode).AddEdge(graph.START, "a").Compile(graph.WithSaver(s))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Invoke(ctx, "t", graph.Update[shapeState]{}); !errors.Is(err, boom) {
		t.Fatalf("Invoke with a failing store: %v, want the store's error", err)
	}
	if _, err := s.Get(ctx, checkpoint.Ref{Thread: "t"}, checkpoint.GetOptions{}); !errors.Is(err, checkpoint.ErrNotFound) {
		t.Errorf("after the failed store: Get = %v, want ErrNotFound", err)
	}
	if _, err := r.UpdateState(ctx, "t", graph.Set(shapeState{N: 1}, "N"), graph.UpdateOptions{}); !errors.Is(err, boom) {
		t.Errorf("UpdateState with a failing store: %v, want the store's error", err)
	}
	s.mu.Lock()
	s.fail = nil
	s.mu.Unlock()
	if _, err := r.Invoke(ctx, "t", graph.Update[shapeState]{}); err != nil {
		t.Fatal(err)
	}
	if n := s.count(); n != 3 {
		t.Errorf("%d PutTopology calls, want 3 (two failed, one stored)", n)
	}

	plain := plainSaver{checkpoint.NewMemorySaver(nil)}
	r, err = graph.New[shapeState]().AddNode("a", noopNode).AddEdge(graph.START, "a").Compile(graph.WithSaver(plain))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Invoke(ctx, "t", graph.Update[shapeState]{}); err != nil {
		t.Fatal(err)
	}
	fp, _ := r.Topology().Fingerprint()
	tp, err := plain.Get(ctx, checkpoint.Ref{Thread: "t"}, checkpoint.GetOptions{})
	if err != nil || tp.Checkpoint.Metadata.Topology != fp {
		t.Errorf("head on a saver without topologies: %v, %v; want Metadata.Topology %s", tp, err, fp)
	}
}

// BenchmarkSaveTopology: what a run pays for the topology once its
// Runnable stored it (every save asks: one atomic load), and what the
// first store costs on the memory saver.
func BenchmarkSaveTopology(b *testing.B) {
	ctx := context.Background()
	b.Run("stored", func(b *testing.B) {
		r, err := fullShape()
		if err != nil {
			b.Fatal(err)
		}
		if err := r.SaveTopology(ctx); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if err := r.SaveTopology(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("first", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			b.StopTimer()
			r, err := fullShape()
			if err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			if err := r.SaveTopology(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
}
