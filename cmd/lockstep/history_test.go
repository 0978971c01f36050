package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockstepgo/lockstep/checkpoint"
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
	s, err := sqlite.OpenExisting(db, sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	all, err := s.List(context.Background(), threadFeed, checkpoint.ListOptions{})
	s.Close()
	if err != nil {
		t.Fatal(err)
	}
	oldest, mid := all[len(all)-1].Checkpoint.ID, all[4].Checkpoint.ID
	cases := []struct {
		name string
		args []string
	}{
		{"history-feed", []string{"history", threadFeed}},
		{"history-feed-values", []string{"history", threadFeed, "--values", "--limit", "0"}},
		{"history-feed-values-json", []string{"history", threadFeed, "--values", "--json", "--limit", "3"}},
		{"history-feed-values-page", []string{"history", threadFeed, "--values", "--limit", "4"}},
		{"history-feed-values-before", []string{"history", threadFeed, "--values", "--limit", "3", "--before", mid}},
		{"history-feed-values-before-json", []string{"history", threadFeed, "--values", "--before", mid, "--json"}},
		{"history-feed-oldest", []string{"history", threadFeed, "--values", "--before", oldest}},
		{"history-feed-oldest-json", []string{"history", threadFeed, "--before", oldest, "--json"}},
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

// heapWriter discards what is written to it and, at the first write and
// every tenth after it, records the live heap (after a collection): what
// the writer's caller holds while it prints. (What a printer holds for
// the whole output it holds at every write; a collection at each write
// would make the test slow.)
type heapWriter struct {
	n      int64  // bytes written
	writes int    // calls of Write
	peak   uint64 // largest live heap seen at a write
}

func (w *heapWriter) Write(p []byte) (int, error) {
	w.n += int64(len(p))
	if w.writes%10 == 0 {
		w.peak = max(w.peak, liveHeap())
	}
	w.writes++
	return len(p), nil
}

// liveHeap returns the bytes of the heap that are in use, after a
// collection.
func liveHeap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestHistoryValuesStreams checks that history --values holds about one
// checkpoint's values at a time, not the whole output: on a thread whose
// values add up to many times what the database holds, the live heap
// while it prints stays a small fraction of what it prints.
func TestHistoryValuesStreams(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a thread of 80 steps")
	}
	const steps, size = 80, 1024
	db := buildFeed(t, steps, size)
	for _, format := range []string{"table", "json"} {
		t.Run(format, func(t *testing.T) {
			args := []string{"--db", db, "history", threadFeed, "--values", "--limit", "0"}
			if format == "json" {
				args = append(args, "--json")
			}
			var stdout heapWriter
			var stderr strings.Builder
			base := liveHeap()
			code := run(context.Background(), args, &stdout, &stderr, func() time.Time { return cliNow() })
			if code != exitOK {
				t.Fatalf("exit %d: %s", code, stderr.String())
			}
			// The values alone are steps*steps/2 items of size bytes.
			if min := int64(steps * steps / 2 * size); stdout.n < min {
				t.Fatalf("printed %d bytes, want at least %d", stdout.n, min)
			}
			held := int64(stdout.peak) - int64(base)
			t.Logf("printed %d bytes in %d writes, holding at most %d", stdout.n, stdout.writes, held)
			// What it may hold: the thread's rows (about 2*steps*size
			// bytes, raw and decoded), a few copies of one checkpoint's
			// values (steps*size bytes) and the table's other columns:
			// about a fifth of the output here. Half the output is
			// generous; building every row before printing holds more
			// than twice the output.
			if held > stdout.n/2 {
				t.Errorf("history --values held %d bytes while printing %d (more than half): it does not stream", held, stdout.n)
			}
		})
	}
}

// TestHistoryShowsRunKey: history shows the run key of an input checkpoint
// (graph.RunKey), so that an operator can tell whether a keyed request was
// applied: "input (key …)" in the table and run_key in --json, and
// nothing for checkpoints without one.
func TestHistoryShowsRunKey(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "key.db")
	saver, err := sqlite.Open(path, sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	g := newGraphEnv(saver)
	r, err := graph.New[Feed]().
		AddNode("add", func(ctx context.Context, f Feed) (graph.Update[Feed], error) {
			return graph.Set(Feed{Items: []string{"x"}}, "Items"), nil
		}).
		AddEdge(graph.START, "add").
		Compile(g.options()...)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Invoke(ctx, threadFeed, graph.Set(Feed{Note: "a"}, "Note"), graph.RunKey("order-7")); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Invoke(ctx, threadFeed, graph.Set(Feed{Note: "b"}, "Note")); err != nil {
		t.Fatal(err)
	}
	saver.Close()
	table := cli(path, cliNow(), "history", threadFeed)
	if table.code != exitOK || strings.Count(table.stdout, `input (key "order-7")`) != 1 || strings.Count(table.stdout, "input") != 2 {
		t.Errorf("history table (exit %d):\n%s", table.code, table.stdout)
	}
	js := cli(path, cliNow(), "history", threadFeed, "--json")
	var doc struct {
		Checkpoints []checkpointJSON `json:"checkpoints"`
	}
	if err := json.Unmarshal([]byte(js.stdout), &doc); err != nil {
		t.Fatalf("history --json: %v\n%s", err, js.stdout)
	}
	var keys []string
	for _, c := range doc.Checkpoints {
		if c.Source == "input" {
			keys = append(keys, c.RunKey)
		}
	}
	if want := []string{"", "order-7"}; !slices.Equal(keys, want) {
		t.Errorf("run keys of the input checkpoints, newest first: %q, want %q", keys, want)
	}
}
