package graph_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/interrupt"
)

// tupleSaver serves a real thread with every tuple passed through edit,
// as if its rows had been changed and their checksums recomputed: what a
// reader finds after a disk, a bug, a hand edit or another writer wrote
// what the runtime never does. The saver cannot tell; the readers must.
type tupleSaver struct {
	checkpoint.Saver
	edit func(tp *checkpoint.Tuple)
}

// own gives tp maps and slices of its own, so that edit changes nothing
// the base saver holds.
func own(tp *checkpoint.Tuple) {
	tp.Pending = slices.Clone(tp.Pending)
	versions := make(map[string]string, len(tp.Checkpoint.Versions))
	for k, v := range tp.Checkpoint.Versions {
		versions[k] = v
	}
	tp.Checkpoint.Versions = versions
	chans := make(map[string][]checkpoint.Blob, len(tp.Checkpoint.Channels))
	for k, v := range tp.Checkpoint.Channels {
		chans[k] = slices.Clone(v)
	}
	tp.Checkpoint.Channels = chans
}

func (s *tupleSaver) Get(ctx context.Context, ref checkpoint.Ref, _ checkpoint.GetOptions) (*checkpoint.Tuple, error) {
	tp, err := s.Saver.Get(ctx, ref, checkpoint.GetOptions{})
	if err != nil {
		return nil, err
	}
	own(tp)
	s.edit(tp)
	return tp, nil
}

func (s *tupleSaver) List(ctx context.Context, thread string, opts checkpoint.ListOptions) ([]*checkpoint.Tuple, error) {
	tps, err := s.Saver.List(ctx, thread, opts)
	for _, tp := range tps {
		own(tp)
		s.edit(tp)
	}
	return tps, err
}

// rowState has a float field for the cases of values that would change.
type rowState struct {
	Price float64
	Notes []string `lockstep:"append"`
	A, B  string
}

// rowGraph: set writes Price and Notes, then ask1 and ask2 both wait on
// an interrupt, in parallel: the head holds two interrupt writes.
func rowGraph() *graph.Graph[rowState] {
	ask := func(field string) graph.NodeFunc[rowState] {
		return func(ctx context.Context, s rowState) (graph.Update[rowState], error) {
			a, err := interrupt.Ask[string](ctx, "ok "+field+"?")
			if err != nil {
				return graph.Update[rowState]{}, err
			}
			if field == "A" {
				return graph.Set(rowState{A: a}, "A"), nil
			}
			return graph.Set(rowState{B: a}, "B"), nil
		}
	}
	return graph.New[rowState]().
		AddNode("set", func(ctx context.Context, s rowState) (graph.Update[rowState], error) {
			return graph.Set(rowState{Price: 1.5, Notes: []string{"set"}}, "Price", "Notes"), nil
		}).
		AddNode("ask1", ask("A")).
		AddNode("ask2", ask("B")).
		AddEdge(graph.START, "set").AddEdge("set", "ask1").AddEdge("set", "ask2")
}

// writeOf returns the i-th pending write of tp to channel (by task order).
func writeOf(tp *checkpoint.Tuple, channel string, i int) *checkpoint.PendingWrite {
	for j := range tp.Pending {
		if tp.Pending[j].Channel == channel {
			if i == 0 {
				return &tp.Pending[j]
			}
			i--
		}
	}
	return nil
}

