package status_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/internal/systemtest"
)

// TestRunMetadataReadsTheSame: caller metadata reads the same from the
// Runnable that wrote it (its cached frames) as from a fresh one reading
// the saver, on both savers: numbers as json.Number with every digit
// (checkpoint.Metadata). Snapshots take metadata from the saver's tuple,
// never from the frame the run saved (which holds the caller's Go types),
// and this pins that.
func TestRunMetadataReadsTheSame(t *testing.T) {
	savers := systemtest.EverySaver()
	g := func() *graph.Graph[statusState] {
		return graph.New[statusState]().
			AddNode("a", func(ctx context.Context, s statusState) (graph.Update[statusState], error) {
				return graph.Set(statusState{Log: []string{"a"}}, "Log"), nil
			}).
			AddEdge(graph.START, "a")
	}
	caller := map[string]any{"order": int64(9007199254740993), "ratio": 1.5, "count": 3, "team": "billing", "urgent": true}
	want := map[string]any{"order": json.Number("9007199254740993"), "ratio": json.Number("1.5"), "count": json.Number("3"), "team": "billing", "urgent": true}
	for name, open := range savers {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			s := open(t)
			writer, err := g().Compile(graph.WithSaver(s))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := writer.Invoke(ctx, "t", graph.Update[statusState]{}, graph.Metadata(caller)); err != nil {
				t.Fatal(err)
			}
			reader, err := g().Compile(graph.WithSaver(s))
			if err != nil {
				t.Fatal(err)
			}
			for who, r := range map[string]*graph.Runnable[statusState]{"writer": writer, "reader": reader} {
				snap, err := r.GetState(ctx, "t")
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(want, snap.Metadata.Extra); diff != "" {
					t.Errorf("%s: GetState metadata (-want +got):\n%s", who, diff)
				}
				hist, err := r.History(ctx, "t", graph.HistoryOptions{})
				if err != nil {
					t.Fatal(err)
				}
				for _, h := range hist {
					if h.Metadata.Source == checkpoint.SourceInput {
						continue
					}
					if diff := cmp.Diff(want, h.Metadata.Extra); diff != "" {
						t.Errorf("%s: History step %d metadata (-want +got):\n%s", who, h.Metadata.Step, diff)
					}
				}
			}
		})
	}
}

// TestListMetadataOnlyReadsNoState: both savers honour
// ListOptions.MetadataOnly (the RunKey look-up relies on it to stay cheap
// on long threads): no channels and no pending writes, the metadata as a
// full List gives it.
func TestListMetadataOnlyReadsNoState(t *testing.T) {
	savers := systemtest.EverySaver()
	for name, open := range savers {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			s := open(t)
			r, err := graph.New[statusState]().
				AddNode("a", func(ctx context.Context, st statusState) (graph.Update[statusState], error) {
					return graph.Set(statusState{Log: []string{"a"}}, "Log"), nil
				}).
				AddEdge(graph.START, "a").Compile(graph.WithSaver(s))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := r.Invoke(ctx, "t", graph.Set(statusState{Log: []string{"in"}}, "Log"), graph.RunKey("k")); err != nil {
				t.Fatal(err)
			}
			full, err := s.List(ctx, "t", checkpoint.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			light, err := s.List(ctx, "t", checkpoint.ListOptions{MetadataOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			if len(light) != len(full) || len(full) == 0 {
				t.Fatalf("%d tuples, %d in the full list", len(light), len(full))
			}
			for i, tp := range light {
				if tp.Checkpoint.Channels != nil || tp.Pending != nil {
					t.Errorf("checkpoint %s: %d channels, %d pending writes, want none", tp.Checkpoint.ID, len(tp.Checkpoint.Channels), len(tp.Pending))
				}
				if diff := cmp.Diff(full[i].Checkpoint.Metadata, tp.Checkpoint.Metadata); diff != "" {
					t.Errorf("checkpoint %s metadata (-full +light):\n%s", tp.Checkpoint.ID, diff)
				}
			}
		})
	}
}
