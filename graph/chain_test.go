package graph_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
)

type chainMsg struct {
	ID   string `json:"id"`
	Text string `json:"text"`
}

type chainState struct {
	Msgs  []chainMsg `lockstep:"append"`
	Steps int
}

// chainGraph appends one message of about size bytes per superstep until
// the state holds n messages.
func chainGraph(n, size int) *graph.Graph[chainState] {
	return graph.New[chainState]().
		AddNode("talk", func(ctx context.Context, s chainState) (graph.Update[chainState], error) {
			k := len(s.Msgs)
			// Sizes vary, so that segment and snapshot sizes are not
			// multiples of one item.
			text := fmt.Sprintf("%d:%s", k, strings.Repeat("x", size/2+k*37%size))
			return graph.Set(chainState{Msgs: []chainMsg{{ID: fmt.Sprint("m", k), Text: text}}, Steps: k + 1}, "Msgs", "Steps"), nil
		}).
		AddEdge(graph.START, "talk").
		AddConditionalEdges("talk", func(ctx context.Context, s chainState) ([]string, error) {
			if len(s.Msgs) >= n {
				return []string{graph.END}, nil
			}
			return []string{"talk"}, nil
		}, "talk", graph.END)
}

// TestAppendChainsStayShort (D4): a field appended to a thousand times is
// stored so that its latest value is a short chain of blobs (whole values
// and gathered appends, not one blob per checkpoint), while the bytes
// stored stay within a small multiple of the bytes the value holds; a
// Runnable that never saw the thread reads every checkpoint's value
// exactly as the run built it, and so does a run that goes on from it.
func TestAppendChainsStayShort(t *testing.T) {
	n, size := 1000, 1000
	if raceEnabled {
		n = 300 // each step costs several times as much; the bounds scale with n
	}
	ctx := context.Background()
	saver := checkpoint.NewMemorySaver(nil)
	r, err := chainGraph(n, size).Compile(graph.WithSaver(saver), graph.WithRecursionLimit(n+10))
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Invoke(ctx, "long", graph.Update[chainState]{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Values.Msgs) != n {
		t.Fatalf("the run ended with %d messages, want %d", len(res.Values.Msgs), n)
	}

	tp, err := saver.Get(ctx, checkpoint.Ref{Thread: "long"}, checkpoint.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	chain := tp.Checkpoint.Channels["Msgs"]
	payload := 0
	for _, b := range chain {
		payload += len(b.Data)
	}
	// A chain of segments of sqrt(start*1 KiB) bytes and the small blobs
	// since the last one: about 2*sqrt(n) blobs for items of about 1 KiB.
	if limit := 3 * int(math.Sqrt(float64(n))); len(chain) > limit {
		t.Errorf("the head's chain of Msgs holds %d blobs, want at most %d (one per append is %d)", len(chain), limit, n)
	}

	// Every checkpoint's own blob of Msgs, once: what the thread stores.
	all, err := saver.List(ctx, "long", checkpoint.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	stored := 0
	for _, h := range all {
		for _, b := range h.Checkpoint.Channels["Msgs"] {
			if b.Version == h.Checkpoint.ID {
				stored += len(b.Data)
			}
		}
	}
	if stored > 4*payload {
		t.Errorf("the thread stores %d bytes of Msgs for a value of %d: more than 4x", stored, payload)
	}
	t.Logf("head chain: %d blobs; stored %d bytes for a %d-byte value (%.2fx)", len(chain), stored, payload, float64(stored)/float64(payload))

	// A Runnable that never saw the thread.
	cold, err := chainGraph(n, size).Compile(graph.WithSaver(saver), graph.WithRecursionLimit(n+10))
	if err != nil {
		t.Fatal(err)
	}
	st, err := cold.GetState(ctx, "long")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(res.Values, st.Values); diff != "" {
		t.Fatalf("cold GetState differs from the run's state (-run +read):\n%s", diff)
	}
	hist, err := cold.History(ctx, "long", graph.HistoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range hist {
		k := len(s.Values.Msgs)
		if k == 0 {
			continue
		}
		if diff := cmp.Diff(res.Values.Msgs[:k], s.Values.Msgs); diff != "" {
			t.Fatalf("checkpoint %s: Msgs is not the run's first %d messages (-run +read):\n%s", s.Config.CheckpointID, k, diff)
		}
	}

	// A run that goes on from the cold read keeps the chain short and the
	// value exact.
	more, err := chainGraph(n+150, size).Compile(graph.WithSaver(saver), graph.WithRecursionLimit(n+160))
	if err != nil {
		t.Fatal(err)
	}
	res2, err := more.Invoke(ctx, "long", graph.Set(chainState{Steps: -1}, "Steps"))
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := chainGraph(n, size).Compile(graph.WithSaver(saver))
	if err != nil {
		t.Fatal(err)
	}
	st, err = fresh.GetState(ctx, "long")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(res2.Values, st.Values); diff != "" {
		t.Fatalf("after the second run, cold GetState differs (-run +read):\n%s", diff)
	}
	if diff := cmp.Diff(res.Values.Msgs, st.Values.Msgs[:n]); diff != "" {
		t.Fatalf("the second run changed the first run's messages (-first +now):\n%s", diff)
	}
	tp, err = saver.Get(ctx, checkpoint.Ref{Thread: "long"}, checkpoint.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, limit := len(tp.Checkpoint.Channels["Msgs"]), 3*int(math.Sqrt(float64(n+150))); got > limit {
		t.Errorf("after the second run the head's chain holds %d blobs, want at most %d", got, limit)
	}
}
