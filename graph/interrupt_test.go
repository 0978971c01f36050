package graph_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/interrupt"
	"github.com/lockstepgo/lockstep/retry"
)

// askNode pauses with question and writes the answer to Answer.
func askNode(c *counter, name, question string) graph.NodeFunc[State] {
	return func(ctx context.Context, s State) (graph.Update[State], error) {
		c.inc(name)
		ans, err := interrupt.Ask[string](ctx, question)
		if err != nil {
			return graph.Update[State]{}, err
		}
		return graph.Set(State{Answer: ans, Log: []string{name + ":" + ans}}, "Answer", "Log"), nil
	}
}

// The table of docs/semantics.md §4.4, on one graph shape: START → a → {x, sib}
// → b, where x does what the row says and sib always completes.
func TestStatusTable(t *testing.T) {
	type row struct {
		name       string
		x          func(c *counter) graph.NodeFunc[State]
		opts       []graph.RunOption
		wantErr    bool
		wantStatus graph.Status
		wantNext   []string
		wantIntr   int  // interrupts on x's task
		wantTaskX  bool // x is among the snapshot's tasks
	}
	rows := []row{
		{name: "interrupt", x: func(c *counter) graph.NodeFunc[State] { return askNode(c, "x", "ok?") },
			wantStatus: graph.StatusWaiting, wantNext: []string{"x"}, wantIntr: 1, wantTaskX: true},
		{name: "node interrupt", x: func(c *counter) graph.NodeFunc[State] {
			return func(ctx context.Context, s State) (graph.Update[State], error) {
				return graph.Update[State]{}, fmt.Errorf("wrapped: %w", &interrupt.NodeInterrupt{Value: map[string]string{"why": "check"}})
			}
		}, wantStatus: graph.StatusWaiting, wantNext: []string{"x"}, wantIntr: 1, wantTaskX: true},
		{name: "interrupt before", x: func(c *counter) graph.NodeFunc[State] { return logNode(c, "x") },
			opts: []graph.RunOption{graph.InterruptBefore("x")}, wantStatus: graph.StatusWaiting, wantNext: []string{"sib", "x"}, wantTaskX: true},
		{name: "interrupt after", x: func(c *counter) graph.NodeFunc[State] { return logNode(c, "x") },
			opts: []graph.RunOption{graph.InterruptAfter("x")}, wantStatus: graph.StatusWaiting, wantNext: []string{"b"}},
		{name: "exception", x: func(c *counter) graph.NodeFunc[State] {
			return func(ctx context.Context, s State) (graph.Update[State], error) {
				return graph.Update[State]{}, errors.New("card declined")
			}
		}, wantErr: true, wantStatus: graph.StatusFailed, wantNext: []string{"x"}, wantTaskX: true},
		{name: "done", x: func(c *counter) graph.NodeFunc[State] { return logNode(c, "x") },
			wantStatus: graph.StatusDone, wantNext: nil},
	}
	for _, saverName := range []string{"memory"} {
		for _, tc := range rows {
			t.Run(saverName+"/"+tc.name, func(t *testing.T) {
				ctx := context.Background()
				c := newCounter()
				g := graph.New[State]().
					AddNode("a", logNode(c, "a")).AddNode("x", tc.x(c)).AddNode("sib", logNode(c, "sib")).AddNode("b", logNode(c, "b")).
					AddEdge(graph.START, "a").AddEdge("a", "x").AddEdge("a", "sib").AddJoin([]string{"x", "sib"}, "b")
				r := mustCompile(t, g, graph.WithSaver(checkpoint.NewMemorySaver(nil)))
				res, err := r.Invoke(ctx, "t", graph.Update[State]{}, tc.opts...)
				if tc.wantErr != (err != nil) {
					t.Fatalf("Invoke error = %v, want error %v", err, tc.wantErr)
				}
				s, err := r.GetState(ctx, "t")
				if err != nil {
					t.Fatal(err)
				}
				if s.Status != tc.wantStatus {
					t.Errorf("status = %s, want %s", s.Status, tc.wantStatus)
				}
				if diff := cmp.Diff(tc.wantNext, s.Next, cmpopts.EquateEmpty()); diff != "" {
					t.Errorf("next (-want +got):\n%s", diff)
				}
				var xTask *graph.Task
				for i := range s.Tasks {
					switch s.Tasks[i].Name {
					case "x":
						xTask = &s.Tasks[i]
					case "sib":
						// A completed sibling has a result and no error.
						if tc.wantTaskX && s.Tasks[i].Result == nil && tc.name != "interrupt before" {
							t.Errorf("sibling has no result")
						}
					}
				}
				if tc.wantTaskX != (xTask != nil) {
					t.Fatalf("task x present = %v, want %v (tasks %+v)", xTask != nil, tc.wantTaskX, s.Tasks)
				}
				if xTask != nil {
					if len(xTask.Interrupts) != tc.wantIntr {
						t.Errorf("x interrupts = %d, want %d", len(xTask.Interrupts), tc.wantIntr)
					}
					if (xTask.Error != nil) != (tc.wantStatus == graph.StatusFailed) {
						t.Errorf("x error = %v", xTask.Error)
					}
				}
				if tc.wantStatus == graph.StatusWaiting && !tc.wantErr && res.Status != graph.StatusWaiting {
					t.Errorf("Invoke status = %s, want waiting", res.Status)
				}
				if len(s.Interrupts) != tc.wantIntr {
					t.Errorf("snapshot interrupts = %d, want %d", len(s.Interrupts), tc.wantIntr)
				}
			})
		}
	}
}

