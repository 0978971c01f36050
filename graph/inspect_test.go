package graph_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/interrupt"
)

// checkpoint.Inspect reads stored data without the graph's code (the CLI
// relies on it); it must agree with GetState and History on every task ID,
// next list, interrupt and status.
func TestInspectAgreesWithSnapshots(t *testing.T) {
	ctx := context.Background()
	type scenario struct {
		name string
		run  func(r *graph.Runnable[State]) // drives thread "t"
		opts []graph.Option
	}
	fail := errors.New("boom")
	g := func() *graph.Graph[State] {
		return graph.New[State]().
			AddNode("a", logNode(nil, "a")).
			AddNode("ask", func(ctx context.Context, s State) (graph.Update[State], error) {
				v, err := interrupt.Ask[string](ctx, "q1")
				if err != nil {
					return graph.Update[State]{}, err
				}
				if _, err := interrupt.Ask[string](ctx, "q2"); err != nil {
					return graph.Update[State]{}, err
				}
				return graph.Set(State{Log: []string{"ask:" + v}}, "Log"), nil
			}).
			AddNode("sib", logNode(nil, "sib")).
			AddNode("bad", func(ctx context.Context, s State) (graph.Update[State], error) {
				if s.X == "fail" {
					return graph.Update[State]{}, fail
				}
				return graph.Set(State{Log: []string{"bad"}}, "Log"), nil
			}).
			AddNode("w", logNode(nil, "w")).
			AddEdge(graph.START, "a").AddEdge("a", "ask").AddEdge("a", "sib").AddEdge("a", "bad").
			AddJoin([]string{"sib", "bad"}, "w").
			AddSendEdges("w", func(ctx context.Context, s State) ([]graph.Send[State], error) {
				return []graph.Send[State]{{Node: "sib", Arg: State{X: "1"}}, {Node: "sib", Arg: State{X: "2"}}}, nil
			}, "sib")
	}
	scenarios := []scenario{
		{name: "waiting on first ask", run: func(r *graph.Runnable[State]) { r.Invoke(ctx, "t", graph.Update[State]{}) }},
		{name: "waiting on second ask", run: func(r *graph.Runnable[State]) {
			r.Invoke(ctx, "t", graph.Update[State]{})
			r.Resume(ctx, "t", graph.Command[State]{Resume: "yes"})
		}},
		{name: "done", run: func(r *graph.Runnable[State]) {
			r.Invoke(ctx, "t", graph.Update[State]{})
			r.Resume(ctx, "t", graph.Command[State]{Resume: "yes"})
			r.Resume(ctx, "t", graph.Command[State]{Resume: "yes"})
		}},
		{name: "failed", run: func(r *graph.Runnable[State]) { r.Invoke(ctx, "t", graph.Set(State{X: "fail"}, "X")) }},
		{name: "breakpoint", run: func(r *graph.Runnable[State]) { r.Invoke(ctx, "t", graph.Update[State]{}) },
			opts: []graph.Option{graph.WithInterruptBefore("a")}},
		{name: "resume with goto", run: func(r *graph.Runnable[State]) {
			r.Invoke(ctx, "t", graph.Update[State]{})
			r.Resume(ctx, "t", graph.Command[State]{Update: graph.Goto[State]("w")})
		}, opts: []graph.Option{graph.WithInterruptBefore("a")}},
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			saver := checkpoint.NewMemorySaver(nil)
			r := mustCompile(t, g(), append(sc.opts, graph.WithSaver(saver))...)
			sc.run(r)
			hist := history(t, r, "t")
			head, err := r.GetState(ctx, "t")
			if err != nil {
				t.Fatal(err)
			}
			for i, s := range append([]graph.Snapshot[State]{head}, hist...) {
				latest := i == 0
				tp, err := saver.Get(ctx, checkpoint.Ref{Thread: "t", ID: s.Config.CheckpointID}, checkpoint.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				in, err := checkpoint.Inspect(tp, latest)
				if err != nil {
					t.Fatal(err)
				}
				type view struct {
					Status     string
					Next       []string
					IDs        []string
					Interrupts []string
				}
				want := view{Status: string(s.Status), Next: s.Next}
				for _, tk := range s.Tasks {
					want.IDs = append(want.IDs, tk.ID)
				}
				for _, it := range s.Interrupts {
					want.Interrupts = append(want.Interrupts, it.ID)
				}
				got := view{Status: in.Status, Next: in.Next}
				for _, tk := range in.Tasks {
					got.IDs = append(got.IDs, tk.ID)
				}
				for _, it := range in.Interrupts {
					got.Interrupts = append(got.Interrupts, it.ID)
				}
				if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
					t.Errorf("checkpoint %d (latest %v, %s step %d): snapshot vs Inspect (-snapshot +inspect):\n%s",
						i, latest, s.Metadata.Source, s.Metadata.Step, diff)
				}
			}
		})
	}
}

