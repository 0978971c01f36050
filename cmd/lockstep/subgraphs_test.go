package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/lockstepgo/lockstep/checkpoint/sqlite"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/interrupt"
)

// state shows the subgraph a waiting task runs, at every depth: its
// namespace, status, next tasks and its own tasks, down to the one that
// asked.
func TestStateShowsNestedWaitingTasks(t *testing.T) {
	db, id := nestedDB(t)
	testNestedState(t, db, id)
}

// nestedDB runs thread nested-1 into a new database: a graph whose node
// importer runs a subgraph whose node verify runs one whose node check
// asks, and returns the database and the interrupt's ID.
func nestedDB(t *testing.T) (string, string) {
	t.Helper()
	ctx := context.Background()
	db := filepath.Join(t.TempDir(), "sub.db")
	s, err := sqlite.Open(db, sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ge := newGraphEnv(s)
	leaf, err := graph.New[Job]().
		AddNode("check", func(ctx context.Context, j Job) (graph.Update[Job], error) {
			ans, err := interrupt.Ask[string](ctx, "import "+j.Source+"?")
			if err != nil {
				return graph.Update[Job]{}, err
			}
			return graph.Set(Job{Log: []string{"check " + ans}}, "Log"), nil
		}).
		AddEdge(graph.START, "check").Compile(graph.WithName("leaf"))
	if err != nil {
		t.Fatal(err)
	}
	mid, err := graph.New[Job]().AddNode("load", logNode("load")).AddSubgraph("verify", graph.Subgraph(leaf)).
		AddEdge(graph.START, "load").AddEdge("load", "verify").Compile(graph.WithName("mid"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := graph.New[Job]().AddSubgraph("importer", graph.Subgraph(mid)).AddEdge(graph.START, "importer").
		Compile(ge.options(graph.WithName("top"))...)
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Invoke(ctx, "nested-1", graph.Set(Job{Source: "s3"}, "Source"))
	if err != nil || res.Status != graph.StatusWaiting {
		t.Fatalf("Invoke: %s (%v)", res.Status, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return db, res.Interrupts[0].ID
}

func testNestedState(t *testing.T, db, id string) {
	t.Helper()
	out := cli(db, cliNow(), "state", "--json", "nested-1")
	if out.code != 0 {
		t.Fatalf("state --json: %v", out)
	}
	var st stateJSON
	if err := json.Unmarshal([]byte(out.stdout), &st); err != nil {
		t.Fatal(err)
	}
	type level struct{ Node, Status, NS string }
	var got []level
	tasks := st.Tasks
	for len(tasks) > 0 {
		var next []taskJSON
		for _, tk := range tasks {
			if tk.Status == "waiting" {
				ns := ""
				if tk.Subgraph != nil {
					ns = nsShapeCLI(tk.Subgraph.NS)
					next = tk.Subgraph.Tasks
				}
				got = append(got, level{tk.Node, tk.Status, ns})
				if len(tk.Interrupts) != 1 || tk.Interrupts[0].ID != id {
					t.Errorf("task %s: interrupts %+v, want %s", tk.Node, tk.Interrupts, id)
				}
			}
		}
		tasks = next
	}
	want := []level{{"importer", "waiting", "importer"}, {"verify", "waiting", "importer|verify"}, {"check", "waiting", ""}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("waiting tasks, root first (-want +got):\n%s", diff)
	}

	out = cli(db, cliNow(), "state", "nested-1")
	if out.code != 0 {
		t.Fatalf("state: %v", out)
	}
	for _, line := range []string{"subgraph importer (task", "subgraph importer > verify (task", "check", `"import s3?"`} {
		if !strings.Contains(out.stdout, line) {
			t.Errorf("state does not show %q:\n%s", line, out.stdout)
		}
	}
}

// history names the path of the tasks a checkpoint waits in down its
// subgraphs.
func TestHistoryShowsNestedWaitingTasks(t *testing.T) {
	db, _ := nestedDB(t)
	out := cli(db, cliNow(), "history", "--json", "nested-1")
	if out.code != 0 {
		t.Fatalf("history --json: %v", out)
	}
	var h struct{ Checkpoints []checkpointJSON }
	if err := json.Unmarshal([]byte(out.stdout), &h); err != nil {
		t.Fatal(err)
	}
	if len(h.Checkpoints) == 0 || !h.Checkpoints[0].Head {
		t.Fatalf("history: %+v", h.Checkpoints)
	}
	if diff := cmp.Diff([]string{"importer > verify > check"}, h.Checkpoints[0].Waiting); diff != "" {
		t.Errorf("head's waiting paths (-want +got):\n%s", diff)
	}
	for _, c := range h.Checkpoints[1:] {
		if c.Waiting != nil {
			t.Errorf("checkpoint %s (not waiting) names waiting paths %v", c.Checkpoint, c.Waiting)
		}
	}
	out = cli(db, cliNow(), "history", "nested-1")
	if out.code != 0 || !strings.Contains(out.stdout, "importer (waiting in importer > verify > check)") {
		t.Errorf("history does not show the nested waiting task:\n%v", out)
	}
}

// nsShapeCLI is a namespace without its task IDs.
func nsShapeCLI(ns string) string {
	var parts []string
	for _, p := range strings.Split(ns, "|") {
		node, _, _ := strings.Cut(p, ":")
		parts = append(parts, node)
	}
	return strings.Join(parts, "|")
}