// D8: resume re-runs only the interrupted node; earlier nodes, finished
// siblings and durable steps do not run again.
func TestResumeWithoutReplay(t *testing.T) {
	ctx := context.Background()
	c := newCounter()
	ask := func(ctx context.Context, s State) (graph.Update[State], error) {
		c.inc("ask")
		charge, err := graph.Durable(ctx, "charge", func(ctx context.Context) (string, error) {
			c.inc("charge")
			return "ch_1", nil
		})
		if err != nil {
			return graph.Update[State]{}, err
		}
		ans, err := interrupt.Ask[string](ctx, "ship "+charge+"?")
		if err != nil {
			return graph.Update[State]{}, err
		}
		return graph.Set(State{Answer: ans, Log: []string{"ask:" + charge + ":" + ans}}, "Answer", "Log"), nil
	}
	g := graph.New[State]().
		AddNode("pre", logNode(c, "pre")).AddNode("ask", ask).AddNode("sib", logNode(c, "sib")).AddNode("post", logNode(c, "post")).
		AddEdge(graph.START, "pre").AddEdge("pre", "ask").AddEdge("pre", "sib").AddJoin([]string{"ask", "sib"}, "post")
	r := mustCompile(t, g, graph.WithSaver(checkpoint.NewMemorySaver(nil)))
	res, err := r.Invoke(ctx, "t", graph.Update[State]{})
	if err != nil || res.Status != graph.StatusWaiting {
		t.Fatalf("Invoke = %v, %v; want waiting", res.Status, err)
	}
	if want := []string{"pre", "sib"}; !slices.Equal(res.Values.Log, want) {
		t.Errorf("waiting values log = %v, want %v (sibling writes applied)", res.Values.Log, want)
	}
	// A resume without the answer pauses again; nothing else re-runs.
	if res, err = r.Continue(ctx, "t"); err != nil || res.Status != graph.StatusWaiting {
		t.Fatalf("Continue = %v, %v; want waiting again", res.Status, err)
	}
	res, err = r.Resume(ctx, "t", graph.Command[State]{Resume: "yes"})
	if err != nil || res.Status != graph.StatusDone {
		t.Fatalf("Resume = %v, %v; want done", res.Status, err)
	}
	if diff := cmp.Diff([]string{"pre", "ask:ch_1:yes", "sib", "post"}, res.Values.Log); diff != "" {
		t.Errorf("log (-want +got):\n%s", diff)
	}
	want := map[string]int{"pre": 1, "sib": 1, "post": 1, "charge": 1, "ask": 3}
	for name, n := range want {
		if got := c.get(name); got != n {
			t.Errorf("%s ran %d times, want %d", name, got, n)
		}
	}
	// The pause left no trace in the checkpoint chain (R16): the same
	// checkpoints as a run that never paused, the input, START's step and
	// one per superstep.
	hist, err := r.History(ctx, "t", graph.HistoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	type cp struct {
		Source string
		Step   int
	}
	var got []cp
	for _, h := range slices.Backward(hist) {
		got = append(got, cp{string(h.Metadata.Source), h.Metadata.Step})
	}
	wantChain := []cp{{"input", -1}, {"loop", 0}, {"loop", 1}, {"loop", 2}, {"loop", 3}}
	if diff := cmp.Diff(wantChain, got); diff != "" {
		t.Errorf("checkpoints, oldest first (-want +got):\n%s", diff)
	}
}

// Several Ask calls in one node are answered in order, one resume each.
func TestTwoInterruptsInOneNode(t *testing.T) {
	ctx := context.Background()
	c := newCounter()
	g := graph.New[State]().
		AddNode("form", func(ctx context.Context, s State) (graph.Update[State], error) {
			c.inc("form")
			name, err := interrupt.Ask[string](ctx, "name?")
			if err != nil {
				return graph.Update[State]{}, err
			}
			city, err := interrupt.Ask[string](ctx, "city?")
			if err != nil {
				return graph.Update[State]{}, err
			}
			return graph.Set(State{X: name, Y: city}, "X", "Y"), nil
		}).AddEdge(graph.START, "form")
	r := mustCompile(t, g, graph.WithSaver(checkpoint.NewMemorySaver(nil)))
	res, _ := r.Invoke(ctx, "t", graph.Update[State]{})
	first := res.Interrupts
	if len(first) != 1 || string(first[0].Value) != `"name?"` {
		t.Fatalf("first interrupts = %v", first)
	}
	res, err := r.Resume(ctx, "t", graph.Command[State]{Resume: "Ada"})
	if err != nil || len(res.Interrupts) != 1 || string(res.Interrupts[0].Value) != `"city?"` || res.Interrupts[0].ID == first[0].ID {
		t.Fatalf("second pause = %+v, %v; want a new interrupt asking city", res.Interrupts, err)
	}
	s, _ := r.GetState(ctx, "t")
	if s.Status != graph.StatusWaiting || !slices.Equal(s.Next, []string{"form"}) {
		t.Errorf("between answers: status %s next %v, want waiting [form]", s.Status, s.Next)
	}
	// The task keeps the question it asked and was answered; the snapshot
	// lists only the one still waiting.
	if len(s.Tasks) != 1 || len(s.Tasks[0].Interrupts) != 2 || s.Tasks[0].Interrupts[0].ID != first[0].ID ||
		string(s.Tasks[0].Interrupts[0].Value) != `"name?"` || string(s.Tasks[0].Answered[first[0].ID]) != `"Ada"` ||
		len(s.Interrupts) != 1 || s.Interrupts[0].ID != res.Interrupts[0].ID {
		t.Errorf("between answers: task %+v, snapshot interrupts %+v; want both questions on the task, the answer to the first, and only the second waiting", s.Tasks, s.Interrupts)
	}
	// Answering the first interrupt again is refused.
	_, err = r.Resume(ctx, "t", graph.Command[State]{ResumeByID: map[string]any{first[0].ID: "Bob"}})
	if !errors.Is(err, graph.ErrAlreadyAnswered) {
		t.Errorf("re-answer error = %v, want ErrAlreadyAnswered", err)
	}
	res, err = r.Resume(ctx, "t", graph.Command[State]{Resume: "Paris"})
	if err != nil || res.Values.X != "Ada" || res.Values.Y != "Paris" {
		t.Fatalf("final = %+v, %v", res.Values, err)
	}
	if c.get("form") != 3 {
		t.Errorf("form ran %d times, want 3", c.get("form"))
	}
}

// Parallel interrupted nodes are answered by ID, one at a time or together;
// a plain value is ambiguous.
func TestParallelInterrupts(t *testing.T) {
	// Parallel askers write only the append field: two writes to the
	// last-value Answer in one step would (rightly) conflict.
	logAsk := func(c *counter, name string) graph.NodeFunc[State] {
		return func(ctx context.Context, s State) (graph.Update[State], error) {
			c.inc(name)
			ans, err := interrupt.Ask[string](ctx, name+"?")
			if err != nil {
				return graph.Update[State]{}, err
			}
			return graph.Set(State{Log: []string{name + ":" + ans}}, "Log"), nil
		}
	}
	build := func(c *counter) *graph.Runnable[State] {
		g := graph.New[State]().
			AddNode("p", logAsk(c, "p")).AddNode("q", logAsk(c, "q")).AddNode("end", logNode(c, "end")).
			AddEdge(graph.START, "p").AddEdge(graph.START, "q").AddJoin([]string{"p", "q"}, "end")
		return mustCompile(t, g, graph.WithSaver(checkpoint.NewMemorySaver(nil)))
	}
	ids := func(t *testing.T, r *graph.Runnable[State]) map[string]string { // question → ID
		s, err := r.GetState(context.Background(), "t")
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, in := range s.Interrupts {
			var q string
			if err := in.Decode(&q); err != nil {
				t.Fatal(err)
			}
			out[q] = in.ID
		}
		return out
	}
	t.Run("ambiguous single value", func(t *testing.T) {
		r := build(newCounter())
		r.Invoke(context.Background(), "t", graph.Update[State]{})
		_, err := r.Resume(context.Background(), "t", graph.Command[State]{Resume: "x"})
		var re *graph.ResumeError
		if !errors.Is(err, graph.ErrAmbiguousResume) || !errors.As(err, &re) || len(re.Pending) != 2 {
			t.Fatalf("error = %v, want ErrAmbiguousResume listing 2 pending", err)
		}
	})
	t.Run("one at a time", func(t *testing.T) {
		ctx := context.Background()
		c := newCounter()
		r := build(c)
		r.Invoke(ctx, "t", graph.Update[State]{})
		m := ids(t, r)
		res, err := r.Resume(ctx, "t", graph.Command[State]{ResumeByID: map[string]any{m["p?"]: "P"}})
		if err != nil || res.Status != graph.StatusWaiting || len(res.Interrupts) != 1 || res.Interrupts[0].ID != m["q?"] {
			t.Fatalf("after first answer: %+v, %v", res, err)
		}
		res, err = r.Resume(ctx, "t", graph.Command[State]{Resume: "Q"}) // one pending now: plain value is fine
		if err != nil || res.Status != graph.StatusDone {
			t.Fatalf("after second answer: %v, %v", res.Status, err)
		}
		if diff := cmp.Diff([]string{"p:P", "q:Q", "end"}, res.Values.Log); diff != "" {
			t.Errorf("log (-want +got):\n%s", diff)
		}
		if c.get("p") != 2 || c.get("q") != 3 || c.get("end") != 1 {
			t.Errorf("runs p=%d q=%d end=%d, want 2 3 1", c.get("p"), c.get("q"), c.get("end"))
		}
	})
	t.Run("both at once", func(t *testing.T) {
		ctx := context.Background()
		c := newCounter()
		r := build(c)
		r.Invoke(ctx, "t", graph.Update[State]{})
		m := ids(t, r)
		res, err := r.Resume(ctx, "t", graph.Command[State]{ResumeByID: map[string]any{m["p?"]: "P", m["q?"]: "Q"}})
		if err != nil || res.Status != graph.StatusDone || !slices.Equal(res.Values.Log, []string{"p:P", "q:Q", "end"}) {
			t.Fatalf("Resume = %+v, %v", res, err)
		}
		if c.get("p") != 2 || c.get("q") != 2 {
			t.Errorf("runs p=%d q=%d, want 2 each", c.get("p"), c.get("q"))
		}
	})
	t.Run("unknown ID", func(t *testing.T) {
		r := build(newCounter())
		r.Invoke(context.Background(), "t", graph.Update[State]{})
		_, err := r.Resume(context.Background(), "t", graph.Command[State]{ResumeByID: map[string]any{"0123": "x"}})
		if !errors.Is(err, graph.ErrUnknownInterrupt) {
			t.Errorf("error = %v, want ErrUnknownInterrupt", err)
		}
	})
	t.Run("another thread's interrupt ID", func(t *testing.T) {
		// Interrupt IDs include the thread (through the task ID): an
		// answer meant for t2 cannot resume t, and nothing is written.
		ctx := context.Background()
		r := build(newCounter())
		r.Invoke(ctx, "t", graph.Update[State]{})
		r.Invoke(ctx, "t2", graph.Update[State]{})
		s2, err := r.GetState(ctx, "t2")
		if err != nil || len(s2.Interrupts) == 0 {
			t.Fatalf("t2: %v, %d interrupts", err, len(s2.Interrupts))
		}
		before, _ := r.History(ctx, "t", graph.HistoryOptions{})
		_, err = r.Resume(ctx, "t", graph.Command[State]{ResumeByID: map[string]any{s2.Interrupts[0].ID: "x"}})
		if !errors.Is(err, graph.ErrUnknownInterrupt) {
			t.Errorf("error = %v, want ErrUnknownInterrupt", err)
		}
		after, _ := r.History(ctx, "t", graph.HistoryOptions{})
		if len(after) != len(before) {
			t.Errorf("refused resume wrote checkpoints: %d, then %d", len(before), len(after))
		}
		if s, _ := r.GetState(ctx, "t"); s.Status != graph.StatusWaiting || len(s.Interrupts) != 2 {
			t.Errorf("t after the refused resume: %v with %d interrupts, want waiting with 2", s.Status, len(s.Interrupts))
		}
	})
}

// Resume and new input fail closed.
func TestResumeFailsClosed(t *testing.T) {
	ctx := context.Background()
	c := newCounter()
	g := graph.New[State]().AddNode("ask", askNode(c, "ask", "ok?")).AddEdge(graph.START, "ask")
	r := mustCompile(t, g, graph.WithSaver(checkpoint.NewMemorySaver(nil)))

	if _, err := r.Resume(ctx, "nobody", graph.Command[State]{Resume: "x"}); !errors.Is(err, graph.ErrThreadNotFound) {
		t.Errorf("resume unknown thread: %v, want ErrThreadNotFound", err)
	}
	r.Invoke(ctx, "t", graph.Update[State]{})
	if _, err := r.Invoke(ctx, "t", graph.Set(State{X: "new"}, "X")); !errors.Is(err, graph.ErrPendingInterrupt) {
		t.Errorf("new input to a waiting thread: %v, want ErrPendingInterrupt", err)
	}
	if _, err := r.Resume(ctx, "t", graph.Command[State]{Resume: "a", ResumeByID: map[string]any{"x": 1}}); !errors.Is(err, graph.ErrInvalidInput) {
		t.Errorf("both Resume and ResumeByID: %v, want ErrInvalidInput", err)
	}
	if _, err := r.Resume(ctx, "t", graph.Command[State]{Resume: "yes"}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Resume(ctx, "t", graph.Command[State]{Resume: "again"}); !errors.Is(err, graph.ErrNothingToResume) {
		t.Errorf("second resume: %v, want ErrNothingToResume", err)
	}
	// DiscardPending lets new input replace a waiting interrupt.
	r.Invoke(ctx, "t2", graph.Update[State]{})
	res, err := r.Invoke(ctx, "t2", graph.Set(State{X: "new"}, "X"), graph.DiscardPending())
	if err != nil || res.Status != graph.StatusWaiting || res.Values.X != "new" {
		t.Errorf("discarding invoke = %+v, %v", res, err)
	}
}

// TestResumeRefusesNodeInterruptAnswer: a NodeInterrupt takes no answer.
// Answering it (one value or by ID) is refused with ErrNotAnswerable, and a
// Command that answers nothing and changes nothing with ErrInvalidInput;
// both leave the thread waiting as it was. Updating the state through the
// Command resumes it.
func TestResumeRefusesNodeInterruptAnswer(t *testing.T) {
	ctx := context.Background()
	c := newCounter()
	g := graph.New[State]().AddNode("hold", func(ctx context.Context, s State) (graph.Update[State], error) {
		c.inc("hold")
		if s.X != "cleared" {
			return graph.Update[State]{}, &interrupt.NodeInterrupt{Value: "held for review"}
		}
		return graph.Set(State{Answer: "done"}, "Answer"), nil
	}).AddEdge(graph.START, "hold")
	r := mustCompile(t, g, graph.WithSaver(checkpoint.NewMemorySaver(nil)))
	res, err := r.Invoke(ctx, "t", graph.Update[State]{})
	if err != nil || res.Status != graph.StatusWaiting || len(res.Interrupts) != 1 {
		t.Fatalf("Invoke = %+v, %v", res, err)
	}
	id := res.Interrupts[0].ID
	before, _ := r.GetState(ctx, "t")
	for _, tc := range []struct {
		name string
		cmd  graph.Command[State]
		want error
	}{
		{"one value", graph.Command[State]{Resume: "ok"}, graph.ErrNotAnswerable},
		{"by ID", graph.Command[State]{ResumeByID: map[string]any{id: "ok"}}, graph.ErrNotAnswerable},
		{"empty", graph.Command[State]{}, graph.ErrInvalidInput},
	} {
		_, err := r.Resume(ctx, "t", tc.cmd)
		var re *graph.ResumeError
		if !errors.Is(err, tc.want) || tc.want == graph.ErrNotAnswerable && (!errors.As(err, &re) || re.InterruptID != id || re.Thread != "t") {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
		after, _ := r.GetState(ctx, "t")
		if after.Status != graph.StatusWaiting || after.Config.CheckpointID != before.Config.CheckpointID || len(after.Interrupts) != 1 {
			t.Errorf("%s: the thread is %s at %s with %d interrupts, want it waiting as it was", tc.name, after.Status, after.Config.CheckpointID, len(after.Interrupts))
		}
	}
	if c.get("hold") != 1 {
		t.Errorf("the node ran %d times, want once", c.get("hold"))
	}
	res, err = r.Resume(ctx, "t", graph.Command[State]{Update: graph.Set(State{X: "cleared"}, "X")})
	if err != nil || res.Status != graph.StatusDone || res.Values.Answer != "done" {
		t.Errorf("resume with an update: %+v, %v", res, err)
	}
}

// TestRefusedAnswerCanBeCorrected: an answer the node cannot decode (a
// string for an Ask[int]) fails the resume with the *interrupt.AnswerError,
// and is taken back: the interrupt waits again, the same question, and a
// resume with an answer of the right type completes the run.
func TestRefusedAnswerCanBeCorrected(t *testing.T) {
	ctx := context.Background()
	c := newCounter()
	g := graph.New[State]().AddNode("qty", func(ctx context.Context, s State) (graph.Update[State], error) {
		c.inc("qty")
		n, err := interrupt.Ask[int](ctx, "how many?")
		if err != nil {
			return graph.Update[State]{}, err
		}
		return graph.Set(State{X: fmt.Sprint(n)}, "X"), nil
	}).AddEdge(graph.START, "qty")
	r := mustCompile(t, g, graph.WithSaver(checkpoint.NewMemorySaver(nil)))
	res, err := r.Invoke(ctx, "t", graph.Update[State]{})
	if err != nil || len(res.Interrupts) != 1 {
		t.Fatalf("Invoke = %+v, %v", res, err)
	}
	id := res.Interrupts[0].ID
	_, err = r.Resume(ctx, "t", graph.Command[State]{Resume: "lots"})
	var ae *interrupt.AnswerError
	var ne *graph.NodeError
	if !errors.As(err, &ae) || ae.ID != id || !errors.As(err, &ne) || ne.Node != "qty" {
		t.Fatalf("wrong-type answer: %v, want a *NodeError around the *interrupt.AnswerError", err)
	}
	s, _ := r.GetState(ctx, "t")
	if s.Status != graph.StatusWaiting || len(s.Interrupts) != 1 || s.Interrupts[0].ID != id || len(s.Tasks) != 1 || len(s.Tasks[0].Answered) != 0 {
		t.Fatalf("after the refused answer: status %s, interrupts %+v, tasks %+v; want the question waiting again", s.Status, s.Interrupts, s.Tasks)
	}
	res, err = r.Resume(ctx, "t", graph.Command[State]{Resume: 3})
	if err != nil || res.Status != graph.StatusDone || res.Values.X != "3" || c.get("qty") != 3 {
		t.Errorf("corrected answer: %+v, %v, node ran %d times", res, err, c.get("qty"))
	}
}

// TestUpdateStateKeepsFinishedSiblings (docs/semantics.md §6, LangGraph's
// bulk_update_state on the head): a sibling that finished in the step an
// interrupt stopped keeps its writes when a reviewer updates the state as
// the interrupted node: they are applied before the update, and the
// sibling does not run again.
func TestUpdateStateKeepsFinishedSiblings(t *testing.T) {
	ctx := context.Background()
	c := newCounter()
	g := graph.New[State]().
		AddNode("ask", askNode(c, "ask", "go on?")).
		AddNode("sib", func(ctx context.Context, s State) (graph.Update[State], error) {
			c.inc("sib")
			return graph.Set(State{Count: 7, Log: []string{"sib"}}, "Count", "Log"), nil
		}).
		AddNode("next", logNode(c, "next")).
		AddEdge(graph.START, "ask").AddEdge(graph.START, "sib").AddEdge("ask", "next")
	r := mustCompile(t, g, graph.WithSaver(checkpoint.NewMemorySaver(nil)))
	if res, err := r.Invoke(ctx, "t", graph.Update[State]{}); err != nil || res.Status != graph.StatusWaiting {
		t.Fatalf("Invoke = %+v, %v", res, err)
	}
	if _, err := r.UpdateState(ctx, "t", graph.Set(State{Log: []string{"manual"}}, "Log"), graph.UpdateOptions{AsNode: "ask"}); err != nil {
		t.Fatal(err)
	}
	s, _ := r.GetState(ctx, "t")
	if s.Values.Count != 7 || !slices.Equal(s.Values.Log, []string{"sib", "manual"}) || !slices.Equal(s.Next, []string{"next"}) {
		t.Errorf("after the update: values %+v, next %v; want the sibling's writes, then the update, and next", s.Values, s.Next)
	}
	res, err := r.Continue(ctx, "t")
	if err != nil || res.Status != graph.StatusDone || !slices.Equal(res.Values.Log, []string{"sib", "manual", "next"}) || c.get("sib") != 1 {
		t.Errorf("Continue = %+v, %v, sib ran %d times", res.Values, err, c.get("sib"))
	}
}

// Two resumes of one interrupt at once: exactly one runs the node.
func TestConcurrentResume(t *testing.T) {
	ctx := context.Background()
	c := newCounter()
	release := make(chan struct{})
	g := graph.New[State]().
		AddNode("ask", func(ctx context.Context, s State) (graph.Update[State], error) {
			ans, err := interrupt.Ask[string](ctx, "ok?")
			if err != nil {
				return graph.Update[State]{}, err
			}
			c.inc("effect")
			<-release
			return graph.Set(State{Answer: ans}, "Answer"), nil
		}).AddEdge(graph.START, "ask")
	r := mustCompile(t, g, graph.WithSaver(checkpoint.NewMemorySaver(nil)))
	r.Invoke(ctx, "t", graph.Update[State]{})
	const n = 8
	results := make(chan error, n)
	var wg sync.WaitGroup
	var winner atomic.Int64
	winner.Store(-1)
	for i := range n {
		wg.Go(func() {
			_, err := r.Resume(ctx, "t", graph.Command[State]{Resume: fmt.Sprint(i)})
			if err == nil {
				winner.Store(int64(i))
			}
			results <- err
		})
	}
	// The winner blocks in the node until released, so the n-1 losers must
	// all have been turned away while it still holds the thread.
	var errs []error
	for range n - 1 {
		errs = append(errs, <-results)
	}
	close(release)
	wg.Wait()
	errs = append(errs, <-results)
	wins := 0
	for _, err := range errs {
		switch {
		case err == nil:
			wins++
		case errors.Is(err, checkpoint.ErrThreadBusy), errors.Is(err, checkpoint.ErrConflict), errors.Is(err, graph.ErrNothingToResume):
		default:
			t.Errorf("loser error = %v, want busy, conflict or nothing to resume", err)
		}
	}
	if wins != 1 || c.get("effect") != 1 {
		t.Errorf("wins = %d, effects = %d; want 1 and 1", wins, c.get("effect"))
	}
	// The state holds the winner's answer, not a loser's (R18).
	s, err := r.GetState(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprint(winner.Load()); s.Values.Answer != want {
		t.Errorf("answer = %q, want the winner's %q", s.Values.Answer, want)
	}
}

// A node that swallows the pause from Ask is still paused.
func TestSwallowedInterruptStillPauses(t *testing.T) {
	g := graph.New[State]().
		AddNode("sloppy", func(ctx context.Context, s State) (graph.Update[State], error) {
			_, _ = interrupt.Ask[string](ctx, "ok?") // error ignored
			return graph.Set(State{X: "ran on"}, "X"), nil
		}).AddEdge(graph.START, "sloppy")
	r := mustCompile(t, g, graph.WithSaver(checkpoint.NewMemorySaver(nil)))
	res, err := r.Invoke(context.Background(), "t", graph.Update[State]{})
	if err != nil || res.Status != graph.StatusWaiting || res.Values.X != "" {
		t.Errorf("Invoke = %+v, %v; want waiting without the node's write", res, err)
	}
}

// A retry policy never retries a pause.
func TestRetryNeverRetriesInterrupt(t *testing.T) {
	c := newCounter()
	g := graph.New[State]().
		AddNode("ask", askNode(c, "ask", "ok?"), graph.WithRetry(retry.Policy{MaxAttempts: 5})).
		AddNode("flaky", func(ctx context.Context, s State) (graph.Update[State], error) {
			c.inc("flaky")
			if c.get("flaky") < 3 {
				return graph.Update[State]{}, errors.New("transient")
			}
			return graph.Set(State{X: "ok"}, "X"), nil
		}, graph.WithRetry(retry.Policy{MaxAttempts: 5})).
		AddEdge(graph.START, "ask").AddEdge(graph.START, "flaky")
	r := mustCompile(t, g, graph.WithSaver(checkpoint.NewMemorySaver(nil)))
	res, err := r.Invoke(context.Background(), "t", graph.Update[State]{})
	if err != nil || res.Status != graph.StatusWaiting {
		t.Fatalf("Invoke = %v, %v", res.Status, err)
	}
	if c.get("ask") != 1 || c.get("flaky") != 3 {
		t.Errorf("ask ran %d times (want 1), flaky %d (want 3)", c.get("ask"), c.get("flaky"))
	}
}

// docs/semantics.md §4.3: static breakpoints, at compile time and per run, pass
// once on resume and fire again only after new updates.
func TestBreakpoints(t *testing.T) {
	ctx := context.Background()
	c := newCounter()
	g := graph.New[State]().
		AddNode("a", logNode(c, "a")).AddNode("b", logNode(c, "b")).AddNode("c", logNode(c, "c")).
		AddEdge(graph.START, "a").AddEdge("a", "b").AddEdge("b", "c")
	r := mustCompile(t, g, graph.WithSaver(checkpoint.NewMemorySaver(nil)), graph.WithInterruptBefore("b"))
	res, err := r.Invoke(ctx, "t", graph.Update[State]{})
	if err != nil || res.Status != graph.StatusWaiting || !slices.Equal(res.Next, []string{"b"}) || len(res.Interrupts) != 0 {
		t.Fatalf("before b: %+v, %v", res, err)
	}
	s, _ := r.GetState(ctx, "t")
	if s.Status != graph.StatusWaiting || s.Breakpoint == nil || s.Breakpoint.When != "before" {
		t.Errorf("snapshot at breakpoint: status %s breakpoint %+v", s.Status, s.Breakpoint)
	}
	res, err = r.Continue(ctx, "t", graph.InterruptAfter("*"))
	if err != nil || res.Status != graph.StatusWaiting || !slices.Equal(res.Next, []string{"c"}) {
		t.Fatalf("after b (per run '*'): %+v, %v", res, err)
	}
	res, err = r.Continue(ctx, "t")
	if err != nil || res.Status != graph.StatusDone || c.get("b") != 1 || c.get("c") != 1 {
		t.Fatalf("finish: %v, %v (b %d, c %d)", res.Status, err, c.get("b"), c.get("c"))
	}
	// Resume with an update but no answer passes a breakpoint too.
	r.Invoke(ctx, "t2", graph.Update[State]{})
	res, err = r.Resume(ctx, "t2", graph.Command[State]{Update: graph.Set(State{X: "reviewed"}, "X")})
	if err != nil || res.Status != graph.StatusDone || res.Values.X != "reviewed" {
		t.Errorf("resume past breakpoint: %+v, %v", res, err)
	}
}

// The hotel-booking pattern: a compliance node raises NodeInterrupt on a
// request that looks like SQL injection; the thread waits (not failed); a
// reviewer corrects the state; the run continues and books once.
func TestNodeInterruptReviewAndContinue(t *testing.T) {
	ctx := context.Background()
	c := newCounter()
	g := graph.New[State]().
		AddNode("parse", func(ctx context.Context, s State) (graph.Update[State], error) {
			return graph.Set(State{Y: strings.TrimSpace(s.X)}, "Y"), nil
		}).
		AddNode("compliance", func(ctx context.Context, s State) (graph.Update[State], error) {
			if strings.Contains(strings.ToLower(s.Y), "drop table") || strings.Contains(s.Y, "';") {
				return graph.Update[State]{}, &interrupt.NodeInterrupt{Value: map[string]string{"reason": "request looks like SQL injection", "request": s.Y}}
			}
			return graph.Update[State]{}, nil
		}).
		AddNode("book", func(ctx context.Context, s State) (graph.Update[State], error) {
			c.inc("book")
			return graph.Set(State{Answer: "booked " + s.Y}, "Answer"), nil
		}).
		AddEdge(graph.START, "parse").AddEdge("parse", "compliance").AddEdge("compliance", "book")
	r := mustCompile(t, g, graph.WithSaver(checkpoint.NewMemorySaver(nil)))
	res, err := r.Invoke(ctx, "t", graph.Set(State{X: "Hotel Ritz'; DROP TABLE bookings;--"}, "X"))
	if err != nil || res.Status != graph.StatusWaiting {
		t.Fatalf("Invoke = %v, %v", res.Status, err)
	}
	s, _ := r.GetState(ctx, "t")
	if s.Status != graph.StatusWaiting || !slices.Equal(s.Next, []string{"compliance"}) || len(s.Tasks) != 1 || len(s.Tasks[0].Interrupts) != 1 || s.Tasks[0].Error != nil {
		t.Fatalf("snapshot = %+v", s)
	}
	var why map[string]string
	if err := s.Interrupts[0].Decode(&why); err != nil || why["reason"] != "request looks like SQL injection" {
		t.Errorf("interrupt value = %v, %v", why, err)
	}
	// The reviewer corrects the request as the parse node would have.
	if _, err := r.UpdateState(ctx, "t", graph.Set(State{Y: "Hotel Ritz"}, "Y"), graph.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	res, err = r.Continue(ctx, "t")
	if err != nil || res.Status != graph.StatusDone || res.Values.Answer != "booked Hotel Ritz" || c.get("book") != 1 {
		t.Fatalf("after review: %+v, %v, booked %d times", res, err, c.get("book"))
	}
	if _, err := r.Continue(ctx, "t"); err != nil || c.get("book") != 1 {
		t.Errorf("a second Continue re-ran something: %v, booked %d", err, c.get("book"))
	}
}

// docs/semantics.md §6: update as a node, replay and fork keep old history, and
// interrupts fire again with new IDs on a fork.
func TestUpdateReplayFork(t *testing.T) {
	ctx := context.Background()
	c := newCounter()
	g := graph.New[State]().
		AddNode("a", logNode(c, "a")).AddNode("ask", askNode(c, "ask", "ok?")).AddNode("b", logNode(c, "b")).
		AddEdge(graph.START, "a").AddEdge("a", "ask").AddEdge("ask", "b")
	r := mustCompile(t, g, graph.WithSaver(checkpoint.NewMemorySaver(nil)))
	res, _ := r.Invoke(ctx, "t", graph.Update[State]{})
	firstID := res.Interrupts[0].ID
	r.Resume(ctx, "t", graph.Command[State]{Resume: "yes"})
	before := history(t, r, "t")
	if len(before) != 5 {
		t.Fatalf("history has %d checkpoints, want 5", len(before))
	}
	// Replay from the checkpoint before ask: a fork, ask pauses again with a
	// new ID, and the old branch is kept.
	var atAsk graph.Snapshot[State]
	for _, s := range before {
		if slices.Equal(s.Next, []string{"ask"}) {
			atAsk = s
		}
	}
	res, err := r.Replay(ctx, "t", atAsk.Config.CheckpointID)
	if err != nil || res.Status != graph.StatusWaiting || len(res.Interrupts) != 1 || res.Interrupts[0].ID == firstID {
		t.Fatalf("replay = %+v, %v; want a new interrupt", res, err)
	}
	after := history(t, r, "t")
	if len(after) != len(before)+1 || after[0].Metadata.Source != checkpoint.SourceFork || after[0].ParentConfig.CheckpointID != atAsk.Config.CheckpointID {
		t.Errorf("after replay: %d checkpoints, head %+v", len(after), after[0].Metadata)
	}
	if c.get("a") != 1 {
		t.Errorf("a re-ran on replay (%d)", c.get("a"))
	}
	// Update as node a on the fork: the update goes through a's edges.
	cfg, err := r.UpdateState(ctx, "t", graph.Set(State{X: "edited"}, "X"), graph.UpdateOptions{AsNode: "a"})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := r.GetState(ctx, "t")
	if s.Config != cfg || s.Metadata.Source != checkpoint.SourceUpdate || !slices.Equal(s.Next, []string{"ask"}) || s.Values.X != "edited" {
		t.Errorf("after update: %+v", s)
	}
	// Update of an old checkpoint starts a branch that becomes the head.
	old := before[len(before)-2] // loop step 0
	cfg, err = r.UpdateState(ctx, "t", graph.Set(State{X: "branch"}, "X"), graph.UpdateOptions{AsNode: graph.START, CheckpointID: old.Config.CheckpointID})
	if err != nil {
		t.Fatal(err)
	}
	s, _ = r.GetState(ctx, "t")
	if s.Config != cfg || s.ParentConfig.CheckpointID != old.Config.CheckpointID || s.Values.X != "branch" {
		t.Errorf("branch head = %+v", s)
	}
	if _, err := r.UpdateState(ctx, "t", graph.Update[State]{}, graph.UpdateOptions{AsNode: "nosuch"}); !errors.Is(err, graph.ErrUnknownNode) {
		t.Errorf("unknown AsNode: %v, want ErrUnknownNode", err)
	}
}

// Command{Update, Goto} on resume runs the goto target beside the resumed
// node.
func TestResumeWithUpdateAndGoto(t *testing.T) {
	ctx := context.Background()
	c := newCounter()
	g := graph.New[State]().
		AddNode("ask", askNode(c, "ask", "ok?")).AddNode("audit", logNode(c, "audit")).
		AddEdge(graph.START, "ask")
	r := mustCompile(t, g, graph.WithSaver(checkpoint.NewMemorySaver(nil)))
	r.Invoke(ctx, "t", graph.Update[State]{})
	res, err := r.Resume(ctx, "t", graph.Command[State]{Resume: "yes", Update: graph.Set(State{X: "note"}, "X").Goto("audit")})
	if err != nil || res.Status != graph.StatusDone {
		t.Fatalf("Resume = %v, %v", res.Status, err)
	}
	if diff := cmp.Diff([]string{"ask:yes", "audit"}, res.Values.Log); diff != "" || res.Values.X != "note" {
		t.Errorf("log (-want +got):\n%s; X=%q", diff, res.Values.X)
	}
}

// AskKey lets one node raise several interrupts at once, from several
// goroutines; each is answered by ID and the node completes when all are.
func TestAskKeyRaisesSeveral(t *testing.T) {
	ctx := context.Background()
	c := newCounter()
	g := graph.New[State]().
		AddNode("review", func(ctx context.Context, s State) (graph.Update[State], error) {
			c.inc("review")
			keys := []string{"refund", "email", "close"}
			answers := make([]string, len(keys))
			errs := make([]error, len(keys))
			var wg sync.WaitGroup
			for i, k := range keys {
				wg.Go(func() { answers[i], errs[i] = interrupt.AskKey[string](ctx, k, "ok to "+k+"?") })
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				return graph.Update[State]{}, err
			}
			return graph.Set(State{Log: answers}, "Log"), nil
		}).AddEdge(graph.START, "review")
	r := mustCompile(t, g, graph.WithSaver(checkpoint.NewMemorySaver(nil)))
	res, err := r.Invoke(ctx, "t", graph.Update[State]{})
	if err != nil || res.Status != graph.StatusWaiting || len(res.Interrupts) != 3 {
		t.Fatalf("Invoke = %v %d interrupts, %v; want waiting with 3", res.Status, len(res.Interrupts), err)
	}
	byQ := map[string]string{}
	for _, in := range res.Interrupts {
		var q string
		in.Decode(&q)
		byQ[q] = in.ID
	}
	// Answer two; the node pauses again on the third only.
	res, err = r.Resume(ctx, "t", graph.Command[State]{ResumeByID: map[string]any{byQ["ok to refund?"]: "R", byQ["ok to close?"]: "C"}})
	if err != nil || res.Status != graph.StatusWaiting || len(res.Interrupts) != 1 || res.Interrupts[0].ID != byQ["ok to email?"] {
		t.Fatalf("after two answers: %+v, %v", res.Interrupts, err)
	}
	res, err = r.Resume(ctx, "t", graph.Command[State]{Resume: "E"})
	if err != nil || res.Status != graph.StatusDone {
		t.Fatalf("final: %v, %v", res.Status, err)
	}
	if diff := cmp.Diff([]string{"R", "E", "C"}, res.Values.Log); diff != "" {
		t.Errorf("answers (-want +got):\n%s", diff)
	}
	if c.get("review") != 3 {
		t.Errorf("review ran %d times, want 3", c.get("review"))
	}
}

// A run holds its thread for as long as it works, even past the lease TTL:
// the heartbeat renews the lease, so a second runner is refused throughout
// and the lease is released at the end. It runs on synctest's clock: on a
// loaded machine a heartbeat scheduled late let a try take the expired
// lease, run the blocked node again and hang the test.
func TestHeartbeatKeepsLongRunsThread(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		const ttl = 120 * time.Millisecond
		release := make(chan struct{})
		g := graph.New[State]().
			AddNode("slow", func(ctx context.Context, s State) (graph.Update[State], error) {
				select {
				case <-release:
					return graph.Set(State{X: "done"}, "X"), nil
				case <-ctx.Done(): // a try that took the thread, given up
					return graph.Update[State]{}, ctx.Err()
				}
			}).
			AddNode("after", logNode(nil, "after")).
			AddEdge(graph.START, "slow").AddEdge("slow", "after")
		saver := checkpoint.NewMemorySaver(nil)
		r := mustCompile(t, g, graph.WithSaver(saver), graph.WithLeaseTTL(ttl))
		other := mustCompile(t, g, graph.WithSaver(saver), graph.WithLeaseTTL(ttl))
		done := make(chan error, 1)
		go func() {
			_, err := r.Invoke(ctx, "t", graph.Update[State]{})
			done <- err
		}()
		synctest.Wait() // the run holds the thread, its node blocked
		// Try to take the thread over, from this runner and another, for
		// several TTLs.
		for tries := range 16 {
			for _, rr := range []*graph.Runnable[State]{r, other} {
				tctx, cancel := context.WithTimeout(ctx, ttl)
				_, err := rr.Continue(tctx, "t")
				cancel()
				if !errors.Is(err, checkpoint.ErrThreadBusy) {
					close(release)
					<-done
					t.Fatalf("try %d: Continue = %v, want ErrThreadBusy while the run works", tries, err)
				}
			}
			time.Sleep(ttl / 4)
		}
		close(release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if _, err := other.Continue(ctx, "t"); err != nil {
			t.Errorf("after the run: Continue = %v, want the lease released", err)
		}
	})
}

// A thread saved by a graph that had node "ask" waits there; the deployed
// graph no longer has it. Reads and runs fail closed with an
// *UnknownNodeError naming the node, writing nothing; UpdateState or new
// input with DiscardPending move the thread on.
func TestNextNamesRemovedNode(t *testing.T) {
	ctx := context.Background()
	saver := checkpoint.NewMemorySaver(nil)
	a := func(ctx context.Context, s State) (graph.Update[State], error) {
		return graph.Set(State{Log: []string{"a"}}, "Log"), nil
	}
	v1 := mustCompile(t, graph.New[State]().AddNode("a", a).
		AddNode("ask", func(ctx context.Context, s State) (graph.Update[State], error) {
			ans, err := interrupt.Ask[string](ctx, "name?")
			return graph.Set(State{Answer: ans}, "Answer"), err
		}).AddEdge(graph.START, "a").AddEdge("a", "ask"), graph.WithSaver(saver))
	v2 := mustCompile(t, graph.New[State]().AddNode("a", a).AddEdge(graph.START, "a"), graph.WithSaver(saver))
	for _, th := range []string{"update", "discard"} {
		if res, err := v1.Invoke(ctx, th, graph.Update[State]{}); err != nil || res.Status != graph.StatusWaiting {
			t.Fatalf("v1 invoke %s = %v, %v", th, res.Status, err)
		}
	}
	before, err := saver.List(ctx, "update", checkpoint.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]func() error{
		"GetState": func() error { _, err := v2.GetState(ctx, "update"); return err },
		"Continue": func() error { _, err := v2.Continue(ctx, "update"); return err },
		"Resume":   func() error { _, err := v2.Resume(ctx, "update", graph.Command[State]{Resume: "x"}); return err },
		"Invoke":   func() error { _, err := v2.Invoke(ctx, "update", graph.Update[State]{}); return err },
	}
	for name, call := range calls {
		var une *graph.UnknownNodeError
		if err := call(); !errors.As(err, &une) || une.Name != "ask" || !errors.Is(err, graph.ErrUnknownNode) {
			t.Errorf("%s: %v, want an *UnknownNodeError naming ask", name, err)
		}
	}
	after, err := saver.List(ctx, "update", checkpoint.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != len(before) {
		t.Errorf("refused calls wrote checkpoints: %d, then %d", len(before), len(after))
	}

	if _, err := v2.UpdateState(ctx, "update", graph.Set(State{Answer: "by hand"}, "Answer"), graph.UpdateOptions{AsNode: "a"}); err != nil {
		t.Fatalf("UpdateState: %v", err)
	}
	s, err := v2.GetState(ctx, "update")
	if err != nil {
		t.Fatalf("GetState after the update: %v", err)
	}
	if s.Status != graph.StatusDone || len(s.Next) != 0 || s.Values.Answer != "by hand" {
		t.Errorf("after the update: status %v, next %v, answer %q", s.Status, s.Next, s.Values.Answer)
	}

	res, err := v2.Invoke(ctx, "discard", graph.Update[State]{}, graph.DiscardPending())
	if err != nil || res.Status != graph.StatusDone {
		t.Fatalf("Invoke with DiscardPending = %v, %v", res.Status, err)
	}
	if diff := cmp.Diff([]string{"a", "a"}, res.Values.Log); diff != "" {
		t.Errorf("log (-want +got):\n%s", diff)
	}
}

// A Runnable whose cached head is stale (another Runnable moved the thread
// on) claims, is refused, and falls back to reading the head first: it
// resumes from the newest checkpoint, never the cached one.
func TestClaimWithStaleCachedHead(t *testing.T) {
	ctx := context.Background()
	saver := checkpoint.NewMemorySaver(nil)
	build := func() *graph.Runnable[State] {
		return mustCompile(t, graph.New[State]().
			AddNode("ask", func(ctx context.Context, s State) (graph.Update[State], error) {
				ans, err := interrupt.Ask[string](ctx, "name?")
				return graph.Set(State{Answer: ans + "/" + s.X}, "Answer"), err
			}).AddEdge(graph.START, "ask"), graph.WithSaver(saver))
	}
	r1, r2 := build(), build()
	if res, err := r1.Invoke(ctx, "t", graph.Update[State]{}); err != nil || res.Status != graph.StatusWaiting {
		t.Fatalf("invoke = %v, %v", res.Status, err)
	}
	if res, err := r2.Resume(ctx, "t", graph.Command[State]{Resume: "bob"}); err != nil || res.Status != graph.StatusDone {
		t.Fatalf("resume by the other runnable = %v, %v", res.Status, err)
	}
	// r1 still caches the waiting checkpoint as the head.
	res, err := r1.Invoke(ctx, "t", graph.Set(State{X: "2"}, "X"))
	if err != nil || res.Status != graph.StatusWaiting || res.Values.Answer != "bob/" {
		t.Fatalf("invoke through the stale cache = %v, %+v, %v; want waiting with bob's answer kept", res.Status, res.Values, err)
	}
	res, err = r1.Resume(ctx, "t", graph.Command[State]{Resume: "carl"})
	if err != nil || res.Status != graph.StatusDone || res.Values.Answer != "carl/2" {
		t.Fatalf("resume = %v, %+v, %v", res.Status, res.Values, err)
	}
}

// A node that asks three times in a loop, with a side-effecting durable
// call before each ask (R19): three resumes finish it, each call runs
// once, the answers come back in order, and a fourth resume has nothing
// to answer.
func TestAskInALoop(t *testing.T) {
	ctx := context.Background()
	c := newCounter()
	g := graph.New[State]().
		AddNode("loop", func(ctx context.Context, s State) (graph.Update[State], error) {
			var answers []string
			for i := range 3 {
				if _, err := graph.Durable(ctx, fmt.Sprint("call", i), func(ctx context.Context) (int, error) {
					c.inc(fmt.Sprint("call", i))
					return i, nil
				}); err != nil {
					return graph.Update[State]{}, err
				}
				ans, err := interrupt.Ask[string](ctx, fmt.Sprint("question ", i))
				if err != nil {
					return graph.Update[State]{}, err
				}
				answers = append(answers, ans)
			}
			return graph.Set(State{Log: answers}, "Log"), nil
		}).AddEdge(graph.START, "loop")
	r := mustCompile(t, g, graph.WithSaver(checkpoint.NewMemorySaver(nil)))
	res, err := r.Invoke(ctx, "t", graph.Update[State]{})
	if err != nil || res.Status != graph.StatusWaiting {
		t.Fatalf("Invoke = %v, %v", res.Status, err)
	}
	for i, ans := range []string{"a", "b", "c"} {
		var q string
		if len(res.Interrupts) != 1 || res.Interrupts[0].Decode(&q) != nil || q != fmt.Sprint("question ", i) {
			t.Fatalf("before answer %d: interrupts %+v, want question %d", i, res.Interrupts, i)
		}
		if res, err = r.Resume(ctx, "t", graph.Command[State]{Resume: ans}); err != nil {
			t.Fatalf("Resume %d: %v", i, err)
		}
		want := graph.StatusWaiting
		if i == 2 {
			want = graph.StatusDone
		}
		if res.Status != want {
			t.Fatalf("after answer %d: %v, want %v", i, res.Status, want)
		}
	}
	if diff := cmp.Diff([]string{"a", "b", "c"}, res.Values.Log); diff != "" {
		t.Errorf("answers (-want +got):\n%s", diff)
	}
	for i := range 3 {
		if n := c.get(fmt.Sprint("call", i)); n != 1 {
			t.Errorf("call%d ran %d times, want 1", i, n)
		}
	}
	if _, err := r.Resume(ctx, "t", graph.Command[State]{Resume: "d"}); !errors.Is(err, graph.ErrNothingToResume) {
		t.Errorf("fourth resume: %v, want ErrNothingToResume", err)
	}
}

// TestDurableRefusesWhatItCannotKeep: a durable step's result is saved
// only if it reads back as what it was: a value that does not decode back
// into its type (an error encodes as {}), one with invalid UTF-8, and one
// over WithMaxValueBytes are typed errors and not saved, so a later run
// does not fail on them for good.
func TestDurableRefusesWhatItCannotKeep(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		step func(ctx context.Context) error
		want error
	}{
		{"an error value", func(ctx context.Context) error {
			_, err := graph.Durable(ctx, "e", func(ctx context.Context) (error, error) { return errors.New("x"), nil })
			return err
		}, graph.ErrNotSerializable},
		{"invalid UTF-8", func(ctx context.Context) error {
			_, err := graph.Durable(ctx, "u", func(ctx context.Context) (string, error) { return "a\xffb", nil })
			return err
		}, graph.ErrNotSerializable},
		{"over the cap", func(ctx context.Context) error {
			_, err := graph.Durable(ctx, "big", func(ctx context.Context) (string, error) { return strings.Repeat("x", 4096), nil })
			return err
		}, graph.ErrStateTooLarge},
	} {
		saver := checkpoint.NewMemorySaver(nil)
		r := mustCompile(t, graph.New[State]().AddNode("n", func(ctx context.Context, s State) (graph.Update[State], error) {
			return graph.Update[State]{}, tc.step(ctx)
		}).AddEdge(graph.START, "n"), graph.WithSaver(saver), graph.WithMaxValueBytes(1024))
		if _, err := r.Invoke(ctx, "t", graph.Update[State]{}); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
		tps, _ := saver.List(ctx, "t", checkpoint.ListOptions{})
		for _, tp := range tps {
			for _, w := range tp.Pending {
				if strings.HasPrefix(w.Channel, checkpoint.ChannelStepPrefix) {
					t.Errorf("%s: a step result was saved: %s", tc.name, w.Value)
				}
			}
		}
	}
}

// TestDurableUnderCancelledContext: when the run's context is cancelled
// before a durable step runs, Durable returns an error matching the
// context's, fn does not run and nothing is saved for the step, on a first
// run and on a resume (where the resume's answers are held until the
// step's fence) alike. Continuing the thread then runs fn once.
func TestDurableUnderCancelledContext(t *testing.T) {
	for _, tc := range []struct {
		name        string
		resume      bool // the step runs in a resumed node, after its answer
		duringFence bool // cancelled while the step's fence claims the thread
	}{
		{name: "first run"},
		{name: "resume", resume: true},
		{name: "first run, cancelled during the fence", duringFence: true},
		{name: "resume, cancelled during the fence", resume: true, duringFence: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			var ran atomic.Int32
			var stepErr error
			cctx, cancel := context.WithCancel(ctx)
			defer cancel()
			var armed atomic.Bool
			saver := &cancelOnClaim{Saver: checkpoint.NewMemorySaver(nil), armed: &armed, cancel: cancel}
			r := mustCompile(t, graph.New[State]().AddNode("n", func(ctx context.Context, s State) (graph.Update[State], error) {
				if tc.resume {
					if _, err := interrupt.Ask[string](ctx, "go?"); err != nil {
						return graph.Update[State]{}, err
					}
				}
				if tc.duringFence {
					armed.Store(true)
				} else {
					cancel()
				}
				v, err := graph.Durable(ctx, "effect", func(ctx context.Context) (int, error) { return int(ran.Add(1)), nil })
				if ctx.Err() != nil && stepErr == nil {
					stepErr = err
				}
				if err != nil {
					return graph.Update[State]{}, err
				}
				return graph.Set(State{Count: v}, "Count"), nil
			}).AddEdge(graph.START, "n"), graph.WithSaver(saver))
			var err error
			if tc.resume {
				if res, err := r.Invoke(ctx, "t", graph.Update[State]{}); err != nil || res.Status != graph.StatusWaiting {
					t.Fatalf("Invoke = %s, %v; want waiting", res.Status, err)
				}
				_, err = r.Resume(cctx, "t", graph.Command[State]{Resume: "yes"})
			} else {
				_, err = r.Invoke(cctx, "t", graph.Update[State]{})
			}
			if !errors.Is(err, context.Canceled) {
				t.Errorf("run: %v, want context.Canceled", err)
			}
			if !errors.Is(stepErr, context.Canceled) || ran.Load() != 0 {
				t.Errorf("Durable under a cancelled context: %v, fn ran %d times; want context.Canceled and no run", stepErr, ran.Load())
			}
			tps, lerr := saver.List(ctx, "t", checkpoint.ListOptions{})
			if lerr != nil {
				t.Fatal(lerr)
			}
			for _, tp := range tps {
				for _, w := range tp.Pending {
					if strings.HasPrefix(w.Channel, checkpoint.ChannelStepPrefix) {
						t.Errorf("a step result was saved: %s", w.Value)
					}
				}
			}
			res, err := r.Continue(ctx, "t")
			if err != nil || res.Status != graph.StatusDone || res.Values.Count != 1 || ran.Load() != 1 {
				t.Errorf("Continue = %s Count %d, %v; fn ran %d times; want done, fn run once", res.Status, res.Values.Count, err, ran.Load())
			}
		})
	}
}

// cancelOnClaim is a saver that, once armed, cancels a context right after
// a Claim or PutWrites succeeds: a run cancelled while a durable step's
// fence writes (a claim on a first run; on a resume, the held answers).
type cancelOnClaim struct {
	checkpoint.Saver
	armed  *atomic.Bool
	cancel context.CancelFunc
}

func (c *cancelOnClaim) Claim(ctx context.Context, ref checkpoint.Ref, l checkpoint.Lease) error {
	err := c.Saver.Claim(ctx, ref, l)
	if err == nil && c.armed.Load() {
		c.cancel()
	}
	return err
}

func (c *cancelOnClaim) PutWrites(ctx context.Context, req checkpoint.WritesRequest) error {
	err := c.Saver.PutWrites(ctx, req)
	if err == nil && c.armed.Load() {
		c.cancel()
	}
	return err
}

// TestDurableNested: a durable step may call others with fn's context; a
// call under the name of a step that encloses it would wait for itself,
// and is an ErrInvalidInput at once instead (fn of the inner call does
// not run).
func TestDurableNested(t *testing.T) {
	step := func(ran *atomic.Int32, inner func(ctx context.Context) error) func(ctx context.Context) (int, error) {
		return func(ctx context.Context) (int, error) {
			ran.Add(1)
			if inner != nil {
				if err := inner(ctx); err != nil {
					return 0, err
				}
			}
			return 1, nil
		}
	}
	for _, tc := range []struct {
		name string
		body func(ctx context.Context, ran *atomic.Int32) error // the node's durable steps
		want error
		runs int32 // fn calls
	}{
		{name: "same name", want: graph.ErrInvalidInput, runs: 1, body: func(ctx context.Context, ran *atomic.Int32) error {
			_, err := graph.Durable(ctx, "a", step(ran, func(ctx context.Context) error {
				_, err := graph.Durable(ctx, "a", step(ran, nil))
				return err
			}))
			return err
		}},
		{name: "same name two levels up", want: graph.ErrInvalidInput, runs: 2, body: func(ctx context.Context, ran *atomic.Int32) error {
			_, err := graph.Durable(ctx, "a", step(ran, func(ctx context.Context) error {
				_, err := graph.Durable(ctx, "b", step(ran, func(ctx context.Context) error {
					_, err := graph.Durable(ctx, "a", step(ran, nil))
					return err
				}))
				return err
			}))
			return err
		}},
		{name: "other names", runs: 2, body: func(ctx context.Context, ran *atomic.Int32) error {
			_, err := graph.Durable(ctx, "a", step(ran, func(ctx context.Context) error {
				_, err := graph.Durable(ctx, "b", step(ran, nil))
				return err
			}))
			return err
		}},
		{name: "same name one after the other", runs: 1, body: func(ctx context.Context, ran *atomic.Int32) error {
			for range 2 {
				if _, err := graph.Durable(ctx, "a", step(ran, nil)); err != nil {
					return err
				}
			}
			return nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A deadlock would end at the deadline with DeadlineExceeded.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var ran atomic.Int32
			r := mustCompile(t, graph.New[State]().AddNode("n", func(ctx context.Context, s State) (graph.Update[State], error) {
				return graph.Update[State]{}, tc.body(ctx, &ran)
			}).AddEdge(graph.START, "n"), graph.WithSaver(checkpoint.NewMemorySaver(nil)))
			_, err := r.Invoke(ctx, "t", graph.Update[State]{})
			switch {
			case tc.want == nil && err != nil:
				t.Errorf("Invoke: %v", err)
			case tc.want != nil && (!errors.Is(err, tc.want) || errors.Is(err, context.DeadlineExceeded)):
				t.Errorf("Invoke: %v, want %v", err, tc.want)
			}
			if ran.Load() != tc.runs {
				t.Errorf("fn ran %d times, want %d", ran.Load(), tc.runs)
			}
		})
	}
}
