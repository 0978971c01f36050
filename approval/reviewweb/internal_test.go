package reviewweb

import (
	"context"
	"encoding/json"
	"net/url"
	"strconv"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/graph"
)

// TestDisplay: a page shows every character that could change how the
// rest reads as a visible mark, cuts long text on a rune boundary and
// says how much it left out.
func TestDisplay(t *testing.T) {
	for _, tc := range []struct {
		in        string
		max       int
		multiline bool
		want      string // text with marks in place
		marks     int
		omitted   int
	}{
		{"plain", 100, false, "plain", 0, 0},
		{"invoice\u202Efdp.exe", 100, false, "invoiceU+202Efdp.exe", 1, 0},
		{"a\u2066b\u2069c\u200Fd\u061C", 100, false, "aU+2066bU+2069cU+200FdU+061C", 4, 0},
		{"zero\u200Bwidth", 100, false, "zeroU+200Bwidth", 1, 0},
		{"bell\x07", 100, false, "bellU+0007", 1, 0},
		{"bad\xffbyte", 100, false, `bad\xFFbyte`, 1, 0},
		{"replaced\uFFFD", 100, false, "replaced\uFFFD", 1, 0},
		{"two\nlines\tand tab", 100, true, "two\nlines\tand tab", 0, 0},
		{"two\nlines", 100, false, "two⏎lines", 1, 0},
		{"ééééé", 5, false, "éé", 0, 6}, // cut before the third é (bytes 4-5)
		{"<script>alert(1)</script>", 100, false, "<script>alert(1)</script>", 0, 0},
	} {
		got := display(tc.in, tc.max, tc.multiline)
		marks := 0
		for _, s := range got.Segs {
			if s.Mark {
				marks++
			}
		}
		if got.String() != tc.want || marks != tc.marks || got.Omitted != tc.omitted || got.Total != len(tc.in) {
			t.Errorf("display(%q, %d) = %q with %d marks, %d omitted of %d; want %q, %d marks, %d omitted",
				tc.in, tc.max, got.String(), marks, got.Omitted, got.Total, tc.want, tc.marks, tc.omitted)
		}
	}
}

// TestDiffJSON: an edit's differences are listed by path, in canonical
// form (1 and 1.0 are the same value), added and removed fields too.
func TestDiffJSON(t *testing.T) {
	got, err := diffJSON([]byte(`{"a":1,"b":{"c":"x","d":[1,2]},"gone":true}`), []byte(`{"a":1.0,"b":{"c":"y","d":[1,2,3]},"new":null}`))
	if err != nil {
		t.Fatal(err)
	}
	want := []Change{
		{Path: "$.b.c", Op: "changed", Old: json.RawMessage(`"x"`), New: json.RawMessage(`"y"`)},
		{Path: "$.b.d[2]", Op: "added", New: json.RawMessage(`3`)},
		{Path: "$.gone", Op: "removed", Old: json.RawMessage(`true`)},
		{Path: "$.new", Op: "added", New: json.RawMessage(`null`)},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("diffJSON (-want +got):\n%s", d)
	}
	if _, err := diffJSON([]byte(`{}`), []byte(`{`)); err == nil {
		t.Error("diffJSON of invalid JSON: no error")
	}
}

type mstate struct{ N int }

func noop(context.Context, mstate) (graph.Update[mstate], error) { return graph.Update[mstate]{}, nil }

// TestDrawingOf draws a graph's topology as Mermaid does (odd names,
// conditional edges, the edge to END of a node without one), marks the
// waiting node, and lays out every node once.
func TestDrawingOf(t *testing.T) {
	r, err := graph.New[mstate]().
		AddNode("compliance", noop).
		AddNode("model (v2)", noop).
		AddNode(`tools "x"`, noop).
		AddNode("audit", noop).
		AddEdge(graph.START, "compliance").
		AddEdge("compliance", "model (v2)").
		AddConditionalEdges("model (v2)", func(context.Context, mstate) ([]string, error) { return []string{graph.END}, nil }, `tools "x"`, graph.END).
		AddEdge(`tools "x"`, "model (v2)").
		Compile()
	if err != nil {
		t.Fatal(err)
	}
	got := drawingOf(r.Topology())
	want := drawing{
		Nodes: []string{"audit", "compliance", "model (v2)", `tools "x"`},
		Edges: []arrow{
			{From: graph.START, To: "compliance"},
			{From: "audit", To: graph.END},
			{From: "compliance", To: "model (v2)"},
			{From: "model (v2)", To: graph.END, Conditional: true},
			{From: "model (v2)", To: `tools "x"`, Conditional: true},
			{From: `tools "x"`, To: "model (v2)"},
		},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("drawingOf (-want +got):\n%s", d)
	}
	g := layout(got, "model (v2)", map[string]bool{"compliance": true})
	names := map[string]string{}
	for _, n := range g.Nodes {
		names[n.Name] = n.Class
	}
	if len(g.Nodes) != 6 || names["model (v2)"] != "node waiting" || names["compliance"] != "node visited" || names[graph.END] != "node terminal" {
		t.Errorf("layout nodes = %v", names)
	}
	if len(g.Edges) != 6 {
		t.Errorf("layout drew %d edges, want 6", len(g.Edges))
	}
}

