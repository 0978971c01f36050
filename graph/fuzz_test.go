package graph_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
)

// FuzzStepMerge drives a fan-out of parallel writers through the reducers
// and checks the merge against a model: appends in node-name order, merges
// with the last node winning, last-value fields conflicting exactly when two
// nodes write them, and the saved state decoding to what the run returned.
func FuzzStepMerge(f *testing.F) {
	f.Add(uint8(3), []byte{1, 2, 4}, "x")
	f.Add(uint8(5), []byte{0, 7, 2, 3, 1}, "")
	f.Add(uint8(2), []byte{4, 4}, "κ")
	f.Fuzz(func(t *testing.T, n uint8, masks []byte, item string) {
		n = n%6 + 1
		if len(masks) < int(n) {
			return
		}
		names := []string{"f", "b", "e", "a", "d", "c"}[:n] // registration order differs from name order
		g := graph.New[State]()
		for i, name := range names {
			mask := masks[i]
			g.AddNode(name, func(ctx context.Context, s State) (graph.Update[State], error) {
				var fields []string
				v := State{}
				if mask&1 != 0 {
					v.Log, fields = []string{name + item}, append(fields, "Log")
				}
				if mask&2 != 0 {
					v.Tags, fields = map[string]string{"k": name, name: item}, append(fields, "Tags")
				}
				if mask&4 != 0 {
					v.X, fields = name, append(fields, "X")
				}
				return graph.Set(v, fields...), nil
			})
			g.AddEdge(graph.START, name)
		}
		saver := checkpoint.NewMemorySaver(nil)
		r, err := g.Compile(graph.WithSaver(saver))
		if err != nil {
			t.Fatal(err)
		}
		res, err := r.Invoke(context.Background(), "t", graph.Set(State{Log: []string{"in"}}, "Log"))

		sorted := slices.Clone(names)
		slices.Sort(sorted)
		want := State{Log: []string{"in"}}
		var xWriters []string
		for _, name := range sorted {
			mask := masks[slices.Index(names, name)]
			if mask&1 != 0 {
				want.Log = append(want.Log, name+item)
			}
			if mask&2 != 0 {
				if want.Tags == nil {
					want.Tags = map[string]string{}
				}
				want.Tags["k"], want.Tags[name] = name, item
			}
			if mask&4 != 0 {
				want.X = name
				xWriters = append(xWriters, name)
			}
		}
		if len(xWriters) > 1 {
			var ce *graph.ConflictError
			if !errors.As(err, &ce) || ce.Field != "X" || !slices.Equal(ce.Nodes, xWriters) {
				t.Fatalf("error = %v, want a conflict on X by %v", err, xWriters)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, res.Values, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("merged state (-want +got):\n%s", diff)
		}
		s, err := r.GetState(context.Background(), "t")
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(res.Values, s.Values, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("saved state differs from the run's (-run +saved):\n%s", diff)
		}
		// The stored blobs are valid JSON.
		tp, err := saver.Get(context.Background(), checkpoint.Ref{Thread: "t"}, checkpoint.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for ch, blobs := range tp.Checkpoint.Channels {
			for _, b := range blobs {
				if !json.Valid(b.Data) {
					t.Fatalf("channel %s blob is not JSON: %s", ch, b.Data)
				}
			}
		}
	})
}
