package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lockstepgo/lockstep/checkpoint/sqlite"
	"github.com/lockstepgo/lockstep/graph"
)

// Feed is the state of the feed graph: a list that grows by one item a
// step and a note that is rewritten every step.
type Feed struct {
	Items []string `lockstep:"append"`
	Note  string
}

// threadFeed is the thread buildFeed writes.
const threadFeed = "feed-1"

// buildFeed runs a graph that appends n items of size bytes each, one a
// superstep, and rewrites a note of size bytes, into a new database, and
// returns its path. The state at step k holds k items, so the thread's
// history with values is about n*n/2 items long while the database holds
// about 2n.
func buildFeed(t *testing.T, n, size int) string {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "feed.db")
	saver, err := sqlite.Open(path, sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer saver.Close()
	g := newGraphEnv(saver)
	item := func(prefix string, i int) string {
		s := prefix + strings.Repeat("x", size)
		return s[:size-3] + string(rune('a'+i%26)) + "<>"
	}
	r, err := graph.New[Feed]().
		AddNode("add", func(ctx context.Context, f Feed) (graph.Update[Feed], error) {
			k := len(f.Items)
			return graph.Set(Feed{Items: []string{item("item", k)}, Note: item("note", k)}, "Items", "Note"), nil
		}).
		AddEdge(graph.START, "add").
		AddConditionalEdges("add", func(ctx context.Context, f Feed) ([]string, error) {
			if len(f.Items) >= n {
				return []string{graph.END}, nil
			}
			return []string{"add"}, nil
		}, "add", graph.END).
		Compile(g.options(graph.WithRecursionLimit(n + 1))...)
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Invoke(ctx, threadFeed, graph.Set(Feed{Note: "start"}, "Note"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != graph.StatusDone {
		t.Fatalf("feed: status %s, want done", res.Status)
	}
	return path
}

// TestHistoryGolden pins the output of history (table and JSON, with and
// without values, whole and in pages) on a thread whose step numbers have
// one and two digits.
func TestHistoryGolden(t *testing.T) {
	db := buildFeed(t, 11, 8)
	now := cliNow()
	cases := []struct {
		name string
		args []string
	}{
		{"history-feed", []string{"history", threadFeed}},
		{"history-feed-values", []string{"history", threadFeed, "--values", "--limit", "0"}},
		{"history-feed-values-json", []string{"history", threadFeed, "--values", "--json", "--limit", "3"}},
		{"history-feed-values-page", []string{"history", threadFeed, "--values", "--limit", "4"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := cli(db, now, tc.args...)
			if got.code != exitOK {
				t.Errorf("exit %d, want 0; stderr: %s", got.code, got.stderr)
			}
			checkGolden(t, tc.name, got, goldenData{db: db})
		})
	}
}
