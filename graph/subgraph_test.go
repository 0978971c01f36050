package graph_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/checkpoint/sqlite"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/interrupt"
)

// subSavers are the savers every subgraph test runs on.
func subSavers(t *testing.T) map[string]func() checkpoint.Saver {
	return map[string]func() checkpoint.Saver{
		"memory": func() checkpoint.Saver { return checkpoint.NewMemorySaver(nil) },
		"sqlite": func() checkpoint.Saver {
			s, err := sqlite.Open(filepath.Join(t.TempDir(), "cp.db"), sqlite.Config{})
			if err != nil {
				t.Fatalf("sqlite.Open: %v", err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s
		},
	}
}

// chain compiles START → names[0] → … → END over State, each node made by
// mk.
func chain(t *testing.T, name string, mk func(node string) graph.NodeFunc[State], names ...string) *graph.Runnable[State] {
	t.Helper()
	g := graph.New[State]()
	prev := graph.START
	for _, n := range names {
		g.AddNode(n, mk(n))
		g.AddEdge(prev, n)
		prev = n
	}
	g.AddEdge(prev, graph.END)
	return mustCompile(t, g, graph.WithName(name))
}

// nsOf returns the namespaces holding checkpoints of thread, "" (the root)
// included, sorted.
func nsOf(t *testing.T, s checkpoint.Saver, thread string) map[string]int {
	t.Helper()
	out := map[string]int{}
	tps, err := s.List(context.Background(), thread, checkpoint.ListOptions{AllNamespaces: true})
	if err != nil && !errors.Is(err, checkpoint.ErrNotFound) {
		t.Fatal(err)
	}
	for _, tp := range tps {
		out[nsShape(tp.NS)]++
	}
	return out
}

// nsShape replaces the task IDs of a namespace by "*": the IDs are
// random-looking, the shape is what a test pins.
func nsShape(ns string) string {
	if ns == "" {
		return ""
	}
	levels, err := checkpoint.SplitNS(ns)
	if err != nil {
		return "bad:" + ns
	}
	var parts []string
	for _, l := range levels {
		parts = append(parts, l.Node+":*")
	}
	return strings.Join(parts, "|")
}

// A compiled graph runs as a node: of the same state type (what it changed
// is written back) or of another with its mapping functions, nested to any
// depth, with its checkpoints under the task's namespace.
func TestSubgraphRuns(t *testing.T) {
	type Inner struct {
		Words []string `lockstep:"append"`
		N     int
	}
	rows := []struct {
		name    string
		build   func(t *testing.T, c *counter, s checkpoint.Saver) *graph.Runnable[State]
		input   graph.Update[State]
		wantLog []string
		want    State
		wantNS  map[string]int // namespace shape → checkpoints
	}{
		{
			name: "same state type",
			build: func(t *testing.T, c *counter, s checkpoint.Saver) *graph.Runnable[State] {
				child := chain(t, "child", func(n string) graph.NodeFunc[State] { return logNode(c, n) }, "c1", "c2")
				g := graph.New[State]()
				g.AddNode("pre", logNode(c, "pre"))
				g.AddSubgraph("sub", graph.Subgraph(child))
				g.AddNode("post", logNode(c, "post"))
				g.AddEdge(graph.START, "pre").AddEdge("pre", "sub").AddEdge("sub", "post").AddEdge("post", graph.END)
				return mustCompile(t, g, graph.WithName("parent"), graph.WithSaver(s))
			},
			input:  graph.Set(State{Log: []string{"in"}}, "Log"),
			want:   State{Log: []string{"in", "pre", "c1", "c2", "post"}},
			wantNS: map[string]int{"": 5, "sub:*": 4}, // input, start, pre, sub, post; input, start, c1, c2
		},
		{
			name: "mapped state type",
			build: func(t *testing.T, c *counter, s checkpoint.Saver) *graph.Runnable[State] {
				cg := graph.New[Inner]()
				cg.AddNode("w", func(ctx context.Context, s Inner) (graph.Update[Inner], error) {
					c.inc("w")
					return graph.Set(Inner{Words: []string{"w"}, N: s.N + len(s.Words)}, "Words", "N"), nil
				})
				cg.AddEdge(graph.START, "w").AddEdge("w", graph.END)
				child := mustCompile(t, cg, graph.WithName("inner"))
				in := func(p State) graph.Update[Inner] {
					return graph.Set(Inner{Words: p.Log, N: p.Count}, "Words", "N")
				}
				out := func(i Inner) graph.Update[State] {
					return graph.Set(State{Count: i.N, X: strings.Join(i.Words, ",")}, "Count", "X")
				}
				g := graph.New[State]()
				g.AddSubgraph("sub", graph.SubgraphMap(child, in, out))
				g.AddEdge(graph.START, "sub").AddEdge("sub", graph.END)
				return mustCompile(t, g, graph.WithName("parent"), graph.WithSaver(s))
			},
			input:  graph.Set(State{Count: 10, Log: []string{"a", "b"}}, "Count", "Log"),
			want:   State{Count: 12, Log: []string{"a", "b"}, X: "a,b,w"},
			wantNS: map[string]int{"": 3, "sub:*": 3},
		},
		{
			name: "three levels",
			build: func(t *testing.T, c *counter, s checkpoint.Saver) *graph.Runnable[State] {
				leaf := chain(t, "leaf", func(n string) graph.NodeFunc[State] { return logNode(c, n) }, "l1")
				mg := graph.New[State]()
				mg.AddNode("m1", logNode(c, "m1"))
				mg.AddSubgraph("leafsub", graph.Subgraph(leaf))
				mg.AddEdge(graph.START, "m1").AddEdge("m1", "leafsub").AddEdge("leafsub", graph.END)
				mid := mustCompile(t, mg, graph.WithName("mid"))
				g := graph.New[State]()
				g.AddSubgraph("midsub", graph.Subgraph(mid))
				g.AddNode("post", logNode(c, "post"))
				g.AddEdge(graph.START, "midsub").AddEdge("midsub", "post").AddEdge("post", graph.END)
				return mustCompile(t, g, graph.WithName("top"), graph.WithSaver(s))
			},
			want:   State{Log: []string{"m1", "l1", "post"}},
			wantNS: map[string]int{"": 4, "midsub:*": 4, "midsub:*|leafsub:*": 3},
		},
	}
	for _, row := range rows {
		for sname, mk := range subSavers(t) {
			t.Run(row.name+"/"+sname, func(t *testing.T) {
				ctx := context.Background()
				c := newCounter()
				s := mk()
				r := row.build(t, c, s)
				res, err := r.Invoke(ctx, "t", row.input)
				if err != nil {
					t.Fatalf("Invoke: %v", err)
				}
				if res.Status != graph.StatusDone {
					t.Fatalf("status %s, want done", res.Status)
				}
				if diff := cmp.Diff(row.want, res.Values); diff != "" {
					t.Errorf("final state (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff(row.wantNS, nsOf(t, s, "t")); diff != "" {
					t.Errorf("checkpoints by namespace (-want +got):\n%s", diff)
				}
				// Deleting the thread deletes its subgraphs' checkpoints.
				if err := s.DeleteThread(ctx, "t"); err != nil {
					t.Fatal(err)
				}
				if got := nsOf(t, s, "t"); len(got) != 0 {
					t.Errorf("after DeleteThread: %v left", got)
				}
			})
		}
	}
}

// askTree builds parent → {sib, sub} → post, where sub runs, depth levels
// down, a graph START → c1 → ask → c3 whose ask node asks "ok?"; mapped
// runs the deepest level through SubgraphMap.
func askTree(t *testing.T, c *counter, s checkpoint.Saver, depth int, mapped bool) *graph.Runnable[State] {
	t.Helper()
	lg := graph.New[State]()
	lg.AddNode("c1", logNode(c, "c1")).AddNode("ask", askNode(c, "ask", "ok?")).AddNode("c3", logNode(c, "c3"))
	lg.AddEdge(graph.START, "c1").AddEdge("c1", "ask").AddEdge("ask", "c3").AddEdge("c3", graph.END)
	inner := mustCompile(t, lg, graph.WithName("leaf"))
	node := graph.Subgraph(inner)
	if mapped {
		node = graph.SubgraphMap(inner, func(p State) graph.Update[State] { return graph.Set(State{X: p.X}, "X") },
			func(c State) graph.Update[State] {
				return graph.Set(State{Log: c.Log, Answer: c.Answer}, "Log", "Answer")
			})
	}
	for i := 1; i < depth; i++ {
		mg := graph.New[State]()
		name := fmt.Sprintf("m%d", i)
		mg.AddNode(name, logNode(c, name)).AddSubgraph("down", node)
		mg.AddEdge(graph.START, name).AddEdge(name, "down").AddEdge("down", graph.END)
		node = graph.Subgraph(mustCompile(t, mg, graph.WithName(fmt.Sprintf("mid%d", i))))
	}
	g := graph.New[State]()
	g.AddNode("a", logNode(c, "a")).AddNode("sib", logNode(c, "sib")).AddNode("post", logNode(c, "post"))
	g.AddSubgraph("sub", node)
	g.AddEdge(graph.START, "a").AddEdge("a", "sub").AddEdge("a", "sib").AddJoin([]string{"sub", "sib"}, "post").AddEdge("post", graph.END)
	return mustCompile(t, g, graph.WithName("parent"), graph.WithSaver(s))
}

// An Ask inside a subgraph, at any depth, pauses the whole thread with the
// same interrupt; the parent's snapshot shows the waiting task with the
// child's state; Resume by ID reaches the child, and only the interrupted
// child node runs again: never the child's finished steps, never the
// parent's finished siblings.
func TestSubgraphInterruptResume(t *testing.T) {
	for _, depth := range []int{1, 2, 3} {
		for _, mapped := range []bool{false, true} {
			for sname, mk := range subSavers(t) {
				t.Run(fmt.Sprintf("depth%d/mapped=%v/%s", depth, mapped, sname), func(t *testing.T) {
					ctx := context.Background()
					c := newCounter()
					r := askTree(t, c, mk(), depth, mapped)
					res, err := r.Invoke(ctx, "t", graph.Set(State{X: "x"}, "X"))
					if err != nil {
						t.Fatalf("Invoke: %v", err)
					}
					if res.Status != graph.StatusWaiting || len(res.Interrupts) != 1 {
						t.Fatalf("Invoke: status %s, %d interrupts; want waiting on 1", res.Status, len(res.Interrupts))
					}
					in := res.Interrupts[0]
					if got, want := string(in.Value), `"ok?"`; got != want {
						t.Errorf("interrupt value %q, want %q", got, want)
					}

					snap, err := r.GetState(ctx, "t", graph.Subgraphs())
					if err != nil {
						t.Fatalf("GetState: %v", err)
					}
					if snap.Status != graph.StatusWaiting || len(snap.Interrupts) != 1 || snap.Interrupts[0].ID != in.ID {
						t.Fatalf("snapshot: status %s, interrupts %v; want waiting on %s", snap.Status, snap.Interrupts, in.ID)
					}
					if diff := cmp.Diff([]string{"sub"}, snap.Next); diff != "" {
						t.Errorf("snapshot Next (-want +got):\n%s", diff)
					}
					// Down the tree, every level shows the waiting task, with the
					// same interrupt, and the state of the graph below.
					tasks := snap.Tasks
					var path []string
					for level := 1; level <= depth; level++ {
						var sub *graph.Task
						for i := range tasks {
							if tasks[i].NS != "" && tasks[i].Result == nil {
								sub = &tasks[i]
							}
						}
						if sub == nil {
							t.Fatalf("level %d: no waiting subgraph task among %+v", level, tasks)
						}
						path = append(path, sub.Name)
						if len(sub.Interrupts) != 1 || sub.Interrupts[0].ID != in.ID {
							t.Fatalf("level %d: task %s interrupts %v, want %s", level, sub.Name, sub.Interrupts, in.ID)
						}
						child, ok := graph.SubgraphStateOf[State](*sub)
						if !ok {
							t.Fatalf("level %d: task %s carries no subgraph state (%T)", level, sub.Name, sub.State)
						}
						if child.Status != graph.StatusWaiting {
							t.Errorf("level %d: subgraph status %s, want waiting", level, child.Status)
						}
						if level == depth {
							if diff := cmp.Diff([]string{"ask"}, child.Next); diff != "" {
								t.Errorf("leaf Next (-want +got):\n%s", diff)
							}
							if diff := cmp.Diff([]string{"c1"}, lastN(child.Values.Log, 1)); diff != "" {
								t.Errorf("leaf state log (-want +got):\n%s", diff)
							}
						}
						tasks = child.Tasks
					}
					wantPath := []string{"sub"}
					for i := 1; i < depth; i++ {
						wantPath = append(wantPath, "down")
					}
					if diff := cmp.Diff(wantPath, path); diff != "" {
						t.Errorf("waiting subgraph tasks, root first (-want +got):\n%s", diff)
					}

					res, err = r.Resume(ctx, "t", graph.Command[State]{ResumeByID: map[string]any{in.ID: "yes"}})
					if err != nil {
						t.Fatalf("Resume: %v", err)
					}
					if res.Status != graph.StatusDone {
						t.Fatalf("Resume: status %s, want done (interrupts %v)", res.Status, res.Interrupts)
					}
					if res.Values.Answer != "yes" {
						t.Errorf("Answer %q, want yes", res.Values.Answer)
					}
					want := map[string]int{"a": 1, "sib": 1, "c1": 1, "ask": 2, "c3": 1, "post": 1}
					for i := 1; i < depth; i++ {
						want[fmt.Sprintf("m%d", i)] = 1
					}
					if diff := cmp.Diff(want, c.n); diff != "" {
						t.Errorf("node runs (-want +got):\n%s", diff)
					}
					wantLog := []string{"c1", "ask:yes", "c3"}
					if got := res.Values.Log; !containsInOrder(got, wantLog) {
						t.Errorf("final log %v does not hold %v in order", got, wantLog)
					}
				})
			}
		}
	}
}

func lastN(xs []string, n int) []string {
	if len(xs) < n {
		return xs
	}
	return xs[len(xs)-n:]
}

func containsInOrder(xs, want []string) bool {
	i := 0
	for _, x := range xs {
		if i < len(want) && x == want[i] {
			i++
		}
	}
	return i == len(want)
}

// A NodeInterrupt inside a subgraph pauses the thread; it takes no answer.
func TestSubgraphNodeInterrupt(t *testing.T) {
	for sname, mk := range subSavers(t) {
		t.Run(sname, func(t *testing.T) {
			ctx := context.Background()
			cg := graph.New[State]()
			cg.AddNode("check", func(ctx context.Context, s State) (graph.Update[State], error) {
				if s.Count < 2 {
					return graph.Update[State]{}, &interrupt.NodeInterrupt{Value: "too small"}
				}
				return graph.Set(State{Log: []string{"checked"}}, "Log"), nil
			})
			cg.AddEdge(graph.START, "check").AddEdge("check", graph.END)
			child := mustCompile(t, cg, graph.WithName("child"))
			g := graph.New[State]()
			g.AddSubgraph("sub", graph.Subgraph(child))
			g.AddEdge(graph.START, "sub").AddEdge("sub", graph.END)
			r := mustCompile(t, g, graph.WithSaver(mk()))
			res, err := r.Invoke(ctx, "t", graph.Set(State{Count: 1}, "Count"))
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != graph.StatusWaiting || len(res.Interrupts) != 1 {
				t.Fatalf("status %s, interrupts %v; want waiting on 1", res.Status, res.Interrupts)
			}
			_, err = r.Resume(ctx, "t", graph.Command[State]{ResumeByID: map[string]any{res.Interrupts[0].ID: "x"}})
			var re *graph.ResumeError
			if !errors.As(err, &re) || !errors.Is(err, graph.ErrNotAnswerable) {
				t.Fatalf("Resume of a NodeInterrupt: %v, want a *ResumeError matching ErrNotAnswerable", err)
			}
		})
	}
}

// A subgraph node's graph is part of the topology and of its fingerprint;
// a run stores it, and the subgraph's checkpoints name it.
func TestSubgraphTopology(t *testing.T) {
	ctx := context.Background()
	s := checkpoint.NewMemorySaver(nil)
	c := newCounter()
	r := askTree(t, c, s, 2, false)
	top := r.Topology()
	mid, ok := top.Subgraph("sub")
	if !ok {
		t.Fatalf("topology %+v has no subgraph for node sub", top)
	}
	leaf, ok := mid.Subgraph("down")
	if !ok || leaf.Name != "leaf" || mid.Name != "mid1" {
		t.Fatalf("nested topologies: %q, %q (%v)", mid.Name, leaf.Name, ok)
	}
	if diff := cmp.Diff([]string{"ask", "c1", "c3"}, leaf.Nodes); diff != "" {
		t.Errorf("leaf nodes (-want +got):\n%s", diff)
	}
	// Another subgraph behind the same node is another topology.
	other := askTree(t, c, s, 1, false)
	fp1, err1 := top.Fingerprint()
	fp2, err2 := other.Topology().Fingerprint()
	if err1 != nil || err2 != nil || fp1 == fp2 {
		t.Errorf("fingerprints %s, %s (%v, %v): want two", fp1, fp2, err1, err2)
	}
	// Encoded and decoded from the saver, it is the same topology.
	if _, err := r.Invoke(ctx, "t", graph.Update[State]{}); err != nil {
		t.Fatal(err)
	}
	tps, err := s.List(ctx, "t", checkpoint.ListOptions{AllNamespaces: true})
	if err != nil {
		t.Fatal(err)
	}
	byNS := map[string]graph.Topology{}
	for _, tp := range tps {
		got, ok, err := graph.LoadTopology(ctx, s, tp.Checkpoint.Metadata.Topology)
		if err != nil || !ok {
			t.Fatalf("checkpoint %s in %q: topology %s not stored (%v)", tp.Checkpoint.ID, tp.NS, tp.Checkpoint.Metadata.Topology, err)
		}
		byNS[nsShape(tp.NS)] = got
	}
	want := map[string]graph.Topology{"": top, "sub:*": mid, "sub:*|down:*": leaf}
	if diff := cmp.Diff(want, byNS); diff != "" {
		t.Errorf("stored topologies by namespace (-want +got):\n%s", diff)
	}
}

// twoAsks builds START → {s1, s2} → END, each running a subgraph START →
// ask → END over State.
func twoAsks(t *testing.T, c *counter, s checkpoint.Saver) *graph.Runnable[State] {
	t.Helper()
	cg := graph.New[State]()
	cg.AddNode("ask", func(ctx context.Context, s State) (graph.Update[State], error) {
		c.inc("ask")
		ans, err := interrupt.Ask[string](ctx, "ok?")
		if err != nil {
			return graph.Update[State]{}, err
		}
		return graph.Set(State{Log: []string{"ask:" + ans}}, "Log"), nil
	}).AddEdge(graph.START, "ask").AddEdge("ask", graph.END)
	child := mustCompile(t, cg, graph.WithName("child"))
	g := graph.New[State]()
	g.AddSubgraph("s1", graph.Subgraph(child)).AddSubgraph("s2", graph.Subgraph(child))
	g.AddEdge(graph.START, "s1").AddEdge(graph.START, "s2").AddEdge("s1", graph.END).AddEdge("s2", graph.END)
	return mustCompile(t, g, graph.WithSaver(s))
}

// Two subgraphs that pause in one step are answered one at a time: the
// first answer finishes its subgraph and the thread still waits on the
// other, whose subgraph asks again (as a parallel node without an answer
// does); the second answer finishes it, and the finished one does not
// run again.
func TestSubgraphParallelInterrupts(t *testing.T) {
	for sname, mk := range subSavers(t) {
		t.Run(sname, func(t *testing.T) {
			ctx := context.Background()
			c := newCounter()
			r := twoAsks(t, c, mk())
			res, err := r.Invoke(ctx, "t", graph.Update[State]{})
			if err != nil || len(res.Interrupts) != 2 {
				t.Fatalf("Invoke: %v, %d interrupts, want 2", err, len(res.Interrupts))
			}
			first, second := res.Interrupts[0], res.Interrupts[1]
			res, err = r.Resume(ctx, "t", graph.Command[State]{ResumeByID: map[string]any{first.ID: "one"}})
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != graph.StatusWaiting || len(res.Interrupts) != 1 || res.Interrupts[0].ID != second.ID {
				t.Fatalf("after the first answer: %s %v, want waiting on %s", res.Status, res.Interrupts, second.ID)
			}
			if got := c.get("ask"); got != 4 {
				t.Errorf("ask ran %d times after one answer, want 4 (2 asks, then both again)", got)
			}
			res, err = r.Resume(ctx, "t", graph.Command[State]{Resume: "two"})
			if err != nil || res.Status != graph.StatusDone {
				t.Fatalf("after the second answer: %s (%v)", res.Status, err)
			}
			if got := c.get("ask"); got != 5 {
				t.Errorf("ask ran %d times, want 5 (the answered subgraph not again)", got)
			}
			log := slices.Clone(res.Values.Log)
			slices.Sort(log)
			if diff := cmp.Diff([]string{"ask:one", "ask:two"}, log); diff != "" {
				t.Errorf("log (-want +got):\n%s", diff)
			}
		})
	}
}

// GetState, History and the subgraph accessors read a subgraph's state;
// UpdateSubgraphState changes it, and the resumed subgraph goes on from
// the update.
func TestSubgraphStateAndUpdate(t *testing.T) {
	ctx := context.Background()
	c := newCounter()
	r := askTree(t, c, checkpoint.NewMemorySaver(nil), 1, false)
	res, err := r.Invoke(ctx, "t", graph.Update[State]{})
	if err != nil || res.Status != graph.StatusWaiting {
		t.Fatalf("Invoke: %s (%v)", res.Status, err)
	}
	plain, err := r.GetState(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	var ns string
	for _, task := range plain.Tasks {
		if task.Name == "sub" {
			ns = task.NS
			if task.State != nil {
				t.Errorf("GetState without Subgraphs carries the subgraph's state")
			}
		}
	}
	if nsShape(ns) != "sub:*" {
		t.Fatalf("sub task NS %q", ns)
	}
	sub, err := graph.GetSubgraphState[State](ctx, r, "t", ns)
	if err != nil || sub.Status != graph.StatusWaiting || sub.Config.NS != ns {
		t.Fatalf("GetSubgraphState: %s %+v (%v)", sub.Status, sub.Config, err)
	}
	hist, err := graph.SubgraphHistory[State](ctx, r, "t", ns, graph.HistoryOptions{})
	if err != nil || len(hist) != 3 || hist[0].Config.CheckpointID != sub.Config.CheckpointID {
		t.Fatalf("SubgraphHistory: %d snapshots (%v), want 3 headed by the state's", len(hist), err)
	}
	withSubs, err := r.History(ctx, "t", graph.HistoryOptions{Subgraphs: true, Limit: 1})
	if err != nil || len(withSubs) != 1 {
		t.Fatal(err)
	}
	for _, task := range withSubs[0].Tasks {
		if task.Name == "sub" {
			if s, ok := graph.SubgraphStateOf[State](task); !ok || s.Config.CheckpointID != sub.Config.CheckpointID {
				t.Errorf("History with Subgraphs: sub task state %v", ok)
			}
		}
	}
	// Wrong type, unknown node, bad namespace.
	if _, err := graph.GetSubgraphState[struct{ A int }](ctx, r, "t", ns); !errors.Is(err, graph.ErrInvalidInput) {
		t.Errorf("another state type: %v, want ErrInvalidInput", err)
	}
	var unk *graph.UnknownNodeError
	if _, err := graph.GetSubgraphState[State](ctx, r, "t", "sib:x"); !errors.As(err, &unk) {
		t.Errorf("a node that runs no subgraph: %v, want *UnknownNodeError", err)
	}
	if _, err := graph.GetSubgraphState[State](ctx, r, "t", "sub"); !errors.Is(err, graph.ErrInvalidInput) {
		t.Errorf("a malformed namespace: %v, want ErrInvalidInput", err)
	}
	// The update is written as the interrupted node: the subgraph goes on
	// after it, and the question is never answered.
	if _, err := graph.UpdateSubgraphState(ctx, r, "t", ns, graph.Set(State{Answer: "edited", Log: []string{"edit"}}, "Answer", "Log"), graph.UpdateOptions{AsNode: "ask"}); err != nil {
		t.Fatalf("UpdateSubgraphState: %v", err)
	}
	res, err = r.Continue(ctx, "t")
	if err != nil || res.Status != graph.StatusDone {
		t.Fatalf("Continue after the update: %s %v (%v)", res.Status, res.Interrupts, err)
	}
	if res.Values.Answer != "edited" || !containsInOrder(res.Values.Log, []string{"c1", "edit", "c3"}) {
		t.Errorf("final %q %v", res.Values.Answer, res.Values.Log)
	}
	if got := c.get("ask"); got != 1 {
		t.Errorf("ask ran %d times, want 1", got)
	}
}

// StreamSubgraphs yields the subgraphs' events with their namespace; a
// plain stream yields the root's only.
func TestSubgraphStream(t *testing.T) {
	for _, nested := range []bool{false, true} {
		t.Run(fmt.Sprint("subgraphs=", nested), func(t *testing.T) {
			ctx := context.Background()
			r := askTree(t, newCounter(), checkpoint.NewMemorySaver(nil), 2, false)
			var opts []graph.RunOption
			if nested {
				opts = append(opts, graph.StreamSubgraphs())
			}
			nodesByNS := map[string][]string{}
			for e, err := range r.Stream(ctx, "t", graph.StartWith(graph.Update[State]{}), opts...) {
				if err != nil {
					t.Fatal(err)
				}
				if e.Kind == graph.EventUpdates && e.Node != graph.START {
					nodesByNS[nsShape(e.NS)] = append(nodesByNS[nsShape(e.NS)], e.Node)
				}
				if e.Config.CheckpointID != "" && e.Config.NS != e.NS {
					t.Errorf("event of %q names checkpoint namespace %q", e.NS, e.Config.NS)
				}
			}
			want := map[string][]string{"": {"a", "sib"}}
			if nested {
				want["sub:*"] = []string{"m1"}
				want["sub:*|down:*"] = []string{"c1"}
			}
			if diff := cmp.Diff(want, nodesByNS); diff != "" {
				t.Errorf("update events by namespace (-want +got):\n%s", diff)
			}
		})
	}
}

// A subgraph node's ToParent ends the subgraph's run and routes in the
// parent; returned in a root graph it fails the node.
func TestSubgraphToParent(t *testing.T) {
	ctx := context.Background()
	c := newCounter()
	cg := graph.New[State]()
	cg.AddNode("route", func(ctx context.Context, s State) (graph.Update[State], error) {
		return graph.Update[State]{}, graph.ToParent(graph.Set(State{X: "routed"}, "X").Goto("done"))
	}).AddNode("never", logNode(c, "never"))
	cg.AddEdge(graph.START, "route").AddEdge("route", "never").AddEdge("never", graph.END)
	child := mustCompile(t, cg, graph.WithName("child"))
	g := graph.New[State]()
	g.AddSubgraph("sub", graph.Subgraph(child)).AddNode("done", logNode(c, "done")).AddNode("other", logNode(c, "other"))
	g.AddEdge(graph.START, "sub").AddEdge("done", graph.END).AddEdge("other", graph.END)
	r := mustCompile(t, g, graph.WithSaver(checkpoint.NewMemorySaver(nil)))
	res, err := r.Invoke(ctx, "t", graph.Update[State]{})
	if err != nil || res.Status != graph.StatusDone {
		t.Fatalf("Invoke: %s (%v)", res.Status, err)
	}
	if res.Values.X != "routed" || c.get("done") != 1 || c.get("never") != 0 || c.get("other") != 0 {
		t.Errorf("X %q, runs done=%d never=%d other=%d", res.Values.X, c.get("done"), c.get("never"), c.get("other"))
	}

	root := graph.New[State]()
	root.AddNode("route", func(ctx context.Context, s State) (graph.Update[State], error) {
		return graph.Update[State]{}, graph.ToParent(graph.Set(State{X: "x"}, "X"))
	}).AddEdge(graph.START, "route")
	rr := mustCompile(t, root)
	if _, err := rr.Invoke(ctx, "t", graph.Update[State]{}); !errors.Is(err, graph.ErrNoParent) {
		t.Errorf("ToParent at the root: %v, want ErrNoParent", err)
	}
}

// Without a saver a subgraph runs as any node does, and a pause inside it
// ends the run waiting, as a pause of a node does.
func TestSubgraphWithoutSaver(t *testing.T) {
	ctx := context.Background()
	c := newCounter()
	child := chain(t, "child", func(n string) graph.NodeFunc[State] { return logNode(c, n) }, "c1", "c2")
	g := graph.New[State]()
	g.AddSubgraph("sub", graph.Subgraph(child)).AddNode("post", logNode(c, "post"))
	g.AddEdge(graph.START, "sub").AddEdge("sub", "post").AddEdge("post", graph.END)
	r := mustCompile(t, g)
	res, err := r.Invoke(ctx, "t", graph.Update[State]{})
	if err != nil || res.Status != graph.StatusDone {
		t.Fatalf("Invoke: %s (%v)", res.Status, err)
	}
	if diff := cmp.Diff([]string{"c1", "c2", "post"}, res.Values.Log); diff != "" {
		t.Errorf("log (-want +got):\n%s", diff)
	}
	res, err = askTree(t, c, nil, 2, false).Invoke(ctx, "t", graph.Update[State]{})
	if err != nil || res.Status != graph.StatusWaiting || len(res.Interrupts) != 1 {
		t.Fatalf("a pause without a saver: %s %v (%v)", res.Status, res.Interrupts, err)
	}
}

// MermaidExpanded draws each subgraph node as a block holding its graph,
// at every depth, and marks waiting nodes by path.
func TestSubgraphMermaidExpanded(t *testing.T) {
	r := askTree(t, newCounter(), nil, 2, false)
	got := r.Topology().MermaidExpanded("sub|down|ask")
	want := `---
config:
  flowchart:
    curve: linear
---
graph TD;
	__start__([<p>__start__</p>]):::first
	a(a)
	post(post)
	sib(sib)
	subgraph sub ["sub"]
		sub_7c___start__([<p>__start__</p>]):::first
		subgraph sub_7c_down ["down"]
			sub_7c_down_7c___start__([<p>__start__</p>]):::first
			sub_7c_down_7c_ask(ask):::waiting
			sub_7c_down_7c_c1(c1)
			sub_7c_down_7c_c3(c3)
			sub_7c_down_7c___end__([<p>__end__</p>]):::last
			sub_7c_down_7c___start__ --> sub_7c_down_7c_c1;
			sub_7c_down_7c_ask --> sub_7c_down_7c_c3;
			sub_7c_down_7c_c1 --> sub_7c_down_7c_ask;
			sub_7c_down_7c_c3 --> sub_7c_down_7c___end__;
		end
		sub_7c_m1(m1)
		sub_7c___end__([<p>__end__</p>]):::last
		sub_7c___start__ --> sub_7c_m1;
		sub_7c_down --> sub_7c___end__;
		sub_7c_m1 --> sub_7c_down;
	end
	__end__([<p>__end__</p>]):::last
	__start__ --> a;
	a --> sib;
	a --> sub;
	post --> __end__;
	sib --> post;
	sub --> post;
	classDef default fill:#f2f0ff,line-height:1.2
	classDef first fill-opacity:0
	classDef last fill:#bfb6fc
	classDef waiting fill:#fde68a,stroke:#b45309,stroke-width:2px
`
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("MermaidExpanded (-want +got):\n%s", diff)
	}
	// Without subgraphs it is Mermaid.
	plain := chain(t, "plain", func(n string) graph.NodeFunc[State] { return logNode(nil, n) }, "x")
	if plain.MermaidExpanded() != plain.Mermaid() {
		t.Errorf("MermaidExpanded of a graph without subgraphs differs from Mermaid")
	}
	// The collapsed drawing is unchanged.
	if strings.Contains(r.Mermaid(), "subgraph") {
		t.Errorf("Mermaid draws the subgraphs expanded")
	}
	// A subgraph node's name may not split a namespace.
	g := graph.New[State]()
	g.AddSubgraph("a|b", graph.Subgraph(plain)).AddEdge(graph.START, "a|b")
	if _, err := g.Compile(); !errors.Is(err, graph.ErrInvalidGraph) {
		t.Errorf("a subgraph node named a|b: %v, want ErrInvalidGraph", err)
	}
}