// TestCorruptRowsRead (issue 16): stored rows that only corruption can
// have written are a *checkpoint.CorruptError naming the thread and the
// checkpoint, from GetState, History, Continue, Resume, checkpoint.Inspect
// (the CLI) and checkpoint.PendingInterrupts (the inbox), whatever saver
// returned them, and nothing is written; before, each was read as valid
// and the waiting interrupts detached (status pending or done, fewer
// interrupts). Pending writes that json.Marshal could not have written
// (null, a duplicate or case-variant key, invalid UTF-8, a lone
// surrogate), scheduling that names no node, a step out of range, a head
// whose ID sorts before its parent's, one interrupt ID twice, and state
// values that would read back as another value (a float64 holding
// 9007199254740993, a lone surrogate escape).
func TestCorruptRowsRead(t *testing.T) {
	setWrite := func(channel string, i int, value string) func(*checkpoint.Tuple) {
		return func(tp *checkpoint.Tuple) {
			if w := writeOf(tp, channel, i); w != nil {
				w.Value = json.RawMessage(value)
			}
		}
	}
	setBlob := func(channel, value string) func(*checkpoint.Tuple) {
		return func(tp *checkpoint.Tuple) {
			if c := tp.Checkpoint.Channels[channel]; len(c) > 0 {
				c[len(c)-1].Data = json.RawMessage(value)
			}
		}
	}
	head := func(edit func(*checkpoint.Tuple)) func(*checkpoint.Tuple) {
		return func(tp *checkpoint.Tuple) {
			if writeOf(tp, checkpoint.ChannelInterrupt, 0) != nil { // the waiting head
				edit(tp)
			}
		}
	}
	for _, tc := range []struct {
		name    string
		edit    func(*checkpoint.Tuple)
		inspect bool // checkpoint.Inspect and PendingInterrupts see it too (not a state value)
	}{
		// Item 3: special writes decoded as strictly as state.
		{"interrupt null", setWrite(checkpoint.ChannelInterrupt, 1, `null`), true},
		{"interrupt duplicate id key", setWrite(checkpoint.ChannelInterrupt, 1, `[{"id":"x","id":"y","value":"q"}]`), true},
		{"interrupt case-variant id key", setWrite(checkpoint.ChannelInterrupt, 1, `[{"ID":"x","value":"q"}]`), true},
		{"interrupt invalid UTF-8", setWrite(checkpoint.ChannelInterrupt, 1, "[{\"id\":\"x\",\"value\":\"\xff\"}]"), true},
		{"interrupt lone surrogate", setWrite(checkpoint.ChannelInterrupt, 1, `[{"id":"x","value":"\ud800"}]`), true},
		{"interrupt without a value", setWrite(checkpoint.ChannelInterrupt, 1, `[{"id":"x"}]`), true},
		{"resume write null", func(tp *checkpoint.Tuple) {
			if w := writeOf(tp, checkpoint.ChannelInterrupt, 0); w != nil {
				tp.Pending = append(tp.Pending, checkpoint.PendingWrite{TaskID: w.TaskID, Node: w.Node, Path: w.Path, Channel: checkpoint.ChannelResume, Value: json.RawMessage(`null`)})
			}
		}, true},
		{"resume write duplicate key", func(tp *checkpoint.Tuple) {
			if w := writeOf(tp, checkpoint.ChannelInterrupt, 0); w != nil {
				var list []checkpoint.Interrupt
				_ = json.Unmarshal(w.Value, &list)
				a := `{"` + list[0].ID + `":"no","` + list[0].ID + `":"yes"}`
				tp.Pending = append(tp.Pending, checkpoint.PendingWrite{TaskID: w.TaskID, Node: w.Node, Path: w.Path, Channel: checkpoint.ChannelResume, Value: json.RawMessage(a)})
			}
		}, true},
		{"error write null", func(tp *checkpoint.Tuple) {
			if w := writeOf(tp, checkpoint.ChannelInterrupt, 1); w != nil {
				tp.Pending = append(tp.Pending, checkpoint.PendingWrite{TaskID: w.TaskID, Node: w.Node, Path: w.Path, Channel: checkpoint.ChannelError, Value: json.RawMessage(`null`)})
			}
		}, true},
		// Item 4: metadata and scheduling that only corruption writes.
		{"next names no node", head(func(tp *checkpoint.Tuple) {
			tp.Checkpoint.Versions[checkpoint.BranchPrefix] = tp.Checkpoint.ID
			tp.Checkpoint.Channels[checkpoint.BranchPrefix] = []checkpoint.Blob{{Version: tp.Checkpoint.ID, Data: json.RawMessage(`null`)}}
		}), true},
		{"step negative", head(func(tp *checkpoint.Tuple) { tp.Checkpoint.Metadata.Step = -5 }), true},
		{"step MaxInt64", head(func(tp *checkpoint.Tuple) { tp.Checkpoint.Metadata.Step = math.MaxInt64 }), true},
		{"head sorts before its parent", head(func(tp *checkpoint.Tuple) { tp.Checkpoint.ParentID = tp.Checkpoint.ID + "z" }), true},
		{"version after the checkpoint", head(func(tp *checkpoint.Tuple) { tp.Checkpoint.Versions["A"] = tp.Checkpoint.ID + "z" }), true},
		{"two interrupts with one ID in a write", func(tp *checkpoint.Tuple) {
			if w := writeOf(tp, checkpoint.ChannelInterrupt, 1); w != nil {
				var list []checkpoint.Interrupt
				_ = json.Unmarshal(w.Value, &list)
				b, _ := json.Marshal(append(list, list[0]))
				w.Value = b
			}
		}, true},
		{"one interrupt ID in two tasks", func(tp *checkpoint.Tuple) {
			if a, b := writeOf(tp, checkpoint.ChannelInterrupt, 0), writeOf(tp, checkpoint.ChannelInterrupt, 1); a != nil && b != nil {
				b.Value = a.Value
			}
		}, true},
		// Item 8: values that would change silently.
		{"float64 that rounds", setBlob("Price", `9007199254740993`), false},
		{"float64 that underflows", setBlob("Price", `1e-400`), false},
		{"lone surrogate in state", setBlob("Notes", `["\ud800"]`), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			base := checkpoint.NewMemorySaver(nil)
			setup := mustCompile(t, rowGraph(), graph.WithSaver(base))
			if res, err := setup.Invoke(ctx, "t", graph.Update[rowState]{}); err != nil || res.Status != graph.StatusWaiting || len(res.Interrupts) != 2 {
				t.Fatalf("setup: %s %d %v", res.Status, len(res.Interrupts), err)
			}
			before, err := base.List(ctx, "t", checkpoint.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			ts := &tupleSaver{Saver: base, edit: tc.edit}
			r := mustCompile(t, rowGraph(), graph.WithSaver(ts))
			want := func(op string, err error) {
				t.Helper()
				var ce *checkpoint.CorruptError
				if !errors.As(err, &ce) || !errors.Is(err, checkpoint.ErrCorrupt) {
					t.Errorf("%s: %v, want a *checkpoint.CorruptError", op, err)
					return
				}
				if ce.Thread != "t" || ce.Checkpoint == "" {
					t.Errorf("%s: %+v does not name the thread and the checkpoint", op, ce)
				}
			}
			snap, err := r.GetState(ctx, "t")
			if err == nil {
				t.Logf("GetState read it as %s with %d interrupts", snap.Status, len(snap.Interrupts))
			}
			want("GetState", err)
			_, err = r.History(ctx, "t", graph.HistoryOptions{})
			want("History", err)
			_, err = r.Continue(ctx, "t")
			want("Continue", err)
			_, err = r.Resume(ctx, "t", graph.Command[rowState]{ResumeByID: map[string]any{"x": "yes"}})
			want("Resume", err)
			if tc.inspect {
				tp, err := ts.Get(ctx, checkpoint.Ref{Thread: "t"}, checkpoint.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				_, err = checkpoint.Inspect(tp, true)
				want("Inspect", err)
				if _, err := checkpoint.PendingInterrupts(tp.Thread, tp.Checkpoint.ID, tp.Pending); err == nil && checkpoint.VerifyTuple(tp) == nil {
					t.Errorf("PendingInterrupts and VerifyTuple: no error")
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
