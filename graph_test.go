package lockstep_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
)

// Report is the state of the end-to-end research graph.
type Report struct {
	Topic    string
	Topics   []string
	Findings []string `lockstep:"append"`
	Outline  string
	Draft    string
	Sources  map[string]string `lockstep:"merge"`
}

// researchGraph: plan fans out one search per topic (Send) while outline
// runs beside them; write waits for outline and the searches (a join); then
// review.
func researchGraph() *graph.Graph[Report] {
	return graph.New[Report]().
		AddNode("plan", func(ctx context.Context, s Report) (graph.Update[Report], error) {
			return graph.Set(Report{Topics: []string{s.Topic + "/history", s.Topic + "/market", s.Topic + "/risks"}}, "Topics"), nil
		}).
		AddNode("search", func(ctx context.Context, s Report) (graph.Update[Report], error) {
			// A push task: its state is the Send's argument.
			return graph.Set(Report{
				Findings: []string{"found " + s.Topic},
				Sources:  map[string]string{s.Topic: "https://example.test/" + s.Topic},
			}, "Findings", "Sources"), nil
		}).
		AddNode("outline", func(ctx context.Context, s Report) (graph.Update[Report], error) {
			return graph.Set(Report{Outline: fmt.Sprintf("%d sections", len(s.Topics))}, "Outline"), nil
		}).
		AddNode("write", func(ctx context.Context, s Report) (graph.Update[Report], error) {
			return graph.Set(Report{Draft: fmt.Sprintf("%s: %d findings, %d sources", s.Outline, len(s.Findings), len(s.Sources))}, "Draft"), nil
		}).
		AddNode("review", func(ctx context.Context, s Report) (graph.Update[Report], error) {
			return graph.Set(Report{Draft: s.Draft + " (reviewed)"}, "Draft"), nil
		}).
		AddEdge(graph.START, "plan").
		AddEdge("plan", "outline").
		AddSendEdges("plan", func(ctx context.Context, s Report) ([]graph.Send[Report], error) {
			var out []graph.Send[Report]
			for _, t := range s.Topics {
				out = append(out, graph.Send[Report]{Node: "search", Arg: Report{Topic: t}})
			}
			return out, nil
		}, "search").
		AddJoin([]string{"outline", "search"}, "write").
		AddEdge("write", "review").
		AddEdge("review", graph.END)
}

// TestEndToEndParallelBranches runs a multi-node graph with parallel
// branches (pull and push tasks, a join) on the in-memory saver and checks
// the final values, the history and Next at every checkpoint.
func TestEndToEndParallelBranches(t *testing.T) {
	ctx := context.Background()
	r, err := researchGraph().Compile(graph.WithSaver(checkpoint.NewMemorySaver(nil)))
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Invoke(ctx, "research-1", graph.Set(Report{Topic: "ev"}, "Topic"))
	if err != nil {
		t.Fatal(err)
	}
	want := Report{
		Topic:    "ev",
		Topics:   []string{"ev/history", "ev/market", "ev/risks"},
		Findings: []string{"found ev/history", "found ev/market", "found ev/risks"},
		Outline:  "3 sections",
		Draft:    "3 sections: 3 findings, 3 sources (reviewed)",
		Sources: map[string]string{
			"ev/history": "https://example.test/ev/history",
			"ev/market":  "https://example.test/ev/market",
			"ev/risks":   "https://example.test/ev/risks",
		},
	}
	if diff := cmp.Diff(want, res.Values); diff != "" {
		t.Errorf("final values (-want +got):\n%s", diff)
	}
	if res.Status != graph.StatusDone || len(res.Next) != 0 {
		t.Errorf("status %s next %v, want done []", res.Status, res.Next)
	}

	hist, err := r.History(ctx, "research-1", graph.HistoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		Source   checkpoint.Source
		Step     int
		Next     []string
		Findings int
	}
	var got []row
	for _, s := range hist {
		got = append(got, row{s.Metadata.Source, s.Metadata.Step, s.Next, len(s.Values.Findings)})
	}
	wantRows := []row{
		{checkpoint.SourceLoop, 4, nil, 3},
		{checkpoint.SourceLoop, 3, []string{"review"}, 3},
		{checkpoint.SourceLoop, 2, []string{"write"}, 3},
		{checkpoint.SourceLoop, 1, []string{"search", "search", "search", "outline"}, 0}, // Sends first, as LangGraph
		{checkpoint.SourceLoop, 0, []string{"plan"}, 0},
		{checkpoint.SourceInput, -1, []string{graph.START}, 0},
	}
	if diff := cmp.Diff(wantRows, got, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("history (-want +got):\n%s", diff)
	}
	for i := 0; i+1 < len(hist); i++ {
		if hist[i].ParentConfig == nil || hist[i].ParentConfig.CheckpointID != hist[i+1].Config.CheckpointID {
			t.Errorf("checkpoint %d's parent is not checkpoint %d", i, i+1)
		}
	}
	// The parallel step's tasks carry their results in history.
	step1 := hist[3]
	var results []string
	for _, tk := range step1.Tasks {
		if tk.Name == "search" {
			results = append(results, string(tk.Result["Findings"]))
		}
	}
	slices.Sort(results)
	if diff := cmp.Diff([]string{`["found ev/history"]`, `["found ev/market"]`, `["found ev/risks"]`}, results); diff != "" {
		t.Errorf("search results (-want +got):\n%s", diff)
	}
	s, err := r.GetState(ctx, "research-1")
	if err != nil || s.Status != graph.StatusDone || s.Config != res.Config {
		t.Errorf("GetState = %s %v, %v; want done at the result's checkpoint", s.Status, s.Config, err)
	}
}