// TestUncommittedHeadStatus: a head whose step's tasks all finished but
// whose step was not committed (their writes conflict, or the commit
// failed) reads pending in History and GetStateAt, as in GetState and
// checkpoint.Inspect: it is the thread's head, not a committed step seen
// in history, and Continue has work to do there.
func TestUncommittedHeadStatus(t *testing.T) {
	ctx := context.Background()
	write := func(field string, v int) graph.NodeFunc[State] {
		return func(ctx context.Context, s State) (graph.Update[State], error) {
			if field == "Count" {
				return graph.Set(State{Count: v}, "Count"), nil
			}
			return graph.Set(State{Log: []string{fmt.Sprint(v)}}, "Log"), nil
		}
	}
	tests := []struct {
		name  string
		field string // that both a and b write
		crash bool   // the process dies once the step's writes are saved, before its checkpoint
		// GetState's error; nil when it gives a snapshot
		wantGetStateErr error
	}{
		{name: "conflicting writes", field: "Count", wantGetStateErr: graph.ErrConflictingWrites},
		{name: "crash before the commit", field: "Log", crash: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			saver := &crashBeforeCommit{Saver: checkpoint.NewMemorySaver(nil), armed: tc.crash}
			g := graph.New[State]().AddNode("a", write(tc.field, 1)).AddNode("b", write(tc.field, 2)).
				AddEdge(graph.START, "a").AddEdge(graph.START, "b")
			r := mustCompile(t, g, graph.WithSaver(saver))
			if _, err := r.Invoke(ctx, "t", graph.Update[State]{}); err == nil {
				t.Fatal("Invoke succeeded, want the step to fail")
			}
			saver.armed = false
			want := graph.StatusPending
			head, err := r.GetState(ctx, "t")
			switch {
			case tc.wantGetStateErr != nil && !errors.Is(err, tc.wantGetStateErr):
				t.Fatalf("GetState: %v, want %v", err, tc.wantGetStateErr)
			case tc.wantGetStateErr == nil && err != nil:
				t.Fatalf("GetState: %v", err)
			case err == nil && head.Status != want:
				t.Errorf("GetState status = %s, want %s", head.Status, want)
			}
			tp, err := saver.Get(ctx, checkpoint.Ref{Thread: "t"}, checkpoint.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if tp.Checkpoint.Metadata.Step != 0 {
				t.Fatalf("head step = %d, want 0 (step 1 not committed)", tp.Checkpoint.Metadata.Step)
			}
			in, err := checkpoint.Inspect(tp, true)
			if err != nil || in.Status != string(want) {
				t.Errorf("Inspect status = %q (%v), want %q", in.Status, err, want)
			}
			hist := history(t, r, "t")
			at, err := r.GetStateAt(ctx, "t", tp.Checkpoint.ID)
			if err != nil {
				t.Fatal(err)
			}
			// Filtered, the head is still told apart from older checkpoints.
			loops, err := r.History(ctx, "t", graph.HistoryOptions{Filter: map[string]any{"source": "loop"}})
			if err != nil || len(loops) != 1 {
				t.Fatalf("History of loop checkpoints: %d, %v; want the head alone", len(loops), err)
			}
			inputs, err := r.History(ctx, "t", graph.HistoryOptions{Filter: map[string]any{"source": "input"}})
			if err != nil || len(inputs) != 1 {
				t.Fatalf("History of input checkpoints: %d, %v; want one", len(inputs), err)
			}
			type view struct {
				History, HistoryBefore, Filtered, FilteredOlder, GetStateAt graph.Status
			}
			got := view{History: hist[0].Status, HistoryBefore: hist[1].Status, Filtered: loops[0].Status,
				FilteredOlder: inputs[0].Status, GetStateAt: at.Status}
			wantView := view{History: want, HistoryBefore: graph.StatusDone, Filtered: want, FilteredOlder: graph.StatusDone, GetStateAt: want}
			if diff := cmp.Diff(wantView, got); diff != "" {
				t.Errorf("statuses (-want +got):\n%s", diff)
			}
		})
	}
}

// crashBeforeCommit, when armed, saves a loop checkpoint's parent writes
// as pending writes of its parent and then fails the Put without saving
// the checkpoint (the __start__ step passes): what a crash between saving
// a step's writes and committing the step leaves.
type crashBeforeCommit struct {
	checkpoint.Saver
	armed bool
}

func (s *crashBeforeCommit) Put(ctx context.Context, req checkpoint.PutRequest) error {
	if !s.armed || req.Checkpoint.Metadata.Source != checkpoint.SourceLoop || req.Checkpoint.Metadata.Step < 1 {
		return s.Saver.Put(ctx, req)
	}
	ref := checkpoint.Ref{Thread: req.Thread, NS: req.NS, ID: req.Checkpoint.ParentID}
	if err := s.Saver.PutWrites(ctx, checkpoint.WritesRequest{Ref: ref, Tasks: req.ParentWrites, Lease: req.Lease, Release: true}); err != nil {
		return err
	}
	return errInjected
}
