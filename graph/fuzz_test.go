package graph_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/interrupt"
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

		if !utf8.ValidString(item) && slices.ContainsFunc(masks[:n], func(m byte) bool { return m&3 != 0 }) {
			// JSON cannot carry the item: the write is refused, typed.
			if !errors.Is(err, graph.ErrNotSerializable) {
				t.Fatalf("writing %q: %v, want ErrNotSerializable", item, err)
			}
			return
		}

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

// FuzzResumeCommand sends arbitrary resume commands to a thread waiting on
// two interrupts: a command either resumes (answering only pending IDs) or
// fails with a typed error, and a failed command writes nothing.
func FuzzResumeCommand(f *testing.F) {
	f.Add("", "", "x", false, uint8(0))
	f.Add("p", "", `{"a":1}`, true, uint8(1))
	f.Add("", "q", "null", false, uint8(3))
	f.Add("zz", "p", "\xff", true, uint8(2))
	f.Fuzz(func(t *testing.T, id1, id2, value string, plain bool, which uint8) {
		ctx := context.Background()
		saver := checkpoint.NewMemorySaver(nil)
		ask := func(name string) graph.NodeFunc[State] {
			return func(ctx context.Context, s State) (graph.Update[State], error) {
				v, err := interrupt.Ask[any](ctx, name+"?")
				if err != nil {
					return graph.Update[State]{}, err
				}
				b, _ := json.Marshal(v)
				return graph.Set(State{Log: []string{name + ":" + string(b)}}, "Log"), nil
			}
		}
		g := graph.New[State]().AddNode("p", ask("p")).AddNode("q", ask("q")).
			AddEdge(graph.START, "p").AddEdge(graph.START, "q")
		r, err := g.Compile(graph.WithSaver(saver))
		if err != nil {
			t.Fatal(err)
		}
		res, err := r.Invoke(ctx, "t", graph.Update[State]{})
		if err != nil || len(res.Interrupts) != 2 {
			t.Fatalf("setup: %v %v", res.Status, err)
		}
		real := map[string]string{"p": res.Interrupts[0].ID, "q": res.Interrupts[1].ID}
		pick := func(s string) string {
			if id, ok := real[s]; ok {
				return id
			}
			return s
		}
		var cmd graph.Command[State]
		var v any = value
		if json.Valid([]byte(value)) {
			_ = json.Unmarshal([]byte(value), &v)
		}
		switch {
		case plain:
			cmd.Resume = v
		case which%4 == 0:
			cmd.ResumeByID = map[string]any{pick(id1): v}
		case which%4 == 1:
			cmd.ResumeByID = map[string]any{pick(id1): v, pick(id2): v}
		case which%4 == 2:
			cmd.Resume, cmd.ResumeByID = v, map[string]any{pick(id1): v}
		}
		before, _ := saver.List(ctx, "t", checkpoint.ListOptions{})
		_, err = r.Resume(ctx, "t", cmd)
		if err == nil {
			return
		}
		typed := errors.Is(err, graph.ErrAmbiguousResume) || errors.Is(err, graph.ErrUnknownInterrupt) ||
			errors.Is(err, graph.ErrAlreadyAnswered) || errors.Is(err, graph.ErrInvalidInput) ||
			errors.Is(err, graph.ErrNothingToResume) || errors.Is(err, graph.ErrNotSerializable) ||
			errors.Is(err, interrupt.ErrNotSerializable)
		if !typed {
			t.Fatalf("untyped error: %v", err)
		}
		after, _ := saver.List(ctx, "t", checkpoint.ListOptions{})
		if diff := cmp.Diff(before, after); diff != "" {
			t.Fatalf("a refused command changed the thread (-before +after):\n%s", diff)
		}
	})
}
