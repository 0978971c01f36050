package graph_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
)

type corruptItem struct {
	ID  string
	Qty int
}

type corruptState struct {
	Count int
	Item  corruptItem
	Log   []string          `lockstep:"append"`
	Tags  map[string]string `lockstep:"merge"`
}

// fieldSaver serves a real thread with the newest blob of one channel
// replaced, as if the stored bytes had been edited and their checksum
// recomputed: only the graph's decoder stands between them and the state.
type fieldSaver struct {
	checkpoint.Saver
	channel string
	data    []byte
}

func (s *fieldSaver) edit(tp *checkpoint.Tuple) {
	chain := tp.Checkpoint.Channels[s.channel]
	if len(chain) == 0 {
		return
	}
	chans := make(map[string][]checkpoint.Blob, len(tp.Checkpoint.Channels))
	for ch, c := range tp.Checkpoint.Channels {
		chans[ch] = c
	}
	c := append([]checkpoint.Blob(nil), chain...)
	c[len(c)-1].Data = s.data
	chans[s.channel] = c
	tp.Checkpoint.Channels = chans
}

func (s *fieldSaver) Get(ctx context.Context, ref checkpoint.Ref, _ checkpoint.GetOptions) (*checkpoint.Tuple, error) {
	tp, err := s.Saver.Get(ctx, ref, checkpoint.GetOptions{})
	if err == nil {
		s.edit(tp)
	}
	return tp, err
}

func (s *fieldSaver) List(ctx context.Context, thread string, opts checkpoint.ListOptions) ([]*checkpoint.Tuple, error) {
	tps, err := s.Saver.List(ctx, thread, opts)
	for _, tp := range tps {
		s.edit(tp)
	}
	return tps, err
}