// FuzzLayout: any drawing lays out without panicking and draws every
// node, START and END once: the fuzzer's bytes name the nodes and, two
// at a time, the arrows between them (graph.START and graph.END too).
func FuzzLayout(f *testing.F) {
	f.Add([]byte("abc"), []byte{0, 1, 1, 2, 2, 4, 2, 1, 3, 0})
	f.Add([]byte("a"), []byte{3, 0, 0, 0, 0, 4})
	f.Add([]byte(""), []byte{3, 4})
	f.Fuzz(func(t *testing.T, names, arrows []byte) {
		if len(names) > 64 || len(arrows) > 512 {
			return
		}
		var d drawing
		for i, c := range names {
			d.Nodes = append(d.Nodes, string(rune('a'+c%26))+strconv.Itoa(i))
		}
		pick := func(b byte) string {
			all := append([]string{graph.START, graph.END}, d.Nodes...)
			return all[int(b)%len(all)]
		}
		for i := 0; i+1 < len(arrows); i += 2 {
			d.Edges = append(d.Edges, arrow{From: pick(arrows[i]), To: pick(arrows[i+1]), Conditional: arrows[i]%2 == 0})
		}
		g := layout(d, "", nil)
		if len(g.Nodes) < len(d.Nodes) {
			t.Fatalf("layout drew %d of %d nodes", len(g.Nodes), len(d.Nodes))
		}
	})
}

// FuzzParseDecision: decoding a decision, from the API's JSON or from the
// form, never panics, and what it accepts is a decision the rules can
// judge: a known outcome, a note within the limit, arguments (JSON) only
// on an edit, a dry run only of an edit.
func FuzzParseDecision(f *testing.F) {
	for _, s := range []string{
		`{"outcome":"approved"}`, `{"outcome":"edited","args":{"nights":2},"dry_run":true}`, `{"outcome":"rejected","note":"no"}`,
		`{"outcome":"approved","outcome":"rejected"}`, `{"outcome":"APPROVED"}`, `{"outcome":"approved","extra":1}`, "{\"note\":\"\xff\"}",
	} {
		f.Add([]byte(s), "approve", "", "")
	}
	f.Add([]byte(`{}`), "edit", `{"nights":2}`, "a note")
	f.Add([]byte(`{}`), "confirm", `{`, "")
	f.Fuzz(func(t *testing.T, body []byte, action, args, note string) {
		check := func(in decideInput, from string) {
			switch {
			case in.Outcome != approval.Approved && in.Outcome != approval.Rejected && in.Outcome != approval.Edited:
				t.Fatalf("%s: accepted outcome %q", from, in.Outcome)
			case len(in.Note) > approval.MaxNoteBytes:
				t.Fatalf("%s: accepted a note of %d bytes", from, len(in.Note))
			case in.Outcome != approval.Edited && len(in.Args) > 0:
				t.Fatalf("%s: arguments on %s", from, in.Outcome)
			case in.Outcome == approval.Edited && !json.Valid(in.Args):
				t.Fatalf("%s: an edit with arguments that are not JSON", from)
			case in.DryRun && in.Outcome != approval.Edited:
				t.Fatalf("%s: a dry run of %s", from, in.Outcome)
			}
		}
		if in, e := parseDecisionJSON(body); e == nil {
			check(in, "json")
			if !utf8.Valid(body) {
				t.Fatalf("json: accepted a body that is not UTF-8")
			}
		} else if e.Status != 400 && e.Status != 422 {
			t.Fatalf("json: refused with status %d", e.Status)
		}
		v := url.Values{"action": {action}, "args": {args}, "note": {note}}
		if in, e := parseDecisionForm(v); e == nil {
			check(in, "form")
		} else if e.Status != 400 && e.Status != 422 {
			t.Fatalf("form: refused with status %d", e.Status)
		}
	})
}