// TestCorruptValues (R21, R48): a stored state value whose JSON is not what
// the runtime writes (its checksum matching: the saver cannot tell) is a
// *checkpoint.CorruptError naming the thread and the checkpoint, never a
// silently different or zero value. Duplicate, unknown and case-variant
// keys, null where Marshal never writes it and invalid UTF-8 are refused
// too: encoding/json alone would decode them.
func TestCorruptValues(t *testing.T) {
	for _, tc := range []struct {
		name, channel, data string
	}{
		{"truncated", "Item", `{"ID":"i-1","Qty":`},
		{"trailing garbage", "Item", `{"ID":"i-1","Qty":2} x`},
		{"BOM", "Item", "\ufeff{\"ID\":\"i-1\",\"Qty\":2}"},
		{"an array for a struct", "Item", `[1,2]`},
		{"a string for an int", "Count", `"2"`},
		{"deep nesting", "Log", strings.Repeat("[", 10001) + strings.Repeat("]", 10001)},
		{"an object for an append chain", "Log", `{"a":1}`},
		{"duplicate keys", "Item", `{"ID":"i-1","ID":"i-2","Qty":2}`},
		{"duplicate map keys", "Tags", `{"k":"a","k":"b"}`},
		{"case-variant keys", "Item", `{"ID":"i-1","id":"i-2","Qty":2}`},
		{"keys in another case", "Item", `{"id":"i-1","qty":2}`},
		{"a type tag", "Item", `{"__type":"os/exec.Cmd","Path":"/bin/sh"}`},
		{"null for an int", "Count", `null`},
		{"null for a struct", "Item", `null`},
		{"invalid UTF-8", "Log", "[\"\xff\"]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			base := checkpoint.NewMemorySaver(nil)
			g := graph.New[corruptState]().
				AddNode("a", func(ctx context.Context, s corruptState) (graph.Update[corruptState], error) {
					return graph.Set(corruptState{Count: 2, Item: corruptItem{ID: "i-1", Qty: 2}, Log: []string{"a"}, Tags: map[string]string{"k": "v"}}, "Count", "Item", "Log", "Tags"), nil
				}).
				AddNode("b", func(ctx context.Context, s corruptState) (graph.Update[corruptState], error) {
					return graph.Set(corruptState{Log: []string{"b"}}, "Log"), nil
				}).
				AddEdge(graph.START, "a").AddEdge("a", "b")
			setup := mustCompile(t, g, graph.WithSaver(base), graph.WithInterruptBefore("b"))
			if res, err := setup.Invoke(ctx, "t", graph.Update[corruptState]{}); err != nil || res.Status != graph.StatusWaiting {
				t.Fatalf("setup: %s %v", res.Status, err)
			}
			before, err := base.List(ctx, "t", checkpoint.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			r := mustCompile(t, g, graph.WithSaver(&fieldSaver{Saver: base, channel: tc.channel, data: []byte(tc.data)}), graph.WithInterruptBefore("b"))
			for _, op := range []struct {
				name string
				call func() error
			}{
				{"GetState", func() error { _, err := r.GetState(ctx, "t"); return err }},
				{"History", func() error { _, err := r.History(ctx, "t", graph.HistoryOptions{}); return err }},
				{"Continue", func() error { _, err := r.Continue(ctx, "t"); return err }},
				{"Resume", func() error { _, err := r.Resume(ctx, "t", graph.Command[corruptState]{}); return err }},
			} {
				err := op.call()
				var ce *checkpoint.CorruptError
				if !errors.As(err, &ce) || !errors.Is(err, checkpoint.ErrCorrupt) {
					t.Errorf("%s: %v, want a *checkpoint.CorruptError", op.name, err)
					continue
				}
				if ce.Thread != "t" || ce.Checkpoint == "" {
					t.Errorf("%s: %+v does not name the thread and the checkpoint", op.name, ce)
				}
			}
			after, err := base.List(ctx, "t", checkpoint.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(after) != len(before) || after[0].Checkpoint.ID != before[0].Checkpoint.ID || len(after[0].Pending) != len(before[0].Pending) {
				t.Errorf("a run on the corrupt thread wrote: %d checkpoints (head %s, %d writes), %d before (head %s, %d writes)",
					len(after), after[0].Checkpoint.ID, len(after[0].Pending), len(before), before[0].Checkpoint.ID, len(before[0].Pending))
			}
		})
	}
}

type evolveItemV1 struct{ ID string }
type evolveItemV2 struct {
	ID  string
	Qty int
}
type evolveV1 struct {
	Item evolveItemV1
	Old  string
}
type evolveV2 struct{ Item evolveItemV2 }

// TestStateTypeGrows: checkpoints written with an older state type read
// under a newer one that added a nested field and removed a top-level one
// (graph's doc: "Stored state and changing the state type").
func TestStateTypeGrows(t *testing.T) {
	ctx := context.Background()
	saver := checkpoint.NewMemorySaver(nil)
	v1 := mustCompile(t, graph.New[evolveV1]().AddNode("a", func(ctx context.Context, s evolveV1) (graph.Update[evolveV1], error) {
		return graph.Set(evolveV1{Item: evolveItemV1{ID: "i-1"}, Old: "gone"}, "Item", "Old"), nil
	}).AddEdge(graph.START, "a"), graph.WithSaver(saver))
	if _, err := v1.Invoke(ctx, "t", graph.Update[evolveV1]{}); err != nil {
		t.Fatal(err)
	}
	v2 := mustCompile(t, graph.New[evolveV2]().AddNode("a", func(ctx context.Context, s evolveV2) (graph.Update[evolveV2], error) {
		return graph.Update[evolveV2]{}, nil
	}).AddEdge(graph.START, "a"), graph.WithSaver(saver))
	s, err := v2.GetState(ctx, "t")
	if err != nil {
		t.Fatalf("GetState under the grown type: %v", err)
	}
	if diff := cmp.Diff(evolveV2{Item: evolveItemV2{ID: "i-1"}}, s.Values); diff != "" {
		t.Errorf("values (-want +got):\n%s", diff)
	}
}

type rawState struct{ Raw json.RawMessage }

// TestWriteRefusesWhatReadRefuses: a write whose JSON the strict decoder
// would refuse (a json.RawMessage with invalid UTF-8 or a duplicate key)
// is refused when it is written, so a thread never holds a value it cannot
// read back.
func TestWriteRefusesWhatReadRefuses(t *testing.T) {
	for _, raw := range []string{`"\x83"`, `{"a":1,"a":2}`, `[{"k":{"x":1,"x":1}}]`} {
		saver := checkpoint.NewMemorySaver(nil)
		r := mustCompile(t, graph.New[rawState]().AddNode("w", func(ctx context.Context, s rawState) (graph.Update[rawState], error) {
			return graph.Set(rawState{Raw: json.RawMessage(raw)}, "Raw"), nil
		}).AddEdge(graph.START, "w"), graph.WithSaver(saver))
		_, err := r.Invoke(context.Background(), "t", graph.Update[rawState]{})
		var ee *graph.EncodeError
		if !errors.Is(err, graph.ErrNotSerializable) || !errors.As(err, &ee) {
			t.Errorf("writing %q: %v, want an *EncodeError", raw, err)
		} else if want := `write of node "w" to field Raw`; ee.What != want {
			t.Errorf("writing %q: the error names %q, want %q", raw, ee.What, want)
		}
		_, err = r.Invoke(context.Background(), "t2", graph.Set(rawState{Raw: json.RawMessage(raw)}, "Raw"))
		if !errors.Is(err, graph.ErrNotSerializable) || !errors.As(err, &ee) {
			t.Errorf("input %q: %v, want ErrNotSerializable", raw, err)
		} else if want := "input field Raw"; ee.What != want {
			t.Errorf("input %q: the error names %q, want %q", raw, ee.What, want)
		}
		if tps, _ := saver.List(context.Background(), "t2", checkpoint.ListOptions{}); len(tps) != 0 {
			t.Errorf("input %q: %d checkpoints written", raw, len(tps))
		}
	}
}

type nanState struct {
	F    float64
	Blob string
}

// TestUnstorableWriteFailsTheNode: a node whose write cannot be stored
// (not JSON, or over the size cap) fails, as a node error naming it; the
// thread reads as failed with the task's error, not as pending, and no
// checkpoint of the step is written.
func TestUnstorableWriteFailsTheNode(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		u    graph.Update[nanState]
		want error
	}{
		{"not JSON", graph.Set(nanState{F: math.NaN()}, "F"), graph.ErrNotSerializable},
		{"over the cap", graph.Set(nanState{Blob: strings.Repeat("x", 2000)}, "Blob"), graph.ErrStateTooLarge},
	} {
		saver := checkpoint.NewMemorySaver(nil)
		r := mustCompile(t, graph.New[nanState]().AddNode("w", func(ctx context.Context, s nanState) (graph.Update[nanState], error) {
			return tc.u, nil
		}).AddEdge(graph.START, "w"), graph.WithSaver(saver), graph.WithMaxValueBytes(1000))
		_, err := r.Invoke(ctx, "t", graph.Update[nanState]{})
		var ne *graph.NodeError
		if !errors.Is(err, tc.want) || !errors.As(err, &ne) || ne.Node != "w" || ne.Thread != "t" {
			t.Errorf("%s: Invoke: %v, want a *NodeError for node w matching %v", tc.name, err, tc.want)
		}
		s, err := r.GetState(ctx, "t")
		if err != nil || s.Status != graph.StatusFailed || len(s.Tasks) != 1 || s.Tasks[0].Error == nil || s.Tasks[0].Name != "w" {
			t.Errorf("%s: state %s, tasks %+v (%v), want failed with the task's error", tc.name, s.Status, s.Tasks, err)
		}
	}
}
